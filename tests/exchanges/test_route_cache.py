"""The per-index route cache of topic and x-rtopic exchanges: never stale, and bounded.

The cache holds one exchange's own matcher results (names bound to it), not whole routes,
so a change at an exchange downstream (E2E, alternate exchange) cannot leave it stale.
These tests route before and after every kind of topology change and compare.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    ExchangeType,
    Queue,
    QueueDeclared,
    QueueDeleted,
)
from leveret.exchanges.patterns import RouteCache, RTopicIndex, TopicIndex
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route

TOPIC, RTOPIC = ExchangeType.TOPIC, ExchangeType.RTOPIC
PATTERN_TYPES = [TOPIC, RTOPIC]


def build(*events: Event) -> Projection:
    return Projection.replay([ExchangeDeclared(Exchange("", ExchangeType.DIRECT)), *events])


def declare(name: str, type_: ExchangeType, ae: str | None = None) -> ExchangeDeclared:
    args = {} if ae is None else {"alternate-exchange": ae}
    return ExchangeDeclared(Exchange(name, type_, arguments=args))


def bind(source: str, dest: str, key: str, kind: DestKind = DestKind.QUEUE) -> BindingAdded:
    return BindingAdded(Binding(source, dest, kind, key))


def unbind(source: str, dest: str, key: str, kind: DestKind = DestKind.QUEUE) -> BindingRemoved:
    return BindingRemoved(Binding(source, dest, kind, key))


def queues(*names: str) -> list[Event]:
    return [QueueDeclared(Queue(name)) for name in names]


def cache_of(p: Projection, exchange: str, side: str = "queues") -> RouteCache:
    index = getattr(p.indexes[exchange], side)
    assert isinstance(index, TopicIndex | RTopicIndex)
    return index.cache


@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_results_are_cached_and_shared(type_: ExchangeType) -> None:
    p = build(declare("x", type_), *queues("q"), bind("x", "q", "a.b"))
    first = route(p, "x", "a.b")
    assert first == {"q"}
    assert "a.b" in cache_of(p, "x")
    assert route(p, "x", "a.b") is first  # a hit: the same frozenset, no walk


@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_bind_and_unbind_invalidate(type_: ExchangeType) -> None:
    p = build(declare("x", type_), *queues("q1", "q2"), bind("x", "q1", "a.b"))
    key = "a.b"
    assert route(p, "x", key) == {"q1"}
    p.apply(bind("x", "q2", "a.b"))
    assert route(p, "x", key) == {"q1", "q2"}
    p.apply(unbind("x", "q1", "a.b"))
    assert route(p, "x", key) == {"q2"}
    p.apply(unbind("x", "q2", "a.b"))
    assert route(p, "x", key) == set()
    p.apply(bind("x", "q1", "a.b"))
    assert route(p, "x", key) == {"q1"}


@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_a_binding_that_does_not_match_still_clears_only_its_own_exchange(
    type_: ExchangeType,
) -> None:
    p = build(declare("x", type_), declare("y", type_), *queues("q"), bind("x", "q", "a"))
    route(p, "x", "a")
    route(p, "y", "a")
    p.apply(bind("y", "q", "zzz"))
    assert "a" in cache_of(p, "x")  # x's results do not depend on y's bindings
    assert "a" not in cache_of(p, "y")
    assert route(p, "x", "a") == {"q"}


@pytest.mark.parametrize("type_", PATTERN_TYPES)
@pytest.mark.parametrize("downstream", PATTERN_TYPES)
def test_no_stale_route_through_e2e(type_: ExchangeType, downstream: ExchangeType) -> None:
    p = build(
        declare("a", type_),
        declare("b", downstream),
        *queues("q1", "q2"),
        bind("a", "b", "k.x", DestKind.EXCHANGE),
        bind("b", "q1", "k.x"),
    )
    assert route(p, "a", "k.x") == {"q1"}
    p.apply(bind("b", "q2", "k.x"))  # only b changes: a's cached {b} is still right
    assert route(p, "a", "k.x") == {"q1", "q2"}
    p.apply(unbind("b", "q1", "k.x"))
    assert route(p, "a", "k.x") == {"q2"}
    p.apply(unbind("a", "b", "k.x", DestKind.EXCHANGE))
    assert route(p, "a", "k.x") == set()
    p.apply(bind("a", "b", "k.x", DestKind.EXCHANGE))
    assert route(p, "a", "k.x") == {"q2"}


@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_no_stale_route_through_the_alternate_exchange(type_: ExchangeType) -> None:
    p = build(
        declare("x", type_, ae="ae"),
        declare("ae", type_),
        *queues("q", "lost", "late"),
        bind("ae", "lost", "k"),
    )
    assert route(p, "x", "k") == {"lost"}
    p.apply(bind("ae", "late", "k"))
    assert route(p, "x", "k") == {"lost", "late"}
    p.apply(bind("x", "q", "k"))  # x routes now: no alternate exchange
    assert route(p, "x", "k") == {"q"}
    p.apply(unbind("x", "q", "k"))
    assert route(p, "x", "k") == {"lost", "late"}


@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_no_stale_route_after_deletions(type_: ExchangeType) -> None:
    p = build(
        declare("x", type_),
        declare("y", type_),
        *queues("q", "r"),
        bind("x", "q", "k"),
        bind("x", "y", "k", DestKind.EXCHANGE),
        bind("y", "r", "k"),
    )
    assert route(p, "x", "k") == {"q", "r"}
    p.apply(QueueDeleted("q"))
    assert route(p, "x", "k") == {"r"}
    p.apply(ExchangeDeleted("y"))
    assert route(p, "x", "k") == set()
    p.apply(declare("y", type_))  # a new y: no bindings, so nothing cached survives
    assert route(p, "x", "k") == set()
    p.apply(ExchangeDeleted("x"))
    p.apply(declare("x", type_))
    assert route(p, "x", "k") == set()
    assert not cache_of(p, "x") or cache_of(p, "x").get("k") == frozenset()


@pytest.fixture
def tiny_cache() -> Iterator[None]:
    saved = RouteCache.max_entries, RouteCache.max_weight
    RouteCache.max_entries, RouteCache.max_weight = 3, 8
    try:
        yield
    finally:
        RouteCache.max_entries, RouteCache.max_weight = saved


@pytest.mark.usefixtures("tiny_cache")
@pytest.mark.parametrize("type_", PATTERN_TYPES)
def test_cache_is_bounded_by_entries_and_by_names_held(type_: ExchangeType) -> None:
    names = [f"q{i}" for i in range(10)]
    p = build(declare("x", type_), *queues(*names), *(bind("x", q, f"k.{q}") for q in names))
    cache = cache_of(p, "x")
    for q in names:
        assert route(p, "x", f"k.{q}") == {q}
        assert len(cache) <= 3
        assert cache.weight == sum(len(v) + 1 for v in cache.values()) <= 8
    assert list(cache) == ["k.q7", "k.q8", "k.q9"]  # the oldest go first
    everything = "#"  # x-rtopic: the pattern matching every binding
    if type_ is TOPIC:
        everything = "any.key"
        for q in names:
            p.apply(bind("x", q, "#"))
    assert len(route(p, "x", everything)) == 10
    assert everything not in cache  # heavier than the whole budget: not kept
    assert len(route(p, "x", everything)) == 10
