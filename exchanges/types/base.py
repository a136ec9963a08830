"""The contract every exchange type fulfils, as RabbitMQ's ``rabbit_exchange_type``
behaviour: how its bindings are indexed, how it routes, and what it refuses.

An exchange keeps two indexes of its type, one per destination kind (queues, and exchanges
for E2E bindings), so that the common publish touches only queue names. A router reads one
index: ``(index, routing_keys, headers, content) -> names``; ``content`` is the message's raw
content header, which only the consistent-hash type reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from leveret.exchanges.model import Binding, ExchangeType

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


def no_exchange_problem(arguments: Mapping[str, Any]) -> str | None:
    """``validate/1`` of a type that checks nothing."""
    return None


def no_binding_problem(routing_key: str, arguments: Mapping[str, Any]) -> str | None:
    """``validate_binding/2`` of a type that checks nothing."""
    return None


@dataclass(frozen=True, slots=True)
class ExchangeTypeModule:
    """One exchange type.

    ``indexes(arguments)`` makes the queue-side and exchange-side indexes of a new exchange;
    ``route`` is its router; ``validate(arguments)`` and ``validate_binding(routing_key,
    arguments)`` give RabbitMQ's explanation for a refused declare or bind (406), else None.
    ``routes_as``, when set, names the type this one routes as (the delayed-message type
    wraps the type of its ``x-delayed-type``).
    """

    kind: ExchangeType
    indexes: Callable[[Mapping[str, Any]], tuple[BindingIndex, BindingIndex]]
    route: Router
    validate: Callable[[Mapping[str, Any]], str | None] = no_exchange_problem
    validate_binding: Callable[[str, Mapping[str, Any]], str | None] = no_binding_problem
    routes_as: Callable[[Mapping[str, Any]], ExchangeType | str | None] | None = None


def pair(index_type: Callable[[], BindingIndex]) -> Callable[[Mapping[str, Any]], tuple[Any, Any]]:
    """``indexes`` for a type whose two indexes are independent and take no arguments."""

    def make(arguments: Mapping[str, Any]) -> tuple[Any, Any]:
        return index_type(), index_type()

    return make
