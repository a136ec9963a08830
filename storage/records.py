"""Record payloads of the definitions log: ``(vhost, event)`` <-> bytes.

This module is the only place that knows the payload format; :mod:`leveret.storage.log` frames the
payloads and never looks inside them.

Payload layout (versions 1 and 2)::

    u8 RECORD_VERSION | ASCII JSON array  [tag, vhost, fields...]

    tag  event              fields
    "X"  ExchangeDeclared   name, type, durable, auto_delete, internal, arguments
    "x"  ExchangeDeleted    name
    "Q"  QueueDeclared      name, durable, exclusive, auto_delete, arguments
    "q"  QueueDeleted       name
    "B"  BindingAdded       source, destination, kind ("queue"|"exchange"), routing_key, arguments
    "b"  BindingRemoved     (as "B")

``arguments`` is a JSON object whose values are *tagged*: ``[tag, payload]``. AMQP field
values must come back with their exact Python type (``True`` is not ``1``, ``1`` is not
``1.0``, ``"a"`` is not ``b"a"``: bindings and equivalence checks compare them by type), and
JSON alone cannot tell these apart, so every value carries its type:

    "s" str    "t" bool    "i" int    "f" float (non-finite: "nan", "inf", "-inf")
    "b" bytes (base64)     "x" bytearray (base64)    "d" Decimal (str)
    "T" datetime (isoformat, keeps naive/aware and the offset)    "n" None (payload null)
    "F" table: object of tagged values    "A" array: list of tagged values
    "W" a table or array nested more than JSON_NESTING_MAX levels deep: its AMQP octets
        (type tag and length included, base64), as exchanges.fields encodes them

Tuples are stored as arrays (and come back as lists). A value of any other type is refused
with ``TypeError`` before anything is written.

Why "W": the wire takes tables nested thousands of levels deep (RabbitMQ stores any term),
but Python's JSON encoder and decoder recurse per level (two per AMQP level here) and stop
near 1,000, so a deep argument would make its declare fail. AMQP octets are read and written
with an explicit stack. Inside such a value, bytes come back as bytearray (the wire's byte
array), the one type the octets do not keep apart. A record holding a "W" value is written
as version 2, every other record as version 1, so a Leveret that predates "W" still reads
logs without one and stops with "upgrade Leveret" on one that has.

A payload whose version byte is above :data:`RECORD_VERSION` raises
:class:`~storage.errors.LogFormatError`: an older broker must stop, not drop the record.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from leveret.exchanges import fields as amqp_fields
from leveret.exchanges.model import (
    Arguments,
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    Queue,
    QueueDeclared,
    QueueDeleted,
)
from leveret.exchanges.types import TYPES
from leveret.storage.errors import CorruptRecordError, LogFormatError

#: The newest payload version this module writes and reads (2: values tagged "W" may occur).
RECORD_VERSION = 2
#: Version 1: the same layout without "W" values; still written when a record has none.
_PLAIN_VERSION = 1
#: Deeper tables and arrays are stored as AMQP octets ("W"): JSON recursion stays far from
#: Python's limit, and ordinary arguments (a few levels at most) stay readable in the log.
JSON_NESTING_MAX = 100
#: What follows the version byte in every payload (the JSON array's bracket). The log looks for
#: it to find the next record after a damaged one (:func:`leveret.storage.log.resync`); JSON
#: escapes control characters, so the version byte (1) followed by it never occurs inside a
#: payload. Keep it in any future payload version.
PAYLOAD_MARK = b"["

# Enum lookups through plain dicts: DestKind("queue") costs several times more, and
# replaying 100k bindings is on the start-up path. Exchange types are the registry's keys,
# read at each lookup (a type registered later is known too); an unknown one is a KeyError.
_DEST_KINDS: dict[str, DestKind] = {k.value: k for k in DestKind}
_VERSION_BYTES = {False: bytes([_PLAIN_VERSION]), True: bytes([RECORD_VERSION])}
_READABLE = (_PLAIN_VERSION, RECORD_VERSION)
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
# raw_decode on a str skips json.loads' encoding detection: about 5x faster on small records.
_raw_decode = json.JSONDecoder().raw_decode


# -- argument values ----------------------------------------------------------------------


def encode_value(value: Any) -> list[Any]:
    """The tagged JSON form ``[tag, payload]`` of one AMQP field value (see the module doc)."""
    # bool before int (bool is an int subclass), datetime before anything date-like.
    if isinstance(value, str):
        return ["s", str(value)]
    if isinstance(value, bool):
        return ["t", value]
    if isinstance(value, int):
        return ["i", int(value)]
    if isinstance(value, float):
        return ["f", value if math.isfinite(value) else repr(value)]
    if isinstance(value, bytes):
        return ["b", base64.b64encode(value).decode("ascii")]
    if isinstance(value, bytearray):
        return ["x", base64.b64encode(value).decode("ascii")]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, datetime):
        return ["T", value.isoformat()]
    if value is None:
        return ["n", None]
    if isinstance(value, Mapping):
        return ["F", encode_table(value)]
    if isinstance(value, list | tuple):
        return ["A", [encode_value(v) for v in value]]
    raise TypeError(f"not an AMQP field value: {type(value).__name__} {value!r}")


def encode_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """A field table as a JSON object of tagged values; a value nested more than
    :data:`JSON_NESTING_MAX` levels deep is tagged "W" (its AMQP octets)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if not isinstance(key, str):  # json.dumps would silently turn 1 into "1"
            raise TypeError(f"field table key must be str, not {type(key).__name__}")
        if isinstance(value, Mapping | list | tuple) and amqp_fields.nested_deeper_than(
            value, JSON_NESTING_MAX
        ):
            out[str(key)] = ["W", base64.b64encode(_octets(value)).decode("ascii")]
        else:
            out[str(key)] = encode_value(value)
    return out


