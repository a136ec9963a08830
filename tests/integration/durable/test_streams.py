"""Stream queues (``x-queue-type: stream``) through AMQP 0-9-1, as pika and aio-pika see them.

Each expectation was observed on RabbitMQ 3.10.8 (``-m rabbitmq``); sources: docs/streams.md
("Usage", "Limitations"), rabbit_stream_queue.erl (declare, consume, settle),
rabbit_amqqueue:check_max_age/1. A stream keeps its messages when they are acked; every
consumer reads from an offset of its own.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from leveret.config import Config
from leveret.inspect import BrokerThread

from ..helpers import durable_queue, unique

pytestmark = pytest.mark.timeout(30)

STREAM = {"x-queue-type": "stream"}


def stream(ch: BlockingChannel, cleanup: list[str], **arguments: Any) -> str:
    return durable_queue(ch, cleanup, "stream", "st", **arguments)


def publish(ch: BlockingChannel, name: str, *bodies: bytes, **headers: Any) -> None:
    """Publish with confirms, one at a time (each is its own chunk in RabbitMQ)."""
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body, pika.BasicProperties(headers=headers or None))


Delivery = tuple[Any, Any, bytes]  # (method, properties, body)


def consume(
    connection: pika.BlockingConnection,
    name: str,
    offset: Any = None,
    *,
    prefetch: int = 100,
    ack: bool = False,
    arguments: dict[str, Any] | None = None,
) -> tuple[BlockingChannel, list[Delivery]]:
    """A new channel consuming ``name`` from ``offset``, and the list its deliveries go to."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    got: list[Delivery] = []

    def on_message(ch_: BlockingChannel, method: Any, properties: Any, body: bytes) -> None:
        got.append((method, properties, body))
        if ack:
            ch_.basic_ack(method.delivery_tag)

    arguments = dict(arguments or {})
    if offset is not None:
        arguments["x-stream-offset"] = offset
    channel.basic_consume(name, on_message, arguments=arguments)
    return channel, got


def read(
    connection: pika.BlockingConnection,
    name: str,
    offset: Any = None,
    *,
    prefetch: int = 100,
    ack: bool = True,
    within: float = 0.6,
    arguments: dict[str, Any] | None = None,
) -> list[tuple[bytes, Any, bool]]:
    """(body, x-stream-offset, redelivered) of what a new consumer gets within ``within`` s."""
    channel, got = consume(
        connection, name, offset, prefetch=prefetch, ack=ack, arguments=arguments
    )
    pump_until(connection, lambda: False, within)
    channel.close()
    return [
        (body, (properties.headers or {}).get("x-stream-offset"), method.redelivered)
        for method, properties, body in got
    ]


def pump_until(
    connection: pika.BlockingConnection, done: Callable[[], bool], within: float = 5.0
) -> None:
    """Process the connection's events until ``done()`` (at most ``within`` seconds)."""
    deadline = time.monotonic() + within
    while not done() and time.monotonic() < deadline:
        connection.process_data_events(0.05)


def offsets(got: list[tuple[bytes, Any, bool]]) -> list[Any]:
    return [offset for _body, offset, _redelivered in got]


# -- declare --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "arguments", "text"),
    [
        ({"durable": False}, {}, "invalid property 'non-durable' for queue '{q}' in vhost '/'"),
        (
            {"durable": True, "exclusive": True},
            {},
            "invalid property 'exclusive-owner' for queue '{q}' in vhost '/'",
        ),
        (
            {"durable": True, "auto_delete": True},
            {},
            "invalid property 'auto-delete' for queue '{q}' in vhost '/'",
        ),
        (
            {"durable": True},
            {"x-max-age": "1x"},
            "invalid arg 'x-max-age' for queue '{q}' in vhost '/': invalid_max_age",
        ),
        (
            {"durable": True},
            {"x-max-age": "0s"},
            "invalid arg 'x-max-age' for queue '{q}' in vhost '/': invalid_max_age",
        ),
        (
            {"durable": True},
            {"x-max-age": 10},
            "invalid arg 'x-max-age' for queue '{q}' in vhost '/': {{unacceptable_type,signedint}}",
        ),
        (
            {"durable": True},
            {"x-stream-max-segment-size-bytes": -1},
            "invalid arg 'x-stream-max-segment-size-bytes' for queue '{q}' in vhost '/': "
            "{{value_negative,-1}}",
        ),
        (
            {"durable": True},
            {"x-message-ttl": 1000},
            "invalid arg 'x-message-ttl' for queue '{q}' in vhost '/' "
            "of queue type rabbit_stream_queue",
        ),
    ],
)
def test_declare_rules(
    ch: BlockingChannel, flags: dict[str, bool], arguments: dict[str, Any], text: str
) -> None:
    name = unique("st-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(name, arguments={**STREAM, **arguments}, **flags)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - " + text.format(q=name),
    )


