"""The pure rules of the delayed-message exchange (exchanges/delayed.py) and how route()
reports the exchanges that keep a message back. The plugin's behaviour is cited in
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
from leveret.exchanges.model import Exchange, ExchangeDeclared, ExchangeType
from leveret.exchanges.routing import route
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
    assert underlying_type({"x-delayed-type": "topic"}) is ExchangeType.TOPIC
    assert underlying_type({"x-delayed-type": "nope"}) == "nope"
    assert underlying_type({"x-delayed-type": 1}) is None


def test_a_delayed_message_is_held_and_routes_nowhere_now() -> None:
    p = build(delayed("d"), *queues("q"), to_queue("d", "q", "k"))
    holds: list[str] = []
    assert route(p, "d", "k", {"x-delay": 100}, holds=holds) == set()
    assert holds == ["d"]


def test_without_a_delay_it_routes_as_its_type() -> None:
    p = build(delayed("d", "topic"), *queues("q"), to_queue("d", "q", "a.#"))
    holds: list[str] = []
    assert route(p, "d", "a.b", None, holds=holds) == {"q"}
    # released: the negated header routes at once
    assert route(p, "d", "a.b", {"x-delay": -100}, holds=holds) == {"q"}
    assert holds == []


def test_the_alternate_exchange_routes_a_held_message_now() -> None:
    p = build(
        delayed("d", ae="ae"),
        build_fanout("ae"),
        *queues("q", "caught"),
        to_queue("d", "q", "k"),
        to_queue("ae", "caught"),
    )
    holds: list[str] = []
    assert route(p, "d", "k", {"x-delay": 5}, holds=holds) == {"caught"}
    assert holds == ["d"]


def test_held_downstream_of_an_exchange_binding() -> None:
    p = build(
        build_fanout("f"),
        delayed("d"),
        *queues("direct", "later"),
        to_queue("f", "direct"),
        to_exchange("f", "d"),
        to_queue("d", "later", "k"),
    )
    holds: list[str] = []
    assert route(p, "f", "k", {"x-delay": 5}, holds=holds) == {"direct"}
    assert holds == ["d"]


def test_without_a_holds_list_a_held_message_still_routes_nowhere() -> None:
    # The pipeline routes this way: it sees what the broker recorded at publish time.
    p = build(delayed("d"), *queues("q"), to_queue("d", "q", "k"))
    assert route(p, "d", "k", {"x-delay": 100}) == set()


def build_fanout(name: str) -> ExchangeDeclared:
    return ExchangeDeclared(Exchange(name, ExchangeType.FANOUT))
