"""Route functions and the projection's event semantics, one rule per test."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from leveret.exchanges.model import (
    EMPTY,
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
    freeze,
)
from leveret.exchanges.patterns import TopicIndex
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route, sender_selected_keys
from leveret.exchanges.types import TYPES, validate_binding
from leveret.exchanges.types.headers import amqp_equal

DIRECT, FANOUT, TOPIC, HEADERS = (
    ExchangeType.DIRECT,
    ExchangeType.FANOUT,
    ExchangeType.TOPIC,
    ExchangeType.HEADERS,
)


def exchange(name: str, type_: ExchangeType = DIRECT, ae: str | None = None) -> ExchangeDeclared:
    args = {} if ae is None else {"alternate-exchange": ae}
    return ExchangeDeclared(Exchange(name, type_, arguments=args))


def queue(name: str) -> QueueDeclared:
    return QueueDeclared(Queue(name))


def to_queue(source: str, dest: str, key: str = "", args: dict[str, Any] | None = None) -> Binding:
    return Binding(source, dest, DestKind.QUEUE, key, args or {})


def to_exchange(
    source: str, dest: str, key: str = "", args: dict[str, Any] | None = None
) -> Binding:
    return Binding(source, dest, DestKind.EXCHANGE, key, args or {})


def build(*events: Event | Binding) -> Projection:
    """A projection with the default exchange, from events (bare bindings mean 'added')."""
    p = Projection()
    p.apply(exchange(""))
    for event in events:
        p.apply(BindingAdded(event) if isinstance(event, Binding) else event)
    return p


def queues(*names: str) -> list[Event]:
    return [queue(name) for name in names]


# -- direct ---------------------------------------------------------------------------


def test_direct_routes_by_exact_key_and_shares_results() -> None:
    p = build(
        exchange("x"), *queues("q1", "q2"), to_queue("x", "q1", "k"), to_queue("x", "q2", "k")
    )
    first = route(p, "x", "k")
    assert first == {"q1", "q2"}
    assert route(p, "x", "k") is first  # precomputed, no allocation per publish
    assert route(p, "x", "K") is EMPTY
    assert route(p, "x", "k.") is EMPTY


def test_direct_same_queue_twice_with_other_arguments_is_refcounted() -> None:
    a, b = to_queue("x", "q", "k", {"v": 1}), to_queue("x", "q", "k", {"v": 2})
    p = build(exchange("x"), queue("q"), a, b)
    assert route(p, "x", "k") == {"q"}
    p.apply(BindingRemoved(a))
    assert route(p, "x", "k") == {"q"}
    p.apply(BindingRemoved(b))
    assert route(p, "x", "k") is EMPTY


def test_fanout_ignores_routing_key() -> None:
    p = build(
        exchange("f", FANOUT), *queues("q1", "q2"), to_queue("f", "q1", "a"), to_queue("f", "q2")
    )
    assert route(p, "f", "anything") == {"q1", "q2"}
    assert route(build(exchange("f", FANOUT)), "f", "x") == set()


def test_topic_routes_through_the_trie() -> None:
    p = build(
        exchange("t", TOPIC),
        *queues("q1", "q2"),
        to_queue("t", "q1", "a.*"),
        to_queue("t", "q2", "#"),
    )
    assert route(p, "t", "a.b") == {"q1", "q2"}
    assert route(p, "t", "b") == {"q2"}


def test_every_type_has_a_module() -> None:
    assert set(TYPES) == set(ExchangeType)
    # x-delayed-message wraps its x-delayed-type and keeps messages back; no other type does
    wrappers = {kind for kind, module in TYPES.items() if module.wraps is not None}
    keepers = {kind for kind, module in TYPES.items() if module.keeps is not None}
    assert wrappers == keepers == {ExchangeType.DELAYED}


def test_missing_exchange_routes_nowhere() -> None:
    assert route(build(), "nope", "k") is EMPTY


# -- default exchange -------------------------------------------------------------------


def test_default_exchange_routes_to_the_queue_named_by_the_key() -> None:
    p = build(queue("q"))
    assert route(p, "", "q") == {"q"}
    assert route(p, "", "q") is route(p, "", "q")
    assert route(p, "", "missing") is EMPTY
    p.apply(QueueDeleted("q"))
    assert route(p, "", "q") is EMPTY


def test_default_exchange_cannot_be_bound() -> None:
    p = build(exchange("x"), queue("q"), to_queue("", "q", "other"), to_exchange("x", "", "k"))
    assert list(p.bindings()) == []
    assert route(p, "", "other") is EMPTY


def test_default_exchange_with_cc() -> None:
    p = build(*queues("q1", "q2"))
    assert route(p, "", "q1", {"CC": ["q2", "missing"], "BCC": [b"q1"]}) == {"q1", "q2"}


# -- exchange-to-exchange, alternate exchanges -------------------------------------------


def test_e2e_cycle_terminates_and_deduplicates() -> None:
    p = build(
        exchange("x1", FANOUT),
        exchange("x2", FANOUT),
        exchange("x3", TOPIC),
        *queues("q", "r"),
        to_exchange("x1", "x2"),
        to_exchange("x2", "x1"),  # cycle
        to_exchange("x2", "x3"),
        to_exchange("x3", "x1", "#"),  # another cycle
        to_exchange("x1", "x1"),  # self loop
        to_queue("x1", "q"),
        to_queue("x2", "q"),
        to_queue("x3", "q", "a.#"),
        to_queue("x3", "r", "b"),
    )
    assert route(p, "x1", "a.b") == {"q"}
    assert route(p, "x2", "b") == {"q", "r"}


def test_alternate_exchange_only_when_nothing_matched() -> None:
    p = build(
        exchange("x", ae="ae"),
        exchange("ae", FANOUT),
        *queues("q", "unrouted"),
        to_queue("x", "q", "k"),
        to_queue("ae", "unrouted"),
    )
    assert route(p, "x", "k") == {"q"}
    assert route(p, "x", "other") == {"unrouted"}


def test_alternate_exchange_of_an_exchange_reached_through_e2e() -> None:
    p = build(
        exchange("x1", FANOUT, ae="ae1"),
        exchange("x2", DIRECT, ae="ae2"),
        exchange("ae1", FANOUT),
        exchange("ae2", FANOUT),
        *queues("q1", "from-ae1", "from-ae2"),
        to_exchange("x1", "x2"),
        to_queue("x1", "q1"),
        to_queue("ae1", "from-ae1"),
        to_queue("ae2", "from-ae2"),
    )
    # x2 routed nothing, so its own AE is used; x1 routed (to q1 and x2), so ae1 is not.
    assert route(p, "x1", "k") == {"q1", "from-ae2"}


def test_e2e_destination_counts_as_routed_for_the_source() -> None:
    """process_alternate/2 looks at the source's own destinations, exchanges included."""
    p = build(
        exchange("x1", FANOUT, ae="ae1"),
        exchange("x2", DIRECT),
        exchange("ae1", FANOUT),
        queue("from-ae1"),
        to_exchange("x1", "x2"),
        to_queue("ae1", "from-ae1"),
    )
    assert route(p, "x1", "k") == set()


