"""Pure route functions: which queues does a published message reach?

Each exchange type has a router ``(index, routing_keys, headers, content) -> set of names``
that reads only its own index (RabbitMQ's ``rabbit_exchange_type:route``); ``content`` is the
message's raw content header, which only the consistent-hash exchange reads (it hashes a
header or property with its AMQP type). :func:`route` adds the rules
shared by all types, once, as ``rabbit_exchange:route/3`` does:

* exchange-to-exchange bindings are walked as a work list with a visited set, so cycles are
  safe, and destinations are collected in a set, so every queue gets one copy;
* every visited exchange whose own routing found nothing hands over to its alternate
  exchange (a missing one is ignored);
* the ``CC`` and ``BCC`` headers add routing keys for the whole route
  (``mc_amqpl:message/4`` stores ``[RoutingKey | CC ++ BCC]``, which every exchange type
  reads; docs: sender-selected.md);
* the default exchange (``""``) routes to the queue named by each routing key, if it exists;
* an ``x-delayed-message`` exchange keeps back a message that asks for a delay: it routes
  nowhere from there now (so its alternate exchange applies), and the caller learns which
  exchanges keep it (``holds``) to route it from each of them later (leveret.exchanges.delayed).

Nothing here does I/O or mutates the projection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from leveret.exchanges.chash import (
    ConsistentHashIndex,
    binding_problem,
    exchange_problem,
    route_consistent_hash,
)
from leveret.exchanges.delayed import DELAY_HEADER, delay_of
from leveret.exchanges.model import EMPTY, Exchange, ExchangeType, XMatch
from leveret.exchanges.patterns import RTopicIndex, TopicIndex
from leveret.exchanges.projection import (
    DirectIndex,
    ExchangeIndex,
    FanoutIndex,
    HeadersIndex,
    HeadersSpec,
    Projection,
)

Headers = Mapping[str, Any] | None
Names = frozenset[str] | set[str]
Content = bytes | None
Router = Callable[[Any, Sequence[str], Headers, Content], Names]

_BINARY = (str, bytes, bytearray)
_SCALARS = frozenset({str, bytes, int, float, bool})
_NUMBERS = frozenset({int, float})  # not bool: Erlang's true is an atom, never 1
_ABSENT = object()


def route_direct(
    index: DirectIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """Names bound with exactly one of ``routing_keys``."""
    by_key = index.by_key
    if len(routing_keys) == 1:
        refs = by_key.get(routing_keys[0])
        return EMPTY if refs is None else refs.names()
    found: set[str] = set()
    for key in routing_keys:
        refs = by_key.get(key)
        if refs is not None:
            found.update(refs.names())
    return found


def route_fanout(
    index: FanoutIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """Every bound name; the routing key is ignored."""
    return index.names()


def route_patterns(
    index: TopicIndex | RTopicIndex,
    routing_keys: Sequence[str],
    headers: Headers,
    content: Content = None,
) -> Names:
    """Names one of ``routing_keys`` reaches through a cached pattern index, one lookup per
    key: topic (routing keys against binding patterns) and x-rtopic (each routing key, CC
    and BCC included, is a pattern against literal binding keys)."""
    if not len(index):
        return EMPTY
    if len(routing_keys) == 1:
        return index.lookup(routing_keys[0])
    found: set[str] = set()
    for key in routing_keys:
        found |= index.lookup(key)
    return found


route_topic = route_rtopic = route_patterns


def route_headers(
    index: HeadersIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """Names whose binding arguments match the message headers; routing keys are ignored."""
    if not index.specs:
        return EMPTY
    message = headers if headers is not None else {}
    found: set[str] = set()
    for spec in index.specs.values():
        if spec.dest not in found and headers_match(spec, message):
            found.add(spec.dest)
    return found


ROUTERS: Mapping[ExchangeType, Router] = {
    ExchangeType.DIRECT: route_direct,
    ExchangeType.FANOUT: route_fanout,
    ExchangeType.TOPIC: route_topic,
    ExchangeType.HEADERS: route_headers,
    ExchangeType.RTOPIC: route_rtopic,
    ExchangeType.CONSISTENT_HASH: route_consistent_hash,
}

# The same table keyed by index class: a class hashes by identity, an enum member through a
# Python-level __hash__, and this lookup is on the publish path.
_ROUTER_BY_INDEX: Mapping[type, Router] = {
    DirectIndex: route_direct,
    FanoutIndex: route_fanout,
    TopicIndex: route_topic,
    HeadersIndex: route_headers,
    RTopicIndex: route_rtopic,
    ConsistentHashIndex: route_consistent_hash,
}


def headers_match(spec: HeadersSpec, message: Mapping[str, Any]) -> bool:
    """Whether ``message`` headers satisfy one headers binding.

    ``all`` with nothing to check matches everything, ``any`` with nothing matches nothing
    (``match_all([]) -> true``, ``match_any([]) -> false`` in RabbitMQ).
    """
    if spec.match_any:
        for key, expected in spec.required:
            actual = message.get(key, _ABSENT)
            if actual is not _ABSENT and (expected is None or _equal(expected, actual)):
                return True
        return False
    for key, expected in spec.required:
        actual = message.get(key, _ABSENT)
        if actual is _ABSENT or (expected is not None and not _equal(expected, actual)):
            return False
    return True


def _equal(expected: Any, actual: Any) -> bool:
    # Most header values are scalars of the same type: settle those without a call.
    if type(expected) is type(actual) and type(actual) in _SCALARS:
        return bool(expected == actual)
    # rabbit_exchange_type_headers:headers_match/5 compares a header's value with the
    # binding's by Erlang's ==, whatever their field types: an integer 1 matches a float
    # 1.0 (observed on RabbitMQ 3.10.8). Inside arrays and tables the values keep their
    # type tags, so there amqp_equal's stricter rule applies.
    if type(expected) in _NUMBERS and type(actual) in _NUMBERS:
        return bool(expected == actual)
    return amqp_equal(expected, actual)


def amqp_equal(a: Any, b: Any) -> bool:
    """Equality of two AMQP field values as RabbitMQ's ``=:=`` sees them.

    The type matters (``1`` is not ``1.0``, ``True`` is not ``1``) except that integer widths
    do not exist in Python, and ``str``/``bytes``/``bytearray`` are all Erlang binaries, so
    the same UTF-8 content is equal. Decimals compare by digits and scale, as Erlang's
    ``{decimal, Scale, Value}`` does, so ``1.0`` and ``1.00`` differ.
    """
    ta = type(a)
    if ta is type(b):
        if ta is list or ta is tuple:
            return len(a) == len(b) and all(amqp_equal(x, y) for x, y in zip(a, b, strict=True))
        if ta is dict:
            return a.keys() == b.keys() and all(amqp_equal(v, b[k]) for k, v in a.items())
        if ta is Decimal:
            return bool(a.as_tuple() == b.as_tuple())
        return bool(a == b)
    if isinstance(a, _BINARY) and isinstance(b, _BINARY):
        return _as_bytes(a) == _as_bytes(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, int) and isinstance(b, int):
        return bool(a == b)  # int subclasses (IntEnum) are still integers
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return amqp_equal(list(a), list(b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return amqp_equal(dict(a), dict(b))
    return False


def _as_bytes(value: str | bytes | bytearray) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def sender_selected_keys(routing_key: str, headers: Headers) -> tuple[str, ...]:
    """The routing key followed by the ``CC`` and ``BCC`` keys, without duplicates.

    As ``rabbit_basic:header_routes/1``, only string elements of the arrays count
    (pamqp decodes a longstr that is not UTF-8 to ``bytes``).
    """
    keys = [routing_key]
    if headers is not None:
        for name in ("CC", "BCC"):
            values = headers.get(name)
            if isinstance(values, list | tuple):
                for value in values:
                    if isinstance(value, str):
                        keys.append(value)
                    elif isinstance(value, bytes):
                        keys.append(value.decode("utf-8", "replace"))
    return tuple(dict.fromkeys(keys))


def route(
    projection: Projection,
    exchange_name: str,
    routing_key: str,
    headers: Headers = None,
    content: Content = None,
    holds: list[str] | None = None,
) -> Names:
    """Names of the queues that a message published to ``exchange_name`` reaches.

    ``content`` (the raw content header) matters only to consistent-hash exchanges that
    hash a header or property; without it those see the message as having none.
    ``holds``, when given, gets the names of the ``x-delayed-message`` exchanges that keep
    the message back (:func:`leveret.exchanges.delayed.delay_of` of ``headers`` is a delay); it
    routes nowhere from those now. Raises :class:`leveret.exchanges.delayed.DelayCrashError` for an
    ``x-delay`` the plugin crashes on, when a delayed exchange reads it.

    An unknown exchange reaches nothing (the broker checks existence first). The result is
    shared when it comes straight from an index: treat it as read-only.
    """
    index = projection.indexes.get(exchange_name)
    if index is None:
        return EMPTY
    if headers is not None and ("CC" in headers or "BCC" in headers):
        keys = sender_selected_keys(routing_key, headers)
        return _walk(projection, index, keys, headers, content, holds)
    if index.plain_direct:
        # The hot path: a direct exchange without E2E bindings. Two dict lookups, and the
        # result is the index's own frozenset.
        refs = index.direct.get(routing_key)
        if refs is not None:
            return refs.frozen or refs.names()
        if index.alternate is None:
            return EMPTY
    elif index.is_default:
        return projection.queue_routes.get(routing_key, EMPTY)
    elif index.e2e == 0 and (not index.delayed or headers is None or DELAY_HEADER not in headers):
        found = _ROUTER_BY_INDEX[type(index.queues)](index.queues, (routing_key,), headers, content)
        if found or index.alternate is None:
            return found
    return _walk(projection, index, (routing_key,), headers, content, holds)


def _walk(
    projection: Projection,
    first: ExchangeIndex,
    keys: tuple[str, ...],
    headers: Headers,
    content: Content,
    holds: list[str] | None = None,
) -> Names:
    """The general case: E2E bindings, alternate exchanges, several routing keys, delayed
    exchanges."""
    indexes = projection.indexes
    queues: set[str] = set()
    seen = {first.name}
    work = [first]
    delay = -1  # not read yet
    while work:
        index = work.pop()
        exchanges: Names = EMPTY
        if index.delayed and delay < 0:
            delay = delay_of(headers)
        if index.is_default:
            found: Names = {key for key in keys if key in projection.queues}
        elif index.delayed and delay:
            # The plugin's route/2: kept back, so routed nowhere from here now.
            found = EMPTY
            if holds is not None:
                holds.append(index.name)
        else:
            router = _ROUTER_BY_INDEX[type(index.queues)]
            found = router(index.queues, keys, headers, content)
            if index.e2e:
                exchanges = router(index.exchanges, keys, headers, content)
        queues.update(found)
        targets: Iterable[str]
        if exchanges:
            targets = exchanges
        elif not found and index.alternate is not None:
            # rabbit_exchange:process_alternate/2: only when this exchange routed nowhere.
            targets = (index.alternate,)
        else:
            continue
        for name in targets:
            if name not in seen:
                seen.add(name)
                target = indexes.get(name)
                if target is not None:  # a missing exchange (or AE) is ignored
                    work.append(target)
    return queues or EMPTY


def validate_exchange(kind: ExchangeType, arguments: Mapping[str, Any]) -> str | None:
    """RabbitMQ's explanation when a new exchange's arguments are invalid for its type
    (the type module's ``validate/1``), else None. Only the consistent-hash type checks
    (:func:`leveret.exchanges.chash.exchange_problem`); raises
    :class:`leveret.exchanges.chash.ExchangeTypeCrashError` where RabbitMQ's type module crashes."""
    if kind is ExchangeType.CONSISTENT_HASH:
        return exchange_problem(arguments)
    return None


def validate_binding(
    exchange: Exchange, arguments: Mapping[str, Any], routing_key: str = ""
) -> str | None:
    """RabbitMQ's explanation when a binding is invalid for ``exchange``, else None.

    Headers exchanges check ``x-match`` (``rabbit_exchange_type_headers:validate_binding/2``):
    a longstr naming one of the four modes, or absent. Consistent-hash exchanges check that
    the binding key is a weight (:func:`leveret.exchanges.chash.binding_problem`).
    """
    if exchange.type is ExchangeType.CONSISTENT_HASH:
        return binding_problem(routing_key, erlang_binary)
    if exchange.type is not ExchangeType.HEADERS or "x-match" not in arguments:
        return None
    value = arguments["x-match"]
    if isinstance(value, str | bytes):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if raw.decode("utf-8", "replace") in tuple(XMatch):
            return None
        return (
            f"Invalid x-match field value {erlang_binary(raw)}; "
            "expected all, any, all-with-x, or any-with-x"
        )
    type_name, shown = _erlang_field(value)
    return f"Invalid x-match field type {type_name} (value {shown}); expected longstr"


def erlang_binary(raw: bytes) -> str:
    """How Erlang's ``~tp`` prints a binary: ``<<"foo">>``, ``<<"é"/utf8>>``, ``<<1,2>>``,
    and ``<<>>`` when empty."""
    if not raw:
        return "<<>>"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "<<" + ",".join(str(b) for b in raw) + ">>"
    if not all(ch.isprintable() or ch in "\n\t\r" for ch in text):
        return "<<" + ",".join(str(b) for b in raw) + ">>"
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
    return f'<<"{escaped}"/utf8>>' if not text.isascii() else f'<<"{escaped}">>'


def _erlang_field(value: Any) -> tuple[str, str]:
    """The AMQP type name RabbitMQ reports, and the value as Erlang prints it.

    Integer type names follow the width pamqp picks when encoding (smallest that fits).
    """
    if value is None:
        return "void", "undefined"
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        for name, low, high in _INT_WIDTHS:
            if low <= value <= high:
                return name, str(value)
        return "long", str(value)
    if isinstance(value, float):
        return "float", repr(value)
    if isinstance(value, bytearray):
        return "binary", erlang_binary(bytes(value))
    if isinstance(value, Decimal):
        return "decimal", str(value)
    if isinstance(value, Mapping):
        return "table", repr(dict(value))
    if isinstance(value, list | tuple):
        return "array", repr(list(value))
    if isinstance(value, datetime):
        return "timestamp", str(int(value.timestamp()))
    return type(value).__name__, repr(value)


_INT_WIDTHS = (
    ("byte", -(2**7), 2**7 - 1),
    ("short", -(2**15), 2**15 - 1),
    ("unsignedshort", 0, 2**16 - 1),
    ("signedint", -(2**31), 2**31 - 1),
    ("unsignedint", 0, 2**32 - 1),
    ("long", -(2**63), 2**63 - 1),
)
