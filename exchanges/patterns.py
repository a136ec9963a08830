"""The pattern indexes (topic and ``x-rtopic``) and the route cache in front of them.

A topic or reverse-topic match walks a trie, which costs microseconds to milliseconds; a
dict lookup costs tens of nanoseconds, and publishers tend to reuse a few routing keys. So
each pattern index memoises its own results by routing key in a :class:`RouteCache`.

Why per index and not per ``route()`` call: a route through exchange-to-exchange bindings
or an alternate exchange depends on several exchanges' bindings, so a cached whole route
would need invalidating whenever any exchange downstream changed. A cached *index* result
depends only on that index's own bindings, and every binding change of the index goes
through its ``bind``/``unbind``, which clears the cache. Deleting an exchange drops its
indexes, cache included; deleting a queue or an exchange unbinds what points at it first,
which clears the caches of the sources. ``route`` keeps walking E2E bindings and alternate
exchanges on every call; only the per-exchange trie walks are memoised.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from leveret.exchanges.model import EMPTY, Binding
from leveret.exchanges.rtopic import ReverseTopicTrie
from leveret.exchanges.trie import TopicTrie


class RouteCache(OrderedDict[str, frozenset[str]]):
    """Results of one index by routing key, bounded, evicting the oldest first.

    Two bounds: ``max_entries`` keys, and ``max_weight`` names held over all results (a
    frozenset costs about 45 bytes per name, so at most ~45 MB per index), so that caching
    ``#`` over 100k bindings cannot hold gigabytes. A single result heavier than
    ``max_weight`` is returned without being kept. FIFO rather than LRU: a hit stays one
    C-level dict lookup (an LRU would move the entry on every hit), and eviction is O(1)
    (``popitem(last=False)``; evicting from the front of a plain dict is not).
    """

    __slots__ = ("weight",)

    max_entries = 65536  # the topic benchmark cycles 10,000 keys: a smaller cache would thrash
    max_weight = 1 << 20

    def __init__(self) -> None:
        super().__init__()
        self.weight = 0

    def store(self, routing_key: str, found: set[str]) -> frozenset[str]:
        """Keep ``found`` (a fresh match result) for ``routing_key``; return it frozen."""
        names = frozenset(found) if found else EMPTY
        weight = len(names) + 1
        if weight > self.max_weight:
            return names
        self[routing_key] = names
        self.weight += weight
        while len(self) > self.max_entries or self.weight > self.max_weight:
            _, old = self.popitem(last=False)
            self.weight -= len(old) + 1
        return names

    def invalidate(self) -> None:
        """Forget every result: the index's bindings changed."""
        if self:
            self.clear()
            self.weight = 0


class _CachedIndex:
    """``bind``/``unbind``/``lookup`` over a trie's ``add``/``remove``/``match``, with a
    route cache that every binding change empties. Mixed in after the trie class."""

    __slots__ = ()
    cache: RouteCache

    if TYPE_CHECKING:

        def add(self, key: str, destination: str) -> None: ...
        def remove(self, key: str, destination: str) -> bool: ...
        def match(self, key: str) -> set[str]: ...

    def bind(self, binding: Binding) -> None:
        """Add ``binding`` and forget cached results."""
        self.add(binding.routing_key, binding.destination)
        self.cache.invalidate()

    def unbind(self, binding: Binding) -> None:
        """Remove ``binding`` and forget cached results."""
        self.remove(binding.routing_key, binding.destination)
        self.cache.invalidate()

    def lookup(self, key: str) -> frozenset[str]:
        """The names ``key`` (a routing key, or an x-rtopic pattern) reaches, from the cache
        or a trie walk (a shared result: read-only)."""
        found = self.cache.get(key)
        if found is None:
            found = self.cache.store(key, self.match(key))
        return found


class TopicIndex(TopicTrie[str], _CachedIndex):
    """Topic exchange: a :class:`TopicTrie` of binding keys to names, with a route cache."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        super().__init__()
        self.cache = RouteCache()


class RTopicIndex(ReverseTopicTrie[str], _CachedIndex):
    """``x-rtopic`` exchange: a :class:`ReverseTopicTrie` of literal binding keys to names,
    with a route cache keyed by the routing pattern."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        super().__init__()
        self.cache = RouteCache()