def test_server_named_stream_is_refused(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare("", durable=True, arguments=STREAM)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue",
    )


def test_a_max_age_without_digits_crashes_the_channel(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.queue_declare(unique("st-bad"), durable=True, arguments={**STREAM, "x-max-age": "h"})
    assert (err.value.reply_code, err.value.reply_text) == (541, "INTERNAL_ERROR")


def test_retention_arguments_are_taken(ch: BlockingChannel, cleanup: list[str]) -> None:
    arguments = {
        "x-max-age": "7D",
        "x-max-length-bytes": 10_000_000,
        "x-stream-max-segment-size-bytes": 1_000_000,
    }
    name = stream(ch, cleanup, **arguments)
    ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments})


# -- reading --------------------------------------------------------------------------------


def test_acked_messages_stay_and_every_consumer_reads_them_all(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"m0", b"m1", b"m2")
    first = read(connection, name, "first")
    assert first == [(b"m0", 0, False), (b"m1", 1, False), (b"m2", 2, False)]
    # Acked by the first reader, still there for the next one.
    assert read(connection, name, "first") == first


def test_the_offset_header_replaces_the_publishers_and_keeps_the_rest(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"m", **{"app": "x", "n": 7, "x-stream-offset": 77})
    _channel, got = consume(connection, name, "first")
    pump_until(connection, lambda: bool(got))
    assert [properties.headers for _m, properties, _b in got] == [
        {"app": "x", "n": 7, "x-stream-offset": 0}
    ]


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        ("first", [0, 1, 2, 3]),
        ("last", [3]),
        ("next", []),
        (None, []),  # next is the default
        (2, [2, 3]),
        (-5, [0, 1, 2, 3]),  # before the start: the first
        (9, []),  # past the end: waits there
        ("1h", [0, 1, 2, 3]),  # an interval back from now
        ("1D", [0, 1, 2, 3]),
    ],
)
def test_where_a_consumer_starts(
    connection: pika.BlockingConnection,
    ch: BlockingChannel,
    cleanup: list[str],
    offset: Any,
    expected: list[int],
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"a", b"b", b"c", b"d")
    assert offsets(read(connection, name, offset)) == expected


def test_a_next_consumer_gets_what_is_published_after_it(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"old")
    _channel, got = consume(connection, name)  # no offset: next
    connection.process_data_events(0.3)
    publish(ch, name, b"new")
    pump_until(connection, lambda: bool(got))
    assert [body for *_, body in got] == [b"new"]


def test_a_timestamp_starts_at_the_first_message_published_since(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"before")
    time.sleep(1.1)
    since = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
    time.sleep(1.1)
    publish(ch, name, b"after-1", b"after-2")
    got = read(connection, name, since)
    assert [body for body, *_ in got] == [b"after-1", b"after-2"]


def test_prefetch_is_the_credit_and_acks_return_it(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, *[b"m%d" % i for i in range(6)])
    assert offsets(read(connection, name, "first", prefetch=2, ack=False)) == [0, 1]
    assert offsets(read(connection, name, "first", prefetch=2, ack=True)) == list(range(6))


def test_aio_pika_consumer_with_an_offset(amqp_url: str, cleanup: list[str]) -> None:
    async def scenario() -> list[tuple[bytes, Any]]:
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=10)
            name = unique("st-aio")
            cleanup.append(name)
            queue = await channel.declare_queue(name, durable=True, arguments=STREAM)
            publisher = await connection.channel(publisher_confirms=True)
            for i in range(3):
                await publisher.default_exchange.publish(aio_pika.Message(b"%d" % i), name)
            got: list[tuple[bytes, Any]] = []
            async with queue.iterator(arguments={"x-stream-offset": 1}) as messages:
                async for message in messages:
                    async with message.process():
                        got.append((message.body, message.headers["x-stream-offset"]))
                    if len(got) == 2:
                        break
            return got

    assert asyncio.run(scenario()) == [(b"1", 1), (b"2", 2)]


# -- what a stream refuses ------------------------------------------------------------------


@pytest.mark.parametrize(("qos", "no_ack"), [(None, False), (None, True), ("global", False)])
def test_a_consumer_needs_a_prefetch(
    ch: BlockingChannel, cleanup: list[str], qos: Any, no_ack: bool
) -> None:
    name = stream(ch, cleanup)
    if qos == "global":
        ch.basic_qos(prefetch_count=10, global_qos=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_consume(name, lambda *_: None, auto_ack=no_ack)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - consumer prefetch count is not set for "
        f"'queue '{name}' in vhost '/''",
    )


