"""Record payloads: exact round-trips of events and AMQP field values, versions, JSON dump."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from storage_helpers import events, field_values, same, tables

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.storage.errors import CorruptRecordError, LogFormatError
from leveret.storage.records import (
    JSON_NESTING_MAX,
    RECORD_VERSION,
    decode,
    decode_value,
    encode,
    encode_value,
    event_to_json,
    value_to_json,
)


def arguments_of(event: Event) -> Any:
    for attr in ("exchange", "queue", "binding"):
        if hasattr(event, attr):
            return getattr(event, attr).arguments
    return None


def without_arguments(event: Event) -> Event:
    """The event with empty arguments (compared separately, with NaN equal to itself)."""
    for attr in ("exchange", "queue", "binding"):
        if hasattr(event, attr):
            inner = dataclasses.replace(getattr(event, attr), arguments={})
            return dataclasses.replace(event, **{attr: inner})
    return event


@given(field_values)
def test_field_values_round_trip_with_their_types(value: Any) -> None:
    tagged = json.loads(json.dumps(encode_value(value)))
    assert same(decode_value(tagged), value)


@given(st.text(), events)
def test_events_round_trip(vhost: str, event: Event) -> None:
    got_vhost, got = decode(encode(vhost, event))
    assert got_vhost == vhost
    assert type(got) is type(event)
    assert without_arguments(got) == without_arguments(event)
    assert same(arguments_of(got), arguments_of(event))


@pytest.mark.parametrize(
    ("a", "b"),
    [(True, 1), (1, 1.0), ("a", b"a"), (b"a", bytearray(b"a")), (0, False), (None, "")],
)
def test_values_that_compare_equal_keep_their_types(a: Any, b: Any) -> None:
    args = {"a": a, "b": b}
    _, event = decode(encode("/", QueueDeclared(Queue("q", True, arguments=args))))
    assert isinstance(event, QueueDeclared)
    assert same(dict(event.queue.arguments), args)


def test_payload_is_versioned_ascii_json() -> None:
    payload = encode("/", BindingAdded(Binding("x", "q", DestKind.QUEUE, "a.#")))
    assert payload[0] == 1  # version 1: no value stored as AMQP octets, so older brokers read it
    assert json.loads(payload[1:]) == ["B", "/", "x", "q", "queue", "a.#", {}]


def test_a_newer_record_version_is_a_format_error() -> None:
    payload = encode("/", QueueDeclared(Queue("q", True)))
    with pytest.raises(LogFormatError, match="newer"):
        decode(bytes([RECORD_VERSION + 1]) + payload[1:])


def _deep(levels: int, leaf: Any) -> Any:
    value = leaf
    for level in range(levels):
        value = {"k": value} if level % 2 else [value, b"\x00"]
    return value


def _depth(value: Any) -> int:
    levels = 0
    while isinstance(value, dict | list):
        value = value["k"] if isinstance(value, dict) else value[0]
        levels += 1
    return levels


@pytest.mark.parametrize("levels", [JSON_NESTING_MAX, JSON_NESTING_MAX + 1, 20_000])
def test_deep_arguments_round_trip(levels: int) -> None:
    """Deeper than JSON_NESTING_MAX, an argument is stored as its AMQP octets ("W", record
    version 2): json would recurse past Python's limit. The other arguments stay JSON."""
    deep = _deep(levels, Decimal("1.50"))
    args = {"deep": deep, "plain": {"n": 1, "f": 1.0, "t": True}}
    payload = encode("/", QueueDeclared(Queue("q", True, arguments=args)))
    assert payload[0] == (RECORD_VERSION if levels > JSON_NESTING_MAX else 1)
    fields = json.loads(payload[1:])
    assert fields[-1]["plain"] == encode_value(args["plain"])
    _, event = decode(payload)
    assert isinstance(event, QueueDeclared)
    back = event.queue.arguments
    assert _depth(back["deep"]) == levels
    assert same(back["plain"], args["plain"])
    if levels < 1000:  # same() recurses
        assert back["deep"] == deep
    # The log dump's plain JSON: per argument, the deep one as its octets.
    shown = event_to_json("/", event)["arguments"]
    assert ("$amqp" in shown["deep"]) == (levels > JSON_NESTING_MAX)
    assert shown["plain"] == {"n": 1, "f": 1.0, "t": True}


