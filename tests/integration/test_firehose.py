"""The firehose tracer: ``tracing`` on a vhost copies its publishes and deliveries to
``amq.rabbitmq.trace`` (broker/firehose.py; RabbitMQ's rabbit_trace.erl, docs/firehose.md).

Each scenario runs against Leveret (an in-process broker with its management API) and, with
``-m rabbitmq``, against a real RabbitMQ; each makes its own vhost with tracing switched on
through the management API (as ``rabbitmqctl trace_on`` does) and deletes it afterwards.
Every expectation was observed on RabbitMQ 3.10.8 first.
"""

from __future__ import annotations

import re
import struct
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel

from .helpers import Http, unique
from .wire import FRAME_HEADER, WireClient

pytestmark = pytest.mark.timeout(60)

TRACE = "amq.rabbitmq.trace"
CONNECTION_NAME = re.compile(r"127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+")


@dataclass
class Traced:
    api: Http
    vhost: str
    url: str

    @property
    def path(self) -> str:
        return "/api/vhosts/" + urllib.parse.quote(self.vhost, safe="")

    def channel(self) -> BlockingChannel:
        return pika.BlockingConnection(pika.URLParameters(self.url)).channel()


@pytest.fixture
def traced(brokers: tuple[str, Http]) -> Iterator[Traced]:
    url, api = brokers
    vhost = unique("ft")
    quoted = urllib.parse.quote(vhost, safe="")
    assert api("PUT", f"/api/vhosts/{quoted}", {"tracing": True})[0] == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api("PUT", f"/api/permissions/{quoted}/guest", everything)[0] in (201, 204)
    parts = urllib.parse.urlsplit(url)
    yield Traced(api, vhost, urllib.parse.urlunsplit((*parts[:2], "/" + quoted, "", "")))
    api("DELETE", f"/api/vhosts/{quoted}")


def trace_queue(ch: BlockingChannel, name: str = "") -> str:
    declared = ch.queue_declare(name, exclusive=not name)
    ch.queue_bind(declared.method.queue, TRACE, "#")
    return str(declared.method.queue)


def traces(ch: BlockingChannel, queue: str, count: int) -> list[tuple[str, bytes, dict[str, Any]]]:
    """``count`` trace copies as (routing key, body, headers), checking what every copy
    carries (its node and connection name) and dropping those two."""
    found: list[tuple[str, bytes, dict[str, Any]]] = []
    deadline = time.monotonic() + 5
    while len(found) < count and time.monotonic() < deadline:
        method, properties, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.02)
            continue
        assert method.exchange == TRACE
        # The copy's only property is its headers table.
        assert properties.delivery_mode is None and properties.content_type is None
        headers = dict(properties.headers)
        assert isinstance(headers.pop("node"), str)
        assert CONNECTION_NAME.fullmatch(headers.pop("connection"))
        found.append((method.routing_key, body, headers))
    assert len(found) == count
    assert ch.basic_get(queue, auto_ack=True)[0] is None, "more traces than expected"
    return found


def test_tracing_is_switched_on_and_off_through_the_vhost(traced: Traced) -> None:
    assert traced.api("GET", traced.path)[1]["tracing"] is True
    assert traced.api("PUT", traced.path, {"tracing": False})[0] == 204
    assert traced.api("GET", traced.path)[1]["tracing"] is False
    # A PUT without the key leaves it as it is.
    assert traced.api("PUT", traced.path, {"tracing": True})[0] == 204
    assert traced.api("PUT", traced.path, {"description": "d"})[0] == 204
    assert traced.api("GET", traced.path)[1]["tracing"] is True


def test_publishes_and_gets_are_traced(traced: Traced) -> None:
    ch = traced.channel()
    queue = trace_queue(ch)
    ch.queue_declare("work", exclusive=True)
    ch.exchange_declare("ex", "direct", auto_delete=True)
    ch.queue_bind("work", "ex", "k")
    ch.basic_publish(
        "",
        "work",
        b"hello",
        pika.BasicProperties(content_type="text/plain", headers={"h": 1}, delivery_mode=2),
    )
    ch.basic_publish("ex", "k", b"two", pika.BasicProperties(headers={"CC": ["nowhere"]}))
    ch.basic_publish("ex", "unroutable", b"three")
    method, _, _ = ch.basic_get("work")
    ch.basic_nack(method.delivery_tag, requeue=True)
    ch.basic_get("work", auto_ack=True)

    who = {"vhost": traced.vhost, "channel": 1, "user": "guest"}
    hello = {
        "exchange_name": "",
        "routing_keys": ["work"],
        "properties": {"delivery_mode": 2, "headers": {"h": 1}, "content_type": "text/plain"},
    }
    assert traces(ch, queue, 5) == [
        ("publish.", b"hello", {**hello, **who, "routed_queues": ["work"]}),
        (
            "publish.ex",
            b"two",
            {
                "exchange_name": "ex",
                "routing_keys": ["k", "nowhere"],
                "properties": {"headers": {"CC": ["nowhere"]}},
                **who,
                "routed_queues": ["work"],
            },
        ),
        (
            "publish.ex",
            b"three",
            {
                "exchange_name": "ex",
                "routing_keys": ["unroutable"],
                "properties": {},
                **who,
                "routed_queues": [],
            },
        ),
        ("deliver.work", b"hello", {**hello, "redelivered": 0, **who}),
        ("deliver.work", b"hello", {**hello, "redelivered": 1, **who}),
    ]
    # The copies are the broker's own publishes: not in amq.rabbitmq.trace's statistics,
    # once those of the exchange the client published to are in (RabbitMQ: after its 5 s
    # statistics interval).
    exchanges = f"/api/exchanges/{urllib.parse.quote(traced.vhost, safe='')}"
    deadline = time.monotonic() + 20
    while traced.api("GET", f"{exchanges}/ex")[1].get("message_stats", {}).get("publish_in") != 2:
        assert time.monotonic() < deadline
        time.sleep(0.25)
    assert "message_stats" not in traced.api("GET", f"{exchanges}/{TRACE}")[1]
    ch.connection.close()


