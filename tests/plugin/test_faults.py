"""Injected faults (``leveret.faults``, broker/inspect/faults.py) seen by real clients over
real sockets: aio-pika's robust connection recovers from a dropped connection and from a
restart, pika's blocked-connection timeout fires under the memory alarm, connection.blocked
and .unblocked come with the disk alarm, basic.cancel reaches consumers, a delay slows a
round trip down, and a Celery worker and a FastStream subscriber carry on after a restart.

The module's broker has a data directory (its own ``leveret_broker``), as a restart needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from leveret.config import Config
from leveret.faults import (
    InvalidFaultError,
    NoDataDirError,
    UnknownQueueError,
    UnknownVhostError,
)
from leveret.inspect import BrokerThread, Inspector, LeveretOnlyError, ManagementAPI
from tests.plugin.test_celery_kombu import celery_worker

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def leveret_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """The plugin's broker, with a data directory (as docs/testing.md's conftest has)."""
    data_dir = tmp_path_factory.mktemp("faults-data")
    config = Config(host="127.0.0.1", port=0, shutdown_timeout=0.5, data_dir=data_dir)
    with BrokerThread(config) as broker:
        yield broker


@pytest.fixture(autouse=True)
def _quiet_clients() -> None:
    # The clients log every reconnection attempt at ERROR: expected here.
    for name in ("aiormq", "aio_pika", "pika"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def robust_url(amqp_url: str) -> str:
    """aio-pika reconnects after reconnect_interval (5 s by default)."""
    return amqp_url + "?reconnect_interval=0.05"


async def consume_into(
    connection: aio_pika.abc.AbstractRobustConnection, queue_name: str
) -> asyncio.Queue[aio_pika.abc.AbstractIncomingMessage]:
    """A robust consumer of a durable queue, acking each message it hands over."""
    got: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
    channel = await connection.channel()
    queue = await channel.declare_queue(queue_name, durable=True)

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()
        await got.put(message)

    await queue.consume(on_message)
    return got


async def publish(connection: aio_pika.abc.AbstractConnection, queue: str, body: bytes) -> None:
    channel = await connection.channel()  # confirms on: back from the store's sync
    await channel.default_exchange.publish(
        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue
    )
    await channel.close()


# -- drop_connections ----------------------------------------------------------------------


def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """A clean project with one test file, run with the plugin's own defaults."""
    monkeypatch.delenv("LEVERET_URL", raising=False)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(code)


async def robust(amqp_url: str) -> tuple[aio_pika.abc.AbstractRobustConnection, asyncio.Event]:
    """A robust connection, and an event set when it has reconnected."""
    connection = await aio_pika.connect_robust(robust_url(amqp_url))
    reconnected = asyncio.Event()
    connection.reconnect_callbacks.add(lambda *_: reconnected.set())
    return connection, reconnected


async def acking_consumer(channel: aio_pika.abc.AbstractChannel, queue: str) -> str:
    """Declare ``queue`` and consume it, acking each message; the consumer tag."""

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()

    return await (await channel.declare_queue(queue)).consume(on_message)


async def wait_cancelled(channel: aio_pika.abc.AbstractChannel, tag: str) -> None:
    """Wait until aiormq forgets consumer ``tag``: it does when basic.cancel arrives."""
    underlay = await channel.get_underlay_channel()
    for _ in range(500):
        if tag not in underlay.consumers:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"consumer {tag} was never cancelled")


async def test_robust_consumer_recovers_after_drop(amqp_url: str, leveret: Inspector) -> None:
    connection, reconnected = await robust(amqp_url)
    try:
        got = await consume_into(connection, "jobs")
        await leveret.wait_for_consumers_async("jobs", 1)
        assert leveret.faults.drop_connections() == 1
        await asyncio.wait_for(reconnected.wait(), 10)
        await leveret.wait_for_consumers_async("jobs", 1)
        publisher = await aio_pika.connect(amqp_url)
        await publish(publisher, "jobs", b"after the drop")
        await publisher.close()
        message = await asyncio.wait_for(got.get(), 10)
        assert message.body == b"after the drop"
    finally:
        await connection.close()


def test_drop_connections_only_the_named_client(amqp_url: str, leveret: Inspector) -> None:
    params = pika.URLParameters(amqp_url)
    params.client_properties = {"connection_name": "victim"}
    victim = pika.BlockingConnection(params)
    bystander = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        assert leveret.faults.drop_connections(client="nobody") == 0
        assert leveret.faults.drop_connections(client="victim") == 1
        with pytest.raises(pika.exceptions.StreamLostError):
            victim.channel()  # a reset, not a connection.close: pika sees the stream lost
        bystander.channel().queue_declare("still-here")
    finally:
        bystander.close()


# -- close_connections ---------------------------------------------------------------------


