"""The pure rules of the delayed-message exchange (exchanges/delayed.py), its type module
wrapping its x-delayed-type (exchanges/types/delayed.py), and how route_kept() reports the
exchanges that keep a message back. The plugin's behaviour is cited in
exchanges/delayed.py; the broker side is tested in tests/integration/test_delayed_exchange.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from leveret.exchanges.delayed import (
    MAX_DELAY,
    DelayCrashError,
    declare_problem,
    delay_of,
    underlying_type,
)
from leveret.exchanges.model import (
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    ExchangeTypeCrashError,
)
from leveret.exchanges.routing import route, route_kept
from leveret.exchanges.types import TYPES, validate_binding, validate_exchange
from leveret.exchanges.types.delayed import DelayedIndex
from tests.exchanges.test_routing import build, queues, to_exchange, to_queue

DELAYED = ExchangeType.DELAYED


def delayed(name: str, kind: str = "direct", ae: str | None = None) -> ExchangeDeclared:
    arguments: dict[str, Any] = {"x-delayed-type": kind}
    if ae is not None:
        arguments["alternate-exchange"] = ae
    return ExchangeDeclared(Exchange(name, DELAYED, arguments=arguments))


@pytest.mark.parametrize(
    ("value", "delay"),
    [
        (None, 0),
        (250, 250),
        (MAX_DELAY, MAX_DELAY),
        (MAX_DELAY + 1, 0),
        (0, 0),
        (-250, 0),
        ("250", 250),
        ("+250", 250),
        (b"250", 250),  # a longstr that pamqp left as bytes
        ("-250", 0),
        (250.9, 250),
        (True, 0),
        (bytearray(b"250"), 0),  # a byte array is no string type
        (datetime(2026, 1, 1, tzinfo=UTC), 0),
        ([250], 0),
        ({"ms": 250}, 0),
    ],
)
def test_delay_of(value: Any, delay: int) -> None:
    headers = {} if value is None else {"x-delay": value}
    assert delay_of(headers) == delay


def test_no_headers_no_delay() -> None:
    assert delay_of(None) == 0


@pytest.mark.parametrize(
    "value", ["", " 5", "5 ", "5.0", "1e3", "٣", "+", Decimal("1.5"), float("inf")]
)
def test_values_the_plugin_crashes_on(value: Any) -> None:
    with pytest.raises(DelayCrashError):
        delay_of({"x-delay": value})


def test_declare_rules() -> None:
    assert declare_problem({"x-delayed-type": "topic"}) is None
    assert declare_problem({"x-delayed-type": b"topic"}) is None
    assert "must be an existing exchange type" in str(declare_problem({}))
    assert "can't be used" in str(declare_problem({"x-delayed-type": "x-delayed-message"}))
    assert underlying_type({"x-delayed-type": "topic"}) == ExchangeType.TOPIC  # the name given
    assert underlying_type({"x-delayed-type": b"nope"}) == "nope"  # the registry judges it
    assert underlying_type({"x-delayed-type": 1}) is None


def test_a_delayed_message_is_held_and_routes_nowhere_now() -> None:
    p = build(delayed("d"), *queues("q"), to_queue("d", "q", "k"))
    assert route_kept(p, "d", "k", {"x-delay": 100}) == (set(), ("d",))
    assert p.keeping == {"d"}


def test_without_a_delay_it_routes_as_its_type() -> None:
    p = build(delayed("d", "topic"), *queues("q"), to_queue("d", "q", "a.#"))
    assert route_kept(p, "d", "a.b", None) == ({"q"}, ())
    # released: the negated header routes at once
    assert route_kept(p, "d", "a.b", {"x-delay": -100}) == ({"q"}, ())


def test_the_type_wraps_its_x_delayed_type() -> None:
    # Indexes, routing and binding checks are the wrapped type's; keeping is its own.
    module = TYPES[DELAYED]
    assert module.wraps is not None and module.keeps is not None
    assert (
        module.wraps({"x-delayed-type": "x-consistent-hash"}) is TYPES[ExchangeType.CONSISTENT_HASH]
    )
    assert module.wraps({"x-delayed-type": "x-delayed-message"}) is None
    assert module.wraps({"x-delayed-type": "nope"}) is None
    queues_index, _ = module.indexes({"x-delayed-type": "fanout"})
    assert isinstance(queues_index, DelayedIndex)
    assert queues_index.route is TYPES[ExchangeType.FANOUT].route
    hashed = Exchange("h", DELAYED, arguments={"x-delayed-type": "x-consistent-hash"})
    weight = validate_binding(Exchange("c", ExchangeType.CONSISTENT_HASH), {}, "one")
    assert weight is not None and validate_binding(hashed, {}, "one") == weight
    assert validate_binding(hashed, {}, "1") is None
    headers = Exchange("h", DELAYED, arguments={"x-delayed-type": "headers"})
    assert "Invalid x-match" in str(validate_binding(headers, {"x-match": "nope"}))
    assert keeps_nothing_without_headers(module.keeps)


def keeps_nothing_without_headers(keeps: Any) -> bool:
    return not keeps(None) and not keeps({}) and keeps({"x-delay": 1})


def test_declare_checks_through_the_registry() -> None:
    assert validate_exchange(DELAYED, {"x-delayed-type": "topic"}) is None
    assert validate_exchange(DELAYED, {"x-delayed-type": "nope"}) == (
        "unknown exchange type 'nope'"
    )
    assert "can't be used" in str(
        validate_exchange(DELAYED, {"x-delayed-type": "x-delayed-message"})
    )
    assert (
        validate_exchange(DELAYED, {"x-delayed-type": "x-consistent-hash", "hash-property": "nope"})
        == "Unsupported property: nope"
    )


def test_the_alternate_exchange_routes_a_held_message_now() -> None:
    p = build(
        delayed("d", ae="ae"),
        build_fanout("ae"),
        *queues("q", "caught"),
        to_queue("d", "q", "k"),
        to_queue("ae", "caught"),
    )
    assert route_kept(p, "d", "k", {"x-delay": 5}) == ({"caught"}, ("d",))
    assert route(p, "d", "k", {"x-delay": 5}) == {"caught"}


def test_held_downstream_of_an_exchange_binding() -> None:
    p = build(
        build_fanout("f"),
        delayed("d"),
        *queues("direct", "later"),
        to_queue("f", "direct"),
        to_exchange("f", "d"),
        to_queue("d", "later", "k"),
    )
    assert route_kept(p, "f", "k", {"x-delay": 5}) == ({"direct"}, ("d",))
    # once, whatever the number of routing keys (CC)
    assert route_kept(p, "f", "k", {"x-delay": 5, "CC": ["k2"]}) == ({"direct"}, ("d",))


def test_a_crash_in_the_keeps_hook_is_the_type_s() -> None:
    p = build(build_fanout("f"), delayed("d"), to_exchange("f", "d"))
    with pytest.raises(ExchangeTypeCrashError):
        route(p, "f", "k", {"x-delay": "five"})
    with pytest.raises(DelayCrashError):
        route_kept(p, "f", "k", {"x-delay": "five"})


def test_without_route_kept_a_held_message_still_routes_nowhere() -> None:
    # The pipeline routes this way: it sees what the broker recorded at publish time.
    p = build(delayed("d"), *queues("q"), to_queue("d", "q", "k"))
    assert route(p, "d", "k", {"x-delay": 100}) == set()


def build_fanout(name: str) -> ExchangeDeclared:
    return ExchangeDeclared(Exchange(name, ExchangeType.FANOUT))
