"""AMQP 0-9-1 wire facts shared by the broker and the routing code: the field-table type
tags with RabbitMQ's names for them, the basic properties in wire order, and field tables
decoded, checked and encoded without recursion (below).

Pure data and pure functions over octets; the broker's codec and message code and the
consistent-hash exchange (which hashes values with their types) read the same tables, so
they cannot disagree about a tag or a property's place. Standard library only, so the
storage layer can use the table codec too.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from leveret.exchanges.timestamps import WireTimestamp, decode_timestamp, timestamp_value

# Field type tags -> RabbitMQ's names (rabbit_binary_parser), with the size of fixed-width
# values (-1: a 32-bit length prefix follows the tag).
FIELD_TYPES: dict[int, tuple[str, int]] = {
    ord("b"): ("byte", 1),
    ord("B"): ("unsignedbyte", 1),
    ord("s"): ("short", 2),
    ord("u"): ("unsignedshort", 2),
    ord("I"): ("signedint", 4),
    ord("i"): ("unsignedint", 4),
    ord("l"): ("long", 8),
    ord("L"): ("long", 8),  # rabbit_binary_parser takes both (amqp-0-9-1-errata); py-amqp writes L
    ord("f"): ("float", 4),
    ord("d"): ("double", 8),
    ord("D"): ("decimal", 5),
    ord("t"): ("bool", 1),
    ord("T"): ("timestamp", 8),
    ord("V"): ("void", 0),
    ord("S"): ("longstr", -1),
    ord("x"): ("binary", -1),
    ord("F"): ("table", -1),
    ord("A"): ("array", -1),
}

# The basic properties in wire order (AMQP 0-9-1 spec, class basic): flag bit, name, and
# size: 0 for a short string, -1 for the headers table, else a fixed number of octets.
PROPERTY_LAYOUT: tuple[tuple[int, str, int], ...] = (
    (0x8000, "content_type", 0),
    (0x4000, "content_encoding", 0),
    (0x2000, "headers", -1),
    (0x1000, "delivery_mode", 1),
    (0x0800, "priority", 1),
    (0x0400, "correlation_id", 0),
    (0x0200, "reply_to", 0),
    (0x0100, "expiration", 0),
    (0x0080, "message_id", 0),
    (0x0040, "timestamp", 8),
    (0x0020, "type", 0),
    (0x0010, "user_id", 0),
    (0x0008, "app_id", 0),
    (0x0004, "cluster_id", 0),
)

# A content header payload: class id, weight and body size, then the property flags.
PROPERTIES_AT = 12
_FLAGS = struct.Struct(">H")
_LENGTH = struct.Struct(">I")


def property_spans(content: bytes) -> dict[str, tuple[int, int]]:
    """Where each present property's value lies in a content header payload (a short
    string's or the table's length prefix excluded)."""
    (flags,) = _FLAGS.unpack_from(content, PROPERTIES_AT)
    spans: dict[str, tuple[int, int]] = {}
    pos = PROPERTIES_AT + 2
    for bit, name, size in PROPERTY_LAYOUT:
        if not flags & bit:
            continue
        if size == 0:
            start, pos = pos + 1, pos + 1 + content[pos]
        elif size < 0:
            start, pos = pos + 4, pos + 4 + _LENGTH.unpack_from(content, pos)[0]
        else:
            start, pos = pos, pos + size
        spans[name] = (start, pos)
    return spans


def table_fields(data: bytes, pos: int, end: int) -> Iterator[tuple[bytes, int, int, int]]:
    """``(name, type tag, start, end)`` of each entry of the field table whose entries are
    ``data[pos:end]`` (after its length prefix), without decoding any value. An unknown tag
    is taken as zero-width (the callers read tables the publish path has checked)."""
    while pos < end:
        start = pos
        key_end = pos + 1 + data[pos]
        tag = data[key_end]
        size = FIELD_TYPES.get(tag, ("unknown", 0))[1]
        pos = key_end + 1
        if size < 0:  # length-prefixed
            size = 4 + _LENGTH.unpack_from(data, pos)[0]
        pos += size
        yield data[start + 1 : key_end], tag, start, pos


_ERLANG_INTEGER = re.compile(rb"[+-]?[0-9]+")


def erlang_integer(text: str | bytes) -> int | None:
    """``list_to_integer/1`` (or ``binary_to_integer/1``): an optional sign and the digits
    0-9 only (no spaces, no underscores, unlike Python's ``int``), else None (its
    ``badarg``). RabbitMQ reads integers this way from consistent-hash binding keys,
    ``x-delay`` strings and management API request text."""
    raw = text.encode() if isinstance(text, str) else text
    return int(raw) if _ERLANG_INTEGER.fullmatch(raw) else None


# -- field values: decoding, checking, encoding ---------------------------------------------
#
# Decoding gives the Python values pamqp gives (``dict``, ``list``, ``str`` or ``bytes`` for a
# long string that is not UTF-8, ``bytearray``, ``int``, ``float``, ``bool``, ``Decimal``,
# ``datetime``, ``None``), with an explicit stack instead of recursion, so a table nested
# 15,000 levels deep (RabbitMQ accepts that much) decodes like a flat one, and without copying
# the rest of the buffer for every value, as pamqp does, so that a large table costs time in
# proportion to its size. Nested values must lie inside the table or array that holds them
# (rabbit_binary_parser's binary matches). check_fields walks a table without building
# anything (the publish path only has to know that the headers decode). Encoding is
# iterative too, with RabbitMQ's type choices: an int is a signed 64-bit ``l`` (the type of
# the counts RabbitMQ adds), a float a ``d`` (pamqp would write the smallest int type that
# fits and a 32-bit ``f``).
#
# A timestamp (field type ``T``, and the ``timestamp`` property) is an opaque unsigned 64-bit
# integer to RabbitMQ. pamqp reads one above 2^32 as milliseconds and fails beyond year 9999;
# here such a value becomes a WireTimestamp: the datetime pamqp gives (the latest datetime
# when none fits) that keeps the wire value, so encoding it again gives the same octets and
# no value is refused.

_TAGGED_LONG = struct.Struct(">cq")
_TAGGED_DOUBLE = struct.Struct(">cd")
_TAGGED_TIMESTAMP = struct.Struct(">cQ")
_TIMESTAMP = struct.Struct(">Q")
_unpack_timestamp = _TIMESTAMP.unpack_from
_DECIMAL = struct.Struct(">Bi")

# -- decoding -------------------------------------------------------------------------------

_S8 = struct.Struct(">b").unpack_from
_U8 = struct.Struct(">B").unpack_from
_S16 = struct.Struct(">h").unpack_from
_U16 = struct.Struct(">H").unpack_from
_S32 = struct.Struct(">i").unpack_from
_U32 = struct.Struct(">I").unpack_from
_S64 = struct.Struct(">q").unpack_from
_F32 = struct.Struct(">f").unpack_from
_F64 = struct.Struct(">d").unpack_from
_unpack_long = _LENGTH.unpack_from

# Fixed-width numbers: tag -> (unpack, size), with pamqp's signedness (decode.TABLE_MAPPING).
_NUMBERS: dict[int, tuple[Callable[[bytes, int], tuple[Any, ...]], int]] = {
    ord("b"): (_S8, 1),
    ord("B"): (_U8, 1),
    ord("s"): (_S16, 2),
    ord("u"): (_U16, 2),
    ord("I"): (_S32, 4),
    ord("i"): (_U32, 4),
    ord("l"): (_S64, 8),
    ord("L"): (_S64, 8),
    ord("f"): (_F32, 4),
    ord("d"): (_F64, 8),
}
_TAG_BOOL: Final = ord("t")
_TAG_STRING: Final = ord("S")
_TAG_BYTES: Final = ord("x")
_TAG_TABLE: Final = ord("F")
_TAG_ARRAY: Final = ord("A")
_TAG_TIMESTAMP: Final = ord("T")
_TAG_DECIMAL: Final = ord("D")
_TAG_VOID: Final = ord("V")
_TEN = decimal.Decimal(10)

# For check_table: the width of each tag's value; _PREFIXED for a long string or byte
# array (a 32-bit length follows the tag), _NESTED_TABLE and _NESTED_ARRAY, _UNKNOWN. Tag 0
# is a void, as pamqp reads it ("seen in the wild").
_PREFIXED: Final = -1
_NESTED_TABLE: Final = -2
_NESTED_ARRAY: Final = -3
_UNKNOWN: Final = -4
_WIDTHS = [_UNKNOWN] * 256
for _tag, (_, _size) in _NUMBERS.items():
    _WIDTHS[_tag] = _size
_WIDTHS[_TAG_BOOL] = 1
_WIDTHS[_TAG_TIMESTAMP] = 8
_WIDTHS[_TAG_DECIMAL] = 5
_WIDTHS[_TAG_VOID] = _WIDTHS[0] = 0
_WIDTHS[_TAG_STRING] = _WIDTHS[_TAG_BYTES] = _PREFIXED
_WIDTHS[_TAG_TABLE] = _NESTED_TABLE
_WIDTHS[_TAG_ARRAY] = _NESTED_ARRAY
_WIDTHS_T: Final = tuple(_WIDTHS)


def _cut_short(what: str) -> ValueError:
    return ValueError(f"field {what} cut short")


def _decimal_at(data: bytes, pos: int) -> decimal.Decimal:
    places: int
    digits: int
    places, digits = _DECIMAL.unpack_from(data, pos)
    return decimal.Decimal(digits) * (_TEN**-places)  # as pamqp's decode.decimal


def _reader(unpack: Callable[[bytes, int], tuple[Any, ...]]) -> Callable[[bytes, int], Any]:
    return lambda data, pos: unpack(data, pos)[0]


# Fixed-width values (_WIDTHS >= 0): tag -> the value at a position.
_FIXED_READERS: dict[int, Callable[[bytes, int], Any]] = {
    tag: _reader(unpack) for tag, (unpack, _) in _NUMBERS.items()
}
_FIXED_READERS[_TAG_BOOL] = lambda data, pos: bool(data[pos])
_FIXED_READERS[_TAG_TIMESTAMP] = lambda data, pos: decode_timestamp(_unpack_timestamp(data, pos)[0])
_FIXED_READERS[_TAG_DECIMAL] = _decimal_at
_FIXED_READERS[_TAG_VOID] = _FIXED_READERS[0] = lambda data, pos: None


def _long_string(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw  # pamqp's decode.long_str: bytes when not UTF-8


def decode_fields(data: bytes, pos: int, end: int, table: bool = True) -> Any:
    """The entries of the field table (``table``) or array whose octets are
    ``data[pos:end]``, after its length prefix: a ``dict`` or a ``list`` of pamqp's values.

    Iterative (an explicit stack of the tables and arrays being filled). Raises ValueError
    when the octets do not decode: a value or a nested table reaching past its container, an
    unknown field type, a field name that is not UTF-8.
    """
    root: Any = {} if table else []
    container = root
    stack: list[tuple[Any, int, bool]] = []
    widths, readers = _WIDTHS_T, _FIXED_READERS
    key = ""
    while True:
        if pos >= end:
            if pos > end:
                raise _cut_short("value")
            if not stack:
                return root
            container, end, table = stack.pop()
            continue
        if table:
            key_end = pos + 1 + data[pos]
            if key_end >= end:
                raise _cut_short("name")
            key = data[pos + 1 : key_end].decode("utf-8")
            pos = key_end
        tag = data[pos]
        width = widths[tag]
        pos += 1
        value: Any
        if width >= 0:
            if pos + width > end:
                raise _cut_short("value")
            value = readers[tag](data, pos)
            pos += width
        elif width == _UNKNOWN:
            raise ValueError(f"unknown field type {tag}")
        else:
            start = pos + 4
            if start > end or start + _unpack_long(data, pos)[0] > end:
                raise _cut_short("value")
            pos = start + _unpack_long(data, pos)[0]
            if width == _PREFIXED:
                raw = data[start:pos]
                value = _long_string(raw) if tag == _TAG_STRING else bytearray(raw)
            else:
                value = {} if width == _NESTED_TABLE else []
                stack.append((container, end, table))
                if table:
                    container[key] = value
                else:
                    container.append(value)
                container, end, table, pos = value, pos, width == _NESTED_TABLE, start
                continue
        if table:
            container[key] = value
        else:
            container.append(value)


def decode_table(data: bytes, offset: int = 0) -> tuple[int, dict[str, Any]]:
    """The field table at ``offset`` (length prefix included): ``(octets it takes, dict)``,
    as pamqp's ``decode.field_table(data[offset:])``. Raises ValueError when it does not
    decode (the table reaching past ``data`` included)."""
    if offset + 4 > len(data):
        raise _cut_short("table length")
    end = offset + 4 + _unpack_long(data, offset)[0]
    if end > len(data):
        raise ValueError("field table longer than its data")
    return end - offset, decode_fields(data, offset + 4, end)


def _skip_entries(data: bytes, pos: int, end: int, names_ok: bool) -> tuple[int, int]:
    """Skip a table's entries from ``pos`` up to one holding a table or an array (or an
    unknown type): ``(position after its type tag, its _WIDTHS)``; or ``(end or beyond,
    0)`` at the table's end. Raises UnicodeDecodeError for a name that is not UTF-8."""
    widths = _WIDTHS_T
    unpack_long = _unpack_long
    while pos < end:
        key_end = pos + 1 + data[pos]
        if not names_ok:
            key = data[pos + 1 : key_end]
            if not key.isascii():
                key.decode("utf-8")
        width = widths[data[key_end]]
        pos = key_end + 1
        if width >= 0:
            pos += width
        elif width == _PREFIXED:
            pos += 4 + unpack_long(data, pos)[0]
        else:
            return pos, width
    return pos, 0