def test_alternate_exchange_chain_and_cycle() -> None:
    p = build(
        exchange("a", ae="b"),
        exchange("b", ae="c"),
        exchange("c", ae="a"),
        queue("q"),
        to_queue("c", "q", "k"),
    )
    assert route(p, "a", "k") == {"q"}
    assert route(p, "a", "nope") == set()


def test_missing_alternate_exchange_is_ignored() -> None:
    p = build(exchange("x", ae="missing"), queue("q"), to_queue("x", "q", "k"))
    assert route(p, "x", "nope") == set()
    assert route(p, "x", "k") == {"q"}


def test_alternate_exchange_given_as_bytes() -> None:
    p = build(
        ExchangeDeclared(Exchange("x", DIRECT, arguments={"alternate-exchange": b"ae"})),
        exchange("ae", FANOUT),
        queue("q"),
        to_queue("ae", "q"),
    )
    assert route(p, "x", "k") == {"q"}


# -- CC and BCC ---------------------------------------------------------------------------


def cc_topology() -> Projection:
    return build(
        exchange("x"),
        exchange("x0"),
        exchange("t", TOPIC),
        *queues("q1", "q2", "q3"),
        to_queue("x", "q1", "k1"),
        to_queue("x", "q2", "k2"),
        to_queue("x", "q3", "k3"),
        to_exchange("x0", "x", "k1"),
        to_queue("t", "q3", "k3.#"),
    )