def test_close_connections_is_320_with_the_reason(amqp_url: str, leveret: Inspector) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    assert leveret.faults.close_connections(reason="maintenance") == 1
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        connection.channel()
    assert caught.value.reply_code == 320
    assert caught.value.reply_text == "CONNECTION_FORCED - maintenance"


# -- restart -------------------------------------------------------------------------------


async def test_restart_kill_robust_consumer_and_persistent_messages(
    amqp_url: str, leveret: Inspector
) -> None:
    holder = await aio_pika.connect(amqp_url)  # the kill aborts it
    channel = await holder.channel()
    await channel.declare_queue("orders", durable=True)
    held_queue = await channel.declare_queue("held", durable=True)
    await publish(holder, "orders", b"before the restart")
    await publish(holder, "held", b"unacked")
    # A delivery still unacked when the broker dies comes back, flagged redelivered.
    held = await held_queue.get(no_ack=False)
    assert held.body == b"unacked" and not held.redelivered

    connection, reconnected = await robust(amqp_url)
    try:
        leveret.faults.restart()  # kill=True
        assert leveret.queue_depth("orders") == 1  # the inspector reads the new broker
        assert leveret.stats("held").messages_ready == 1
        await asyncio.wait_for(reconnected.wait(), 10)
        got = await consume_into(connection, "orders")
        first = await asyncio.wait_for(got.get(), 10)
        assert first.body == b"before the restart"
        publisher = await aio_pika.connect(amqp_url)
        await publish(publisher, "orders", b"after the restart")
        channel = await publisher.channel()
        again = await (await channel.declare_queue("held", durable=True)).get(no_ack=True)
        assert again.body == b"unacked" and again.redelivered
        await publisher.close()
        second = await asyncio.wait_for(got.get(), 10)
        assert second.body == b"after the restart"
    finally:
        await connection.close()
        with contextlib.suppress(Exception):
            await holder.close()


def test_clean_restart_sends_320_and_keeps_the_vhost(amqp_url: str, leveret: Inspector) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    connection.channel().queue_declare("kept", durable=True)
    leveret.faults.restart(kill=False)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        connection.channel()
    assert caught.value.reply_code == 320
    again = pika.BlockingConnection(pika.URLParameters(amqp_url))  # same port, same vhost
    try:
        again.channel().queue_declare("kept", durable=True, passive=True)
    finally:
        again.close()
    assert leveret.queues() == ["kept"]


def test_journal_and_frozen_clock_carry_on_through_a_restart(
    amqp_url: str, leveret: Inspector
) -> None:
    journal = leveret.journal
    leveret.clock.advance(3600)
    frozen_at = leveret.clock.now()
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    # Confirmed: the restart is a kill -9, which may take an unconfirmed message with it.
    channel.confirm_delivery()
    channel.queue_declare("jobs", durable=True, arguments={"x-message-ttl": 60000})
    channel.basic_publish("", "jobs", b"before", pika.BasicProperties(delivery_mode=2))
    journal.wait_for("published")
    leveret.faults.restart()

    assert leveret.clock.now() == frozen_at  # still frozen where it stood
    again = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = again.channel()
        channel.basic_publish("", "jobs", b"after", pika.BasicProperties(delivery_mode=2))
        journal.wait_for("published", count=2)
        assert leveret.queue_depth("jobs") == 2
        leveret.clock.advance(61)  # the TTL runs on the carried clock, for both messages
        assert leveret.queue_depth("jobs") == 0
    finally:
        again.close()
    assert [r.body for r in journal.published()] == [b"before", b"after"]
    assert [r.time for r in journal.published()] == [frozen_at, frozen_at]
    assert len(journal.expired(queue="jobs")) == 2


def test_restart_without_a_data_dir_says_what_to_do() -> None:
    with BrokerThread(Config(host="127.0.0.1", port=0)) as broker:
        broker.add_vhost("v")
        with pytest.raises(NoDataDirError, match=r"leveret_config.*data_dir"):
            broker.inspector("v").faults.restart()
        port = broker.server.port
        connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_url("v")))
        connection.close()  # nothing stopped
        assert broker.server.port == port


# -- alarms --------------------------------------------------------------------------------


