"""The consistent-hash exchange type ``x-consistent-hash`` (the
rabbitmq-consistent-hash-exchange plugin); its ring, hashing and checks are in
:mod:`leveret.exchanges.chash`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leveret.exchanges.chash import (
    ConsistentHashIndex,
    Ring,
    binding_problem,
    exchange_problem,
    route_consistent_hash,
)
from leveret.exchanges.erlang import erlang_binary
from leveret.exchanges.model import DestKind, Exchange, ExchangeType
from leveret.exchanges.types.base import ExchangeTypeModule


def indexes(arguments: Mapping[str, Any]) -> tuple[ConsistentHashIndex, ConsistentHashIndex]:
    """One ring of buckets over both kinds of destination."""
    ring = Ring(arguments)
    return ConsistentHashIndex(ring, DestKind.QUEUE), ConsistentHashIndex(ring, DestKind.EXCHANGE)


def weight_problem(
    exchange: Exchange, routing_key: str, arguments: Mapping[str, Any]
) -> str | None:
    """``validate_binding/2``: the binding key is the bucket weight."""
    return binding_problem(routing_key, erlang_binary)


CONSISTENT_HASH = ExchangeTypeModule(
    ExchangeType.CONSISTENT_HASH,
    indexes,
    route_consistent_hash,
    validate=exchange_problem,
    validate_binding=weight_problem,
    # rabbit_exchange_type_consistent_hash:description/0 (seen in 3.10.8's /api/overview)
    description="Consistent Hashing Exchange",
)
