"""The fanout exchange type: every binding, whatever the routing key
(``rabbit_exchange_type_fanout``)."""

from __future__ import annotations

from collections.abc import Sequence

from leveret.exchanges.model import Binding, ExchangeType
from leveret.exchanges.refs import RefSet
from leveret.exchanges.types.base import Content, ExchangeTypeModule, Headers, Names, pair


class FanoutIndex(RefSet):
    """Fanout exchange: every bound name, whatever the routing key."""

    __slots__ = ()

    def bind(self, binding: Binding) -> None:
        self.add(binding.destination)

    def unbind(self, binding: Binding) -> None:
        self.discard(binding.destination)


def route_fanout(
    index: FanoutIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """Every bound name; the routing key is ignored."""
    return index.names()


FANOUT = ExchangeTypeModule(
    ExchangeType.FANOUT,
    pair(FanoutIndex),
    route_fanout,
    description="AMQP fanout exchange, as per the AMQP specification",
)
