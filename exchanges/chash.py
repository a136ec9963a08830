"""The consistent-hash exchange ``x-consistent-hash`` (RabbitMQ's
rabbitmq_consistent_hash_exchange plugin, as shipped with 3.10; its
src/rabbit_exchange_type_consistent_hash.erl).

A binding's key is a weight: the number of buckets its destination gets. Buckets are
numbered in binding order; removing a binding removes its buckets and moves the later ones
down, so the others keep their order. A message goes to exactly one destination: the
bucket that Lamping and Veach's jump hash picks for ``erlang:phash2`` of

* the routing key (the default; with CC/BCC keys, still the routing key itself), or
* the value of the header the exchange argument ``hash-header`` names, as RabbitMQ
  decodes it (``{longstr, <<"v">>}``; ``undefined`` when the message lacks it), or
* the property ``hash-property`` names: ``message_id``, ``correlation_id`` or
  ``timestamp`` (a binary of its decimal digits), ``undefined`` when unset.

Header and property values are read from the message's raw content header, so that their
AMQP types (which the hash covers) are the ones the publisher sent. Bucket choices are
memoised per hashed value, and the memo is dropped whenever the ring changes.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

from leveret.exchanges.erlhash import UNDEFINED, Atom, jump_consistent_hash, phash2
from leveret.exchanges.fields import FIELD_TYPES, erlang_integer, property_spans
from leveret.exchanges.model import EMPTY, Binding, DestKind, ExchangeTypeCrashError

HASH_PROPERTIES = ("correlation_id", "message_id", "timestamp")
_MEMO_LIMIT = 65536


def hash_on(arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """What the exchange hashes: ``("header", name)``, ``("property", name)``, or None for
    the routing key. Assumes :func:`exchange_problem` passed."""
    for kind, argument in (("header", "hash-header"), ("property", "hash-property")):
        value = arguments.get(argument)
        if value is not None:
            return kind, _text(value)
    return None


def _text(value: str | bytes) -> str:
    # pamqp gives a longstr as str, or as bytes when it is not UTF-8.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def exchange_problem(arguments: Mapping[str, Any]) -> str | None:
    """RabbitMQ's 406 text for a consistent-hash exchange's arguments, or None
    (``validate/1``); raises :class:`ExchangeTypeCrashError` where the plugin crashes."""
    header = arguments.get("hash-header")
    prop = arguments.get("hash-property")
    for value in (header, prop):
        if value is not None and not isinstance(value, str | bytes):
            raise ExchangeTypeCrashError(value)
    if header is not None and prop is not None:
        return "hash-header and hash-property are mutually exclusive"
    if prop is not None:
        name = _text(prop)
        if name not in HASH_PROPERTIES:
            return f"Unsupported property: {name}"
    return None


def binding_problem(routing_key: str, show: Callable[[bytes], str]) -> str | None:
    """RabbitMQ's 406 text for a binding key that is no weight (``validate_binding/2``),
    or None. ``show`` prints a binary as Erlang does."""
    raw = routing_key.encode("utf-8")
    weight = erlang_integer(raw)
    if weight is None:
        return f"The binding key must be an integer: {show(raw)}"
    if weight < 1:
        return "The binding key must be greater than 0"
    return None


class Ring:
    """The buckets of one exchange: its bindings in order, each with its weight."""

    __slots__ = ("_bindings", "_ends", "_memo", "_targets", "source")

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.source = hash_on(arguments)
        self._bindings: dict[Any, tuple[str, DestKind, int]] = {}
        self._ends: list[int] = []  # cumulative weights, one per binding in order
        self._targets: list[tuple[str, DestKind]] = []  # the destinations, in the same order
        self._memo: dict[Any, tuple[str, DestKind] | None] = {}

    def bind(self, binding: Binding) -> None:
        """Append ``binding``'s buckets (the broker refuses a key that is no weight; one
        from elsewhere, a hand-edited definitions file say, gets no buckets)."""
        weight = max(erlang_integer(binding.routing_key) or 0, 0)
        self._bindings[binding.key] = (binding.destination, binding.kind, weight)
        # Appending keeps a replay of many bindings linear; only an unbind renumbers.
        self._ends.append((self._ends[-1] if self._ends else 0) + weight)
        self._targets.append((binding.destination, binding.kind))
        self._memo.clear()

    def unbind(self, binding: Binding) -> None:
        """Remove ``binding``'s buckets; the later ones move down."""
        if self._bindings.pop(binding.key, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        self._ends = list(accumulate(weight for _, _, weight in self._bindings.values()))
        self._targets = [(name, kind) for name, kind, _ in self._bindings.values()]
        self._memo.clear()

    def destination(self, term: Any) -> tuple[str, DestKind] | None:
        """The destination whose bucket the jump hash picks for ``term``."""
        memo = self._memo
        # Routing keys and string headers repeat: memoise them (arrays and tables, which
        # hold lists, are not hashable and are hashed every time).
        key = term if type(term) is bytes or _hashable(term) else None
        if key is not None and key in memo:
            return memo[key]
        chosen = None
        if self._ends and self._ends[-1] > 0:
            bucket = jump_consistent_hash(phash2(term), self._ends[-1])
            chosen = self._targets[bisect_right(self._ends, bucket)]
        if key is not None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[key] = chosen
        return chosen

    def dump(self) -> Any:
        return tuple(self._bindings.items())


def _hashable(term: Any) -> bool:
    try:
        hash(term)
    except TypeError:
        return False
    return True


class ConsistentHashIndex:
    """One side (queues or exchanges) of a consistent-hash exchange's shared :class:`Ring`:
    the exchange routes to one destination of either kind."""

    __slots__ = ("kind", "ring")

    def __init__(self, ring: Ring, kind: DestKind) -> None:
        self.ring = ring
        self.kind = kind

    def bind(self, binding: Binding) -> None:
        self.ring.bind(binding)

    def unbind(self, binding: Binding) -> None:
        self.ring.unbind(binding)

    def dump(self) -> Any:
        return self.ring.dump() if self.kind is DestKind.QUEUE else ()


def route_consistent_hash(
    index: ConsistentHashIndex,
    routing_keys: Sequence[str],
    headers: Mapping[str, Any] | None,
    content: bytes | None = None,
) -> frozenset[str]:
    """The one destination of ``index``'s kind a message reaches, if the ring picks one."""
    ring = index.ring
    source = ring.source
    if source is None:
        term: Any = routing_keys[0].encode("utf-8")
    elif source[0] == "header":
        term = header_term(content, source[1])
    else:
        term = property_term(content, source[1])
    chosen = ring.destination(term)
    if chosen is None or chosen[1] is not index.kind:
        return EMPTY
    return frozenset((chosen[0],))


# -- typed values from a raw content header (rabbit_binary_parser's view) -------------------

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
# How the fixed-width numbers read (the names come from fields.FIELD_TYPES).
_NUMBERS = {
    ord(tag): struct.Struct(layout)
    for tag, layout in (
        ("b", ">b"),
        ("B", ">B"),
        ("s", ">h"),
        ("u", ">H"),
        ("I", ">i"),
        ("i", ">I"),
        ("l", ">q"),
        ("L", ">q"),
        ("f", ">f"),
        ("d", ">d"),
        ("T", ">Q"),
    )
}


def property_term(content: bytes | None, name: str) -> Any:
    """``message_id`` or ``correlation_id`` as a binary, ``timestamp`` as the binary of its
    decimal digits (``integer_to_binary/1``), or ``undefined``."""
    if not content:
        return UNDEFINED
    span = property_spans(content).get(name)
    if span is None:
        return UNDEFINED
    raw = content[span[0] : span[1]]
    if name == "timestamp":
        return str(_U64.unpack(raw)[0]).encode()
    return raw


def header_term(content: bytes | None, name: str) -> Any:
    """``rabbit_misc:table_lookup(Headers, Name)``: ``{Type, Value}`` or ``undefined``."""
    if not content:
        return UNDEFINED
    span = property_spans(content).get("headers")
    if span is None:
        return UNDEFINED
    wanted = name.encode("utf-8")
    for key, value in _table(content, span[0], span[1]):
        if key == wanted:
            return value
    return UNDEFINED


def _table(data: bytes, pos: int, end: int) -> list[tuple[bytes, Any]]:
    """A field table's (name, ``{Type, Value}``) pairs in wire order."""
    fields = []
    while pos < end:
        length = data[pos]
        key = data[pos + 1 : pos + 1 + length]
        value, pos = _value(data, pos + 1 + length)
        fields.append((key, value))
    return fields


def _value(data: bytes, pos: int) -> tuple[Any, int]:
    """One typed field value, as rabbit_binary_parser decodes it, and where the next starts.
    The broker took the table as well formed (the publish checks it), so every tag is known."""
    tag = data[pos]
    name, size = FIELD_TYPES[tag]
    kind = Atom(name)
    pos += 1
    number = _NUMBERS.get(tag)
    if number is not None:
        return (kind, number.unpack_from(data, pos)[0]), pos + size
    if size < 0:
        start = pos + 4
        end = start + _U32.unpack_from(data, pos)[0]
        if name in ("longstr", "binary"):
            return (kind, data[start:end]), end
        if name == "table":
            return (kind, [(key, *value) for key, value in _table(data, start, end)]), end
        items = []
        while start < end:
            item, start = _value(data, start)
            items.append(item)
        return (kind, items), end
    if name == "bool":
        return (kind, Atom("true" if data[pos] else "false")), pos + size
    if name == "decimal":
        return (kind, (data[pos], _U32.unpack_from(data, pos + 1)[0])), pos + size
    return (kind, UNDEFINED), pos  # void
