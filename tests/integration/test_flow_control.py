"""Flow control and limits: maximum message size, the memory alarm (connection.blocked /
connection.unblocked), the maximum number of connections and a configured channel_max.

Leveret only. Every scenario here needs a broker configured with small limits (a 1 KiB
message size limit, a 64 KiB memory watermark, two connections), which a client cannot ask a
running RabbitMQ for: its limits live in rabbitmq.conf, and the shared test RabbitMQ must not
be reconfigured. Each test starts its own in-process Leveret with the limit it needs
(``BrokerThread(Config(...))`` from tests/conftest.py). The expected texts and behaviours are
RabbitMQ's, from its sources (rabbit_channel:check_msg_size/3, rabbit_reader: the throttle,
send_blocked/2, blocked_by_message/1, is_over_node_connection_limit/1, create_channel/2):

- a message whose *body* is larger than ``max_message_size`` closes the channel with
  406 ``PRECONDITION_FAILED - message size N is larger than configured max size M``;
- while the memory alarm is on, a connection that publishes gets ``connection.blocked`` with
  reason ``low on memory`` (only if it advertised the ``connection.blocked`` capability, which
  pika and aio-pika do) and the broker stops reading from it; connections that only consume
  are neither blocked nor told; when memory falls below the watermark, ``connection.unblocked``
  is sent and reading resumes;
- one connection more than ``connection_max`` is refused at connection.open with
  530 ``NOT_ALLOWED - connection refused: node connection limit (N) is reached``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from aio_pika import Message
from aiormq.exceptions import ChannelPreconditionFailed
from pamqp import commands

from leveret.config import Config
from tests.conftest import BrokerThread

from .helpers import aio_reply, unique, wait_until
from .wire import WireClient

pytestmark = pytest.mark.timeout(60)

MAX_SIZE = 1024
WATERMARK = 64 * 1024
CHUNK = 16 * 1024
FILL = 8  # 8 x 16 KiB = twice the watermark


# -- helpers ----------------------------------------------------------------------------------


def connect(url: str) -> pika.BlockingConnection:
    p = pika.URLParameters(url)
    p.connection_attempts = 1
    p.socket_timeout = 5
    p.stack_timeout = 10
    # Long enough not to interfere: pika would drop a connection blocked for longer.
    p.blocked_connection_timeout = 30
    return pika.BlockingConnection(p)


def pump(
    connections: list[pika.BlockingConnection], done: Callable[[], bool], within: float = 10.0
) -> None:
    """Process I/O on all connections until ``done()`` holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for connection in connections:
            connection.process_data_events(time_limit=0.01)