def test_cc_and_bcc_add_routing_keys() -> None:
    p = cc_topology()
    assert route(p, "x", "k1", {"CC": ["k2"], "BCC": [b"k3"]}) == {"q1", "q2", "q3"}
    assert route(p, "x", "none", {"CC": ["k2", 7, bytearray(b"k3")]}) == {"q2"}
    assert route(p, "t", "zzz", {"BCC": ["k3.x"]}) == {"q3"}


def test_cc_that_is_not_an_array_is_ignored() -> None:
    assert route(cc_topology(), "x", "none", {"CC": "k2"}) == set()


def test_cc_applies_to_the_whole_route() -> None:
    # x0 only forwards k1, but x then sees k1 and the CC key k2.
    assert route(cc_topology(), "x0", "k1", {"CC": ["k2"]}) == {"q1", "q2"}
    assert route(cc_topology(), "x0", "k2", {"CC": ["k1"]}) == {"q1", "q2"}


def test_sender_selected_keys_deduplicate() -> None:
    assert sender_selected_keys("a", {"CC": ["b", "a"], "BCC": ["b", b"c"]}) == ("a", "b", "c")
    assert sender_selected_keys("a", None) == ("a",)


# -- headers -------------------------------------------------------------------------------

HEADER_CASES: list[tuple[dict[str, Any], dict[str, Any] | None, bool]] = [
    ({"a": 1}, {"a": 1}, True),
    # headers_match/5 compares top-level values with Erlang's == (types ignored): 1 == 1.0.
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 1.0}, {"a": 1}, True),
    ({"a": 1}, {"a": 1.5}, False),
    ({"a": 1.5}, {"a": 1.5}, True),
    ({"a": True}, {"a": 1}, False),  # bool is not an integer
    ({"a": 1}, {"a": True}, False),
    ({"a": 2**40}, {"a": 2**40}, True),  # integer widths do not matter
    ({"a": "x"}, {"a": b"x"}, True),  # both longstr
    ({"a": b"x"}, {"a": bytearray(b"x")}, True),
    ({"a": "é"}, {"a": "é".encode()}, True),
    ({"a": "x"}, {"a": 1}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": None}, {"a": "anything"}, True),  # void: header present
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {}, False),
    ({"a": 1}, {"a": None}, False),
    ({"a": 1}, None, False),
    ({"a": 1, "b": 2}, {"a": 1}, False),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 2, "b": 1}, False),
    ({"x-match": "any", "a": None}, {"a": 0}, True),
    ({"x-match": b"any", "a": 1}, {"a": 1, "b": 0}, True),
    ({"x-match": "all"}, {}, True),  # nothing to check: all matches everything
    ({"x-match": "all", "x-foo": "bar"}, None, True),
    ({}, {"z": 1}, True),
    ({"x-match": "any"}, {"a": 1}, False),  # ... and any matches nothing
    ({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"}, False),
    ({"x-foo": "bar", "a": 1}, {"a": 1}, True),  # x- arguments skipped
    ({"a": 1}, {"a": 1, "x-y": 2}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {}, False),
    ({"x-match": "all-with-x", "x-foo": None, "a": 1}, {"x-foo": 1, "a": 1}, True),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x", "x-foo": "bar"}, {"x-foo": "baz"}, False),
    ({"x-match": "unknown", "a": 1, "b": 1}, {"a": 1}, False),  # legacy fallback to all
    ({"a": [1, "x"]}, {"a": [1, b"x"]}, True),
    ({"a": [1, "x"]}, {"a": [1.0, "x"]}, False),
    ({"a": {"k": 1}}, {"a": {"k": 1}}, True),
    ({"a": {"k": 1}}, {"a": {"k": 1.0}}, False),
    ({"a": Decimal("1.0")}, {"a": Decimal("1.0")}, True),
    ({"a": Decimal("1.0")}, {"a": Decimal("1.00")}, False),  # {decimal, Scale, Value}
]


@pytest.mark.parametrize(("args", "message", "matches"), HEADER_CASES)
def test_headers_matching(
    args: dict[str, Any], message: dict[str, Any] | None, matches: bool
) -> None:
    p = build(exchange("h", HEADERS), queue("q"), to_queue("h", "q", "ignored", args))
    assert route(p, "h", "whatever", message) == ({"q"} if matches else set())


def test_headers_several_bindings_and_e2e() -> None:
    p = build(
        exchange("h", HEADERS),
        exchange("f", FANOUT),
        *queues("q1", "q2", "q3"),
        to_queue("h", "q1", "", {"a": 1}),
        to_queue("h", "q1", "", {"b": 1}),
        to_queue("h", "q2", "", {"x-match": "any", "a": 1, "b": 2}),
        to_exchange("h", "f", "", {"c": None}),
        to_queue("f", "q3"),
    )
    assert route(p, "h", "", {"a": 1, "b": 1}) == {"q1", "q2"}
    assert route(p, "h", "", {"c": "x"}) == {"q3"}
    assert route(p, "h", "", None) == set()


def test_amqp_equal_is_typed() -> None:
    assert amqp_equal("a", b"a") and amqp_equal(b"a", "a")
    assert not amqp_equal(0, False) and not amqp_equal(False, 0)
    assert not amqp_equal(1, 1.0)
    assert amqp_equal((1, "a"), [1, b"a"])


def _nested(levels: int, leaf: Any) -> Any:
    value = leaf
    for level in range(levels):
        value = {"k": value, "n": level} if level % 2 else [level, value]
    return value


def test_deep_values_compare_and_freeze_without_recursion() -> None:
    """Tables nested 20,000 deep (the wire allows about 18,000 in a 128 KiB frame) are
    compared (headers matching) and frozen into binding identities without RecursionError."""
    a, b, c = _nested(20_000, "x"), _nested(20_000, "x"), _nested(20_000, "y")
    assert amqp_equal(a, _nested(20_000, b"x")) and not amqp_equal(a, c)
    assert freeze(a) != freeze(_nested(20_000, b"x"))  # the type is part of the identity
    assert freeze(a) == freeze(b) and hash(freeze(a)) == hash(freeze(b))
    assert freeze(a) != freeze(c)
    # Keys are sorted at every level, as for shallow values.
    assert freeze(_nested(300, {"p": 1, "q": 2})) == freeze(_nested(300, {"q": 2, "p": 1}))
    # A 1 and a 1.0 at the bottom stay different identities.
    assert freeze(_nested(300, 1)) != freeze(_nested(300, 1.0))
    # Bindings with deep arguments are one binding when the arguments are equal.
    projection = Projection()
    projection.apply(ExchangeDeclared(Exchange("h", ExchangeType.HEADERS)))
    projection.apply(QueueDeclared(Queue("q")))
    for value in (a, b):
        projection.apply(BindingAdded(Binding("h", "q", DestKind.QUEUE, "", {"d": value})))
    assert len(projection.bindings_from("h")) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "foo",
            'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x',
        ),
        (
            b"foo",
            'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x',
        ),
        ("", "Invalid x-match field value <<>>; expected all, any, all-with-x, or any-with-x"),
        (
            "ALL",
            'Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x',
        ),
        (1, "Invalid x-match field type byte (value 1); expected longstr"),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
        ("all", None),
        ("any", None),
        ("all-with-x", None),
        (b"any-with-x", None),
    ],
)
def test_validate_binding(value: Any, expected: str | None) -> None:
    headers = Exchange("h", HEADERS)
    assert validate_binding(headers, {"x-match": value}) == expected


