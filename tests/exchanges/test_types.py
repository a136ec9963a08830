"""Adding an exchange type is its module and one line of the registry (exchanges/types/):
a toy type registered in ``TYPES`` only, with no other table touched, is indexed by the
projection, checked by the registry's validators and routed by the generic route(), E2E
bindings, alternate exchanges and a ``keeps`` hook included."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from leveret.exchanges.model import (
    EMPTY,
    Binding,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
)
from leveret.exchanges.routing import route, route_kept
from leveret.exchanges.types import TYPES, validate_binding, validate_exchange
from leveret.exchanges.types.base import ExchangeTypeModule, Headers, Names, pair
from tests.exchanges.test_routing import build, queues, to_exchange, to_queue

TOY = "x-toy"  # a name no ExchangeType has: the registry is all the generic code reads


class LengthIndex:
    """The toy's index: a binding key is a length; a routing key of that length matches."""

    def __init__(self) -> None:
        self.by_length: dict[int, set[str]] = {}

    def bind(self, binding: Binding) -> None:
        self.by_length.setdefault(int(binding.routing_key), set()).add(binding.destination)

    def unbind(self, binding: Binding) -> None:
        self.by_length.get(int(binding.routing_key), set()).discard(binding.destination)

    def dump(self) -> Any:
        return frozenset((n, frozenset(names)) for n, names in self.by_length.items())


def route_length(
    index: LengthIndex, routing_keys: Sequence[str], headers: Headers, content: Any = None
) -> Names:
    found: set[str] = set()
    for key in routing_keys:
        found |= index.by_length.get(len(key), set())
    return found or EMPTY


def length_problem(
    exchange: Exchange, routing_key: str, arguments: Mapping[str, Any]
) -> str | None:
    return None if routing_key.isdigit() else f"not a length: {routing_key}"


def no_size(arguments: Mapping[str, Any]) -> str | None:
    return "the toy takes no size" if "size" in arguments else None


TOY_TYPE = ExchangeTypeModule(
    TOY,  # type: ignore[arg-type]  # a toy outside the enum
    pair(LengthIndex),
    route_length,
    validate=no_size,
    validate_binding=length_problem,
    description="A toy exchange",
    keeps=lambda headers: headers is not None and "later" in headers,
)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(TYPES, TOY, TOY_TYPE)  # type: ignore[call-overload]  # the one line
    yield


def toy(name: str, ae: str | None = None) -> ExchangeDeclared:
    arguments = {} if ae is None else {"alternate-exchange": ae}
    return ExchangeDeclared(Exchange(name, TOY, arguments=arguments))  # type: ignore[arg-type]


def test_a_type_registered_once_is_checked_indexed_and_routed() -> None:
    assert validate_exchange(TOY, {"size": 1}) == "the toy takes no size"  # type: ignore[arg-type]
    assert validate_exchange(TOY, {}) is None  # type: ignore[arg-type]
    exchange = Exchange("t", TOY)  # type: ignore[arg-type]
    assert validate_binding(exchange, {}, "abc") == "not a length: abc"
    assert validate_binding(exchange, {}, "3") is None
    p = build(toy("t"), *queues("three", "four"), to_queue("t", "three", "3"))
    assert route(p, "t", "abc") == {"three"}
    assert route(p, "t", "abcd") == set()
    assert route(p, "t", "abcd", {"CC": ["xyz"]}) == {"three"}


def test_the_generic_walk_asks_the_keeps_hook() -> None:
    p = build(
        toy("t", ae="ae"),
        toy("ae"),
        *queues("now", "caught"),
        to_queue("t", "now", "3"),
        to_queue("ae", "caught", "3"),
    )
    assert p.keeping == {"t", "ae"}
    assert route(p, "t", "abc") == {"now"}
    assert route_kept(p, "t", "abc") == ({"now"}, ())
    # Kept by t, so routed nowhere from it: its alternate exchange (a toy too) keeps it as well.
    assert route_kept(p, "t", "abc", {"later": True}) == (set(), ("t", "ae"))
    q = build(
        ExchangeDeclared(Exchange("f", ExchangeType.FANOUT)),
        toy("t"),
        *queues("fan", "now"),
        to_queue("f", "fan"),
        to_exchange("f", "t"),
        to_queue("t", "now", "3"),
    )
    assert route_kept(q, "f", "abc", {"later": 1}) == ({"fan"}, ("t",))
    assert route(q, "f", "abc") == {"fan", "now"}
