"""The delayed-message exchange type ``x-delayed-message``: it indexes and routes as the type
of its ``x-delayed-type`` argument (:func:`leveret.exchanges.delayed.underlying_type`);
keeping back the messages that ask for a delay is :func:`leveret.exchanges.routing.route`'s
and the broker's (:mod:`leveret.exchanges.delayed`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from leveret.exchanges.delayed import underlying_type
from leveret.exchanges.model import ExchangeType
from leveret.exchanges.types.base import Content, ExchangeTypeModule, Headers, Names


def _unused_indexes(arguments: Mapping[str, Any]) -> tuple[Any, Any]:
    raise TypeError("an x-delayed-message exchange is indexed as its x-delayed-type")


def _unused_route(
    index: Any, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    raise TypeError("an x-delayed-message exchange routes as its x-delayed-type")


DELAYED = ExchangeTypeModule(
    ExchangeType.DELAYED, _unused_indexes, _unused_route, routes_as=underlying_type
)