def test_memory_alarm_fires_pikas_blocked_connection_timeout(
    amqp_url: str, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    params = pika.URLParameters(amqp_url)
    params.blocked_connection_timeout = 0.3
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_declare("work")
    channel.basic_publish("", "work", b"one")  # a publisher: the alarm blocks it
    leveret.faults.memory_alarm()
    # The monitor's own check finds usage under the mark and does not clear it.
    leveret_broker.call(leveret_broker.server.state.memory._check)
    assert leveret_broker.call(lambda: leveret_broker.server.state.memory.alarm)
    with pytest.raises(
        (pika.exceptions.ConnectionBlockedTimeout, pika.exceptions.StreamLostError)
    ) as caught:
        for _ in range(50):
            channel.basic_publish("", "work", b"more")
            connection.process_data_events(time_limit=0.1)
    assert isinstance(caught.value, pika.exceptions.ConnectionBlockedTimeout)
    leveret.faults.memory_alarm(on=False)
    assert not leveret_broker.call(lambda: leveret_broker.server.state.memory.alarm)


def test_disk_alarm_blocks_and_unblocks(
    amqp_url: str, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    events: list[str] = []
    connection.add_on_connection_blocked_callback(
        lambda _conn, frame: events.append("blocked: " + frame.method.reason)
    )
    connection.add_on_connection_unblocked_callback(lambda _conn, _f: events.append("unblocked"))
    try:
        channel = connection.channel()
        channel.queue_declare("work")
        channel.basic_publish("", "work", b"one")
        leveret.faults.disk_alarm()
        while not events:
            connection.process_data_events(time_limit=0.05)
        assert events == ["blocked: low on disk"]
        # A periodic reading with plenty of room does not clear the injected alarm.
        disk = leveret_broker.server.state.disk
        leveret_broker.call(lambda: disk.update(disk.limit * 100))
        assert leveret_broker.call(lambda: disk.alarm)
        leveret.faults.disk_alarm(on=False)
        while len(events) < 2:
            connection.process_data_events(time_limit=0.05)
        assert events == ["blocked: low on disk", "unblocked"]
        channel.basic_publish("", "work", b"two")
        leveret.wait_for_messages("work", 2)
    finally:
        connection.close()


def test_the_fixture_clears_an_alarm_left_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(
        pytester,
        monkeypatch,
        """
        def test_leaves_it_on(leveret):
            leveret.faults.memory_alarm()
            leveret.faults.delay(50)

        def test_after(leveret_broker):
            assert not leveret_broker.call(lambda: leveret_broker.server.state.memory.alarm)
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


# -- cancel_consumers ----------------------------------------------------------------------


def test_cancel_consumers_sends_basic_cancel(amqp_url: str, leveret: Inspector) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare("tasks")
        channel.basic_publish("", "tasks", b"in hand")
        cancelled: list[str] = []
        deliveries: list[int] = []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        tag = channel.basic_consume(
            "tasks", lambda _ch, method, _p, _b: deliveries.append(method.delivery_tag)
        )
        while not deliveries:
            connection.process_data_events(time_limit=0.05)
        assert leveret.faults.cancel_consumers("tasks") == 1
        while not cancelled:
            connection.process_data_events(time_limit=0.05)
        assert cancelled == [tag]
        stats = leveret.stats("tasks")
        assert (stats.consumers, stats.messages_unacknowledged) == (0, 1)
        channel.basic_ack(deliveries[0])  # the delivery stayed with the channel
        leveret.wait_until_acked("tasks", 1)
        assert leveret.faults.cancel_consumers("tasks") == 0
    finally:
        connection.close()


async def test_cancel_consumers_reaches_aio_pika(amqp_url: str, leveret: Inspector) -> None:
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        tag = await acking_consumer(channel, "events")
        assert tag in (await channel.get_underlay_channel()).consumers
        assert leveret.faults.cancel_consumers("events") == 1
        await leveret.wait_for_consumers_async("events", 0)
        await wait_cancelled(channel, tag)
    finally:
        await connection.close()


# -- delay ---------------------------------------------------------------------------------


def test_delay_makes_a_round_trip_take_at_least_ms(amqp_url: str, leveret: Inspector) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare("rtt")

        def round_trip() -> float:
            start = time.monotonic()
            channel.queue_declare("rtt", passive=True)
            return time.monotonic() - start

        leveret.faults.delay(150)
        delayed = [round_trip() for _ in range(3)]
        assert min(delayed) >= 0.15
        # Order is kept: a burst of publishes arrives in order, each confirm after 150 ms.
        channel.confirm_delivery()
        for n in range(5):
            channel.basic_publish("", "rtt", str(n).encode())
        leveret.faults.delay(0)
        assert round_trip() < 0.15
        bodies = [channel.basic_get("rtt", auto_ack=True)[2] for _ in range(5)]
        assert bodies == [b"0", b"1", b"2", b"3", b"4"]
    finally:
        connection.close()


def test_delay_applies_to_connections_opened_later(amqp_url: str, leveret: Inspector) -> None:
    leveret.faults.delay(100)
    start = time.monotonic()
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        # Start and Tune go out before the vhost is known; Open-Ok and Channel.Open-Ok,
        # two round trips, are held 100 ms each.
        connection.channel()
        assert time.monotonic() - start >= 0.2
    finally:
        connection.close()


# -- bad input -----------------------------------------------------------------------------


def test_bad_input_raises_one_clear_exception(
    amqp_url: str, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    with pytest.raises(InvalidFaultError, match="ms must be 0 or more"):
        leveret.faults.delay(-1)
    with pytest.raises(InvalidFaultError, match="ms must be a number"):
        leveret.faults.delay("fast")  # type: ignore[arg-type]
    with pytest.raises(UnknownQueueError, match="no queue 'nope'"):
        leveret.faults.cancel_consumers("nope")
    with pytest.raises(InvalidFaultError, match="kill must be true or false"):
        leveret.faults.restart(kill="yes")  # type: ignore[arg-type]
    gone = leveret.for_vhost("no-such-vhost").faults
    for call in (
        gone.drop_connections,
        lambda: gone.close_connections("x"),
        gone.memory_alarm,
        gone.disk_alarm,
        lambda: gone.delay(5),
        gone.restart,
    ):
        with pytest.raises(UnknownVhostError, match="no vhost 'no-such-vhost'"):
            call()
    # A connection that is gone meanwhile is simply not there to drop.
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    connection.close()
    assert leveret.faults.drop_connections() == 0
    # Nothing broke.
    assert not leveret_broker.call(lambda: leveret_broker.server.state.memory.alarm)
    again = pika.BlockingConnection(pika.URLParameters(amqp_url))
    again.channel().queue_declare("fine")
    again.close()


def test_faults_need_the_in_process_broker() -> None:
    faults = Inspector.unavailable("no management API answers", vhost="v").faults
    with pytest.raises(LeveretOnlyError, match=r"in-process.*no management API"):
        faults.drop_connections()
    with pytest.raises(LeveretOnlyError):
        faults.restart()
    faults.reset()  # nothing to clear off-broker
    # Through the management API of an external broker (never contacted for this).
    remote = Inspector(ManagementAPI("http://127.0.0.1:9", "guest", "guest"), vhost="v").faults
    for call in (remote.memory_alarm, lambda: remote.cancel_consumers("q"), remote.restart):
        with pytest.raises(LeveretOnlyError, match=re.escape("management API http://127.0.0.1:9")):
            call()


# -- Celery and FastStream -----------------------------------------------------------------


def test_celery_worker_keeps_processing_after_restart(amqp_url: str, leveret: Inspector) -> None:
    from celery import Celery

    app = Celery("faults", broker=amqp_url, backend="rpc://", set_as_current=False)
    app.conf.broker_connection_retry = True
    app.conf.broker_connection_max_retries = None
    done = threading.Event()

    @app.task  # type: ignore[untyped-decorator]
    def add(x: int, y: int) -> int:
        done.set()
        return x + y

    try:
        with celery_worker(app):
            assert add.delay(1, 2).get(timeout=10) == 3
            leveret.faults.restart()
            # The worker reconnects and consumes again; a task sent after the restart runs.
            leveret.wait_for_consumers("celery", 1, timeout=20)
            done.clear()
            result = add.apply_async((2, 3), retry=True)
            assert done.wait(20)
            assert result.get(timeout=20) == 5
    finally:
        app.close()


async def test_faststream_subscriber_comes_back_after_drop_and_restart(
    amqp_url: str, leveret: Inspector
) -> None:
    from faststream.rabbit import RabbitBroker, RabbitQueue

    broker = RabbitBroker(amqp_url, reconnect_interval=0.05, logger=None)
    got: asyncio.Queue[str] = asyncio.Queue()

    @broker.subscriber(RabbitQueue("fs.jobs", durable=True))
    async def handle(body: str) -> None:
        await got.put(body)

    async with broker:
        await broker.start()
        await leveret.wait_for_consumers_async("fs.jobs", 1)
        await broker.publish("first", "fs.jobs")
        assert await asyncio.wait_for(got.get(), 10) == "first"
        # Acked before the fault, or it would rightly come back (at least once).
        await leveret.wait_until_acked_async("fs.jobs", 1)
        for fault in ("drop", "restart"):
            if fault == "drop":
                assert leveret.faults.drop_connections() >= 1
            else:
                leveret.faults.restart()
            await leveret.wait_for_consumers_async("fs.jobs", 1, timeout=20)
            publisher = await aio_pika.connect(amqp_url)
            await publish(publisher, "fs.jobs", f"after {fault}".encode())
            await publisher.close()
            assert await asyncio.wait_for(got.get(), 10) == f"after {fault}"
            # The counters restart with the broker (the queue is recovered afresh).
            await leveret.wait_until_acked_async("fs.jobs", 2 if fault == "drop" else 1)


def test_the_vhost_is_kept_in_the_data_dir(
    leveret_broker: BrokerThread, leveret_vhost: str
) -> None:
    """What brings the test's vhost back after a restart: it is in the saved users file."""
    data_dir = leveret_broker.config.data_dir
    assert isinstance(data_dir, Path)
    assert leveret_vhost in json.loads((data_dir / "users.json").read_text())["vhosts"]
