"""Property tests: the trie, the projection and route against brute-force references."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.exchanges import rtopic
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
from leveret.exchanges.rtopic import ReverseTopicTrie
from leveret.exchanges.trie import TopicTrie

# Small alphabets make collisions, wildcards and empty words frequent.
WORDS = st.sampled_from(["a", "b", "", "*", "#"])
KEYS = st.lists(WORDS, max_size=5).map(".".join)


def words_of(key: str) -> tuple[str, ...]:
    return tuple(key.split(".")) if key else ()


@cache
def topic_matches(pattern: tuple[str, ...], key: tuple[str, ...]) -> bool:
    """The definition, recursively: '#' eats any number of words, '*' exactly one."""
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(topic_matches(rest, key[i:]) for i in range(len(key) + 1))
    if not key:
        return False
    return (head == "*" or head == key[0]) and topic_matches(rest, key[1:])


@given(st.lists(st.tuples(KEYS, st.integers(0, 3)), max_size=30), st.lists(KEYS, max_size=10))
def test_trie_matches_brute_force(bindings: list[tuple[str, int]], routing_keys: list[str]) -> None:
    trie: TopicTrie[int] = TopicTrie()
    for key, dest in bindings:
        trie.add(key, dest)
    for routing_key in [*routing_keys, "", ".", "a..b"]:
        expected = {d for k, d in bindings if topic_matches(words_of(k), words_of(routing_key))}
        assert trie.match(routing_key) == expected


Ops = list[tuple[bool, str, int]]


def add_remove_and_rebuild(make: Callable[[], Any], ops: Ops) -> tuple[Any, Any, int]:
    """Apply ``ops`` (add or remove ``key -> dest``) to a new trie, checking each remove's
    answer; return it, a trie freshly built from what is left, and how many bindings are
    left."""
    trie = make()
    alive: dict[tuple[str, int], int] = {}
    for add, key, dest in ops:
        if add:
            trie.add(key, dest)
            alive[key, dest] = alive.get((key, dest), 0) + 1
        else:
            removed = trie.remove(key, dest)
            assert removed == ((key, dest) in alive)
            if removed:
                alive[key, dest] -= 1
                if not alive[key, dest]:
                    del alive[key, dest]
    fresh = make()
    for (key, dest), count in alive.items():
        for _ in range(count):
            fresh.add(key, dest)
    return trie, fresh, sum(alive.values())


@given(st.lists(st.tuples(st.booleans(), KEYS, st.integers(0, 2)), max_size=60))
def test_trie_add_remove_equals_fresh_trie(ops: list[tuple[bool, str, int]]) -> None:
    trie, fresh, left = add_remove_and_rebuild(TopicTrie[int], ops)
    assert trie.dump() == fresh.dump()  # pruned: no dead nodes left behind
    assert trie.node_count() == fresh.node_count()
    assert len(trie) == left


# Routing patterns for x-rtopic: longer, so that runs of wildcards and several '#' occur.
PATTERNS = st.lists(WORDS, max_size=7).map(".".join)


PLANS = {
    "default": (rtopic._INFIX_FACTOR, rtopic._SMALL),
    "infix": (0, -1),  # whenever the pattern has a literal word
    "anchored": (10**9, rtopic._SMALL),  # never the infix plan
}


@pytest.mark.parametrize("plan", sorted(PLANS))
@settings(max_examples=300, deadline=None)  # no per-example deadline: the machine is shared
@given(st.lists(st.tuples(KEYS, st.integers(0, 3)), max_size=30), st.lists(PATTERNS, max_size=10))
def test_rtopic_matches_brute_force(
    plan: str, bindings: list[tuple[str, int]], patterns: list[str]
) -> None:
    """x-rtopic is topic matching with the roles swapped: the pattern is the routing key.

    Small tries would nearly always pick an anchored search, so each plan is also forced,
    and every one is checked against the definition."""
    trie: ReverseTopicTrie[int] = ReverseTopicTrie()
    for key, dest in bindings:
        trie.add(key, dest)
    saved = rtopic._INFIX_FACTOR, rtopic._SMALL
    rtopic._INFIX_FACTOR, rtopic._SMALL = PLANS[plan]
    try:
        for pattern in [*patterns, "", "#", "#.*", "#.#", "*.#.*", "#.*.a", "a.#.b", "#.a.#"]:
            expected = {d for k, d in bindings if topic_matches(words_of(pattern), words_of(k))}
            assert trie.match(pattern) == expected, pattern
    finally:
        rtopic._INFIX_FACTOR, rtopic._SMALL = saved


@given(st.lists(st.tuples(st.booleans(), KEYS, st.integers(0, 2)), max_size=60))
def test_rtopic_add_remove_equals_fresh_trie(ops: list[tuple[bool, str, int]]) -> None:
    trie, fresh, left = add_remove_and_rebuild(ReverseTopicTrie[int], ops)
    assert trie.dump() == fresh.dump()  # both tries pruned, counts right
    assert trie.node_count() == fresh.node_count()
    assert len(trie) == left


# -- random topologies ------------------------------------------------------------------------

EXCHANGE_TYPES = {
    "d": ExchangeType.DIRECT,
    "f": ExchangeType.FANOUT,
    "t": ExchangeType.TOPIC,
    "h": ExchangeType.HEADERS,
    "t2": ExchangeType.TOPIC,
    "r": ExchangeType.RTOPIC,
    "r2": ExchangeType.RTOPIC,
}
QUEUES = ["q0", "q1", "q2"]
HEADER_VALUES = st.sampled_from([None, 1, 2, 1.0, True, "v", b"v", "w"])
X_MATCH = st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"])


@st.composite
def bindings(
    draw: st.DrawFn, keys: st.SearchStrategy[str] = KEYS, sources: list[str] | None = None
) -> Binding:
    source = draw(st.sampled_from(sources or sorted(EXCHANGE_TYPES)))
    kind = draw(st.sampled_from([DestKind.QUEUE, DestKind.QUEUE, DestKind.EXCHANGE]))
    dest = draw(st.sampled_from(QUEUES if kind is DestKind.QUEUE else sorted(EXCHANGE_TYPES)))
    args: dict[str, Any] = {}
    if EXCHANGE_TYPES[source] is ExchangeType.HEADERS:
        args = draw(st.dictionaries(st.sampled_from(["a", "b", "x-c"]), HEADER_VALUES, max_size=2))
        mode = draw(X_MATCH)
        if mode is not None:
            args["x-match"] = mode
    return Binding(source, dest, kind, draw(keys), args)


def declarations(ae: dict[str, str]) -> list[Event]:
    events: list[Event] = [ExchangeDeclared(Exchange("", ExchangeType.DIRECT))]
    for name, type_ in EXCHANGE_TYPES.items():
        args = {"alternate-exchange": ae[name]} if name in ae else {}
        events.append(ExchangeDeclared(Exchange(name, type_, arguments=args)))
    events.extend(QueueDeclared(Queue(q)) for q in QUEUES)
    return events


ALTERNATES = st.dictionaries(
    st.sampled_from(sorted(EXCHANGE_TYPES)),
    st.sampled_from([*EXCHANGE_TYPES, "missing"]),
    max_size=3,
)
OPS = st.lists(
    st.one_of(
        bindings().map(BindingAdded),
        bindings().map(BindingAdded),
        bindings().map(BindingRemoved),
        st.sampled_from(QUEUES).map(QueueDeleted),
        st.sampled_from(QUEUES).map(lambda q: QueueDeclared(Queue(q))),
        st.sampled_from(sorted(EXCHANGE_TYPES)).map(ExchangeDeleted),
    ),
    max_size=40,
)


def redeclare(event: Event, ae: dict[str, str]) -> list[Event]:
    """Follow an exchange deletion with its re-declaration, so topologies stay interesting."""
    if isinstance(event, ExchangeDeleted):
        declared = [e for e in declarations(ae) if isinstance(e, ExchangeDeclared)]
        return [event, *[e for e in declared if e.exchange.name == event.name]]
    return [event]


@settings(max_examples=200)
@given(ALTERNATES, OPS)
def test_projection_equals_one_built_from_surviving_bindings(
    ae: dict[str, str], ops: list[Event]
) -> None:
    live = Projection.replay(declarations(ae))
    queues = set(QUEUES)
    alive: dict[Any, Binding] = {}
    for op in ops:
        for event in redeclare(op, ae):
            live.apply(event)
            # The model: the rules of the projection, written the obvious way.
            match event:
                case BindingAdded(b):
                    dest_exists = b.destination in (
                        queues if b.kind is DestKind.QUEUE else EXCHANGE_TYPES
                    )
                    if dest_exists:
                        alive.setdefault(b.key, b)
                case BindingRemoved(b):
                    alive.pop(b.key, None)
                case QueueDeleted(name):
                    queues.discard(name)
                    alive = {
                        k: b
                        for k, b in alive.items()
                        if (b.kind, b.destination) != (DestKind.QUEUE, name)
                    }
                case QueueDeclared(queue):
                    queues.add(queue.name)
                case ExchangeDeleted(name):
                    alive = {
                        k: b
                        for k, b in alive.items()
                        if b.source != name and (b.kind, b.destination) != (DestKind.EXCHANGE, name)
                    }
    fresh = Projection.replay(
        [
            *[e for e in declarations(ae) if not isinstance(e, QueueDeclared)],
            *[QueueDeclared(Queue(q)) for q in sorted(queues)],
            *[BindingAdded(b) for b in reversed(list(alive.values()))],
        ]
    )
    assert live == fresh
    assert {b.key for b in live.bindings()} == set(alive)
    for name in EXCHANGE_TYPES:
        assert live.has_bindings_from(name) == any(b.source == name for b in alive.values())


MESSAGES = st.tuples(
    st.sampled_from(["", *EXCHANGE_TYPES, "missing"]),
    st.one_of(KEYS, st.sampled_from(QUEUES)),
    st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["a", "b", "x-c", "CC", "BCC"]),
            st.one_of(
                HEADER_VALUES, st.lists(st.one_of(KEYS, st.sampled_from(QUEUES)), max_size=2)
            ),
            max_size=4,
        ),
    ),
)


@settings(max_examples=300)
@given(ALTERNATES, st.lists(bindings(), max_size=25), st.lists(MESSAGES, min_size=1, max_size=8))
def test_route_equals_reference(
    ae: dict[str, str], binds: list[Binding], messages: list[tuple[str, str, Any]]
) -> None:
    projection = Projection.replay([*declarations(ae), *map(BindingAdded, binds)])
    for exchange, routing_key, headers in messages:
        expected = reference_route(ae, binds, exchange, routing_key, headers)
        assert route(projection, exchange, routing_key, headers) == expected


@given(ALTERNATES, OPS, st.lists(MESSAGES, max_size=3))
def test_replay_equals_live_application_with_reads_in_between(
    ae: dict[str, str], ops: list[Event], messages: list[tuple[str, str, Any]]
) -> None:
    events = [*declarations(ae), *[e for op in ops for e in redeclare(op, ae)]]
    live = Projection()
    for event in events:
        live.apply(event)
        for exchange, routing_key, headers in messages:
            route(live, exchange, routing_key, headers)  # reads must not change the state
    assert live == Projection.replay(events)


CACHE_BOUNDS = st.sampled_from([(RouteCache.max_entries, RouteCache.max_weight), (2, 4)])
# Few keys, so that a route is likely to be asked again after a binding change that matters.
FEW_KEYS = st.sampled_from(["", "a", "b", "a.b", "#", "a.*", "*.b", "#.b", "a.#", "q0"])
# Binding changes mostly at the exchanges that cache (and where E2E bindings lead).
CACHED = ["t", "t2", "r", "r2"]
OP = st.one_of(
    *[bindings(FEW_KEYS, CACHED).map(BindingAdded)] * 3,
    bindings(FEW_KEYS, CACHED).map(BindingRemoved),
    bindings(FEW_KEYS).map(BindingAdded),
    st.integers(0, 1000),  # unbind the n-th live binding (a random unbind rarely exists)
    st.sampled_from(QUEUES).map(QueueDeleted),
    st.sampled_from(QUEUES).map(lambda q: QueueDeclared(Queue(q))),
    st.sampled_from(sorted(EXCHANGE_TYPES)).map(ExchangeDeleted),
)
MESSAGE = st.tuples(
    st.sampled_from(["", *EXCHANGE_TYPES, *CACHED]),
    FEW_KEYS,
    st.one_of(st.none(), st.fixed_dictionaries({"CC": st.lists(FEW_KEYS, max_size=2)})),
)


@settings(max_examples=300, deadline=None)  # each example replays the topology many times
@given(ALTERNATES, CACHE_BOUNDS, st.lists(st.tuples(OP, MESSAGE), min_size=10, max_size=30))
def test_cached_routes_equal_uncached_routes(
    ae: dict[str, str], bounds: tuple[int, int], steps: list[tuple[Event | int, Any]]
) -> None:
    """Random bind/unbind/delete sequences, with every message seen so far routed again
    after each change: the live projection, whose caches have seen every earlier route,
    answers as a projection replayed from scratch (empty caches). The (2, 4) bounds also
    exercise eviction."""
    saved = RouteCache.max_entries, RouteCache.max_weight
    RouteCache.max_entries, RouteCache.max_weight = bounds
    try:
        events = declarations(ae)
        live = Projection.replay(events)
        messages: list[tuple[str, str, Any]] = []
        for op, message in steps:
            if isinstance(op, int):
                alive = list(live.bindings())
                if not alive:
                    continue
                op = BindingRemoved(alive[op % len(alive)])
            for event in redeclare(op, ae):
                live.apply(event)
                events.append(event)
            messages.append(message)
            fresh = Projection.replay(events)
            for exchange, routing_key, headers in messages:
                expected = route(fresh, exchange, routing_key, headers)
                assert route(live, exchange, routing_key, headers) == expected
            # And the invariant itself: every cached entry is what a walk gives now.
            for index in live.indexes.values():
                for side in (index.queues, index.exchanges):
                    if isinstance(side, TopicIndex | RTopicIndex):
                        for key, names in side.cache.items():
                            assert names == side.match(key)
    finally:
        RouteCache.max_entries, RouteCache.max_weight = saved


def reference_route(
    ae: dict[str, str], binds: list[Binding], exchange: str, routing_key: str, headers: Any
) -> set[str]:
    """rabbit_exchange:route/3 over a plain list of bindings, no indexes."""
    if exchange != "" and exchange not in EXCHANGE_TYPES:
        return set()
    keys = [routing_key]
    for name in ("CC", "BCC"):
        value = (headers or {}).get(name)
        if isinstance(value, list):
            keys += [
                v.decode() if isinstance(v, bytes) else v
                for v in value
                if isinstance(v, str | bytes)
            ]
    found: set[str] = set()
    seen, work = {exchange}, [exchange]
    while work:
        x = work.pop()
        if x == "":
            found |= {k for k in keys if k in QUEUES}
            continue
        dests = {
            (b.kind, b.destination)
            for b in binds
            if b.source == x and reference_match(b, keys, headers)
        }
        if not dests and x in ae:
            dests = {(DestKind.EXCHANGE, ae[x])}
        for kind, name in dests:
            if kind is DestKind.QUEUE:
                found.add(name)
            elif name not in seen:
                seen.add(name)
                if name in EXCHANGE_TYPES:
                    work.append(name)
    return found


def reference_match(b: Binding, keys: list[str], headers: Any) -> bool:
    type_ = EXCHANGE_TYPES[b.source]
    if type_ is ExchangeType.FANOUT:
        return True
    if type_ is ExchangeType.DIRECT:
        return b.routing_key in keys
    if type_ is ExchangeType.TOPIC:
        return any(topic_matches(words_of(b.routing_key), words_of(k)) for k in keys)
    if type_ is ExchangeType.RTOPIC:  # the routing key is the pattern
        return any(topic_matches(words_of(k), words_of(b.routing_key)) for k in keys)
    message = headers or {}
    mode = b.arguments.get("x-match") or "all"
    with_x = mode.endswith("-with-x")
    results = [
        key in message and (value is None or erlang_term(value) == erlang_term(message[key]))
        for key, value in b.arguments.items()
        if key != "x-match" and (with_x or not key.startswith("x-"))
    ]
    return any(results) if mode.startswith("any") else all(results)


def erlang_term(value: Any) -> Any:
    """What RabbitMQ compares: binaries for both string types, atoms for booleans."""
    if isinstance(value, str):
        return ("binary", value.encode())
    if isinstance(value, bytes):
        return ("binary", value)
    if isinstance(value, list):
        return ("list", tuple(erlang_term(v) for v in value))
    return (type(value).__name__, value)