def _skip_values(data: bytes, pos: int, end: int, names_ok: bool) -> tuple[int, int]:
    """:func:`_skip_entries` for an array's values."""
    widths = _WIDTHS_T
    unpack_long = _unpack_long
    while pos < end:
        width = widths[data[pos]]
        pos += 1
        if width >= 0:
            pos += width
        elif width == _PREFIXED:
            pos += 4 + unpack_long(data, pos)[0]
        else:
            return pos, width
    return pos, 0


def check_fields(data: bytes, pos: int, end: int) -> bool:
    """Whether the field table entries ``data[pos:end]`` (after the length prefix) decode
    (:func:`decode_fields` would not raise), found without building any value.

    The publish path runs this on every message with headers, so the entries of a table or
    an array are skipped in a tight loop that stops only at a nested table or array. A value
    that reaches past its container moves the position past ``end`` for good, which is
    checked once, at the container's end.
    """
    stack: list[tuple[int, bool]] = []
    table = True
    # Field names must be UTF-8: in an all-ASCII table (most are) every name is, which one
    # scan in C finds faster than a check per name.
    names_ok = data[pos:end].isascii()
    try:
        while True:
            pos, width = (_skip_entries if table else _skip_values)(data, pos, end, names_ok)
            if not width:  # the container's end (or past it: something reached beyond)
                if pos > end:
                    return False
                if not stack:
                    return True
                end, table = stack.pop()
                continue
            if width == _UNKNOWN or pos + 4 > end:
                return False
            value_end = pos + 4 + _unpack_long(data, pos)[0]
            if value_end > end:
                return False
            stack.append((end, table))
            end, table = value_end, width == _NESTED_TABLE
            pos += 4
    except (UnicodeDecodeError, IndexError, struct.error):
        return False