def _octets(value: Any) -> bytes:
    try:
        return amqp_fields.encode_value(value)
    except struct.error as exc:  # an integer beyond the wire's 64 bits
        raise TypeError(f"cannot store {type(value).__name__} value: {exc}") from exc


def _float(payload: Any) -> float:
    return float(payload)  # a finite JSON number, or "nan" / "inf" / "-inf"


def _int(payload: Any) -> int:
    if type(payload) is not int:
        raise CorruptRecordError(f"bad int payload {payload!r}")
    return payload


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "s": str,
    "t": bool,
    "i": _int,
    "f": _float,
    "b": base64.b64decode,
    "x": lambda p: bytearray(base64.b64decode(p)),
    "d": Decimal,
    "T": datetime.fromisoformat,
    "n": lambda p: None,
    "F": lambda p: decode_table(p),
    "A": lambda p: [decode_value(v) for v in p],
    "W": lambda p: amqp_fields.decode_value(base64.b64decode(p, validate=True)),
}


def decode_value(tagged: Any) -> Any:
    """The AMQP field value of a tagged JSON form (inverse of :func:`encode_value`)."""
    try:
        tag, payload = tagged
        return _DECODERS[tag](payload)
    except CorruptRecordError:
        raise
    except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
        raise CorruptRecordError(f"bad tagged value {tagged!r}: {exc}") from exc


def decode_table(obj: Any) -> dict[str, Any]:
    """A field table from its JSON object of tagged values."""
    if not isinstance(obj, dict):
        raise CorruptRecordError(f"field table is not an object: {obj!r}")
    return {key: decode_value(value) for key, value in obj.items()}


# -- events -------------------------------------------------------------------------------


def _fields(event: Event) -> list[Any]:
    match event:
        case BindingAdded(b) | BindingRemoved(b):
            tag = "B" if isinstance(event, BindingAdded) else "b"
            return [tag, b.source, b.destination, b.kind.value, b.routing_key, _args(b.arguments)]
        case ExchangeDeclared(x):
            return [
                "X",
                x.name,
                x.type,
                x.durable,
                x.auto_delete,
                x.internal,
                _args(x.arguments),
            ]
        case ExchangeDeleted(name):
            return ["x", name]
        case QueueDeclared(q):
            return ["Q", q.name, q.durable, q.exclusive, q.auto_delete, _args(q.arguments)]
        case QueueDeleted(name):
            return ["q", name]
    raise TypeError(f"not a topology event: {event!r}")


def _args(arguments: Arguments) -> dict[str, Any]:
    return encode_table(arguments) if arguments else {}


def encode(vhost: str, event: Event) -> bytes:
    """The payload of one log record. Raises ``TypeError`` for values it cannot store."""
    fields = _fields(event)
    fields.insert(1, vhost)
    arguments = fields[-1] if type(fields[-1]) is dict else {}
    deep = any(tagged[0] == "W" for tagged in arguments.values())
    return _VERSION_BYTES[deep] + _dumps(fields).encode("ascii")


def _arguments(obj: Any) -> dict[str, Any]:
    return {} if obj == {} else decode_table(obj)


def _binding(f: list[Any]) -> Binding:
    return Binding(f[2], f[3], _DEST_KINDS[f[4]], f[5], _arguments(f[6]))


_EVENTS: dict[str, Callable[[list[Any]], Event]] = {
    "B": lambda f: BindingAdded(_binding(f)),
    "b": lambda f: BindingRemoved(_binding(f)),
    "X": lambda f: ExchangeDeclared(
        Exchange(f[2], TYPES[f[3]].kind, f[4], f[5], f[6], _arguments(f[7]))
    ),
    "x": lambda f: ExchangeDeleted(f[2]),
    "Q": lambda f: QueueDeclared(Queue(f[2], f[3], f[4], f[5], _arguments(f[6]))),
    "q": lambda f: QueueDeleted(f[2]),
}
_ARITY = {"B": 7, "b": 7, "X": 8, "x": 3, "Q": 7, "q": 3}


