"""Timestamps are opaque unsigned 64-bit integers: every value is accepted, routed and
delivered unchanged, as RabbitMQ does.

amqp091-go publishes random properties, and a ``timestamp`` of 2^62 with a ``reply_to`` or an
``expiration`` closed the connection with 541 INTERNAL_ERROR: those properties make the broker
decode the properties, and pamqp reads a timestamp above 2^32 as milliseconds and fails with
``ValueError: year ... is out of range`` past year 9999. The same held for a ``T`` value in
the headers table (checked on every publish). Now no timestamp is refused, and where the
broker re-encodes properties (direct reply-to, dead-lettering) the wire value is kept.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

import pika
import pytest
from pamqp import commands

from leveret.exchanges.fields import table_fields

from . import fieldbytes as fb
from .helpers import unique
from .wire import FRAME_BODY, FRAME_HEADER, WireClient

pytestmark = pytest.mark.timeout(60)

# Seconds, the edges of pamqp's milliseconds reading, beyond year 9999, and the extremes.
TIMESTAMPS = [0, 1, 2**31, 2**32 - 1, 2**32, 253402300799999, 253402300800000, 2**62]
TIMESTAMPS += [2**63 - 1, 2**63, 2**64 - 1]


@pytest.fixture(autouse=True)
def no_broker_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Leveret logged no error (an exception escaping a handler is logged before the 541)."""
    with caplog.at_level(logging.ERROR, logger="leveret"):
        yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.fixture
def client(amqp_url: str) -> Iterator[WireClient]:
    with WireClient(amqp_url) as c:
        c.connect()
        c.open_channel(1)
        yield c
        c.close_connection()


def _queue(client: WireClient, prefix: str, arguments: bytes = fb.table()) -> str:
    queue = unique(prefix)
    client.send_raw(fb.queue_declare(1, queue, arguments, exclusive=True))
    client.expect(commands.Queue.DeclareOk, channel=1)
    return queue


def _get_raw(client: WireClient, queue: str, ack: bool = False) -> tuple[int, bytes, bytes]:
    """``basic.get``: the delivery tag, the content header payload as sent, the body."""
    get_ok = client.get_eventually(queue, no_ack=not ack)
    return (get_ok.delivery_tag, *_content(client))


def _content(client: WireClient) -> tuple[bytes, bytes]:
    kind, channel, header = client.read_raw_frame()
    assert (kind, channel) == (FRAME_HEADER, 1)
    (size,) = struct.unpack_from(">Q", header, 4)
    body = b""
    while len(body) < size:
        kind, channel, payload = client.read_raw_frame()
        assert (kind, channel) == (FRAME_BODY, 1)
        body += payload
    return header, body


# The properties before ``timestamp``, in wire order: flag, and "str" (a short string),
# "table" or a fixed size.
_BEFORE_TIMESTAMP: list[tuple[int, str | int]] = [
    (0x8000, "str"), (0x4000, "str"), (0x2000, "table"), (0x1000, 1), (0x0800, 1),
    (0x0400, "str"), (0x0200, "str"), (0x0100, "str"), (0x0080, "str"),
]  # fmt: skip


def _property_timestamp(header: bytes) -> int:
    """The ``timestamp`` property of a content header payload (read raw)."""
    flags = struct.unpack_from(">H", header, 12)[0]
    assert flags & fb.FLAG_TIMESTAMP
    pos = 14
    for bit, kind in _BEFORE_TIMESTAMP:
        if not flags & bit:
            continue
        if kind == "str":
            pos += 1 + header[pos]
        elif kind == "table":
            pos += 4 + struct.unpack_from(">I", header, pos)[0]
        else:
            pos += int(kind)
    return int(struct.unpack_from(">Q", header, pos)[0])


def _header_values(header: bytes) -> dict[bytes, bytes]:
    """The headers table: name -> the value's octets, type tag included."""
    (length,) = struct.unpack_from(">I", header, 14)
    fields = table_fields(header, 18, 18 + length)
    return {name: header[start + 1 + len(name) : end] for name, _, start, end in fields}


@pytest.mark.parametrize("stamp", TIMESTAMPS)
@pytest.mark.parametrize(
    "companions",
    [fb.FLAG_REPLY_TO, fb.FLAG_EXPIRATION, fb.FLAG_REPLY_TO | fb.FLAG_EXPIRATION, 0],
    ids=["reply_to", "expiration", "both", "alone"],
)
def test_any_timestamp_property_is_delivered_unchanged(
    client: WireClient, stamp: int, companions: int
) -> None:
    queue = _queue(client, "ts-prop")
    flags = fb.FLAG_TIMESTAMP | fb.FLAG_MESSAGE_ID | companions
    header = fb.content_header(
        2, flags, reply_to="replies", expiration="60000", message_id="m", timestamp_value=stamp
    )
    client.send_raw(fb.publish(1, header, b"ts", routing_key=queue))
    assert _get_raw(client, queue)[1:] == (header, b"ts")