def test_validate_binding_other_cases() -> None:
    assert validate_binding(Exchange("h", HEADERS), {}) is None
    assert validate_binding(Exchange("d", DIRECT), {"x-match": "foo"}) is None


# -- projection semantics -------------------------------------------------------------------


def test_redeclaring_keeps_the_first() -> None:
    p = build(exchange("x"), ExchangeDeclared(Exchange("x", FANOUT)), queue("q"))
    p.apply(QueueDeclared(Queue("q", durable=True)))
    assert p.exchanges["x"].type is DIRECT
    assert p.queues["q"].durable is False


def test_binding_twice_is_one_binding_and_removing_a_missing_one_is_a_no_op() -> None:
    b = to_queue("x", "q", "k", {"a": 1})
    p = build(exchange("x"), queue("q"), b, b)
    assert list(p.bindings()) == [b]
    p.apply(BindingRemoved(to_queue("x", "q", "k", {"a": 1.0})))  # other arguments
    assert p.has_binding(b)
    p.apply(BindingRemoved(b))
    p.apply(BindingRemoved(b))
    assert not p.has_binding(b)
    assert not p.has_bindings_from("x")


def test_binding_with_missing_ends_is_ignored() -> None:
    p = build(
        exchange("x"),
        queue("q"),
        to_queue("x", "nope"),
        to_queue("nope", "q"),
        to_exchange("x", "nope"),
    )
    assert list(p.bindings()) == []


