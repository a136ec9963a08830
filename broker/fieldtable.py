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


def encode_value(value: Any) -> bytes:
    """One field value, type tag included."""
    if isinstance(value, bool):
        return b"t" + encode.boolean(value)
    if isinstance(value, int):
        return b"l" + encode.long_long_int(value)
    if isinstance(value, float):
        return b"d" + encode.double(value)
    if isinstance(value, decimal.Decimal):
        return b"D" + encode.decimal(value)
    if isinstance(value, str):
        return b"S" + encode.long_string(value)
    if isinstance(value, bytes | bytearray):
        return b"x" + _LONG.pack(len(value)) + bytes(value)
    if isinstance(value, datetime.datetime):
        return b"T" + encode.timestamp(value)
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list | tuple):
        items = b"".join(encode_value(v) for v in value)
        return b"A" + _LONG.pack(len(items)) + items
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table, length prefix included."""
    body = b"".join(encode.short_string(str(k)) + encode_value(v) for k, v in table.items())
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