def test_timestamps_through_pika(amqp_url: str) -> None:
    """pika sends the ``timestamp`` property as the integer it is given."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.confirm_delivery()
        for stamp in TIMESTAMPS:
            properties = pika.BasicProperties(timestamp=stamp, reply_to="r", expiration="60000")
            channel.basic_publish("", queue, b"p", properties)
        got = []
        for _ in TIMESTAMPS:
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            assert method is not None and body == b"p"
            got.append((properties.timestamp, properties.reply_to, properties.expiration))
        assert got == [(stamp, "r", "60000") for stamp in TIMESTAMPS]
    finally:
        connection.close()


def _stamps_table() -> bytes:
    return fb.table(
        *[fb.entry(f"t{i}", fb.timestamp(stamp)) for i, stamp in enumerate(TIMESTAMPS)],
        fb.entry("in-array", fb.array(*[fb.timestamp(stamp) for stamp in TIMESTAMPS])),
        fb.entry("route", fb.string("yes")),
    )


def test_timestamps_in_headers_are_routed_and_delivered_unchanged(client: WireClient) -> None:
    exchange = unique("ts-hx")
    client.send(commands.Exchange.Declare(exchange=exchange, exchange_type="headers"), 1)
    client.expect(commands.Exchange.DeclareOk, channel=1)
    queue = _queue(client, "ts-hq")
    binding = fb.table(fb.entry("x-match", fb.string("any")), fb.entry("route", fb.string("yes")))
    client.send_raw(fb.queue_bind(1, queue, exchange, "", binding))
    client.expect(commands.Queue.BindOk, channel=1)
    header = fb.content_header(
        1, fb.FLAG_HEADERS | fb.FLAG_REPLY_TO, headers=_stamps_table(), reply_to="r"
    )
    client.send_raw(fb.publish(1, header, b"h", exchange=exchange))
    assert _get_raw(client, queue)[1:] == (header, b"h")
    client.send(commands.Exchange.Delete(exchange=exchange), 1)
    client.expect(commands.Exchange.DeleteOk, channel=1)


def test_dead_lettering_keeps_every_timestamp(client: WireClient) -> None:
    """The dead-lettered copy's headers are encoded again (x-death is added): the
    publisher's timestamps, in the table and as the property, keep their wire values."""
    target = _queue(client, "ts-dlq")
    source = _queue(
        client,
        "ts-src",
        fb.table(
            fb.entry("x-dead-letter-exchange", fb.string("")),
            fb.entry("x-dead-letter-routing-key", fb.string(target)),
        ),
    )
    for stamp in (2**62, 2**32, 2**64 - 1):
        flags = fb.FLAG_HEADERS | fb.FLAG_TIMESTAMP | fb.FLAG_EXPIRATION
        header = fb.content_header(
            1, flags, headers=_stamps_table(), expiration="60000", timestamp_value=stamp
        )
        client.send_raw(fb.publish(1, header, b"d", routing_key=source))
        tag, _, _ = _get_raw(client, source, ack=True)
        client.send(commands.Basic.Reject(delivery_tag=tag, requeue=False), 1)
        _, dead, body = _get_raw(client, target)
        assert body == b"d"
        assert _property_timestamp(dead) == stamp
        published, copied = _header_values(header), _header_values(dead)
        assert b"x-death" in copied
        assert {k: v for k, v in copied.items() if k in published} == published


def test_direct_reply_to_keeps_the_timestamp(client: WireClient) -> None:
    """A request to ``amq.rabbitmq.reply-to`` has its ``reply_to`` rewritten (properties
    encoded again): the timestamp stays as sent."""
    queue = _queue(client, "ts-rpc")
    client.send(commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True), 1)
    client.expect(commands.Basic.ConsumeOk, channel=1)
    flags = fb.FLAG_REPLY_TO | fb.FLAG_TIMESTAMP | fb.FLAG_HEADERS
    header = fb.content_header(
        1, flags, headers=_stamps_table(), reply_to="amq.rabbitmq.reply-to", timestamp_value=2**62
    )
    client.send_raw(fb.publish(1, header, b"q", routing_key=queue))
    _, delivered, body = _get_raw(client, queue)
    assert body == b"q"
    assert _property_timestamp(delivered) == 2**62
    assert _header_values(delivered) == _header_values(header)
