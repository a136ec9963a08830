"""The contract every exchange type fulfils, as RabbitMQ's ``rabbit_exchange_type``
behaviour: how its bindings are indexed, how it routes, what it refuses, and whether it keeps
a message back instead of routing it now.

An exchange keeps two indexes of its type, one per destination kind (queues, and exchanges
for E2E bindings), so that the common publish touches only queue names. A router reads one
index: ``(index, routing_keys, headers, content) -> names``; ``content`` is the message's raw
content header, which only the consistent-hash type reads.

A type may wrap another type, chosen by the exchange's arguments: its functions delegate
to the wrapped module (``wraps``) and it adds its own rule on top, such as keeping messages
back (``keeps``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from leveret.exchanges.model import Binding, Exchange

Headers = Mapping[str, Any] | None
Names = frozenset[str] | set[str]
Content = bytes | None


class BindingIndex(Protocol):
    """What projection.py asks of a type's index: add and remove bindings, and a dump
    (a comparable snapshot, for tests that compare a replayed projection with a live one)."""

    def bind(self, binding: Binding) -> None: ...

    def unbind(self, binding: Binding) -> None: ...

    def dump(self) -> Any: ...


Router = Callable[[Any, Sequence[str], Headers, Content], Names]
Keeps = Callable[[Headers], bool]


def unknown_type_problem(name: str) -> str:
    """RabbitMQ's 406 text for an exchange type it does not have
    (``rabbit_exchange:check_type/1``; 4.x closes the channel, 3.x the connection)."""
    return f"unknown exchange type '{name}'"


def no_exchange_problem(arguments: Mapping[str, Any]) -> str | None:
    """``validate/1`` of a type that checks nothing."""
    return None


def no_binding_problem(
    exchange: Exchange, routing_key: str, arguments: Mapping[str, Any]
) -> str | None:
    """``validate_binding/2`` of a type that checks nothing."""
    return None


@dataclass(frozen=True, slots=True)
class ExchangeTypeModule:
    """One exchange type.

    ``indexes(arguments)`` makes the queue-side and exchange-side indexes of a new exchange
    (ValueError: these arguments make no exchange of the type, refused by ``validate``);
    ``route`` is its router; ``validate(arguments)`` and ``validate_binding(exchange,
    routing_key, arguments)`` give RabbitMQ's explanation for a refused declare or bind
    (406), else None; ``description`` is what the management API lists (``description/0``).

    ``keeps(headers)``, when set, tells whether an exchange of this type keeps the message
    back instead of routing it now: routing goes nowhere from it for now (so its alternate
    exchange applies), and the caller learns that it keeps the message, to route it from
    there later. It may raise
    :class:`~leveret.exchanges.model.ExchangeTypeCrashError`. None for every type that
    routes at once, and then routing never asks.

    ``wraps(arguments)``, when set, is the module this type delegates to for an exchange
    with these arguments (None: no type it can wrap), for callers that need to see through
    a wrapper, such as the pipeline asking what it can replay.
    """

    kind: str  # the wire name, the type's key in the registry
    indexes: Callable[[Mapping[str, Any]], tuple[BindingIndex, BindingIndex]]
    route: Router
    validate: Callable[[Mapping[str, Any]], str | None] = no_exchange_problem
    validate_binding: Callable[[Exchange, str, Mapping[str, Any]], str | None] = no_binding_problem
    description: str = ""
    keeps: Keeps | None = None
    wraps: Callable[[Mapping[str, Any]], ExchangeTypeModule | None] | None = None


def pair(index_type: Callable[[], BindingIndex]) -> Callable[[Mapping[str, Any]], tuple[Any, Any]]:
    """``indexes`` for a type whose two indexes are independent and take no arguments."""

    def make(arguments: Mapping[str, Any]) -> tuple[Any, Any]:
        return index_type(), index_type()

    return make