def test_a_consumer_must_acknowledge(ch: BlockingChannel, cleanup: list[str]) -> None:
    name = stream(ch, cleanup)
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_consume(name, lambda *_: None, auto_ack=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        540,
        "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues "
        f"queue '{name}' in vhost '/'",
    )


_INVALID_OFFSET = (
    "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{q}' in vhost '/': "
    '{{invalid_stream_offset_arg,{{longstr,<<"{offset}">>}}}}'
)


@pytest.mark.parametrize(
    ("offset", "code", "text"),
    [
        # A string that starts with a digit but is no interval: 406.
        *[(offset, 406, _INVALID_OFFSET) for offset in ("3", "1x", "10")],
        # Other strings, and booleans, crash RabbitMQ's channel: 541.
        *[(offset, 541, "INTERNAL_ERROR") for offset in ("bogus", "FIRST", "", True)],
    ],
)
def test_invalid_offsets(
    ch: BlockingChannel, cleanup: list[str], offset: Any, code: int, text: str
) -> None:
    name = stream(ch, cleanup)
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.AMQPError) as err:
        ch.basic_consume(name, lambda *_: None, arguments={"x-stream-offset": offset})
        ch.connection.process_data_events(1)
    closed = err.value
    assert isinstance(
        closed,
        pika.exceptions.ChannelClosedByBroker
        if code == 406
        else pika.exceptions.ConnectionClosedByBroker,
    )
    assert (closed.reply_code, closed.reply_text) == (code, text.format(q=name, offset=offset))


def test_get_and_purge_are_not_implemented(
    connection: pika.BlockingConnection, amqp_url: str, cleanup: list[str]
) -> None:
    name = stream(connection.channel(), cleanup)
    for action, text in (
        (lambda c: c.basic_get(name), "basic.get"),
        (lambda c: c.queue_purge(name), "queue.purge"),
    ):
        conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
            action(conn.channel())
        assert (err.value.reply_code, err.value.reply_text) == (
            540,
            f"NOT_IMPLEMENTED - {text} not supported by stream queues queue '{name}' in vhost '/'",
        )


@pytest.mark.parametrize("settle", ["nack", "reject"])
def test_nack_and_reject_are_not_implemented(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str], settle: str
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"m")
    channel, got = consume(connection, name, 0, prefetch=1)
    pump_until(connection, lambda: bool(got))
    tag = got[0][0].delivery_tag
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        if settle == "nack":
            channel.basic_nack(tag, requeue=False)
        else:
            channel.basic_reject(tag, requeue=True)
        connection.process_data_events(1)
    assert (err.value.reply_code, err.value.reply_text) == (
        540,
        "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues "
        f"queue '{name}' in vhost '/'",
    )


def test_deleting_a_stream_cancels_its_consumers(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = stream(ch, cleanup)
    publish(ch, name, b"a", b"b")
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=5)
    cancelled: list[Any] = []
    consumer.add_on_cancel_callback(cancelled.append)
    consumer.basic_consume(name, lambda *_: None)
    # RabbitMQ's delete-ok counts no messages for a stream.
    assert ch.queue_delete(name).method.message_count == 0
    pump_until(connection, lambda: bool(cancelled))
    assert cancelled and consumer.is_open


# -- retention ------------------------------------------------------------------------------