def test_deleting_an_exchange_drops_bindings_from_and_to_it() -> None:
    p = build(
        exchange("x"),
        exchange("y", FANOUT),
        queue("q"),
        to_queue("x", "q", "k"),
        to_exchange("y", "x"),
        to_exchange("x", "y", "k"),
        to_exchange("x", "x", "self"),
    )
    assert p.has_bindings_from("y")
    assert {b.source for b in p.bindings_to(DestKind.EXCHANGE, "x")} == {"x", "y"}
    p.apply(ExchangeDeleted("x"))
    assert list(p.bindings()) == []
    assert not p.has_bindings_from("y")
    assert p.indexes["y"].e2e == 0
    assert route(p, "y", "k") == set()
    assert p == build(exchange("y", FANOUT), queue("q"))


def test_deleting_a_queue_drops_bindings_to_it() -> None:
    p = build(exchange("x"), exchange("t", TOPIC), *queues("q", "r"))
    for key in ("a", "b.#", "*.c"):
        p.apply(BindingAdded(to_queue("x", "q", key)))
        p.apply(BindingAdded(to_queue("t", "q", key)))
    p.apply(BindingAdded(to_queue("t", "r", "b.#")))
    p.apply(QueueDeleted("q"))
    assert p.bindings_to(DestKind.QUEUE, "q") == []
    assert [b.destination for b in p.bindings_from("t")] == ["r"]
    assert route(p, "t", "b.c") == {"r"}
    assert p == build(exchange("x"), exchange("t", TOPIC), queue("r"), to_queue("t", "r", "b.#"))


def test_trie_pruning_leaves_no_nodes() -> None:
    keys = ["a.b.c", "a.*.c", "#", "a.#.b", "", "a..b", "#.#", "x.y.z.w", "*"]
    bindings = [to_queue("t", f"q{i % 3}", key) for i, key in enumerate(keys)]
    p = build(exchange("t", TOPIC), *queues("q0", "q1", "q2"), *bindings)
    index = p.indexes["t"].queues
    assert isinstance(index, TopicIndex)
    assert index.node_count() > 1
    for b in bindings:
        p.apply(BindingRemoved(b))
    assert index.node_count() == 1
    assert len(index) == 0
    assert p == build(exchange("t", TOPIC), *queues("q0", "q1", "q2"))
