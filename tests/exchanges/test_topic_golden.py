"""RabbitMQ's topic conformance table, and the edge cases around empty words.

The bindings and both expectation tables are copied from rabbitmq/rabbitmq-server
``deps/rabbit/test/routing_SUITE.erl`` (``topic1/1``); research/peers.md section 2.7 has
the first table. They go through :func:`leveret.exchanges.routing.route`, so the projection, the
trie and the route function are all on the path.
"""

from __future__ import annotations

import time

import pytest

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route
from leveret.exchanges.trie import TopicTrie

X = "topic_matching-exchange"

# (binding key, queue, arguments), in the suite's order: lists:nth/2 below is 1-based on it.
BINDINGS: list[tuple[str, str, dict[str, str]]] = [
    ("a.b.c", "t1", {}),
    ("a.*.c", "t2", {}),
    ("a.#.b", "t3", {}),
    ("a.b.b.c", "t4", {}),
    ("#", "t5", {}),
    ("#.#", "t6", {}),
    ("#.b", "t7", {}),
    ("*.*", "t8", {}),
    ("a.*", "t9", {}),
    ("*.b.c", "t10", {}),
    ("a.#", "t11", {}),
    ("a.#.#", "t12", {}),
    ("b.b.c", "t13", {}),
    ("a.b.b", "t14", {}),
    ("a.b", "t15", {}),
    ("b.c", "t16", {}),
    ("", "t17", {}),
    ("*.*.*", "t18", {}),
    ("vodka.martini", "t19", {}),
    ("a.b.c", "t20", {}),
    ("*.#", "t21", {}),
    ("#.*.#", "t22", {}),
    ("*.#.#", "t23", {}),
    ("*", "t25", {}),
    ("#.b.#", "t26", {}),
    ("args-test", "t27", {"foo": "bar"}),
    ("args-test", "t27", {"foo": "baz"}),  # note aliasing: same key and queue, other args
]

BEFORE_REMOVAL = {
    "a.b.c": "t1 t2 t5 t6 t10 t11 t12 t18 t20 t21 t22 t23 t26",
    "a.b": "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t23 t26",
    "a.b.b": "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t23 t26",
    "": "t5 t6 t17",
    "b.c.c": "t5 t6 t18 t21 t22 t23 t26",
    "a.a.a.a.a": "t5 t6 t11 t12 t21 t22 t23",
    "vodka.gin": "t5 t6 t8 t21 t22 t23",
    "vodka.martini": "t5 t6 t8 t19 t21 t22 t23",
    "b.b.c": "t5 t6 t10 t13 t18 t21 t22 t23 t26",
    "nothing.here.at.all": "t5 t6 t21 t22 t23",
    "oneword": "t5 t6 t21 t22 t23 t25",
    "args-test": "t5 t6 t21 t22 t23 t25 t27",
}

# RemovedBindings = [lists:nth(N, Bindings) || N <- [1, 5, 11, 19, 21, 27]]. The 27th is
# the second args-test binding, so t27 keeps its first binding and still matches.
REMOVED = [1, 5, 11, 19, 21, 27]

AFTER_REMOVAL = {
    "a.b.c": "t2 t6 t10 t12 t18 t20 t22 t23 t26",
    "a.b": "t3 t6 t7 t8 t9 t12 t15 t22 t23 t26",
    "a.b.b": "t3 t6 t7 t12 t14 t18 t22 t23 t26",
    "": "t6 t17",
    "b.c.c": "t6 t18 t22 t23 t26",
    "a.a.a.a.a": "t6 t12 t22 t23",
    "vodka.gin": "t6 t8 t22 t23",
    "vodka.martini": "t6 t8 t22 t23",
    "b.b.c": "t6 t10 t13 t18 t22 t23 t26",
    "nothing.here.at.all": "t6 t22 t23",
    "oneword": "t6 t22 t23 t25",
    "args-test": "t6 t22 t23 t25 t27",
}


def binding(key: str, queue: str, args: dict[str, str]) -> Binding:
    return Binding(X, queue, DestKind.QUEUE, key, args)