def check_table(table: bytes) -> bool:
    """Whether ``table`` (a whole field table, length prefix included, nothing after it)
    decodes."""
    return (
        len(table) >= 4
        and 4 + _unpack_long(table, 0)[0] == len(table)
        and check_fields(table, 4, len(table))
    )


# -- encoding -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _string(value: str) -> bytes:
    """A long-string field value. Cached: header values repeat (queue names, reasons,
    exchange names), and dead-lettering encodes them for every message."""
    raw = value.encode("utf-8")
    return b"S" + _LENGTH.pack(len(raw)) + raw


@functools.lru_cache(maxsize=4096)
def _shortstr(value: str) -> bytes:
    """A field name (cached: the same few names come back in every table)."""
    raw = value.encode("utf-8")
    return bytes((len(raw),)) + raw


def _timestamp(value: datetime.datetime) -> bytes:
    return _TAGGED_TIMESTAMP.pack(b"T", timestamp_value(value))


def _bytes(value: bytes | bytearray) -> bytes:
    return b"x" + _LENGTH.pack(len(value)) + bytes(value)


def _decimal(value: decimal.Decimal) -> bytes:
    """A decimal value as pamqp's ``encode.decimal`` writes it: scale and a signed 32-bit
    mantissa; TypeError when it does not fit (or is not a number)."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):  # NaN, Infinity
        raise TypeError(f"cannot encode {value} as a decimal")
    scale = max(0, -exponent)
    mantissa = int(value.scaleb(scale)) if scale else int(value)
    if not (0 <= scale <= 255 and -(2**31) <= mantissa < 2**31):
        raise TypeError(f"cannot encode {value} as a decimal (scale 0-255, 32-bit mantissa)")
    return b"D" + _DECIMAL.pack(scale, mantissa)


# Scalars by exact type: one dict lookup instead of a chain of isinstance checks per value
# (bool before int matters only for the chain below; here each type has its own entry).
_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    str: _string,
    bool: lambda v: b"t\x01" if v else b"t\x00",
    int: lambda v: _TAGGED_LONG.pack(b"l", v),
    float: lambda v: _TAGGED_DOUBLE.pack(b"d", v),
    datetime.datetime: _timestamp,
    WireTimestamp: _timestamp,
    decimal.Decimal: _decimal,
    bytes: _bytes,
    bytearray: _bytes,
    type(None): lambda v: b"V",
}
_SUBCLASSED = (bool, int, str, float, datetime.datetime, decimal.Decimal, bytes, bytearray)


def _scalar(value: Any) -> bytes | None:
    """A scalar of a subclass (an IntEnum, a str subclass...): the first matching base
    type's encoding; None for a table or an array; TypeError for anything else."""
    for kind in _SUBCLASSED:
        if isinstance(value, kind):
            return _ENCODERS[kind](value)
    if isinstance(value, dict | list | tuple):
        return None
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def _encode_into(out: bytearray, root: Any, table: bool) -> None:
    """Append a table's (``table``) or an array's entries to ``out``, whose last four
    octets are the length prefix to fill in. Iterative: each nested table or array is
    written in place with a length placeholder, filled in once its entries are."""
    encoders = _ENCODERS
    stack: list[tuple[Any, bool, int]] = []
    start = len(out)
    items = iter(root.items()) if table else iter(root)
    while True:
        for item in items:
            if table:
                key, value = item
                out += _shortstr(str(key))
            else:
                value = item
            encoder = encoders.get(type(value))
            encoded = encoder(value) if encoder is not None else _scalar(value)
            if encoded is not None:
                out += encoded
                continue
            nested = isinstance(value, dict)
            out += b"F\x00\x00\x00\x00" if nested else b"A\x00\x00\x00\x00"
            stack.append((items, table, start))
            start, table = len(out), nested
            items = iter(value.items()) if nested else iter(value)
            break
        else:
            _LENGTH.pack_into(out, start - 4, len(out) - start)
            if not stack:
                return
            items, table, start = stack.pop()