def test_consumer_deliveries_and_bcc_keys_are_traced(traced: Traced) -> None:
    ch = traced.channel()
    queue = trace_queue(ch)
    for name, key in (("work", "k"), ("other", "b")):
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, "amq.direct", key)
    properties = pika.BasicProperties(
        headers={"BCC": ["b"], "x": "y"}, priority=3, timestamp=1700000000, message_id="m1"
    )
    ch.basic_publish("amq.direct", "k", b"bcc", properties)
    got: list[bytes] = []
    ch.basic_consume("work", lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    while not got:
        ch.connection.process_data_events(0.05)
    ch.basic_get("other", auto_ack=True)

    # BCC is gone from the properties but stays among the routing keys.
    message = {
        "exchange_name": "amq.direct",
        "routing_keys": ["k", "b"],
        "properties": {
            "timestamp": 1700000000,
            "message_id": "m1",
            "priority": 3,
            "headers": {"x": "y"},
        },
        "vhost": traced.vhost,
        "channel": 1,
        "user": "guest",
    }
    (published, *delivered) = traces(ch, queue, 3)
    routed = published[2].pop("routed_queues")
    assert sorted(routed) == ["other", "work"]
    assert published == ("publish.amq.direct", b"bcc", message)
    assert delivered == [
        ("deliver.work", b"bcc", {**message, "redelivered": 0}),
        ("deliver.other", b"bcc", {**message, "redelivered": 0}),
    ]
    ch.connection.close()


def test_traces_are_not_traced_and_tracing_stops(traced: Traced) -> None:
    ch = traced.channel()
    queue = trace_queue(ch)
    ch.queue_declare("work", exclusive=True)
    ch.basic_publish("", "work", b"one")
    # Consuming the trace queue itself makes no copies of its deliveries.
    seen: list[str] = []
    tag = ch.basic_consume(queue, lambda _c, m, _p, _b: seen.append(m.routing_key), auto_ack=True)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    assert seen == ["publish."]
    ch.basic_cancel(tag)
    assert traced.api("PUT", traced.path, {"tracing": False})[0] == 204
    ch.basic_publish("", "work", b"two")
    assert ch.basic_get("work", auto_ack=True)[2] == b"one"
    assert ch.basic_get("work", auto_ack=True)[2] == b"two"
    ch.connection.process_data_events(0.2)
    assert ch.basic_get(queue, auto_ack=True)[0] is None
    ch.connection.close()


# -- the bytes of a trace copy's headers ------------------------------------------------


def fields(table: bytes) -> list[tuple[str, str, bytes]]:
    """(name, type tag, raw value) of each field of a table (for S, A, F and I values)."""
    found = []
    pos = 0
    while pos < len(table):
        size = table[pos]
        name = table[pos + 1 : pos + 1 + size].decode()
        tag = chr(table[pos + 1 + size])
        pos += 2 + size
        if tag == "I":
            value, pos = table[pos : pos + 4], pos + 4
        else:
            assert tag in "SAF", tag
            (length,) = struct.unpack_from(">I", table, pos)
            value, pos = table[pos + 4 : pos + 4 + length], pos + 4 + length
        found.append((name, tag, value))
    return found


def test_trace_headers_have_rabbitmqs_field_types(traced: Traced) -> None:
    ch = traced.channel()
    queue = trace_queue(ch, "traces")
    ch.queue_declare("work", exclusive=True)
    properties = pika.BasicProperties(
        content_type="text/plain",
        delivery_mode=2,
        priority=3,
        message_id="m1",
        timestamp=1700000000,
        headers={"n": 7},
    )
    ch.basic_publish("", "work", b"typed", properties)
    ch.connection.process_data_events(0.2)

    with WireClient(traced.url).connect() as wire:
        wire.open_channel(1)
        wire.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
        wire.expect(commands.Basic.GetOk, channel=1)
        frame_type, _channel, payload = wire.read_raw_frame()
    assert frame_type == FRAME_HEADER
    # Class basic, then only the headers flag.
    assert payload[:2] == b"\x00\x3c" and payload[12:14] == b"\x20\x00"
    top = fields(payload[18:])
    assert [(name, tag) for name, tag, _ in top] == [
        ("exchange_name", "S"),
        ("routing_keys", "A"),
        ("properties", "F"),
        ("node", "S"),
        ("vhost", "S"),
        ("connection", "S"),
        ("channel", "I"),
        ("user", "S"),
        ("routed_queues", "A"),
    ]
    values = {name: value for name, _, value in top}
    assert values["routing_keys"] == b"S\x00\x00\x00\x04work"
    assert values["channel"] == b"\x00\x00\x00\x01"
    # The properties, last first: integers as signedint, the headers table as pika wrote
    # it (pika writes 7 as a signedint), strings as longstr.
    assert fields(values["properties"]) == [
        ("timestamp", "I", struct.pack(">i", 1700000000)),
        ("message_id", "S", b"m1"),
        ("priority", "I", b"\x00\x00\x00\x03"),
        ("delivery_mode", "I", b"\x00\x00\x00\x02"),
        ("headers", "F", b"\x01nI\x00\x00\x00\x07"),
        ("content_type", "S", b"text/plain"),
    ]
    ch.connection.close()
