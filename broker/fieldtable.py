"""Encoding of content headers the broker rewrites (dead-lettering, BCC, reply-to).

Messages normally pass through with the publisher's header bytes untouched. When the
broker must change a header it re-encodes the properties with pamqp, except the
``headers`` table, which is encoded here with RabbitMQ's type choices: pamqp writes an
``int`` in the smallest type that fits and a ``float`` as a 32-bit ``f``, which would
turn ``x-death``'s ``count`` into a byte and lose precision on doubles. Here an int is a
signed 64-bit ``l`` (RabbitMQ's type for the counts it adds) and a float a ``d``.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

from pamqp import commands, encode, header

_FLAG_CONTENT_TYPE = 0x8000
_FLAG_CONTENT_ENCODING = 0x4000
_FLAG_HEADERS = 0x2000
_LONG = struct.Struct(">I")
_TAGGED_LONG = struct.Struct(">cq")
_TAGGED_DOUBLE = struct.Struct(">cd")
_TAGGED_TIMESTAMP = struct.Struct(">cQ")


def encode_value(value: Any) -> bytes:
    """One field value, type tag included. Plain ``struct`` for the common types: pamqp's
    string encoders validate every call and dominated dead-lettering profiles."""
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return b"S" + _LONG.pack(len(raw)) + raw
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        return _TAGGED_LONG.pack(b"l", value)
    if isinstance(value, float):
        return _TAGGED_DOUBLE.pack(b"d", value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return _TAGGED_TIMESTAMP.pack(b"T", int(value.timestamp()))
    if isinstance(value, decimal.Decimal):
        return b"D" + encode.decimal(value)
    if isinstance(value, bytes | bytearray):
        return b"x" + _LONG.pack(len(value)) + bytes(value)
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list | tuple):
        items = b"".join(encode_value(v) for v in value)
        return b"A" + _LONG.pack(len(items)) + items
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def _shortstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    return bytes((len(raw),)) + raw


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table, length prefix included."""
    body = b"".join(_shortstr(str(k)) + encode_value(v) for k, v in table.items())
    return _LONG.pack(len(body)) + body


def marshal_content_header(body_size: int, properties: commands.Basic.Properties) -> bytes:
    """A Basic content header payload for ``properties`` (headers encoded here)."""
    headers = properties.headers
    properties.headers = None
    try:
        raw = header.ContentHeader(0, body_size, properties).marshal()
    finally:
        properties.headers = headers
    if headers is None:
        return raw
    (flags,) = struct.unpack_from(">H", raw, 12)
    offset = 14
    # The headers table comes after content_type and content_encoding (spec order).
    for flag in (_FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING):
        if flags & flag:
            offset += 1 + raw[offset]
    return (
        raw[:12]
        + struct.pack(">H", flags | _FLAG_HEADERS)
        + raw[14:offset]
        + encode_table(headers)
        + raw[offset:]
    )
