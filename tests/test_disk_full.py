"""A disk that fills up for real under a running broker: ``python -m leveret serve`` in a
subprocess whose file size limit (``RLIMIT_FSIZE``, set in ``preexec_fn`` with SIGXFSZ
ignored) makes every write past it fail with EFBIG, as a full disk or a quota would with
ENOSPC or EDQUOT. No privilege is needed: a process may lower its own limits, and the test
raises the broker's limit back (``prlimit`` on a child of the same user, up to the hard
limit it already had) to make room again without a restart.

What a client sees (RabbitMQ nacks what its store cannot take; before this, Leveret never
answered those publishes, closed the connection with 541 and logged a traceback at the
next persistent publish, and kept doing so until restarted):

* persistent publishes that cannot be written are nacked (confirm mode); the connection
  and the channel stay open, transient publishes are still confirmed, nothing is logged as
  a traceback;
* once there is room again, persistent publishes are confirmed again, without a restart;
* after a ``kill -9`` and a restart, every confirmed message is there, once, in order (and
  so are the nacked ones: they stayed in their queue and were written once there was room).

The free-space alarm does not see a file size limit (the disk has room), which is what
lets this reach the store's error handling; tests/test_disk_alarm.py covers the alarm.

The last test runs in-process, with the store's ``write_all`` replaced by one that fails
with ENOSPC while the test says the disk is full (the seam the message store writes
through; the definitions log has its own, untouched): a ``tx.commit`` waits for room
rather than being answered (a commit cannot be nacked), and a purge goes through.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread
from leveret.storage import log as log_module
from leveret.storage import messages as messages_module
from tests.test_cli import free_port, wait_listening

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[1]
ROOM = 256 * 1024  # bytes a file may hold
BODY = 4096
QUEUE = "full-disk"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


class Broker:
    """``python -m leveret serve --data-dir`` in a subprocess, its log collected."""

    def __init__(
        self,
        data_dir: Path,
        preexec_fn: Callable[[], None] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leveret",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
                "--management-port",
                "-1",
                "--log-level",
                "info",
                *args,
            ],
            cwd=data_dir.parent,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,  # a pipe: the file size limit does not apply to it
            text=True,
            preexec_fn=preexec_fn,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_listening(self.port, self.process)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def connect(self) -> pika.BlockingConnection:
        parameters = pika.ConnectionParameters("127.0.0.1", self.port, socket_timeout=5)
        return pika.BlockingConnection(parameters)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(5)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"


def body(index: int) -> bytes:
    return b"%06d" % index + b"." * (BODY - 6)


def test_a_full_disk_nacks_what_cannot_be_written_and_recovers_without_a_restart(
    data_dir: Path,
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]

    def little_room() -> None:  # in the child, before exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (ROOM, hard))

    broker = Broker(data_dir, little_room)
    try:
        connection = broker.connect()
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        confirmed: list[int] = []
        nacked: list[int] = []
        index = 0
        while len(nacked) < 5:
            assert index < 2 * ROOM // BODY, "the file size limit was never reached"
            try:
                channel.basic_publish("", QUEUE, body(index), PERSISTENT)
                confirmed.append(index)
            except pika.exceptions.NackError:
                nacked.append(index)
            index += 1
        # Confirmed until the segment file was full, nacked from then on; nothing else.
        assert confirmed == list(range(len(confirmed))) and len(confirmed) > 10
        assert nacked == list(range(len(confirmed), index))
        assert connection.is_open and channel.is_open
        # Transient messages need no disk: still confirmed, on the same channel.
        transient = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", transient, b"in memory")
        assert channel.basic_get(transient, auto_ack=True)[2] == b"in memory"

        # Room again (the limit raised from outside): confirmed again, no restart.
        resource.prlimit(broker.process.pid, resource.RLIMIT_FSIZE, (hard, hard))
        for _ in range(10):
            channel.basic_publish("", QUEUE, body(index), PERSISTENT)
            confirmed.append(index)
            index += 1
        assert channel.queue_declare(QUEUE, passive=True).method.message_count == index
        connection.close()
    finally:
        broker.kill()
    log = broker.log
    assert "Traceback" not in log, log
    assert "internal error" not in log and "INTERNAL_ERROR" not in log, log
    assert "message store sync failed: [Errno 27] File too large" in log, log
    assert "message store writes succeed again" in log, log

    # A kill -9, a restart: every confirmed message is there, once, in order; the nacked
    # ones too (they stayed queued and were written once there was room).
    broker = Broker(data_dir)
    try:
        connection = broker.connect()
        channel = connection.channel()
        got = []
        while True:
            method, _properties, content = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            got.append(int(content[:6]))
        connection.close()
    finally:
        broker.kill()
    assert set(confirmed) <= set(got)
    assert got == list(range(index))
    assert "Traceback" not in broker.log, broker.log


def test_a_commit_waits_for_room_and_a_purge_goes_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    full = threading.Event()
    real_write_all = messages_module.write_all

    def write_all(fd: int, data: Any) -> None:
        if full.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data)

    monkeypatch.setattr(messages_module, "write_all", write_all)
    caplog.set_level(logging.WARNING, logger="leveret")
    config = Config(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    broker = BrokerThread(config).start()
    parameters = pika.URLParameters(broker.url)
    publisher, committer = pika.BlockingConnection(parameters), pika.BlockingConnection(parameters)
    purged = QUEUE + ".purged"
    try:
        channel = publisher.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", QUEUE, b"0", PERSISTENT)
        channel.queue_declare(purged, durable=True)
        channel.basic_publish("", purged, b"gone", PERSISTENT)
        tx = committer.channel()
        tx.tx_select()

        full.set()
        with pytest.raises(pika.exceptions.NackError):
            channel.basic_publish("", QUEUE, b"1", PERSISTENT)
        tx.basic_publish("", QUEUE, b"2", PERSISTENT)
        committed: list[float] = []
        thread = threading.Thread(target=lambda: (tx.tx_commit(), committed.append(1.0)))
        thread.start()
        time.sleep(0.5)
        assert not committed  # no commit-ok while its message is not on disk
        # A purge on a full disk: its acks wait in memory, the purge-ok comes now.
        assert channel.queue_purge(purged).method.message_count == 1
        assert channel.is_open

        full.clear()
        thread.join(10)
        assert committed
        channel.basic_publish("", QUEUE, b"3", PERSISTENT)  # confirmed
        assert channel.queue_declare(QUEUE, passive=True).method.message_count == 4
    finally:
        full.clear()
        for connection in (publisher, committer):
            if connection.is_open:
                connection.close()
        broker.stop()
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "message store sync failed: [Errno 28]" in caplog.text
    # After a restart: the committed and confirmed messages are there, the purged one not.
    with BrokerThread(config) as again:
        connection = pika.BlockingConnection(pika.URLParameters(again.url))
        channel = connection.channel()
        assert channel.queue_declare(QUEUE, passive=True).method.message_count == 4
        assert channel.queue_declare(purged, passive=True).method.message_count == 0
        connection.close()
    assert "message store writes succeed again" in caplog.text
    assert "the acks of a purged or deleted queue cannot be written now" in caplog.text


def test_durable_declares_on_a_full_disk_are_refused_and_work_again_with_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A durable declare, bind or delete whose definitions-log record cannot be written
    (or fsynced) is refused with 506 RESOURCE_ERROR, a hard error in AMQP 0-9-1 (so on the
    connection, as 541 would be): no ``*-Ok`` for a change that is not on disk, nothing
    changed in memory either, other connections go on, no traceback. (Before: 541
    INTERNAL_ERROR with a logged traceback, and after a failed fsync every durable declare
    failed until a restart.) With room again, declares work without a restart, and a restart
    shows exactly what was answered ``*-Ok``.
    """
    full, sync_fails = threading.Event(), threading.Event()
    real_write_all, real_datasync = log_module.write_all, log_module.datasync

    def write_all(fd: int, data: Any) -> None:
        if full.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data)

    def datasync(fd: int) -> None:
        if sync_fails.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_datasync(fd)

    monkeypatch.setattr(log_module, "write_all", write_all)
    monkeypatch.setattr(log_module, "datasync", datasync)
    caplog.set_level(logging.WARNING, logger="leveret")
    config = Config(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    broker = BrokerThread(config).start()
    parameters = pika.URLParameters(broker.url)
    bystander = pika.BlockingConnection(parameters)
    try:
        channel = bystander.channel()
        channel.exchange_declare("kept.x", "direct", durable=True)
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "kept", b"one", PERSISTENT)
        for trouble in (full, sync_fails):
            trouble.set()
            for declare in (
                lambda c: c.queue_declare("refused", durable=True),
                lambda c: c.exchange_declare("refused.x", "fanout", durable=True),
                lambda c: c.queue_bind("kept", "kept.x", "refused.key"),
                lambda c: c.queue_delete("kept"),
            ):
                doomed = pika.BlockingConnection(parameters)
                with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                    declare(doomed.channel())
                assert closed.value.reply_code == 506
                assert closed.value.reply_text.startswith(
                    "RESOURCE_ERROR - cannot write the definitions log: [Errno 28]"
                ), closed.value.reply_text
            # The other connection goes on; transient declares need no disk.
            assert bystander.is_open and channel.is_open
            channel.queue_declare("", exclusive=True)
            for name in ("refused", "refused.x"):
                check = bystander.channel()
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
                    if name.endswith(".x"):
                        check.exchange_declare(name, passive=True)
                    else:
                        check.queue_declare(name, passive=True)
                assert missing.value.reply_code == 404
            assert channel.queue_declare("kept", passive=True).method.message_count == 1
            channel.basic_publish("kept.x", "refused.key", b"unbound", mandatory=True)
            trouble.clear()
            # Room again: durable declares work, no restart.
            channel.queue_declare(f"after.{id(trouble)}", durable=True)
            channel.queue_bind("kept", "kept.x", f"key.{id(trouble)}")
        bystander.close()
    finally:
        full.clear()
        sync_fails.clear()
        if bystander.is_open:
            bystander.close()
        broker.stop()
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "INTERNAL_ERROR" not in caplog.text
    assert "writes succeed again" in caplog.text
    with BrokerThread(config) as again:
        connection = pika.BlockingConnection(pika.URLParameters(again.url))
        channel = connection.channel()
        assert channel.queue_declare("kept", passive=True).method.message_count == 1
        for trouble in (full, sync_fails):
            channel.queue_declare(f"after.{id(trouble)}", passive=True)
        channel.exchange_declare("kept.x", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel.queue_declare("refused", passive=True)
        connection.close()
