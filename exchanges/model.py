"""The topology model: exchanges, queues, bindings and the events that change them.

Everything here is immutable. Topology changes are events; the projection
(:mod:`leveret.exchanges.projection`) is the only thing that applies them, both for live
commands and for replay of the binding log at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from leveret.exchanges.fields import nested_deeper_than


class ExchangeType(StrEnum):
    """Names of the built-in exchange types (as on the wire), for code that compares against
    one of them. A type's name is a plain ``str``: the registry
    (:data:`leveret.exchanges.types.TYPES`) is the one place that knows which names are
    types, and a new type needs no member here."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"
    # The reverse topic exchange of the rabbitmq-rtopic-exchange plugin (leveret.exchanges.rtopic).
    RTOPIC = "x-rtopic"
    # The consistent-hash exchange of the rabbitmq_consistent_hash_exchange plugin
    # (leveret.exchanges.chash).
    CONSISTENT_HASH = "x-consistent-hash"
    # The delayed-message exchange of the rabbitmq-delayed-message-exchange plugin
    # (leveret.exchanges.delayed): routes as its ``x-delayed-type``, later when a message asks.
    DELAYED = "x-delayed-message"


class ExchangeTypeCrashError(ValueError):
    """A value an exchange type's module (a plugin's) does not handle, where RabbitMQ's
    channel process crashes (a 541 for the client): a consistent-hash ``hash-header`` that is
    no longstr at declare, an ``x-delay`` that is no integer at publish."""


class XMatch(StrEnum):
    """Values of a headers binding's ``x-match`` argument (``all`` is the default)."""

    ALL = "all"
    ANY = "any"
    ALL_WITH_X = "all-with-x"
    ANY_WITH_X = "any-with-x"


class DestKind(StrEnum):
    """What a binding points at: a queue, or another exchange (E2E binding)."""

    QUEUE = "queue"
    EXCHANGE = "exchange"


Arguments = Mapping[str, Any]

# The one empty route result: routers return it instead of allocating an empty set.
EMPTY: frozenset[str] = frozenset()


#: Nesting depth up to which :func:`freeze` builds nested tuples; a deeper value is frozen
#: flat, since hashing and comparing nested tuples recurse in C, per level.
FREEZE_NESTING_MAX = 100


def freeze(value: Any) -> Any:
    """A hashable, type-preserving form of an AMQP field value (for identity checks)."""
    if type(value) is dict and not value:
        return ()  # the usual binding: no arguments (the fast path of replaying 100k)
    if isinstance(value, Mapping | list | tuple) and nested_deeper_than(value, FREEZE_NESTING_MAX):
        return ("deep", _freeze_flat(value))
    return _freeze(value)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, bytearray):  # pamqp decodes byte arrays ('x') as bytearray
        return ("bytes", bytes(value))
    # The type is part of the identity: 1, 1.0 and True are different AMQP values.
    return (type(value).__name__, value)


def _freeze_flat(value: Any) -> tuple[Any, ...]:
    """The same identity as :func:`_freeze` (keys sorted, types kept) as one flat tuple of
    tokens in pre-order, built with an explicit stack."""
    out: list[Any] = []
    stack: list[tuple[bool, Any]] = [(False, value)]
    while stack:
        is_key, item = stack.pop()
        if is_key:
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(("F", len(item)))
            for key in sorted(item, reverse=True):  # popped in sorted order, key first
                stack += ((False, item[key]), (True, key))
        elif isinstance(item, list | tuple):
            out.append(("A", len(item)))
            stack.extend((False, v) for v in reversed(item))
        else:
            out.append(_freeze(item))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Exchange:
    """A declared exchange."""

    name: str
    type: str  # a name in the registry, leveret.exchanges.types.TYPES
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Arguments = field(default_factory=dict)

    @property
    def alternate_exchange(self) -> str | None:
        """The `alternate-exchange` argument, when it is a string."""
        ae = self.arguments.get("alternate-exchange")
        if isinstance(ae, bytes):
            ae = ae.decode("utf-8", "replace")
        return ae if isinstance(ae, str) else None


# The exchanges every vhost has from the start, all durable
# (rabbit_vhost:declare_default_exchanges/2). Shared by the broker and the pipeline.
PREDECLARED_EXCHANGES: tuple[Exchange, ...] = (
    Exchange("", ExchangeType.DIRECT),
    Exchange("amq.direct", ExchangeType.DIRECT),
    Exchange("amq.fanout", ExchangeType.FANOUT),
    Exchange("amq.topic", ExchangeType.TOPIC),
    Exchange("amq.headers", ExchangeType.HEADERS),
    Exchange("amq.match", ExchangeType.HEADERS),
    Exchange("amq.rabbitmq.trace", ExchangeType.TOPIC, internal=True),
)


@dataclass(frozen=True, slots=True)
class Queue:
    """A declared queue, as far as the topology is concerned."""

    name: str
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    arguments: Arguments = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Binding:
    """A binding from exchange `source` to a queue or exchange `destination`.

    Two bindings are the same binding when source, destination (and its kind),
    routing key and arguments are equal, as in RabbitMQ.
    """

    source: str
    destination: str
    kind: DestKind
    routing_key: str
    arguments: Arguments = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, DestKind, str, str, Any]:
        """Hashable identity of the binding."""
        return (self.source, self.kind, self.destination, self.routing_key, freeze(self.arguments))


@dataclass(frozen=True, slots=True)
class ExchangeDeclared:
    exchange: Exchange


@dataclass(frozen=True, slots=True)
class ExchangeDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class QueueDeclared:
    queue: Queue


@dataclass(frozen=True, slots=True)
class QueueDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class BindingAdded:
    binding: Binding


@dataclass(frozen=True, slots=True)
class BindingRemoved:
    binding: Binding


Event = (
    ExchangeDeclared
    | ExchangeDeleted
    | QueueDeclared
    | QueueDeleted
    | BindingAdded
    | BindingRemoved
)