def decode(payload: bytes) -> tuple[str, Event]:
    """``(vhost, event)`` from a record payload.

    Raises :class:`LogFormatError` for a newer record version and
    :class:`CorruptRecordError` for anything else it cannot read.
    """
    if not payload:
        raise CorruptRecordError("empty record payload")
    version = payload[0]
    if version > RECORD_VERSION:
        raise LogFormatError(
            f"record format version {version} is newer than this Leveret supports "
            f"({RECORD_VERSION}); upgrade Leveret to read this log"
        )
    if version not in _READABLE:
        raise CorruptRecordError(f"unknown record version {version}")
    try:
        text = payload[1:].decode("ascii")
        fields, end = _raw_decode(text)
        if end != len(text):
            raise CorruptRecordError("trailing bytes after the record")
        tag = fields[0]
        if len(fields) != _ARITY[tag] or not isinstance(fields[1], str):
            raise CorruptRecordError(f"bad record fields {fields!r}")
        return fields[1], _EVENTS[tag](fields)
    except CorruptRecordError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise CorruptRecordError(f"undecodable record payload: {exc}") from exc


def decode_many(payloads: list[bytes]) -> list[tuple[str, Event]] | None:
    """Decode many current-version payloads with one JSON parse (the replay fast path:
    parsing record by record costs a Python call each). None when any payload is not
    plainly decodable, so the caller falls back to :func:`decode` per record and reports
    exactly which one is bad."""
    if not payloads or any(not p or p[0] not in _READABLE for p in payloads):
        return None
    try:
        text = "[" + ",".join(p[1:].decode("ascii") for p in payloads) + "]"
        rows = json.loads(text)
        if len(rows) != len(payloads):
            return None
        out = []
        for fields in rows:
            tag = fields[0]
            if len(fields) != _ARITY[tag] or not isinstance(fields[1], str):
                return None
            out.append((fields[1], _EVENTS[tag](fields)))
        return out
    except (TypeError, ValueError, KeyError, IndexError, CorruptRecordError):
        return None


# -- JSON for people and for the pipeline ---------------------------------------------------


def value_to_json(value: Any) -> Any:
    """A plain-JSON view of a field value, for reading rather than round-tripping.

    JSON-native values stay as they are; the others become one-key objects:
    ``{"$bytes": base64}`` (bytes and bytearray), ``{"$decimal": "1.5"}``,
    ``{"$datetime": isoformat}`` and ``{"$float": "nan"|"inf"|"-inf"}``; a table or array
    nested more than :data:`JSON_NESTING_MAX` levels deep is ``{"$amqp": base64}``, its AMQP
    octets (JSON readers recurse per level).
    """
    if isinstance(value, Mapping | list | tuple) and amqp_fields.nested_deeper_than(
        value, JSON_NESTING_MAX
    ):
        return {"$amqp": base64.b64encode(_octets(value)).decode("ascii")}
    return _plain(value)


def _arguments_json(arguments: Arguments) -> dict[str, Any]:
    """Arguments argument by argument, so only a deep one is shown as octets."""
    return {str(key): value_to_json(value) for key, value in arguments.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def event_to_json(vhost: str, event: Event) -> dict[str, Any]:
    """One event as a plain JSON object (``leveret log dump`` prints one per line).

    Field names follow RabbitMQ's ``definitions.json`` (``destination_type``, ``auto_delete``,
    ...), so the pipeline can read both with one schema::

        {"event": "binding.added", "vhost": "/", "source": "x", "destination": "q",
         "destination_type": "queue", "routing_key": "a.b", "arguments": {}}
    """
    head: dict[str, Any]
    match event:
        case ExchangeDeclared(x):
            head = {"event": "exchange.declared", "vhost": vhost, "name": x.name}
            head.update(type=x.type, durable=x.durable, auto_delete=x.auto_delete)
            head.update(internal=x.internal, arguments=_arguments_json(x.arguments))
        case ExchangeDeleted(name):
            head = {"event": "exchange.deleted", "vhost": vhost, "name": name}
        case QueueDeclared(q):
            head = {"event": "queue.declared", "vhost": vhost, "name": q.name}
            head.update(durable=q.durable, exclusive=q.exclusive, auto_delete=q.auto_delete)
            head.update(arguments=_arguments_json(q.arguments))
        case QueueDeleted(name):
            head = {"event": "queue.deleted", "vhost": vhost, "name": name}
        case BindingAdded(b) | BindingRemoved(b):
            kind = "binding.added" if isinstance(event, BindingAdded) else "binding.removed"
            head = {"event": kind, "vhost": vhost, "source": b.source}
            head.update(destination=b.destination, destination_type=b.kind.value)
            head.update(routing_key=b.routing_key, arguments=_arguments_json(b.arguments))
        case _:
            raise TypeError(f"not a topology event: {event!r}")
    return head
