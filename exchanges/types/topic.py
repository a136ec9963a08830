"""The topic exchange type: binding patterns (``*`` one word, ``#`` any number) against
the routing key (``rabbit_exchange_type_topic``), through a trie and a route cache
(:mod:`leveret.exchanges.patterns`)."""

from __future__ import annotations

from collections.abc import Sequence

from leveret.exchanges.model import EMPTY, ExchangeType
from leveret.exchanges.patterns import RTopicIndex, TopicIndex
from leveret.exchanges.types.base import Content, ExchangeTypeModule, Headers, Names, pair


def route_patterns(
    index: TopicIndex | RTopicIndex,
    routing_keys: Sequence[str],
    headers: Headers,
    content: Content = None,
) -> Names:
    """Names one of ``routing_keys`` reaches through a cached pattern index, one lookup per
    key: topic (routing keys against binding patterns) and x-rtopic (each routing key, CC
    and BCC included, is a pattern against literal binding keys)."""
    if not len(index):
        return EMPTY
    if len(routing_keys) == 1:
        return index.lookup(routing_keys[0])
    found: set[str] = set()
    for key in routing_keys:
        found |= index.lookup(key)
    return found


TOPIC = ExchangeTypeModule(
    ExchangeType.TOPIC,
    pair(TopicIndex),
    route_patterns,
    description="AMQP topic exchange, as per the AMQP specification",
)
