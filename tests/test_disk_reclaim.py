"""A full disk never wedges the node (issue 32), on a real, small file system: a tmpfs the
test mounts under its tmp dir (root is needed, as in CI; a mount that fails fails the test,
it is never skipped), a ``python -m leveret serve`` subprocess with its data dir on it, and
pika publishers with confirms.

* The disk alarm: persistent publishes until the alarm blocks the publisher; once every
  message is consumed and acked, the store's only segment, the head, all acked, is deleted
  (before: kept for ever, so the alarm stayed set and publishers blocked until files were
  deleted by hand); the alarm clears by itself and the publisher goes on, with no new write
  and no restart. The same after a ``kill -9`` and a restart in between.
* A truly full disk (``--disk-free-limit 0``: no alarm, the writes fail with ENOSPC): the
  publishes that cannot be written are nacked (RabbitMQ too refuses what its store cannot
  take), confirmed again once there is room (a file deleted, or consumers that ack), without
  a restart; after a ``kill -9`` every confirmed message is there, in order.

And ``/api/nodes`` reports ``disk_free`` for a broker without a data dir too (its working
directory's file system), as RabbitMQ always does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from leveret.config import DISK_FREE_LIMIT, Config
from leveret.inspect import BrokerThread
from leveret.node.disk import DiskFreeLimit
from tests.integration.helpers import Http
from tests.test_disk_full import Broker

pytestmark = pytest.mark.timeout(180)

MiB = 1024 * 1024
BODY = 8 * 1024
QUEUE = "reclaim"
PERSISTENT = pika.BasicProperties(delivery_mode=2)
WITHIN = 30.0  # seconds any "by itself" may take before the test gives up (a few in fact)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``mount(size in MiB)``: a fresh tmpfs under the test's tmp dir, unmounted after."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"tmpfs{len(mounted)}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}m", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.fail(
                f"cannot mount a {size} MiB tmpfs on {where} (this test needs root, as in "
                f"CI): {done.stderr.strip() or done.returncode}"
            )
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], check=True)  # still busy: detach


def body(index: int) -> bytes:
    return b"%06d" % index + b"." * (BODY - 6)


def store_bytes(data_dir: Path) -> int:
    msgs = data_dir / "msgs"
    return sum(p.stat().st_size for p in msgs.iterdir()) if msgs.exists() else 0


def wait_until(done: Callable[[], bool], what: str, within: float = WITHIN) -> float:
    """Seconds it took for ``done()`` to hold; fails after ``within``."""
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < within, f"{what}: not within {within} s"
        time.sleep(0.02)
    return time.monotonic() - started


def drain(broker: Broker) -> list[int]:
    """Consume and ack every message of the queue; their indexes, in order."""
    connection = broker.connect()
    channel = connection.channel()
    got = []
    while True:
        method, _properties, content = channel.basic_get(QUEUE)
        if method is None:
            break
        got.append(int(content[:6]))
        channel.basic_ack(method.delivery_tag)
    connection.close()
    return got


class Publisher:
    """A pika connection publishing persistent messages with confirms in a thread of its
    own until told to :meth:`stop`. (A blocking pika connection hands over
    ``connection.blocked`` only between calls, and a publish sent once the broker stopped
    reading waits, unanswered, until it is unblocked: so the test watches the broker's log
    for the alarm, and reads the connection's events once the thread is done.)"""

    def __init__(self, broker: Broker, start: int = 0) -> None:
        parameters = pika.ConnectionParameters("127.0.0.1", broker.port, socket_timeout=5)
        self.connection = pika.BlockingConnection(parameters)
        self.events: list[str] = []
        self.connection.add_on_connection_blocked_callback(
            lambda _c, frame: self.events.append(f"blocked: {frame.method.reason}")
        )
        self.connection.add_on_connection_unblocked_callback(
            lambda _c, _f: self.events.append("unblocked")
        )
        self.channel = self.connection.channel()
        self.channel.queue_declare(QUEUE, durable=True)
        self.channel.confirm_delivery()
        self.confirmed: list[int] = []
        self.next = start  # the index of the next message
        self.lost: pika.exceptions.AMQPError | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.next < MORE_THAN_FITS:
            try:
                self.publish(1)
            except pika.exceptions.AMQPError as exc:  # the broker was killed
                self.lost = exc
                return

    def stop(self) -> None:
        """No more publishes from the thread (the one under way completes, maybe only once
        the connection is unblocked)."""
        self._stop.set()

    def join(self) -> None:
        """Wait for the thread (its last publish confirmed), then for the events."""
        self.thread.join(WITHIN)
        assert not self.thread.is_alive(), "the last publish was never confirmed"
        wait_until(
            lambda: self.connection.process_data_events(0.02) or "unblocked" in self.events,
            "connection.unblocked",
        )

    def publish(self, count: int) -> None:
        """``count`` more, confirmed (by the thread, or once it has ended)."""
        for _ in range(count):
            self.channel.basic_publish("", QUEUE, body(self.next), PERSISTENT)
            self.confirmed.append(self.next)
            self.next += 1


MORE_THAN_FITS = 64 * MiB // BODY


def log_says(broker: Broker, text: str, within: float = WITHIN) -> float:
    """Seconds until the broker logged ``text``."""
    return wait_until(lambda: text in broker.log, f"the log saying {text!r}", within)


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after-a-restart"])
def test_consumers_free_the_disk_and_the_alarm_clears_by_itself(
    tmpfs: Callable[[int], Path], restart: bool
) -> None:
    """The issue's reproduction: 40 MiB, ``--disk-free-limit 10MB``, 8 KiB persistent
    messages with confirms until the alarm blocks the publisher; then every message is
    consumed and acked. With ``restart``, the broker is killed (-9) while blocked and started
    again on the full disk first (before: the fully acked head was never reclaimed, even
    after a restart)."""
    data_dir = tmpfs(40) / "data"
    args = ("--disk-free-limit", "10MB")
    broker = Broker(data_dir, args=args)
    try:
        publisher = Publisher(broker)
        log_says(broker, "disk alarm set", within=120)
        publisher.stop()
        full = store_bytes(data_dir)
        assert full > 25 * MiB, full
        if restart:
            broker.kill()
            publisher.thread.join(WITHIN)  # its connection is gone: it ends
            confirmed = publisher.confirmed
            broker = Broker(data_dir, args=args)
            log_says(broker, "disk alarm set")  # at start-up, on the full disk
        consumed = drain(broker)
        took = log_says(broker, "disk alarm cleared")
        print(f"disk alarm cleared {took:.2f} s after the last ack")
        assert store_bytes(data_dir) < MiB  # the head, all acked, is gone
        assert shutil.disk_usage(data_dir).free > 35 * MiB
        if restart:
            # All there after the kill, in order (and maybe the one under way, written
            # but not yet confirmed when the broker was killed).
            assert consumed[: len(confirmed)] == confirmed
            assert len(consumed) <= len(confirmed) + 1
            publisher = Publisher(broker, start=consumed[-1] + 1)  # not blocked: clear
            publisher.stop()
            publisher.thread.join(WITHIN)
            publisher.confirmed[:0] = confirmed
        else:
            publisher.join()  # its last publish, held since the alarm, confirmed
            assert publisher.lost is None
            assert publisher.events == ["blocked: low on disk", "unblocked"]
            assert consumed == publisher.confirmed[: len(consumed)]
        publisher.publish(5)  # confirmed: the publisher goes on, no restart
        publisher.connection.close()
    finally:
        broker.kill()
    assert "Traceback" not in broker.log, broker.log
    broker = Broker(data_dir, args=args)
    try:
        left = drain(broker)
    finally:
        broker.kill()
    # Every confirmed message not consumed, once, in order.
    assert left == [i for i in publisher.confirmed if i not in set(consumed)]
    assert "Traceback" not in broker.log, broker.log


def publish_until_nacked(channel: Any, start: int, confirmed: list[int], nacks: int = 5) -> int:
    """Publish from ``start`` on until ``nacks`` were nacked in a row; the next index."""
    nacked: list[int] = []
    index = start
    while len(nacked) < nacks:
        assert index - start < MORE_THAN_FITS, "the disk never filled up"
        try:
            channel.basic_publish("", QUEUE, body(index), PERSISTENT)
            assert not nacked, "confirmed after a nack"
            confirmed.append(index)
        except pika.exceptions.NackError:
            nacked.append(index)
        index += 1
    assert confirmed[-1] == nacked[0] - 1 and len(confirmed) > 100
    return index


def test_a_truly_full_disk_nacks_and_recovers_without_a_restart(
    tmpfs: Callable[[int], Path],
) -> None:
    """``--disk-free-limit 0``: the disk alarm never fires, the writes themselves fail
    (ENOSPC). Room comes back first by deleting a file, then by consumers acking."""
    mount = tmpfs(16)
    ballast = mount / "ballast"
    ballast.write_bytes(bytes(MiB))
    data_dir = mount / "data"
    args = ("--disk-free-limit", "0")
    broker = Broker(data_dir, args=args)
    confirmed: list[int] = []
    try:
        connection = broker.connect()
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        index = publish_until_nacked(channel, 0, confirmed)
        assert shutil.disk_usage(mount).free < 64 * 1024
        assert connection.is_open and channel.is_open
        ballast.unlink()  # room again: confirmed again, no restart
        for _ in range(10):
            channel.basic_publish("", QUEUE, body(index), PERSISTENT)
            confirmed.append(index)
            index += 1
        connection.close()
    finally:
        broker.kill()
    log = broker.log
    assert "message store sync failed: [Errno 28] No space left on device" in log, log
    assert "message store writes succeed again" in log, log
    assert "disk alarm" not in log and "Traceback" not in log, log

    # kill -9, a restart on the (nearly) full disk: every confirmed message is there, in
    # order, and the nacked ones too (kept queued, written once there was room).
    broker = Broker(data_dir, args=args)
    try:
        connection = broker.connect()
        channel = connection.channel()
        channel.confirm_delivery()
        assert channel.queue_declare(QUEUE, passive=True).method.message_count == index
        # Full again; then consumers ack everything: the head, all acked, goes with the
        # records it could not write, and publishes are confirmed again, no restart.
        later: list[int] = []
        index = publish_until_nacked(channel, index, later)
        got = drain(broker)
        assert set(confirmed) | set(later) <= set(got)
        assert got == list(range(index))
        took = wait_until(lambda: shutil.disk_usage(mount).free > 8 * MiB, "space back")
        print(f"space back {took:.2f} s after the last ack")
        after = list(range(index, index + 10))
        for i in after:
            channel.basic_publish("", QUEUE, body(i), PERSISTENT)
        connection.close()
    finally:
        broker.kill()
    assert "Traceback" not in broker.log, broker.log
    broker = Broker(data_dir, args=args)
    try:
        assert drain(broker) == after
    finally:
        broker.kill()
    assert "Traceback" not in broker.log, broker.log


def test_the_node_reports_disk_free_without_a_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RabbitMQ always reports ``disk_free``; a memory-only Leveret reports its working
    directory's file system (it writes nothing, so its alarm stays clear)."""
    monkeypatch.chdir(tmp_path)
    with BrokerThread(Config(host="127.0.0.1", port=0, management_port=0)) as broker:
        management = broker.server.management
        assert management is not None
        status, nodes = Http(management.url)("GET", "/api/nodes")
    assert status == 200
    node = nodes[0]
    assert abs(node["disk_free"] - shutil.disk_usage(os.getcwd()).free) < 64 * MiB
    assert node["disk_free_limit"] == DISK_FREE_LIMIT
    assert node["disk_free_alarm"] is False


@pytest.mark.parametrize("text", ["0", "00"])
def test_a_disk_free_limit_of_0_is_taken(text: str) -> None:
    """As RabbitMQ takes it: no alarm, ever (``--disk-free-limit 0`` above)."""
    assert DiskFreeLimit.parse(text).limit() == DiskFreeLimit.parse(0).limit() == 0