def encode_value(value: Any) -> bytes:
    """One field value, type tag included, with RabbitMQ's type choices (``l``, ``d``)."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    encoded = _scalar(value)
    if encoded is not None:
        return encoded
    out = bytearray(b"F\x00\x00\x00\x00" if isinstance(value, dict) else b"A\x00\x00\x00\x00")
    _encode_into(out, value, isinstance(value, dict))
    return bytes(out)


def encode_table(table: Mapping[str, Any]) -> bytes:
    """A field table, length prefix included."""
    out = bytearray(4)
    _encode_into(out, table, True)
    return bytes(out)


def decode_value(data: bytes) -> Any:
    """The table (``F``) or array (``A``) value whose octets, type tag and length prefix
    included, are ``data`` (inverse of :func:`encode_value` for tables and arrays). Raises
    ValueError when ``data`` is not exactly one such value."""
    if len(data) < 5 or data[0] not in (_TAG_TABLE, _TAG_ARRAY):
        raise ValueError("not a field table or array value")
    if 5 + _unpack_long(data, 1)[0] != len(data):
        raise ValueError("field value length does not match its data")
    return decode_fields(data, 5, len(data), table=data[0] == _TAG_TABLE)


def nested_deeper_than(value: Any, levels: int) -> bool:
    """Whether tables and arrays nest more than ``levels`` deep in ``value`` (a scalar is
    0 deep, ``{}`` 1). Iterative, and it stops at the first branch that goes too deep: the
    storage layer asks it before handing a value to code that recurses per level."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= levels:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