def channel_error(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[int, str]:
    exc = excinfo.value
    assert isinstance(exc, pika.exceptions.ChannelClosedByBroker), repr(exc)
    return exc.reply_code, exc.reply_text


def size_error(size: int, limit: int) -> str:
    return f"PRECONDITION_FAILED - message size {size} is larger than configured max size {limit}"


def limit_error(limit: int) -> str:
    return f"NOT_ALLOWED - connection refused: node connection limit ({limit}) is reached"


@pytest.fixture
def small_broker(request: pytest.FixtureRequest) -> Iterator[BrokerThread]:
    """A Leveret of its own; ``request.param`` holds the Config overrides (see with_config)."""
    broker = BrokerThread(Config(host="127.0.0.1", port=0, **request.param)).start()
    yield broker
    broker.stop()


def with_config(**overrides: Any) -> Any:
    """Run the test against a Leveret started with these Config fields."""
    return pytest.mark.parametrize("small_broker", [overrides], indirect=True, ids=["config"])


# -- maximum message size ---------------------------------------------------------------------


def test_default_max_message_size_is_128_mib() -> None:
    # The 3.13 profile (peers.md 2.13): 128 MiB; RabbitMQ 4.x lowered it to 16 MiB.
    assert Config().max_message_size == 128 * 1024 * 1024


@with_config(max_message_size=MAX_SIZE)
def test_message_larger_than_max_size_is_406(small_broker: BrokerThread) -> None:
    connection = connect(small_broker.url)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.confirm_delivery()
        # The limit is on the body; properties do not count.
        big_headers = pika.BasicProperties(headers={"pad": "h" * 4000})
        channel.basic_publish("", queue, b"x" * MAX_SIZE, big_headers)
        assert channel.queue_declare(queue, passive=True).method.message_count == 1

        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            channel.basic_publish("", queue, b"x" * (MAX_SIZE + 1))
        assert channel_error(excinfo) == (406, size_error(MAX_SIZE + 1, MAX_SIZE))
        # Channel-level: the connection and its other channels carry on.
        assert connection.is_open
        other = connection.channel()
        assert other.queue_declare(queue, passive=True).method.message_count == 1
    finally:
        if connection.is_open:
            connection.close()


@with_config(max_message_size=MAX_SIZE)
async def test_message_larger_than_max_size_through_aio_pika(small_broker: BrokerThread) -> None:
    connection = await aio_pika.connect(small_broker.url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        await channel.default_exchange.publish(Message(b"y" * MAX_SIZE), queue.name)
        with pytest.raises(ChannelPreconditionFailed) as err:
            await channel.default_exchange.publish(Message(b"y" * 70000), queue.name)
        assert aio_reply(err.value) == (406, size_error(70000, MAX_SIZE))
        assert not connection.is_closed
        other = await connection.channel()
        got = await (await other.get_queue(queue.name)).get(no_ack=True)
        assert got.body_size == MAX_SIZE
    finally:
        await connection.close()


# -- memory alarm -----------------------------------------------------------------------------


@with_config(memory_high_watermark=WATERMARK)
def test_memory_alarm_blocks_the_publisher_until_consumers_drain(
    small_broker: BrokerThread,
) -> None:
    publisher = connect(small_broker.url)
    consumer = connect(small_broker.url)
    try:
        events: list[tuple[str, Any]] = []
        consumer_events: list[str] = []
        publisher.add_on_connection_blocked_callback(
            lambda _c, frame: events.append(("blocked", frame.method.reason))
        )
        publisher.add_on_connection_unblocked_callback(
            lambda _c, _frame: events.append(("unblocked", None))
        )
        consumer.add_on_connection_blocked_callback(lambda _c, _f: consumer_events.append("b"))
        consumer.add_on_connection_unblocked_callback(lambda _c, _f: consumer_events.append("u"))

        queue = unique("mem")
        consumer_channel = consumer.channel()
        consumer_channel.queue_declare(queue, auto_delete=True)
        publish_channel = publisher.channel()
        for index in range(FILL):
            publish_channel.basic_publish("", queue, bytes([index]) * CHUNK)
        pump([publisher, consumer], lambda: bool(events))
        assert events == [("blocked", "low on memory")]

        # Blocked: the broker reads nothing more from the publisher.
        publish_channel.basic_publish("", queue, b"marker")
        publisher.process_data_events(time_limit=0.1)
        count = consumer_channel.queue_declare(queue, passive=True).method.message_count
        assert 0 < count <= FILL
        time.sleep(0.3)
        publisher.process_data_events(time_limit=0.05)
        assert consumer_channel.queue_declare(queue, passive=True).method.message_count == count
        assert events == [("blocked", "low on memory")]

        # A consumer on another connection keeps draining; memory falls, the publisher is
        # unblocked and what it sent meanwhile arrives, in order.
        received: list[bytes] = []
        consumer_channel.basic_consume(
            queue, lambda _c, _m, _p, body: received.append(body), auto_ack=True
        )
        pump([publisher, consumer], lambda: len(received) == FILL + 1)
        assert received == [bytes([i]) * CHUNK for i in range(FILL)] + [b"marker"]
        pump([publisher, consumer], lambda: len(events) >= 2)
        assert events[:2] == [("blocked", "low on memory"), ("unblocked", None)]
        assert consumer_events == []

        # Publishing works again.
        publish_channel.confirm_delivery()
        publish_channel.basic_publish("", queue, b"after")
        pump([publisher, consumer], lambda: len(received) == FILL + 2)
        assert received[-1] == b"after"
    finally:
        for connection in (publisher, consumer):
            if connection.is_open:
                connection.close()


@with_config(memory_high_watermark=WATERMARK)
def test_memory_alarm_does_not_block_a_connection_that_only_consumes(
    small_broker: BrokerThread,
) -> None:
    # RabbitMQ blocks a connection only when it publishes while the alarm is on.
    publisher = connect(small_broker.url)
    bystander = connect(small_broker.url)
    try:
        seen: list[str] = []
        bystander.add_on_connection_blocked_callback(lambda _c, _f: seen.append("blocked"))
        publisher_blocked: list[str] = []
        publisher.add_on_connection_blocked_callback(
            lambda _c, f: publisher_blocked.append(f.method.reason)
        )
        queue = unique("mem")
        bystander_channel = bystander.channel()
        bystander_channel.queue_declare(queue, auto_delete=True)
        publish_channel = publisher.channel()
        for _ in range(FILL):
            publish_channel.basic_publish("", queue, b"z" * CHUNK)
        pump([publisher, bystander], lambda: bool(publisher_blocked))
        # The bystander's own commands (declare, get, ack) still work.
        method, _props, body = bystander_channel.basic_get(queue)
        assert body == b"z" * CHUNK
        bystander_channel.basic_ack(method.delivery_tag)
        bystander.process_data_events(time_limit=0.2)
        assert seen == []
        bystander_channel.queue_purge(queue)
    finally:
        for connection in (publisher, bystander):
            if connection.is_open:
                connection.close()


@with_config(memory_high_watermark=WATERMARK)
async def test_memory_alarm_through_aio_pika(
    small_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    # aiormq logs connection.blocked / connection.unblocked as warnings and holds its
    # Connection.ready() until unblocked.
    caplog.set_level(logging.WARNING, logger="aiormq.connection")
    publisher = await aio_pika.connect(small_broker.url)
    consumer = await aio_pika.connect(small_broker.url)
    try:
        consumer_channel = await consumer.channel()
        queue = await consumer_channel.declare_queue(unique("mem"), auto_delete=True)
        publish_channel = await publisher.channel(publisher_confirms=False)
        for index in range(FILL):
            await publish_channel.default_exchange.publish(
                Message(bytes([index]) * CHUNK), queue.name
            )

        async def blocked() -> bool:
            return "was blocked by" in caplog.text

        await wait_until(blocked, within=10)
        assert "was blocked by: 'low on memory'" in caplog.text
        underlay = publisher.transport.connection
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(underlay.ready(), 0.3)

        inbox: asyncio.Queue = asyncio.Queue()
        await queue.consume(inbox.put, no_ack=True)
        bodies = [(await asyncio.wait_for(inbox.get(), 10)).body for _ in range(FILL)]
        assert bodies == [bytes([i]) * CHUNK for i in range(FILL)]
        await asyncio.wait_for(underlay.ready(), 10)
        assert "was unblocked" in caplog.text
        # Only the publisher was blocked.
        assert caplog.text.count("was blocked by") == 1
    finally:
        await publisher.close()
        await consumer.close()


# -- maximum number of connections ------------------------------------------------------------


@with_config(max_connections=2)
def test_one_connection_too_many_is_refused_with_530(small_broker: BrokerThread) -> None:
    url = small_broker.url
    first = connect(url)
    second = connect(url)
    try:
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as excinfo:
            connect(url)
        assert excinfo.value.args == (f"ConnectionClosedByBroker: (530) {limit_error(2)!r}",)

        # On the wire: refused at connection.open (class 10, method 40), connection-level.
        with WireClient(url) as client:
            client.negotiate()
            client.send(commands.Connection.Open(virtual_host="/"))
            client.expect_connection_close(530, limit_error(2), 10, 40)

        # The connections already open are unaffected.
        for connection in (first, second):
            channel = connection.channel()
            queue = channel.queue_declare("", exclusive=True).method.queue
            channel.basic_publish("", queue, b"still fine")
            assert channel.basic_get(queue, auto_ack=True)[2] == b"still fine"

        # Closing one frees a slot.
        first.close()
        deadline = time.monotonic() + 5
        while True:
            try:
                third = connect(url)
                break
            except pika.exceptions.ProbableAccessDeniedError:
                assert time.monotonic() < deadline, "no slot freed after a close"
                time.sleep(0.05)
        third.close()
    finally:
        for connection in (first, second):
            if connection.is_open:
                connection.close()


@with_config(max_connections=0)
def test_zero_max_connections_means_unlimited(small_broker: BrokerThread) -> None:
    connections = [connect(small_broker.url) for _ in range(5)]
    try:
        assert all(c.is_open for c in connections)
    finally:
        for connection in connections:
            connection.close()


# -- channel_max ------------------------------------------------------------------------------


@with_config(channel_max=3)
def test_configured_channel_max_is_offered_and_enforced(small_broker: BrokerThread) -> None:
    with WireClient(small_broker.url) as client:
        tune = client.negotiate()
        assert tune.channel_max == 3
        client.open()
        for number in (1, 2, 3):
            client.open_channel(number)
        client.send(commands.Channel.Open(), 4)
        client.expect_connection_close(
            530,
            "NOT_ALLOWED - number of channels opened (3) has reached the negotiated "
            "channel_max (3)",
        )
    # pika takes the smaller of its own and the broker's channel_max.
    connection = connect(small_broker.url)
    try:
        assert connection._impl.params.channel_max == 3
        channels = [connection.channel() for _ in range(3)]
        assert all(c.is_open for c in channels)
        with pytest.raises(pika.exceptions.NoFreeChannels):
            connection.channel()
    finally:
        connection.close()