def test_retention_drops_whole_segments_from_the_head(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    # 100 messages of 100 bytes, segments of 1,000 bytes, at most 2,000 bytes kept: the
    # head goes a segment at a time. (RabbitMQ's offsets also count its own records, so
    # only the bodies are compared.)
    name = stream(
        ch, cleanup, **{"x-max-length-bytes": 2000, "x-stream-max-segment-size-bytes": 1000}
    )
    bodies = [b"%03d" % i + b"x" * 97 for i in range(100)]
    publish(ch, name, *bodies)
    kept = [body for body, *_ in read(connection, name, "first", within=1.0)]
    assert 0 < len(kept) < 50
    assert kept == bodies[-len(kept) :]


# -- filtering (RabbitMQ 3.13; Leveret only) --------------------------------------------------
#
# The RabbitMQ 3.10.8 these scenarios otherwise run against predates stream filtering, so
# these run on Leveret only. The arguments and their parsing are rabbit_stream_queue's
# (filter_spec/1; docs/stream-filtering.md). RabbitMQ filters whole chunks through a Bloom
# filter and may deliver other messages of a chunk that matched; a Leveret chunk is one
# message, so the expectations below are exact.


@pytest.fixture
def leveret_stream(leveret: BrokerThread) -> Iterator[tuple[pika.BlockingConnection, str]]:
    """A pika connection to the session's Leveret and a stream holding fruit: apple,
    orange, an unfiltered message, banana, apple, and one whose filter value is a number."""
    connection = pika.BlockingConnection(pika.URLParameters(leveret.url))
    name = unique("st-filter")
    channel = connection.channel()
    channel.queue_declare(name, durable=True, arguments=STREAM)
    for fruit in ("apple", "orange", None, "banana", "apple", 7):
        headers = None if fruit is None else {"x-stream-filter-value": fruit}
        body = str(fruit).encode()
        publish(channel, name, body, **(headers or {}))
    yield connection, name
    channel.queue_delete(name)
    connection.close()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, [b"apple", b"orange", b"None", b"banana", b"apple", b"7"]),
        ({"x-stream-filter": "apple"}, [b"apple", b"apple"]),
        ({"x-stream-filter": ["apple", "banana"]}, [b"apple", b"banana", b"apple"]),
        # Array elements that are no string are left out (filter_spec/1).
        ({"x-stream-filter": ["orange", 5]}, [b"orange"]),
        (
            {"x-stream-filter": "apple", "x-stream-match-unfiltered": True},
            [b"apple", b"None", b"apple", b"7"],
        ),
        # match-unfiltered alone is no filter; a filter of another type neither.
        (
            {"x-stream-match-unfiltered": True},
            [b"apple", b"orange", b"None", b"banana", b"apple", b"7"],
        ),
        ({"x-stream-filter": 5}, [b"apple", b"orange", b"None", b"banana", b"apple", b"7"]),
    ],
)
def test_a_filtering_consumer_gets_the_messages_with_its_values(
    leveret_stream: tuple[pika.BlockingConnection, str],
    arguments: dict[str, Any],
    expected: list[bytes],
) -> None:
    connection, name = leveret_stream
    got = read(connection, name, "first", arguments=arguments)
    assert [body for body, _offset, _redelivered in got] == expected


def test_filtered_deliveries_keep_their_offsets_and_skipped_ones_take_no_credit(
    leveret_stream: tuple[pika.BlockingConnection, str],
) -> None:
    connection, name = leveret_stream
    # One unacked delivery at a time: the skipped messages do not use the credit up.
    channel, got = consume(
        connection, name, "first", prefetch=1, arguments={"x-stream-filter": "banana"}
    )
    pump_until(connection, lambda: bool(got))
    method, properties, body = got[0]
    assert (body, properties.headers["x-stream-offset"]) == (b"banana", 3)
    publish(connection.channel(), name, b"late banana", **{"x-stream-filter-value": "banana"})
    pump_until(connection, lambda: len(got) > 1, 0.5)
    assert len(got) == 1  # no credit until the ack
    channel.basic_ack(method.delivery_tag)
    pump_until(connection, lambda: len(got) > 1)
    assert (got[1][2], got[1][1].headers["x-stream-offset"]) == (b"late banana", 6)
    channel.close()


# -- durability (Leveret's data dir) --------------------------------------------------------


def test_a_stream_and_its_offsets_survive_a_restart(tmp_path: Path) -> None:
    def start() -> tuple[BrokerThread, pika.BlockingConnection]:
        broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
        return broker, pika.BlockingConnection(pika.URLParameters(broker.url))

    broker, conn = start()
    try:
        channel = conn.channel()
        channel.queue_declare(
            "events",
            durable=True,
            arguments={**STREAM, "x-max-length-bytes": 300, "x-stream-max-segment-size-bytes": 100},
        )
        # Transient messages too: a stream stores everything.
        publish(channel, "events", *[b"e%d" % i for i in range(20)])
        before = read(conn, "events", "first")
        conn.close()
    finally:
        broker.stop()
    assert 0 < len(before) < 20  # retention ran
    broker, conn = start()
    try:
        assert read(conn, "events", "first") == before
        publish(conn.channel(), "events", b"later")
        assert read(conn, "events", "last") == [(b"later", 20, False)]
        conn.close()
    finally:
        broker.stop()


def test_filter_values_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel().queue_declare("fruit", durable=True, arguments=STREAM)
        for fruit in ("apple", "pear", "apple"):
            publish(conn.channel(), "fruit", fruit.encode(), **{"x-stream-filter-value": fruit})
        conn.close()
    finally:
        broker.stop()
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        got = read(conn, "fruit", "first", arguments={"x-stream-filter": "pear"})
        assert got == [(b"pear", 1, False)]
        conn.close()
    finally:
        broker.stop()
