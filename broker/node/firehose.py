"""The firehose tracer (RabbitMQ's rabbit_trace.erl, docs/firehose.md).

With tracing on for a vhost (``PUT /api/vhosts/NAME {"tracing": true}``, RabbitMQ's
``rabbitmqctl trace_on``), every message a client publishes there is copied to the vhost's
``amq.rabbitmq.trace`` topic exchange with routing key ``publish.<exchange>``, and every
delivery to a client (consumer or ``basic.get``) with ``deliver.<queue>``. A copy carries the
message's body and, as its only property, a headers table:

- ``exchange_name``, ``routing_keys`` (the routing key, then the CC and BCC keys),
  ``properties`` (the message's properties, last property first, integers as
  ``signedint``, the headers table with its own field types, strings as ``longstr``),
  ``node``;
- on a publish: ``vhost``, ``connection``, ``channel``, ``user``, ``routed_queues``;
- on a delivery: ``redelivered`` (0 or 1), ``vhost``, ``connection``, ``channel``, ``user``.

Copies of messages published to ``amq.rabbitmq.trace`` itself are never made, so tracing a
trace queue cannot loop. Tracing lasts until turned off or the broker stops, as in
RabbitMQ, which keeps it in memory only. Messages published through the management API or
moved by the broker (dead-lettering) are not traced: RabbitMQ traces in the channel. One
difference: a publish in a transaction is traced at ``tx.commit``, when Leveret routes it;
RabbitMQ routes and traces it when it arrives.

The header layout is rabbit_trace:msg_to_table/1 plus the extra fields of tap_in/6 and
tap_out/5 in 3.10; checked against RabbitMQ 3.10.8 in tests/integration/test_firehose.py.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Collection, Iterable

from leveret.config import NODE_NAME
from leveret.exchanges.fields import PROPERTY_LAYOUT, property_spans
from leveret.node.events import Subscriber
from leveret.node.message import BccMessage, Message
from leveret.node.peers import ChannelPeer

TRACE_EXCHANGE = "amq.rabbitmq.trace"

_LENGTH = struct.Struct(">I")
_SIGNED_INT = struct.Struct(">ci")
# A content header of class basic, weight 0, with only the headers flag set.
_HEADER_START = struct.Struct(">HHQH")
_BASIC_CLASS = 60
_HEADERS_FLAG = 0x2000


def _longstr(raw: bytes | str) -> bytes:
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    return b"S" + _LENGTH.pack(len(data)) + data


def _signedint(value: int) -> bytes:
    # rabbit_binary_generator writes a signedint as 32 bits and keeps only those.
    wrapped = (value + 2**31) % 2**32 - 2**31
    return _SIGNED_INT.pack(b"I", wrapped)


def _sized(tag: bytes, body: bytes) -> bytes:
    return tag + _LENGTH.pack(len(body)) + body


def _field(name: str, value: bytes) -> bytes:
    raw = name.encode("utf-8")
    return bytes((len(raw),)) + raw + value


def _strings(values: Iterable[bytes | str]) -> bytes:
    return _sized(b"A", b"".join(_longstr(v) for v in values))


@functools.lru_cache(maxsize=1024)
def properties_table(content: bytes) -> bytes:
    """The ``properties`` field value of a trace copy, from a content header payload:
    present properties last-first, as rabbit_trace's fold builds its list."""
    spans = property_spans(content)
    fields = []
    for _bit, name, size in reversed(PROPERTY_LAYOUT):
        span = spans.get(name)
        if span is None:
            continue
        raw = content[span[0] : span[1]]
        if size == 0:
            value = _longstr(raw)
        elif size < 0:
            value = _sized(b"F", raw)
        else:
            value = _signedint(int.from_bytes(raw, "big"))
        fields.append(_field(name, value))
    return _sized(b"F", b"".join(fields))


def _routing_keys(message: Message) -> list[bytes | str]:
    """The routing key, the CC keys, the BCC keys (rabbit_basic:header_routes/1)."""
    keys: list[bytes | str] = [message.routing_key]
    if b"CC" in message.header:
        headers = message.headers or {}
        for name in ("CC", "BCC"):
            value = headers.get(name)
            if isinstance(value, list):
                keys += [v for v in value if isinstance(v, str | bytes)]
    if isinstance(message, BccMessage):
        keys += message.bcc
    return keys


def _copy(message: Message, kind: str, suffix: str, extra: bytes) -> Message:
    table = (
        _field("exchange_name", _longstr(message.exchange))
        + _field("routing_keys", _strings(_routing_keys(message)))
        + _field("properties", properties_table(message.header))
        + _field("node", _longstr(NODE_NAME))
        + extra
    )
    header = _HEADER_START.pack(_BASIC_CLASS, 0, len(message.body), _HEADERS_FLAG)
    return Message(
        TRACE_EXCHANGE, f"{kind}.{suffix}", header + _LENGTH.pack(len(table)) + table, message.body
    )


def _who(channel: ChannelPeer) -> bytes:
    conn = channel.conn
    return (
        _field("vhost", _longstr(conn.vhost.name))
        + _field("connection", _longstr(conn.name))
        + _field("channel", _signedint(channel.id))
        + _field("user", _longstr(conn.user))
    )


def published(message: Message, queues: Iterable[str], channel: ChannelPeer) -> None:
    """Trace a publish on ``channel`` that reached ``queues`` (before they get it, as
    rabbit_channel calls tap_in between routing and delivering)."""
    if message.exchange == TRACE_EXCHANGE:
        return
    extra = _who(channel) + _field("routed_queues", _strings(queues))
    channel.vhost.publish(_copy(message, "publish", message.exchange, extra), counted=False)


def delivered(message: Message, queue: str, redelivered: bool, channel: ChannelPeer) -> None:
    """Trace a delivery from ``queue`` to a client on ``channel``."""
    if message.exchange == TRACE_EXCHANGE:
        return
    extra = _field("redelivered", _signedint(int(redelivered))) + _who(channel)
    channel.vhost.publish(_copy(message, "deliver", queue, extra), counted=False)


class FirehoseTap(Subscriber):
    """The firehose as a subscriber of its vhost's events (:mod:`leveret.node.events`): tracing
    a vhost is subscribing one of these (``vhost.firehose = True``)."""

    publishes = True  # its copies: called after the other subscribers of an event

    def published(
        self, message: Message, queues: Collection[str], origin: ChannelPeer | None
    ) -> None:
        """Trace a client's publish; the management API's and the broker's own (origin
        None) are not traced, as RabbitMQ traces in the channel."""
        if origin is not None:
            published(message, queues, origin)

    def delivered(
        self, message: Message, queue: str, redelivered: bool, origin: ChannelPeer, tag: int
    ) -> None:
        """Trace a delivery to a client."""
        delivered(message, queue, redelivered, origin)
