"""The free disk space alarm (broker/disk.py): RabbitMQ's ``disk_free_limit``.

Each scenario starts an in-process Leveret with a data directory and a free-space probe of
its own (``Config.disk_free_probe``), so the disk can be made to look full, then fine
again, without filling a real disk; real clients (pika, aio-pika) see what RabbitMQ's do:
``connection.blocked`` with reason ``low on disk`` for a connection that publishes
(rabbit_reader:blocked_by_message/1), nothing for one that only consumes, reading paused
until ``connection.unblocked``, and a connection blocked as long as either the memory or the
disk alarm is set. Also: the setting's forms (RabbitMQ's ``disk_free_limit.absolute`` units,
``disk_free_limit.relative``), the probe, the check interval, the management API's node
fields and health check.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest

from leveret.cli import build_parser, config_from
from leveret.config import DISK_FREE_LIMIT, Config
from leveret.inspect import BrokerThread
from leveret.node.disk import MAX_INTERVAL, MIN_INTERVAL, DiskFreeLimit, DiskMonitor, free_bytes
from leveret.node.memory import total_memory
from leveret.settings import SettingsError, resolve
from tests.integration.helpers import Http, unique

pytestmark = pytest.mark.timeout(60)

LIMIT = 100_000_000
PLENTY = LIMIT + 1_000_000  # close to the limit: read every 100 ms
LOW = LIMIT - 1_000_000
WATERMARK = 64 * 1024
CHUNK = 16 * 1024


class Disk:
    """A free-space probe whose answer the test sets."""

    def __init__(self, free: int = PLENTY) -> None:
        self.free = free
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.free


@pytest.fixture
def disk() -> Disk:
    return Disk()


def start(tmp_path: Path, disk: Disk, **overrides: Any) -> BrokerThread:
    config = Config(
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path / "data",
        disk_free_limit=LIMIT,
        disk_free_probe=disk,
        **overrides,
    )
    return BrokerThread(config).start()


@pytest.fixture
def broker(tmp_path: Path, disk: Disk) -> Iterator[BrokerThread]:
    broker = start(tmp_path, disk, management_port=0)
    yield broker
    broker.stop()


def connect(url: str) -> pika.BlockingConnection:
    p = pika.URLParameters(url)
    p.connection_attempts = 1
    p.socket_timeout = 5
    p.blocked_connection_timeout = 15  # the tests unblock before closing
    return pika.BlockingConnection(p)


def pump(
    connections: list[pika.BlockingConnection], done: Callable[[], bool], within: float = 10.0
) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for connection in connections:
            connection.process_data_events(time_limit=0.01)


def watch(connection: pika.BlockingConnection) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    connection.add_on_connection_blocked_callback(
        lambda _c, frame: events.append(("blocked", frame.method.reason))
    )
    connection.add_on_connection_unblocked_callback(
        lambda _c, _frame: events.append(("unblocked", None))
    )
    return events


PERSISTENT = pika.BasicProperties(delivery_mode=2)


# -- blocking -----------------------------------------------------------------------------


def test_low_disk_blocks_publishers_until_space_returns(broker: BrokerThread, disk: Disk) -> None:
    publisher, bystander = connect(broker.url), connect(broker.url)
    try:
        events, seen = watch(publisher), watch(bystander)
        queue = unique("disk")
        bystander_channel = bystander.channel()
        bystander_channel.queue_declare(queue, durable=True)
        channel = publisher.channel()
        channel.confirm_delivery()
        loose = publisher.channel()  # no confirms: its publish returns even while blocked
        channel.basic_publish("", queue, b"before", PERSISTENT)  # a publisher now

        disk.free = LOW
        pump([publisher, bystander], lambda: bool(events))
        assert events == [("blocked", "low on disk")]
        assert broker.server.state.disk.alarm

        # Blocked: nothing more is read from the publisher.
        loose.basic_publish("", queue, b"while blocked", PERSISTENT)
        publisher.process_data_events(time_limit=0.3)
        assert bystander_channel.queue_declare(queue, passive=True).method.message_count == 1
        # The consumer-only connection was neither blocked nor told, and works.
        method, _props, body = bystander_channel.basic_get(queue)
        assert body == b"before"
        bystander_channel.basic_ack(method.delivery_tag)
        bystander.process_data_events(time_limit=0.1)
        assert seen == []

        disk.free = PLENTY
        pump([publisher, bystander], lambda: len(events) == 2)
        assert events == [("blocked", "low on disk"), ("unblocked", None)]
        pump(
            [bystander],
            lambda: bystander_channel.queue_declare(queue, passive=True).method.message_count == 1,
        )
        channel.basic_publish("", queue, b"after", PERSISTENT)  # confirmed
        assert bystander_channel.basic_get(queue, auto_ack=True)[2] == b"while blocked"
        assert bystander_channel.basic_get(queue, auto_ack=True)[2] == b"after"
        bystander_channel.queue_delete(queue)
        assert seen == []
    finally:
        for connection in (publisher, bystander):
            if connection.is_open:
                connection.close()


def test_a_connection_stays_blocked_while_either_alarm_is_set(tmp_path: Path, disk: Disk) -> None:
    # rabbit_reader: one connection.blocked per blocking, its reason naming the alarms in
    # effect then; connection.unblocked only when none is left.
    broker = start(tmp_path, disk, memory_high_watermark=WATERMARK)
    first, second, consumer = (connect(broker.url) for _ in range(3))
    try:
        first_events, second_events = watch(first), watch(second)
        queue = unique("both")
        consumer_channel = consumer.channel()
        consumer_channel.queue_declare(queue, auto_delete=True)
        first_channel = first.channel()
        for index in range(8):  # twice the memory watermark
            first_channel.basic_publish("", queue, bytes([index]) * CHUNK)
        pump([first, consumer], lambda: bool(first_events))
        assert first_events == [("blocked", "low on memory")]

        disk.free = LOW
        pump([first, consumer], lambda: broker.server.state.disk.alarm)
        second.channel().basic_publish("", queue, b"x")
        pump([second, first], lambda: bool(second_events))
        assert second_events == [("blocked", "low on memory & disk")]
        assert first_events == [("blocked", "low on memory")]  # told once

        # The memory alarm clears (a consumer drains the queue): still blocked by the disk.
        received: list[bytes] = []
        consumer_channel.basic_consume(
            queue, lambda _c, _m, _p, body: received.append(body), auto_ack=True
        )
        pump([first, second, consumer], lambda: not broker.server.state.memory.alarm)
        for connection in (first, second, consumer):
            connection.process_data_events(time_limit=0.3)
        assert first_events == [("blocked", "low on memory")]
        assert second_events == [("blocked", "low on memory & disk")]

        disk.free = PLENTY
        pump([first, second, consumer], lambda: len(first_events) == len(second_events) == 2)
        assert first_events[1] == second_events[1] == ("unblocked", None)
        # What the publishers sent while blocked is read now (a connection is blocked from
        # its basic.publish on: the rest of a message may still be waiting), in order.
        pump([first, second, consumer], lambda: len(received) == 9)
        assert b"x" in received
        assert [body for body in received if body != b"x"] == [
            bytes([index]) * CHUNK for index in range(8)
        ]
    finally:
        for connection in (first, second, consumer):
            if connection.is_open:
                connection.close()
        broker.stop()


def test_a_broker_started_on_a_full_disk_blocks_the_first_publish(
    tmp_path: Path, disk: Disk
) -> None:
    disk.free = 0
    broker = start(tmp_path, disk)
    publisher = connect(broker.url)
    try:
        assert broker.server.state.disk.alarm  # read before the listener opened
        events = watch(publisher)
        publisher.channel().basic_publish("", "nowhere", b"x")
        pump([publisher], lambda: bool(events))
        assert events == [("blocked", "low on disk")]
        disk.free = PLENTY  # a blocked connection is not read from: not even its close
        pump([publisher], lambda: len(events) == 2)
    finally:
        publisher.close()
        broker.stop()


async def test_disk_alarm_through_aio_pika(
    tmp_path: Path, disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    # aiormq logs connection.blocked / unblocked as warnings and holds its Connection.ready()
    # (so every publish) until unblocked; a confirmed publish then completes.
    caplog.set_level(logging.WARNING, logger="aiormq.connection")
    broker = start(tmp_path, disk)
    connection = await aio_pika.connect(broker.url)
    try:
        channel = await connection.channel()  # publisher confirms on
        queue = await channel.declare_queue(unique("aio-disk"), durable=True)
        persistent = aio_pika.DeliveryMode.PERSISTENT
        await channel.default_exchange.publish(
            aio_pika.Message(b"1", delivery_mode=persistent), queue.name
        )
        disk.free = LOW  # the connection has published: blocked as soon as the alarm is set
        deadline = time.monotonic() + 10
        while "was blocked by" not in caplog.text:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert "was blocked by: 'low on disk'" in caplog.text
        blocked = asyncio.ensure_future(
            channel.default_exchange.publish(
                aio_pika.Message(b"2", delivery_mode=persistent), queue.name
            )
        )
        underlay = connection.transport.connection
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(underlay.ready(), 0.3)
        assert not blocked.done()
        disk.free = PLENTY
        await asyncio.wait_for(underlay.ready(), 10)
        assert "was unblocked" in caplog.text
        await asyncio.wait_for(blocked, 10)  # sent and confirmed once unblocked
        await channel.default_exchange.publish(
            aio_pika.Message(b"3", delivery_mode=persistent), queue.name, timeout=5
        )
        assert (await queue.declare()).message_count == 3
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()
        broker.stop()


# -- the management API -------------------------------------------------------------------


def test_the_node_and_the_alarm_health_check_show_the_disk_alarm(
    broker: BrokerThread, disk: Disk
) -> None:
    management = broker.server.management
    assert management is not None
    api = Http(management.url)
    status, nodes = api("GET", "/api/nodes")
    assert status == 200
    assert (nodes[0]["disk_free"], nodes[0]["disk_free_limit"]) == (PLENTY, LIMIT)
    assert nodes[0]["disk_free_alarm"] is False
    assert api("GET", "/api/health/checks/alarms") == (200, {"status": "ok"})

    disk.free = LOW
    deadline = time.monotonic() + 10
    while not api("GET", "/api/nodes")[1][0]["disk_free_alarm"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert api("GET", "/api/nodes")[1][0]["disk_free"] == LOW
    status, body = api("GET", "/api/health/checks/local-alarms")
    assert status == 503
    assert body["alarms"] == [{"node": nodes[0]["name"], "resource": "disk"}]


# -- the monitor ------------------------------------------------------------------------------


def test_free_bytes_is_what_df_calls_available(tmp_path: Path) -> None:
    # statvfs f_bavail (space for unprivileged users), as RabbitMQ's ``df -kP``; no other
    # writer may run meanwhile for an exact match, so allow a little drift.
    assert abs(free_bytes(tmp_path) - shutil.disk_usage(tmp_path).free) < 256 * 1024 * 1024


def test_the_check_interval_follows_the_margin() -> None:
    # rabbit_disk_monitor: what the margin lasts at 250 MB/s, twice over, from 100 ms up
    # (RabbitMQ up to 10 s; Leveret up to 1 s).
    monitor = DiskMonitor(LIMIT, None)
    assert monitor.interval() == MAX_INTERVAL  # nothing read yet
    monitor.update(LIMIT + 1000)
    assert monitor.interval() == MIN_INTERVAL
    monitor.update(LIMIT + 50_000_000)
    assert monitor.interval() == pytest.approx(0.4)
    monitor.update(LIMIT + 10**12)
    assert monitor.interval() == MAX_INTERVAL
    monitor.update(0)
    assert monitor.alarm and monitor.interval() == pytest.approx(0.8)


def test_the_alarm_is_set_below_the_limit_only() -> None:
    changes: list[bool] = []
    monitor = DiskMonitor(LIMIT, None, changes.append)
    monitor.update(LIMIT)  # rabbit_disk_monitor: alarmed when CurrentFree < Limit
    monitor.update(LIMIT - 1)
    monitor.update(0)
    monitor.update(LIMIT)
    assert changes == [True, False]


async def test_a_failing_probe_keeps_the_last_reading(caplog: pytest.LogCaptureFixture) -> None:
    readings = iter([LOW, OSError(2, "No such file or directory"), PLENTY])

    def probe() -> int:
        item = next(readings)
        if isinstance(item, OSError):
            raise item
        return item

    monitor = DiskMonitor(LIMIT, probe)
    monitor.start()
    try:
        assert monitor.alarm
        deadline = time.monotonic() + 10
        while monitor.alarm:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert "cannot read the free disk space: [Errno 2]" in caplog.text
    finally:
        monitor.stop()


def test_no_data_dir_means_no_monitoring() -> None:
    with BrokerThread(Config(host="127.0.0.1", port=0)) as broker:
        assert broker.server.state.disk.probe is None
        assert broker.server.state.disk.free is None and not broker.server.state.disk.alarm


def test_the_data_dirs_file_system_is_read_by_default(tmp_path: Path) -> None:
    config = Config(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    with BrokerThread(config) as broker:
        free = broker.server.state.disk.free
        assert free is not None and free > 0
        assert broker.server.state.disk.limit == DISK_FREE_LIMIT == 50_000_000


# -- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50000000", DiskFreeLimit(absolute=50_000_000)),
        ("50MB", DiskFreeLimit(absolute=50_000_000)),
        ("50M", DiskFreeLimit(absolute=50_000_000)),
        ("2GiB", DiskFreeLimit(absolute=2 * 1024**3)),
        ("1Gi", DiskFreeLimit(absolute=1024**3)),
        ("1.0", DiskFreeLimit(relative=1.0)),
        ("2.5", DiskFreeLimit(relative=2.5)),
        ("0.5", DiskFreeLimit(relative=0.5)),
    ],
)
@pytest.mark.parametrize("form", ["flag", "env", "toml"])
def test_disk_free_limit_forms(
    tmp_path: Path, form: str, text: str, expected: DiskFreeLimit
) -> None:
    if form == "flag":
        settings = resolve(build_parser().parse_args(["serve", "--disk-free-limit", text]), {})
    elif form == "env":
        settings = resolve(build_parser().parse_args(["serve"]), {"LEVERET_DISK_FREE_LIMIT": text})
    else:
        value = text if "." in text or text.isdigit() else f'"{text}"'
        file = tmp_path / "leveret.toml"
        file.write_text(f"disk_free_limit = {value}\n")
        settings = resolve(build_parser().parse_args(["serve", "--config", str(file)]), {})
    assert settings.values["disk_free_limit"] == expected


@pytest.mark.parametrize("text", ["-1", "-1.0", "lots", "2 GiB", "2T", "nan", "inf", "1.0MB"])
def test_bad_disk_free_limits_are_refused(text: str) -> None:
    with pytest.raises(SettingsError, match="argument --disk-free-limit"):
        resolve(build_parser().parse_args(["serve", "--disk-free-limit", text]), {})


def test_a_relative_limit_is_a_multiple_of_the_memory(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{1024**3}\n")
    settings = resolve(build_parser().parse_args(["serve", "--disk-free-limit", "1.5"]), {})
    assert config_from(settings, cgroup_root=cgroup).disk_free_limit == round(1.5 * 1024**3)
    default = resolve(build_parser().parse_args(["serve"]), {})
    assert config_from(default).disk_free_limit == 50_000_000
    assert DiskFreeLimit(relative=1.0).limit() == total_memory()
