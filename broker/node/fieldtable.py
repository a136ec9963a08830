"""Basic properties and field values the broker decodes, re-encodes or shows.

Messages normally pass through with the publisher's header bytes untouched. When the broker
must read or change the properties (user_id, expiration, reply-to, dead-lettering, BCC) it
decodes and encodes them here, as pamqp would but for the field tables and timestamps, which
go through leveret.exchanges.fields: iterative (a table nested 15,000 levels deep, as
RabbitMQ accepts, is no different from a flat one), any 64-bit timestamp kept as sent, and
the ``headers`` table encoded with RabbitMQ's type choices: pamqp writes an ``int`` in the
smallest type that fits and a ``float`` as a 32-bit ``f``, which would turn ``x-death``'s
``count`` into a byte and lose precision on doubles.

The table codec is re-exported from here (its users in the broker import it from here).
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Mapping
from typing import Any

from pamqp import commands, encode

from leveret.exchanges.fields import (
    PROPERTY_LAYOUT,
    check_fields,
    check_table,
    decode_fields,
    decode_table,
    encode_table,
    encode_value,
)
from leveret.exchanges.timestamps import WireTimestamp, decode_timestamp, timestamp_value

__all__ = [
    "JSON_DEPTH_MAX",
    "TOO_DEEP_FOR_JSON",
    "WireTimestamp",
    "amqp_json",
    "check_fields",
    "check_table",
    "decode_fields",
    "decode_properties",
    "decode_table",
    "decode_timestamp",
    "encode_properties",
    "encode_table",
    "encode_value",
    "marshal_content_header",
    "timestamp_value",
]

_SHORT = struct.Struct(">H")
_HEADER_FIXED = struct.Struct(">HHQ")
_TIMESTAMP = struct.Struct(">Q")
_U16 = _SHORT.unpack_from


def _cut_short(what: str) -> ValueError:
    return ValueError(f"{what} cut short")


# -- JSON -----------------------------------------------------------------------------------

# Tables and arrays deeper than this are shown as TOO_DEEP_FOR_JSON by amqp_json: json.dumps
# (which its callers use) recurses once per level and fails near the interpreter's recursion
# limit (1000, less the frames of the caller: about 800 under 200 frames). A management API
# reply or a trace line then shows the rest as that text instead of failing (and a message
# fetched with an ack by the management API would be lost).
JSON_DEPTH_MAX = 600
TOO_DEEP_FOR_JSON = f"(nested more than {JSON_DEPTH_MAX} levels deep)"


def _json_scalar(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return timestamp_value(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def amqp_json(value: Any) -> Any:
    """An AMQP field value as JSON, as RabbitMQ shows it (rabbit_misc:amqp_table/1): strings
    and numbers as they are, byte strings decoded, timestamps as their integer value,
    decimals as numbers, tables and arrays recursively. The management API and the traffic
    trace both use it, so a header reads the same in both.

    Iterative; a table or array more than :data:`JSON_DEPTH_MAX` levels down, which
    ``json.dumps`` could not write, is shown as :data:`TOO_DEEP_FOR_JSON`.
    """
    if not isinstance(value, Mapping | list | tuple):
        return _json_scalar(value)
    root: Any = {} if isinstance(value, Mapping) else []
    stack: list[tuple[Any, Any]] = [(root, _entries(value))]
    while stack:
        target, entries = stack[-1]
        for key, child in entries:
            nested = isinstance(child, Mapping | list | tuple)
            if not nested:
                converted: Any = _json_scalar(child)
            elif len(stack) >= JSON_DEPTH_MAX:
                converted, nested = TOO_DEEP_FOR_JSON, False
            else:
                converted = {} if isinstance(child, Mapping) else []
                stack.append((converted, _entries(child)))
            if key is None:
                target.append(converted)
            else:
                target[str(key)] = converted
            if nested:
                break
        else:
            stack.pop()
    return root


def _entries(value: Any) -> Any:
    """(key, value) pairs of a table, (None, value) pairs of an array."""
    if isinstance(value, Mapping):
        return iter(value.items())
    return ((None, item) for item in value)


# -- basic properties -----------------------------------------------------------------------

# PROPERTY_LAYOUT's names as pamqp's Basic.Properties attributes (``type`` is ``message_type``).
_PROPERTIES: tuple[tuple[int, str, int], ...] = tuple(
    (bit, "message_type" if name == "type" else name, size) for bit, name, size in PROPERTY_LAYOUT
)


def decode_properties(data: bytes, offset: int = 0) -> commands.Basic.Properties:
    """Basic properties from ``data[offset:]`` (the property flags on), as pamqp decodes
    them, with the tables and timestamps of leveret.exchanges.fields. One flag word, whose
    lowest bits are ignored, as rabbit_framing does. Raises ValueError when they do not
    decode."""
    properties = commands.Basic.Properties()
    end = len(data)
    if offset + 2 > end:
        raise ValueError("content header flags are truncated")
    (flags,) = _U16(data, offset)
    pos = offset + 2
    for bit, name, size in _PROPERTIES:
        if not flags & bit:
            continue
        value: Any
        if size == 0:
            if pos >= end:
                raise _cut_short("property")
            start = pos + 1
            pos = start + data[pos]
            if pos > end:
                raise _cut_short("property")
            value = data[start:pos].decode("utf-8")
        elif size < 0:
            taken, value = decode_table(data, pos)
            pos += taken
        elif pos + size > end:
            raise _cut_short("property")
        elif size == 8:
            value = decode_timestamp(_TIMESTAMP.unpack_from(data, pos)[0])
            pos += 8
        else:
            value = data[pos]
            pos += 1
        setattr(properties, name, value)
    return properties


def encode_properties(properties: commands.Basic.Properties) -> bytes:
    """The property flags and values of ``properties`` (pamqp's choices: a property that
    is None or ``""`` is left out), the headers table with RabbitMQ's types (module doc)."""
    flags = 0
    out = bytearray(2)
    for bit, name, size in _PROPERTIES:
        value = getattr(properties, name, None)
        if value is None or value == "":
            continue
        flags |= bit
        if size == 0:
            out += encode.short_string(value)
        elif size < 0:
            out += encode_table(value)
        elif size == 8:
            out += _TIMESTAMP.pack(timestamp_value(value))
        else:
            out += encode.octet(value)
    _SHORT.pack_into(out, 0, flags)
    return bytes(out)


def marshal_content_header(body_size: int, properties: commands.Basic.Properties) -> bytes:
    """A Basic content header payload for ``properties`` (headers encoded here)."""
    return _HEADER_FIXED.pack(60, 0, body_size) + encode_properties(properties)


class TypedTable(dict[str, Any]):
    """A decoded field table that remembers the AMQP type of each top-level value
    (``types``: key -> RabbitMQ's type name, e.g. ``short``, ``longstr``)."""

    types: dict[str, str]

    def __init__(self, values: dict[str, Any], types: dict[str, str]) -> None:
        super().__init__(values)
        self.types = types
