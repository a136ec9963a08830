"""Exchange types, one module each behind one contract (:mod:`.base`), as RabbitMQ's
``rabbit_exchange_type`` modules: direct, fanout, topic, headers, x-rtopic,
x-consistent-hash and x-delayed-message. Adding a type touches its module and one line of
:data:`TYPES` (and names it in :class:`~leveret.exchanges.model.ExchangeType`, the wire
names the model, the log and the declare path parse): the projection, routing, the checks
and the management API's list of types all read the module through the registry.

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


def validate_exchange(kind: ExchangeType, arguments: Mapping[str, Any]) -> str | None:
    """RabbitMQ's explanation when a new exchange's arguments are invalid for its type (the
    type module's ``validate/1``), else None; raises
    :class:`leveret.exchanges.model.ExchangeTypeCrashError` where RabbitMQ's module crashes."""
    return TYPES[kind].validate(arguments)


def validate_binding(
    exchange: Exchange, arguments: Mapping[str, Any], routing_key: str = ""
) -> str | None:
    """RabbitMQ's explanation when a binding is invalid for ``exchange`` (the type module's
    ``validate_binding/2``), else None."""
    return TYPES[exchange.type].validate_binding(exchange, routing_key, arguments)


__all__ = ["TYPES", "ExchangeTypeModule", "validate_binding", "validate_exchange"]
