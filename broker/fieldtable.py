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
import functools
import struct
from collections.abc import Callable, Mapping
from typing import Any

from pamqp import commands, encode, header

_FLAG_CONTENT_TYPE = 0x8000
_FLAG_CONTENT_ENCODING = 0x4000
_FLAG_HEADERS = 0x2000
_LONG = struct.Struct(">I")
_TAGGED_LONG = struct.Struct(">cq")
_TAGGED_DOUBLE = struct.Struct(">cd")
_TAGGED_TIMESTAMP = struct.Struct(">cQ")


@functools.lru_cache(maxsize=4096)
def _string(value: str) -> bytes:
    """A long-string field value. Cached: header values repeat (queue names, reasons,
    exchange names), and dead-lettering encodes them for every message."""
    raw = value.encode("utf-8")
    return b"S" + _LONG.pack(len(raw)) + raw


@functools.lru_cache(maxsize=4096)
def _shortstr(value: str) -> bytes:
    """A field name (cached: the same few names come back in every table)."""
    raw = value.encode("utf-8")
    return bytes((len(raw),)) + raw


def _timestamp(value: datetime.datetime) -> bytes:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return _TAGGED_TIMESTAMP.pack(b"T", int(value.timestamp()))


def _array(value: list[Any] | tuple[Any, ...]) -> bytes:
    items = b"".join([encode_value(v) for v in value])
    return b"A" + _LONG.pack(len(items)) + items


def _bytes(value: bytes | bytearray) -> bytes:
    return b"x" + _LONG.pack(len(value)) + bytes(value)


# By exact type: one dict lookup instead of a chain of isinstance checks per value (bool
# before int matters only for the chain below; here each type has its own entry).
_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    str: _string,
    bool: lambda v: b"t\x01" if v else b"t\x00",
    int: lambda v: _TAGGED_LONG.pack(b"l", v),
    float: lambda v: _TAGGED_DOUBLE.pack(b"d", v),
    datetime.datetime: _timestamp,
    decimal.Decimal: lambda v: b"D" + encode.decimal(v),
    bytes: _bytes,
    bytearray: _bytes,
    dict: lambda v: b"F" + encode_table(v),
    list: _array,
    tuple: _array,
    type(None): lambda v: b"V",
}


def encode_value(value: Any) -> bytes:
    """One field value, type tag included, with RabbitMQ's type choices (module doc)."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    # Subclasses (an IntEnum, a str subclass...): the first matching base type.
    for kind in (bool, int, str, float, datetime.datetime, decimal.Decimal, bytes, bytearray, dict):
        if isinstance(value, kind):
            return _ENCODERS[kind](value)
    if isinstance(value, list | tuple):
        return _array(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table, length prefix included."""
    body = b"".join([_shortstr(str(k)) + encode_value(v) for k, v in table.items()])
    return _LONG.pack(len(body)) + body


def amqp_json(value: Any) -> Any:
    """An AMQP field value as JSON, as RabbitMQ shows it (rabbit_misc:amqp_table/1): strings
    and numbers as they are, byte strings decoded, timestamps as seconds, decimals as
    numbers, tables and arrays recursively. The management API and the traffic trace both
    use it, so a header reads the same in both."""
    if isinstance(value, Mapping):
        return {str(k): amqp_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [amqp_json(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


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