@pytest.fixture
def projection() -> Projection:
    p = Projection()
    p.apply(ExchangeDeclared(Exchange(X, ExchangeType.TOPIC)))
    for key, queue, args in BINDINGS:
        p.apply(QueueDeclared(Queue(queue)))
        p.apply(BindingAdded(binding(key, queue, args)))
    return p


@pytest.mark.parametrize(("routing_key", "expected"), BEFORE_REMOVAL.items())
def test_topic1_before_removal(projection: Projection, routing_key: str, expected: str) -> None:
    assert route(projection, X, routing_key) == set(expected.split())


@pytest.mark.parametrize(("routing_key", "expected"), AFTER_REMOVAL.items())
def test_topic1_after_removal(projection: Projection, routing_key: str, expected: str) -> None:
    for n in REMOVED:
        projection.apply(BindingRemoved(binding(*BINDINGS[n - 1])))
    assert route(projection, X, routing_key) == set(expected.split())


def test_topic1_after_exchange_deletion(projection: Projection) -> None:
    projection.apply(ExchangeDeleted(X))
    for routing_key in ("a.b.c", "b.b.c", ""):
        assert route(projection, X, routing_key) == set()
    assert projection.bindings_from(X) == []


def trie_of(*binding_keys: str) -> TopicTrie[str]:
    trie: TopicTrie[str] = TopicTrie()
    for key in binding_keys:
        trie.add(key, key)
    return trie


@pytest.mark.parametrize(
    ("routing_key", "binding_key", "matches"),
    [
        ("a..b", "a.*.b", True),  # '*' matches the empty word
        ("a..b", "a.b", False),
        ("a..b", "a.#.b", True),
        ("a..b", "a..b", True),
        (".", "*.*", True),  # '.' is two empty words
        (".", "*", False),
        (".", "#", True),
        (".", "", False),
        ("a.", "a", False),  # 'a.' is [a, ""]
        ("a.", "a.*", True),
        ("a.", "a.#", True),
        ("a", "a.#", True),  # '#' matches zero words
        ("a", "a.*", False),
        ("", "*", False),  # '*' never matches the empty key
        ("", "#", True),
        ("", "#.#", True),
        ("", "", True),
        ("", "*.#", False),
        ("", "#.*.#", False),
        ("a", "", False),  # binding "" matches only ""
        ("ab", "a*", False),  # wildcards only as whole words
        ("a*", "a*", True),
        ("a.b", "a#", False),
        ("*", "*", True),
        ("#", "a", False),
        ("x.y.z", "#.z", True),
        ("x.y.z", "#.y", False),
    ],
)
def test_edge_cases(routing_key: str, binding_key: str, matches: bool) -> None:
    assert trie_of(binding_key).match(routing_key) == ({binding_key} if matches else set())


def test_exchanges_are_isolated_for_empty_keys() -> None:
    """RabbitMQ 4.3.0 bug #16425: '' bindings of one exchange leaked into another."""
    p = Projection()
    for name in ("x1", "x2"):
        p.apply(ExchangeDeclared(Exchange(name, ExchangeType.TOPIC)))
        p.apply(QueueDeclared(Queue(f"q-{name}")))
    p.apply(BindingAdded(Binding("x2", "q-x2", DestKind.QUEUE, "")))
    assert route(p, "x1", "") == set()
    assert route(p, "x2", "") == {"q-x2"}


def test_pathological_binding_is_polynomial() -> None:
    words = [f"w{i}" for i in range(40)]
    trie = trie_of("#.#.#.#.#.z", "#.#.#.#.#.nope", "#.w3.#.w7.#.#")
    started = time.perf_counter()
    hit = trie.match(".".join([*words, "z"]))
    miss = trie.match(".".join(words))
    elapsed = time.perf_counter() - started
    assert hit == {"#.#.#.#.#.z", "#.w3.#.w7.#.#"}
    assert miss == {"#.w3.#.w7.#.#"}
    assert elapsed < 1.0
