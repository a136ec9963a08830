"""``erlang:phash2``, the exchange's jump hash, the bucket ring and typed value reading.

The golden values were printed by ``erl`` (OTP 25, the Erlang under RabbitMQ 3.10.8 here):
``erlang:phash2(T)`` for each term, and the plugin's ``jump_consistent_hash/2`` (rand
``exs1024`` seeded with ``{K, K, K}``) compiled into a scratch module. The placements a
real RabbitMQ makes are checked in tests/integration/test_consistent_hash.py.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest
from pamqp import commands, header

from leveret.exchanges.chash import (
    ConsistentHashIndex,
    Ring,
    binding_problem,
    exchange_problem,
    header_term,
    property_term,
    route_consistent_hash,
)
from leveret.exchanges.erlang import erlang_binary
from leveret.exchanges.erlhash import UNDEFINED, Atom, jump_consistent_hash, phash2
from leveret.exchanges.model import Binding, DestKind

A = Atom

PHASH2: list[tuple[Any, int]] = [
    (b"", 13708901),
    (b"a", 112802447),
    (b"abc", 98228475),
    (b"hello world!", 25699699),  # exactly one 12-byte block
    (b"0123456789abcdefghij", 65858989),
    ("é".encode(), 87215157),
    (UNDEFINED, 45914356),
    ((A("longstr"), b"abc"), 101716503),
    ((A("signedint"), 5), 40839585),
    ((A("long"), -7), 8099856),
    (42, 30328728),
    (-3, 96895069),
    ([], 113427502),
    (list(b"abc"), 117343302),
    (list(b"abcdefg"), 45708859),
    ([1, 2, 3, 4, 5], 66056394),
    ((A("array"), [(A("longstr"), b"a"), (A("signedint"), 3)]), 106137069),
    ((A("table"), [(b"k", A("longstr"), b"v")]), 95356243),
    ((A("double"), 1.5), 115320697),
    ((A("float"), 0.0), 98214220),
    ((A("double"), -2.25), 117959199),
    ((A("decimal"), (2, 12345)), 108016153),
    ((A("long"), 2**63 - 1), 120433834),
    ((A("long"), -(2**63)), 112631110),
    ((A("timestamp"), 2**64 - 1), 132064098),
    ((A("long"), 2**27), 117666136),  # just past the 28-bit smalls
    ((A("long"), -(2**27) - 1), 132651809),
    ((A("bool"), A("true")), 32030443),
    ((A("bool"), A("false")), 54145719),
    ((A("void"), UNDEFINED), 27077197),
    ((A("array"), []), 86211673),
    ([300, 1, 2], 84092471),  # a list that is no string
    ([1, 2, 300, 4], 552407),  # a string run cut short
    ((A("unsignedbyte"), 200), 88973546),
    ((A("table"), []), 80606520),
]


@pytest.mark.parametrize(("term", "expected"), PHASH2)
def test_phash2_equals_erlang(term: Any, expected: int) -> None:
    assert phash2(term) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (0, [0, 0, 4, 807]),
        (1, [0, 2, 3, 856]),
        (12345, [0, 0, 0, 485]),
        (98228475, [1, 1, 5, 543]),
        (2**27 - 1, [0, 2, 6, 220]),
    ],
)
def test_jump_hash_equals_the_plugin(key: int, expected: list[int]) -> None:
    assert [jump_consistent_hash(key, n) for n in (2, 3, 10, 1000)] == expected
    assert jump_consistent_hash(key, 1) == 0


def _binding(dest: str, weight: str, kind: DestKind = DestKind.QUEUE) -> Binding:
    return Binding("x", dest, kind, weight)


def _routes(ring: Ring, keys: list[str]) -> dict[str, str]:
    queues = ConsistentHashIndex(ring, DestKind.QUEUE)
    exchanges = ConsistentHashIndex(ring, DestKind.EXCHANGE)
    found = {}
    for key in keys:
        names = route_consistent_hash(queues, (key,), None) | route_consistent_hash(
            exchanges, (key,), None
        )
        assert len(names) == 1  # exactly one destination, of one kind
        (found[key],) = names
    return found


KEYS = [f"k{i}" for i in range(24)]


def test_ring_buckets_follow_binding_order_and_weights() -> None:
    ring = Ring({})
    for dest, weight in (("a", "1"), ("b", "2"), ("c", "3")):
        ring.bind(_binding(dest, weight))
    # RabbitMQ 3.10.8's choices (tests/integration/test_consistent_hash.py BY_ROUTING_KEY).
    assert "".join(_routes(ring, KEYS).values()) == "bccbbcbccbccbbbaacabcccb"


def test_unbinding_keeps_the_others_in_order_and_rebinding_appends() -> None:
    ring = Ring({})
    for dest, weight in (("a", "1"), ("b", "2"), ("c", "3")):
        ring.bind(_binding(dest, weight))
    ring.unbind(_binding("b", "2"))
    assert "".join(_routes(ring, KEYS).values()) == "cccccccccccccccaaaaccccc"
    # The memo was dropped: b is back, at the end this time (buckets 4 and 5).
    ring.bind(_binding("b", "2"))
    after = _routes(ring, KEYS)
    assert set(after.values()) == {"a", "b", "c"}
    assert after != dict(zip(KEYS, "bccbbcbccbccbbbaacabcccb", strict=True))


def test_an_exchange_destination_shares_the_ring() -> None:
    ring = Ring({})
    ring.bind(_binding("a", "1"))
    ring.bind(_binding("x", "2", DestKind.EXCHANGE))
    ring.bind(_binding("c", "1"))
    assert "".join(_routes(ring, KEYS).values()) == "xcxxxxxccxxxxxxaaaaxxccx"


def test_an_empty_ring_routes_nowhere() -> None:
    ring = Ring({})
    assert route_consistent_hash(ConsistentHashIndex(ring, DestKind.QUEUE), ("k",), None) == set()
    ring.bind(_binding("a", "nonsense"))  # not from the broker, which refuses it: no buckets
    assert route_consistent_hash(ConsistentHashIndex(ring, DestKind.QUEUE), ("k",), None) == set()


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("1", None),
        ("+02", None),
        ("1000000", None),
        ("0", "The binding key must be greater than 0"),
        ("-3", "The binding key must be greater than 0"),
        ("", "The binding key must be an integer: <<>>"),
        ("1_000", 'The binding key must be an integer: <<"1_000">>'),  # Python's int() takes it
        ("٣", 'The binding key must be an integer: <<"٣"/utf8>>'),  # so does an Arabic three
        (" 1", 'The binding key must be an integer: <<" 1">>'),
    ],
)
def test_binding_keys(key: str, problem: str | None) -> None:
    assert binding_problem(key, erlang_binary) == problem


def test_exchange_arguments() -> None:
    assert exchange_problem({}) is None
    assert exchange_problem({"hash-header": "h"}) is None
    assert exchange_problem({"hash-property": "timestamp"}) is None
    assert exchange_problem({"hash-property": "user_id"}) == "Unsupported property: user_id"
    assert (
        exchange_problem({"hash-header": "h", "hash-property": "message_id"})
        == "hash-header and hash-property are mutually exclusive"
    )


def _content(**properties: Any) -> bytes:
    return header.ContentHeader(0, 5, commands.Basic.Properties(**properties)).marshal()


def test_header_values_keep_their_wire_types() -> None:
    # pamqp picks the narrowest integer type, as the wire says; the hash covers the type.
    content = _content(
        headers={
            "s": "v",
            "small": 5,
            "wide": 2**40,
            "flag": True,
            "d": decimal.Decimal("2.5"),
            "arr": ["a", 1],
            "t": {"k": "v"},
            "none": None,
        },
        message_id="m",
    )
    assert header_term(content, "s") == (A("longstr"), b"v")
    assert header_term(content, "small") == (A("byte"), 5)
    assert header_term(content, "wide") == (A("long"), 2**40)
    assert header_term(content, "flag") == (A("bool"), A("true"))
    assert header_term(content, "d") == (A("decimal"), (1, 25))
    assert header_term(content, "arr") == (A("array"), [(A("longstr"), b"a"), (A("byte"), 1)])
    assert header_term(content, "t") == (A("table"), [(b"k", A("longstr"), b"v")])
    assert header_term(content, "none") == (A("void"), UNDEFINED)
    assert header_term(content, "absent") is UNDEFINED
    assert header_term(_content(), "s") is UNDEFINED
    assert header_term(None, "s") is UNDEFINED


def test_a_long_tagged_capital_l_reads_as_long() -> None:
    # py-amqp (kombu, Celery) tags 64-bit integers 'L'; RabbitMQ reads them as long.
    table = b"\x01nL" + (5).to_bytes(8, "big")
    content = _content(message_id="m")
    flags = int.from_bytes(content[12:14], "big") | 0x2000
    content = (
        content[:12]
        + flags.to_bytes(2, "big")
        + len(table).to_bytes(4, "big")
        + table
        + content[14:]
    )
    assert header_term(content, "n") == (A("long"), 5)
    assert property_term(content, "message_id") == b"m"


def test_properties() -> None:
    stamp = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
    content = _content(
        content_type="text/plain",
        headers={"a": 1},
        delivery_mode=2,
        priority=3,
        correlation_id="c-1",
        reply_to="r",
        expiration="100",
        message_id="m-1",
        timestamp=stamp,
        app_id="app",
    )
    assert property_term(content, "message_id") == b"m-1"
    assert property_term(content, "correlation_id") == b"c-1"
    assert property_term(content, "timestamp") == str(int(stamp.timestamp())).encode()
    assert property_term(_content(), "message_id") is UNDEFINED
    assert property_term(None, "timestamp") is UNDEFINED
