"""Exchange types, one module each behind one contract (:mod:`.base`), as RabbitMQ's
``rabbit_exchange_type`` modules: direct, fanout, topic, headers, x-rtopic,
x-consistent-hash and x-delayed-message. Adding a type touches its module and one line of
:data:`TYPES`.

The door: pure like the rest of ``exchanges/``; the type modules import the data structures
of ``exchanges/`` (tries, the hash ring), never the projection or routing, which use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leveret.exchanges.model import Exchange, ExchangeType
from leveret.exchanges.types.base import ExchangeTypeModule
from leveret.exchanges.types.chash import CONSISTENT_HASH
from leveret.exchanges.types.delayed import DELAYED
from leveret.exchanges.types.direct import DIRECT
from leveret.exchanges.types.fanout import FANOUT
from leveret.exchanges.types.headers import HEADERS
from leveret.exchanges.types.rtopic import RTOPIC
from leveret.exchanges.types.topic import TOPIC

TYPES: Mapping[ExchangeType, ExchangeTypeModule] = {
    module.kind: module
    for module in (DIRECT, FANOUT, TOPIC, HEADERS, RTOPIC, CONSISTENT_HASH, DELAYED)
}


def routing_type(exchange: Exchange) -> ExchangeTypeModule:
    """The type whose indexes and router serve ``exchange``: its own, or for a type that
    wraps another (x-delayed-message) the one it routes as. Raises ValueError when that is no
    type (refused at declare)."""
    module = TYPES[exchange.type]
    if module.routes_as is None:
        return module
    kind = module.routes_as(exchange.arguments)
    if not isinstance(kind, ExchangeType) or TYPES[kind].routes_as is not None:
        raise ValueError(f"{exchange.type.value} exchange {exchange.name!r} routes as {kind!r}")
    return TYPES[kind]


def validate_exchange(kind: ExchangeType, arguments: Mapping[str, Any]) -> str | None:
    """RabbitMQ's explanation when a new exchange's arguments are invalid for its type (the
    type module's ``validate/1``), else None; raises
    :class:`leveret.exchanges.chash.ExchangeTypeCrashError` where RabbitMQ's module crashes."""
    return TYPES[kind].validate(arguments)


def validate_binding(
    exchange: Exchange, arguments: Mapping[str, Any], routing_key: str = ""
) -> str | None:
    """RabbitMQ's explanation when a binding is invalid for ``exchange`` (the type module's
    ``validate_binding/2``), else None."""
    return TYPES[exchange.type].validate_binding(routing_key, arguments)


__all__ = ["TYPES", "ExchangeTypeModule", "routing_type", "validate_binding", "validate_exchange"]
