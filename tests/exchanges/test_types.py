"""Adding an exchange type is its module and one line of the registry (exchanges/types/):
a toy type registered in ``TYPES`` only, with no other table touched, is indexed by the
projection, checked by the registry's validators and routed by the generic route(), E2E
bindings, alternate exchanges and a ``keeps`` hook included; every path that parses a type's
name accepts it (exchange.declare, ``x-delayed-type``, the log's records, the pipeline's
topology) and the management API lists it."""

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
from leveret.exchanges.types import (
    TYPES,
    is_known,
    parse_type,
    validate_binding,
    validate_exchange,
)
from leveret.exchanges.types.base import ExchangeTypeModule, Headers, Names, pair
from leveret.management.api import exchange_types
from leveret.node.auth import AccessControl
from leveret.node.errors import AMQPError
from leveret.node.vhost import VHost
from leveret.session.topology import Actor, declare_exchange
from leveret.storage.records import decode, encode, event_to_json
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
    TOY,
    pair(LengthIndex),
    route_length,
    validate=no_size,
    validate_binding=length_problem,
    description="A toy exchange",
    keeps=lambda headers: headers is not None and "later" in headers,
)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(TYPES, TOY, TOY_TYPE)  # the one line
    yield


def toy(name: str, ae: str | None = None) -> ExchangeDeclared:
    arguments = {} if ae is None else {"alternate-exchange": ae}
    return ExchangeDeclared(Exchange(name, TOY, arguments=arguments))


def test_a_type_registered_once_is_checked_indexed_and_routed() -> None:
    assert validate_exchange(TOY, {"size": 1}) == "the toy takes no size"
    assert validate_exchange(TOY, {}) is None
    exchange = Exchange("t", TOY)
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


def test_the_registry_parses_type_names() -> None:
    assert parse_type(TOY) == TOY and is_known(TOY)
    assert parse_type("topic") is ExchangeType.TOPIC  # a built-in name is its constant
    assert parse_type("nope") is None and not is_known("nope")
    assert parse_type("Topic") is None  # names are case-sensitive, as RabbitMQ's


async def test_the_session_declares_a_registered_type() -> None:
    access = AccessControl.with_users({"guest": "guest"}, ("/",))
    vhost = VHost("/")
    guest = Actor(access, "guest", vhost)
    assert declare_exchange(guest, "t", TOY, False, False, False, False, {}) is True
    assert declare_exchange(guest, "t", TOY, False, False, False, False, {}) is False
    assert vhost.projection.exchanges["t"].type == TOY
    with pytest.raises(AMQPError) as raised:  # the toy's own validate/1
        declare_exchange(guest, "u", TOY, False, False, False, False, {"size": 1})
    assert (raised.value.code, raised.value.text) == (
        406,
        "PRECONDITION_FAILED - the toy takes no size",
    )
    with pytest.raises(AMQPError) as raised:  # an unregistered name: as before
        declare_exchange(guest, "v", "x-nope", False, False, False, False, {})
    assert (raised.value.code, raised.value.text) == (
        406,
        "PRECONDITION_FAILED - unknown exchange type 'x-nope'",
    )
    # A delayed exchange may wrap it: x-delayed-type is parsed through the registry too.
    delayed = {"x-delayed-type": TOY}
    assert declare_exchange(guest, "d", "x-delayed-message", False, False, False, False, delayed)


def test_the_log_records_and_replays_a_registered_type() -> None:
    event = toy("t", ae="ae")
    payload = encode("/", event)
    assert b'"x-toy"' in payload  # the wire name, as the built-in types are stored
    assert decode(payload) == ("/", event)
    assert event_to_json("/", event)["type"] == TOY


def test_the_management_api_lists_the_registry() -> None:
    listed = {t["name"]: t["description"] for t in exchange_types()}
    assert listed == {
        name: module.description or f"{name} exchange" for name, module in TYPES.items()
    }
    assert listed[TOY] == "A toy exchange"