def test_a_damaged_deep_value_is_a_corrupt_record() -> None:
    """Octets that are not base64 of one AMQP value make the record corrupt (the log then
    resynchronises or refuses to start), never a wrong value."""
    payload = encode("/", QueueDeclared(Queue("q", True, arguments={"d": _deep(200, 1)})))
    with pytest.raises(CorruptRecordError):
        decode(payload.replace(b'["W","', b'["W","!', 1))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00[]",
        b"\x01",
        b"\x01not json",
        b'\x01["Z","/"]',
        b'\x01["q","/"]',
        b'\x01["q","/","a","b"]',
        b'\x01["q",1,"a"]',
        b'\x01["q","/","a"] trailing',
        b'\x01["X","/","x","nosuchtype",true,false,false,{}]',
        b'\x01["Q","/","q",true,false,false,{"a":["?",1]}]',
        b'\x01["Q","/","q",true,false,false,{"a":["i","1"]}]',
        b'\x01["Q","/","q",true,false,false,[]]',
        b'\x01["Q","/","q",true,false,false,{"a":["T","yesterday"]}]',
        '\x01["q","/","\u00e9"]'.encode(),
    ],
)
def test_undecodable_payloads_raise_corrupt_record(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode(payload)


@pytest.mark.parametrize("value", [object(), {1: "a"}, {"a": {2, 3}}, 1j])
def test_unstorable_values_are_refused_before_writing(value: Any) -> None:
    args = value if isinstance(value, dict) else {"a": value}
    with pytest.raises(TypeError):
        encode("/", QueueDeclared(Queue("q", True, arguments=args)))


def test_event_to_json_uses_definitions_json_names() -> None:
    args = {
        "b": b"\x00",
        "d": Decimal("1.50"),
        "t": datetime(2024, 1, 2, tzinfo=UTC),
        "f": float("nan"),
        "n": [1, {"x": None}],
    }
    binding = Binding("x", "q", DestKind.QUEUE, "k", args)
    assert event_to_json("/", BindingAdded(binding)) == {
        "event": "binding.added",
        "vhost": "/",
        "source": "x",
        "destination": "q",
        "destination_type": "queue",
        "routing_key": "k",
        "arguments": {
            "b": {"$bytes": "AA=="},
            "d": {"$decimal": "1.50"},
            "t": {"$datetime": "2024-01-02T00:00:00+00:00"},
            "f": {"$float": "nan"},
            "n": [1, {"x": None}],
        },
    }
    exchange = Exchange("x", ExchangeType.HEADERS, internal=True)
    assert event_to_json("v", ExchangeDeclared(exchange))["type"] == "headers"


@given(st.text(), events)
def test_event_to_json_is_strict_json(vhost: str, event: Event) -> None:
    doc = event_to_json(vhost, event)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


@given(tables)
def test_value_to_json_keeps_native_values(table: dict[str, Any]) -> None:
    plain = {k: v for k, v in table.items() if isinstance(v, str | int | type(None))}
    assert value_to_json(plain) == plain


def test_decode_many_equals_decoding_one_by_one() -> None:
    from leveret.exchanges.model import (
        Binding,
        BindingAdded,
        DestKind,
        Exchange,
        ExchangeDeclared,
        ExchangeType,
        Queue,
        QueueDeclared,
    )
    from leveret.storage.records import decode, decode_many, encode

    events = [
        ("/", ExchangeDeclared(Exchange("x", ExchangeType.TOPIC, arguments={"a": 1.5}))),
        ("v", QueueDeclared(Queue("q", durable=True, arguments={"x-max-length": 3}))),
        ("/", BindingAdded(Binding("x", "q", DestKind.QUEUE, "a.#", {"k": b"\x00"}))),
    ]
    payloads = [encode(vhost, event) for vhost, event in events]
    assert decode_many(payloads) == [decode(p) for p in payloads] == events
    # Anything odd falls back to the per-record path (None), which reports the bad record.
    assert decode_many([*payloads, b"\x01not json"]) is None
    assert decode_many([]) is None
