"""AMQP 0-9-1 wire facts shared by the broker and the routing code: the field-table type
tags with RabbitMQ's names for them, and the basic properties in wire order.

Pure data and one pure walk over a content header payload; the broker's codec and message
code and the consistent-hash exchange (which hashes values with their types) read the same
tables, so they cannot disagree about a tag or a property's place.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

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
