"""Field tables, content headers and publishes as raw octets, for tests that send what client
libraries cannot encode: tables nested thousands deep (pamqp and pika recurse once or twice
per level), timestamps beyond ``datetime`` (pamqp reads them as datetimes), header tables of
100 KiB that differ on every message."""

from __future__ import annotations

import struct

FLAG_CONTENT_TYPE = 0x8000
FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000
FLAG_REPLY_TO = 0x0200
FLAG_EXPIRATION = 0x0100
FLAG_MESSAGE_ID = 0x0080
FLAG_TIMESTAMP = 0x0040


def shortstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return bytes([len(raw)]) + raw


def longstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(">I", len(raw)) + raw


def table(*entries: bytes) -> bytes:
    """A field table (length prefix included) of encoded ``entries``."""
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def array(*values: bytes) -> bytes:
    """A field array value (tag ``A`` included) of encoded, tagged ``values``."""
    body = b"".join(values)
    return b"A" + struct.pack(">I", len(body)) + body


def entry(name: str, tagged_value: bytes) -> bytes:
    """One table entry: the name, then the value with its type tag."""
    return shortstr(name) + tagged_value


def string(text: str | bytes) -> bytes:
    """A long-string value, tag included."""
    return b"S" + longstr(text)


def timestamp(value: int) -> bytes:
    """A timestamp value (any unsigned 64-bit integer), tag included."""
    return b"T" + struct.pack(">Q", value)


def nested(depth: int, leaf: bytes = string("bottom"), name: str = "k") -> bytes:
    """A table value (tag ``F`` included) nested ``depth`` levels deep: each level holds one
    entry ``name`` whose value is the next level; the deepest holds ``leaf`` under ``name``."""
    value = leaf
    for _ in range(depth):
        body = entry(name, value)
        value = b"F" + struct.pack(">I", len(body)) + body
    return value


def nested_arrays(depth: int, leaf: bytes = string("bottom")) -> bytes:
    """An array value nested ``depth`` levels deep, ``leaf`` at the bottom."""
    value = leaf
    for _ in range(depth):
        value = b"A" + struct.pack(">I", len(value)) + value
    return value


def depth_of(value: object, name: str = "k") -> tuple[int, object]:
    """(levels, leaf) of a decoded :func:`nested` value, walked without recursion."""
    levels = 0
    while isinstance(value, dict) and list(value) == [name]:
        value = value[name]
        levels += 1
    return levels, value


def content_header(
    body_size: int,
    flags: int = 0,
    *,
    content_type: str = "",
    headers: bytes = b"",
    delivery_mode: int = 0,
    reply_to: str = "",
    expiration: str = "",
    message_id: str = "",
    timestamp_value: int = 0,
) -> bytes:
    """A Basic content header payload with the properties whose flags are set in ``flags``
    (``headers`` is a whole table, length prefix included)."""
    out = struct.pack(">HHQH", 60, 0, body_size, flags)
    if flags & FLAG_CONTENT_TYPE:
        out += shortstr(content_type)
    if flags & FLAG_HEADERS:
        out += headers
    if flags & FLAG_DELIVERY_MODE:
        out += bytes([delivery_mode])
    if flags & FLAG_REPLY_TO:
        out += shortstr(reply_to)
    if flags & FLAG_EXPIRATION:
        out += shortstr(expiration)
    if flags & FLAG_MESSAGE_ID:
        out += shortstr(message_id)
    if flags & FLAG_TIMESTAMP:
        out += struct.pack(">Q", timestamp_value)
    return out


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def publish(
    channel: int,
    header_payload: bytes,
    body: bytes,
    *,
    exchange: str = "",
    routing_key: str = "",
    mandatory: bool = False,
) -> bytes:
    """``basic.publish`` (names as they are: no client-side validation), the content header
    ``header_payload`` and one body frame."""
    fields = b"\x00\x00" + shortstr(exchange) + shortstr(routing_key) + bytes([mandatory])
    out = method(channel, (60, 40), fields) + frame(2, channel, header_payload)
    return out + frame(3, channel, body) if body else out


def method(channel: int, method_id: tuple[int, int], arguments: bytes) -> bytes:
    """A method frame of ``method_id`` whose fields are the raw ``arguments`` octets."""
    return frame(1, channel, struct.pack(">HH", *method_id) + arguments)


def queue_declare(
    channel: int,
    queue: str,
    arguments: bytes,
    *,
    durable: bool = False,
    exclusive: bool = False,
    auto_delete: bool = False,
) -> bytes:
    """``queue.declare`` with a raw ``arguments`` table (length prefix included)."""
    bits = durable << 1 | exclusive << 2 | auto_delete << 3
    return method(channel, (50, 10), b"\x00\x00" + shortstr(queue) + bytes([bits]) + arguments)


def queue_bind(channel: int, queue: str, exchange: str, key: str, arguments: bytes) -> bytes:
    """``queue.bind`` with a raw ``arguments`` table."""
    fields = b"\x00\x00" + shortstr(queue) + shortstr(exchange) + shortstr(key) + b"\x00"
    return method(channel, (50, 20), fields + arguments)


def exchange_declare(
    channel: int, exchange: str, kind: str, arguments: bytes, *, durable: bool = False
) -> bytes:
    """``exchange.declare`` with a raw ``arguments`` table."""
    fields = b"\x00\x00" + shortstr(exchange) + shortstr(kind) + bytes([durable << 1])
    return method(channel, (40, 10), fields + arguments)


def basic_consume(channel: int, queue: str, tag: str, arguments: bytes) -> bytes:
    """``basic.consume`` (acknowledged deliveries) with a raw ``arguments`` table."""
    fields = b"\x00\x00" + shortstr(queue) + shortstr(tag) + b"\x00"
    return method(channel, (60, 20), fields + arguments)
