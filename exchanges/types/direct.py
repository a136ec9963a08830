"""The direct exchange type: a binding key equal to the routing key
(``rabbit_exchange_type_direct``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leveret.exchanges.model import EMPTY, Binding, ExchangeType
from leveret.exchanges.refs import RefSet
from leveret.exchanges.types.base import Content, ExchangeTypeModule, Headers, Names, pair


class DirectIndex:
    """Direct exchange: routing key -> names."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[str, RefSet] = {}

    def bind(self, binding: Binding) -> None:
        refs = self.by_key.get(binding.routing_key)
        if refs is None:
            refs = self.by_key[binding.routing_key] = RefSet()
        refs.add(binding.destination)

    def unbind(self, binding: Binding) -> None:
        refs = self.by_key.get(binding.routing_key)
        if refs is not None:
            refs.discard(binding.destination)
            if not refs:
                del self.by_key[binding.routing_key]

    def dump(self) -> Any:
        return frozenset((key, refs.dump()) for key, refs in self.by_key.items())


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


DIRECT = ExchangeTypeModule(
    ExchangeType.DIRECT,
    pair(DirectIndex),
    route_direct,
    description="AMQP direct exchange, as per the AMQP specification",
)
