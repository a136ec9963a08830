"""The delayed-message exchange type ``x-delayed-message`` (the
rabbitmq-delayed-message-exchange plugin's ``rabbit_exchange_type_delayed_message``).

It wraps the type named by its ``x-delayed-type`` argument, as the plugin's module delegates
every callback to that type's (``?EXCHANGE(X)``): its two indexes are the wrapped type's,
each carried with the wrapped router (:class:`DelayedIndex`), and binding validation is the
wrapped type's. What it adds is its own rule, :func:`keeps`: a message whose ``x-delay``
asks for a delay in ``1..2^32-1`` ms is kept back, and routed from the exchange when the
delay is up by the broker (``broker/delayed.py``). The plugin's pure rules (``x-delay``,
the declare checks) are in :mod:`leveret.exchanges.delayed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from leveret.exchanges.delayed import declare_problem, delay_of, underlying_type
from leveret.exchanges.model import Binding, Exchange, ExchangeType
from leveret.exchanges.types.base import (
    BindingIndex,
    Content,
    ExchangeTypeModule,
    Headers,
    Names,
    Router,
    unknown_type_problem,
)


def wrapped(arguments: Mapping[str, Any]) -> ExchangeTypeModule | None:
    """The module of the type an exchange with these arguments wraps (its
    ``x-delayed-type``), or None when that names no type it can wrap."""
    # The registry holds this module, so it is looked up when an exchange asks, not at import.
    from leveret.exchanges.types import TYPES

    kind = underlying_type(arguments)
    module = None if kind is None else TYPES.get(kind)
    if module is None or module.wraps is not None:
        return None
    return module


def _wrapped_or_fail(arguments: Mapping[str, Any]) -> ExchangeTypeModule:
    module = wrapped(arguments)
    if module is None:
        raise ValueError(f"x-delayed-type {arguments.get('x-delayed-type')!r} is no type to wrap")
    return module


class DelayedIndex:
    """One index of the wrapped type, with the router that reads it."""

    __slots__ = ("inner", "route")

    def __init__(self, inner: BindingIndex, route: Router) -> None:
        self.inner = inner
        self.route = route

    def bind(self, binding: Binding) -> None:
        self.inner.bind(binding)

    def unbind(self, binding: Binding) -> None:
        self.inner.unbind(binding)

    def dump(self) -> Any:
        return self.inner.dump()


def indexes(arguments: Mapping[str, Any]) -> tuple[DelayedIndex, DelayedIndex]:
    """The wrapped type's two indexes."""
    module = _wrapped_or_fail(arguments)
    queues, exchanges = module.indexes(arguments)
    return DelayedIndex(queues, module.route), DelayedIndex(exchanges, module.route)


def route_delayed(
    index: DelayedIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """The wrapped type's routing (``route/2`` without a delay: ``Type:route(X, Delivery)``);
    a message it keeps is never routed here (:func:`keeps`)."""
    return index.route(index.inner, routing_keys, headers, content)


def validate(arguments: Mapping[str, Any]) -> str | None:
    """``validate/1``: ``x-delayed-type`` must name another existing type, which then
    validates the arguments as its own."""
    problem = declare_problem(arguments)
    if problem is not None:
        return problem
    module = wrapped(arguments)
    if module is None:
        return unknown_type_problem(str(underlying_type(arguments)))  # check_type/1
    return module.validate(arguments)


def validate_binding(
    exchange: Exchange, routing_key: str, arguments: Mapping[str, Any]
) -> str | None:
    """``validate_binding/2``: the wrapped type's (a consistent-hash weight, an ``x-match``)."""
    return _wrapped_or_fail(exchange.arguments).validate_binding(exchange, routing_key, arguments)


def keeps(headers: Headers) -> bool:
    """Whether the message is kept back: its ``x-delay`` is a delay the plugin takes
    (``delay_message/2``). Raises :class:`leveret.exchanges.delayed.DelayCrashError` where
    the plugin's ``get_delay/1`` crashes."""
    return headers is not None and delay_of(headers) > 0


DELAYED = ExchangeTypeModule(
    ExchangeType.DELAYED,
    indexes,
    route_delayed,
    validate=validate,
    validate_binding=validate_binding,
    # rabbit_exchange_type_delayed_message:description/0
    description="Delayed Message Exchange.",
    keeps=keeps,
    wraps=wrapped,
)
