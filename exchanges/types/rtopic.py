"""The reverse topic exchange type ``x-rtopic`` (the rabbitmq-rtopic-exchange plugin): the
routing key is the pattern, the binding keys are literal (:mod:`leveret.exchanges.rtopic`)."""

from __future__ import annotations

from leveret.exchanges.model import ExchangeType
from leveret.exchanges.patterns import RTopicIndex
from leveret.exchanges.types.base import ExchangeTypeModule, pair
from leveret.exchanges.types.topic import route_patterns

# Each routing key (CC and BCC included) is looked up as a pattern, as topic looks up keys.
RTOPIC = ExchangeTypeModule(ExchangeType.RTOPIC, pair(RTopicIndex), route_patterns)
