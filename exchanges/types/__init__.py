"""Exchange types, one module each behind one contract (:mod:`.base`), as RabbitMQ's
``rabbit_exchange_type`` modules: direct, fanout, topic, headers, x-rtopic,
x-consistent-hash and x-delayed-message. Adding a type touches its module and one line of
:data:`TYPES`, keyed by its wire name (the module's ``kind``): the declare path, the
``x-delayed-type`` check, the log's replay, the pipeline's topology and the management API's
list of types all parse names through :func:`parse_type`, and the projection, routing and
the checks read the module through the registry. (:class:`~leveret.exchanges.model.ExchangeType`
only names the built-in types for code that compares against one.)

The door: pure like the rest of ``exchanges/``; the type modules import the data structures
of ``exchanges/`` (tries, the hash ring), never the projection or routing, which use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leveret.exchanges.model import Exchange
from leveret.exchanges.types.base import ExchangeTypeModule
from leveret.exchanges.types.chash import CONSISTENT_HASH
from leveret.exchanges.types.delayed import DELAYED
from leveret.exchanges.types.direct import DIRECT
from leveret.exchanges.types.fanout import FANOUT
from leveret.exchanges.types.headers import HEADERS
from leveret.exchanges.types.rtopic import RTOPIC
from leveret.exchanges.types.topic import TOPIC

TYPES: dict[str, ExchangeTypeModule] = {
    module.kind: module
    for module in (DIRECT, FANOUT, TOPIC, HEADERS, RTOPIC, CONSISTENT_HASH, DELAYED)
}


def parse_type(name: str) -> str | None:
    """The exchange type named ``name`` (its registry key, the very object, so a built-in
    one is its :class:`~leveret.exchanges.model.ExchangeType` member), or None when no
    registered type has that name."""
    module = TYPES.get(name)
    return None if module is None else module.kind


def is_known(name: str) -> bool:
    """Whether ``name`` names a registered exchange type."""
    return name in TYPES


def validate_exchange(kind: str, arguments: Mapping[str, Any]) -> str | None:
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


__all__ = [
    "TYPES",
    "ExchangeTypeModule",
    "is_known",
    "parse_type",
    "validate_binding",
    "validate_exchange",
]
