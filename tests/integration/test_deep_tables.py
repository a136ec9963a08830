"""Field tables nested thousands of levels deep, in message headers and method arguments.

RabbitMQ's parser takes a table nested 15,000 levels deep (binary matching, no recursion
limit); Leveret decoded tables with pamqp, which recurses twice per level, so about 500 levels
raised RecursionError, and the connection was closed with 541 INTERNAL_ERROR and a logged
traceback: on a plain queue (the publish path checks that the headers decode), through a
headers exchange, dead-lettering, and in ``queue.declare`` arguments. Now every table is
decoded and encoded with an explicit stack (leveret.node.fieldtable).

The tables are written as raw octets (``fieldbytes``), since pamqp cannot encode them either;
what comes back is read raw and compared octet for octet, except in the pika test, which
raises the recursion limit while pika (recursive too) decodes, after the broker has done its
part under the normal limit.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pamqp import commands, decode
from pika.adapters.blocking_connection import BlockingChannel

from leveret.exchanges.fields import table_fields

from . import fieldbytes as fb
from .helpers import Http, unique
from .wire import FRAME_BODY, FRAME_HEADER, WireClient

pytestmark = pytest.mark.timeout(60)

DEPTHS = [1000, 15000]
# A content header is one frame (frame_max 131072): a table nested 15,000 deep takes 105,000
# octets, an array 75,000, so each nests alone.
NESTINGS = ["tables", "arrays"]


@pytest.fixture(autouse=True)
def no_broker_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Leveret logged no error (an exception escaping a handler is logged as an internal
    error before the 541)."""
    with caplog.at_level(logging.ERROR, logger="leveret"):
        yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.fixture
def client(amqp_url: str) -> Iterator[WireClient]:
    with WireClient(amqp_url, timeout=10) as c:
        c.connect()
        c.open_channel(1)
        yield c
        c.close_connection()


def _deep(depth: int, nesting: str) -> bytes:
    return fb.nested(depth) if nesting == "tables" else fb.nested_arrays(depth)


def _deep_headers(depth: int, nesting: str = "tables") -> bytes:
    return fb.table(fb.entry("route", fb.string("yes")), fb.entry("deep", _deep(depth, nesting)))


def _declare(client: WireClient, queue: str, arguments: bytes = fb.table(), **bits: bool) -> None:
    client.send_raw(fb.queue_declare(1, queue, arguments, **bits))
    assert client.expect(commands.Queue.DeclareOk, channel=1).queue == queue


def _get_raw(client: WireClient, queue: str) -> tuple[commands.Basic.GetOk, bytes, bytes]:
    """``basic.get`` (no ack): the get-ok, the content header payload as sent, the body."""
    get_ok = client.get_eventually(queue)
    kind, channel, header = client.read_raw_frame()
    assert (kind, channel) == (FRAME_HEADER, 1)
    (body_size,) = struct.unpack_from(">Q", header, 4)
    body = b""
    while len(body) < body_size:
        kind, channel, payload = client.read_raw_frame()
        assert (kind, channel) == (FRAME_BODY, 1)
        body += payload
    return get_ok, header, body


def _entries(header: bytes) -> dict[bytes, bytes]:
    """The headers table of a content header payload: name -> the value's octets (type tag
    included), read without decoding any value."""
    assert struct.unpack_from(">H", header, 12)[0] & fb.FLAG_HEADERS
    (length,) = struct.unpack_from(">I", header, 14)
    fields = table_fields(header, 18, 18 + length)
    return {name: header[start + 1 + len(name) : end] for name, _, start, end in fields}


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_headers_on_a_plain_queue_come_back_unchanged(
    client: WireClient, depth: int, nesting: str
) -> None:
    queue = unique("deep-plain")
    _declare(client, queue, exclusive=True)
    header = fb.content_header(5, fb.FLAG_HEADERS, headers=_deep_headers(depth, nesting))
    client.send_raw(fb.publish(1, header, b"hello", routing_key=queue))
    _, delivered, body = _get_raw(client, queue)
    assert (delivered, body) == (header, b"hello")


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_headers_reach_a_consumer(client: WireClient, depth: int) -> None:
    queue = unique("deep-consume")
    _declare(client, queue, exclusive=True)
    header = fb.content_header(2, fb.FLAG_HEADERS, headers=_deep_headers(depth))
    client.send(commands.Basic.Consume(queue=queue, consumer_tag="deep", no_ack=True), 1)
    client.expect(commands.Basic.ConsumeOk, channel=1)
    client.send_raw(fb.publish(1, header, b"hi", routing_key=queue))
    client.expect(commands.Basic.Deliver, channel=1)
    assert client.read_raw_frame() == (FRAME_HEADER, 1, header)
    assert client.read_raw_frame() == (FRAME_BODY, 1, b"hi")


def test_deep_headers_reach_pika_unchanged(amqp_url: str, client: WireClient) -> None:
    depth = 15000
    queue = unique("deep-pika")
    _declare(client, queue)
    for nesting in NESTINGS:
        header = fb.content_header(4, fb.FLAG_HEADERS, headers=_deep_headers(depth, nesting))
        client.send_raw(fb.publish(1, header, b"pika", routing_key=queue))
    client.message_count_eventually(queue, 2)
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        tables, arrays = (_pika_get(channel, queue, depth) for _ in NESTINGS)
        levels, leaf = fb.depth_of(tables["deep"])
        assert (levels, leaf in ("bottom", b"bottom")) == (depth, True)
        value, levels = arrays["deep"], 0
        while isinstance(value, list) and len(value) == 1:
            value, levels = value[0], levels + 1
        assert (levels, value in ("bottom", b"bottom")) == (depth, True)
        assert tables["route"] in ("yes", b"yes")
        channel.queue_delete(queue)
    finally:
        connection.close()


def _pika_get(channel: BlockingChannel, queue: str, depth: int) -> dict[str, Any]:
    """One message's headers through pika, which decodes tables recursively: the recursion
    limit is raised while it does (the broker has routed the message already)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(4 * depth + 1000)
    try:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
    finally:
        sys.setrecursionlimit(limit)
    assert method is not None and body == b"pika"
    headers: dict[str, Any] = properties.headers
    return headers


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_headers_route_through_a_headers_exchange(client: WireClient, depth: int) -> None:
    exchange, queue = unique("deep-hx"), unique("deep-hq")
    client.send(commands.Exchange.Declare(exchange=exchange, exchange_type="headers"), 1)
    client.expect(commands.Exchange.DeclareOk, channel=1)
    _declare(client, queue, exclusive=True)
    binding = fb.table(fb.entry("x-match", fb.string("all")), fb.entry("route", fb.string("yes")))
    client.send_raw(fb.queue_bind(1, queue, exchange, "", binding))
    client.expect(commands.Queue.BindOk, channel=1)
    header = fb.content_header(3, fb.FLAG_HEADERS, headers=_deep_headers(depth))
    client.send_raw(fb.publish(1, header, b"hdr", exchange=exchange, mandatory=True))
    _, delivered, body = _get_raw(client, queue)
    assert (delivered, body) == (header, b"hdr")
    client.send(commands.Exchange.Delete(exchange=exchange), 1)
    client.expect(commands.Exchange.DeleteOk, channel=1)


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_headers_are_dead_lettered(client: WireClient, depth: int, nesting: str) -> None:
    source, target = unique("deep-src"), unique("deep-dlq")
    _declare(client, target, exclusive=True)
    dead_lettering = fb.table(
        fb.entry("x-dead-letter-exchange", fb.string("")),
        fb.entry("x-dead-letter-routing-key", fb.string(target)),
    )
    _declare(client, source, dead_lettering, exclusive=True)
    header = fb.content_header(4, fb.FLAG_HEADERS, headers=_deep_headers(depth, nesting))
    client.send_raw(fb.publish(1, header, b"dead", routing_key=source))
    get_ok = client.get_eventually(source, no_ack=False)
    _skip_content(client)
    client.send(commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False), 1)
    _, dead, body = _get_raw(client, target)
    assert body == b"dead"
    published, copied = _entries(header), _entries(dead)
    # The publisher's headers are kept as they were, octet for octet, deep ones included.
    for name in (b"route", b"deep"):
        assert copied[name] == published[name]
    x_death = decode.field_table(fb.table(fb.entry("x-death", copied[b"x-death"])))[1]["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in x_death] == [(source, "rejected", 1)]


def _skip_content(client: WireClient) -> None:
    """Read a content header and its body frames raw (pamqp could not decode the header)."""
    kind, _, header = client.read_raw_frame()
    assert kind == FRAME_HEADER
    (size,) = struct.unpack_from(">Q", header, 4)
    while size > 0:
        kind, _, payload = client.read_raw_frame()
        assert kind == FRAME_BODY
        size -= len(payload)


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_queue_declared_with_deep_arguments(client: WireClient, depth: int, nesting: str) -> None:
    queue = unique("deep-args")
    arguments = fb.table(fb.entry("x-deep", _deep(depth, nesting)))
    _declare(client, queue, arguments, exclusive=True)
    # Declared again with the same arguments, and passively: the same queue.
    _declare(client, queue, arguments, exclusive=True)
    client.send(commands.Queue.Declare(queue=queue, passive=True), 1)
    client.expect(commands.Queue.DeclareOk, channel=1)
    # A message goes through it as through any queue.
    client.send_raw(fb.publish(1, fb.content_header(1, 0), b"x", routing_key=queue))
    assert _get_raw(client, queue)[2] == b"x"


@pytest.mark.parametrize("depth", DEPTHS)
def test_an_exchange_and_a_consumer_with_deep_arguments(client: WireClient, depth: int) -> None:
    exchange, queue = unique("deep-x"), unique("deep-cq")
    arguments = fb.table(fb.entry("x-deep", fb.nested(depth)))
    client.send_raw(fb.exchange_declare(1, exchange, "fanout", arguments))
    client.expect(commands.Exchange.DeclareOk, channel=1)
    _declare(client, queue, exclusive=True)
    client.send_raw(fb.basic_consume(1, queue, "deep-tag", arguments))
    assert client.expect(commands.Basic.ConsumeOk, channel=1).consumer_tag == "deep-tag"
    client.send(commands.Basic.Cancel(consumer_tag="deep-tag"), 1)
    client.expect(commands.Basic.CancelOk, channel=1)
    client.send(commands.Exchange.Delete(exchange=exchange), 1)
    client.expect(commands.Exchange.DeleteOk, channel=1)


def _api_text(api: Http, method: str, path: str, body: Any = None) -> tuple[int, str]:
    """A management API call's status and undecoded text (json.loads recurses per level)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.base + path, data=data, method=method)
    request.add_header("Authorization", api.auth)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_management_api_shows_deep_values(brokers: tuple[str, Http]) -> None:
    """A queue with deep arguments is listed, and a message with deep headers fetched
    (acknowledged, so a failed reply would lose it): Leveret shows the first
    JSON_DEPTH_MAX levels, then a text saying there are more (json.dumps recurses)."""
    url, api = brokers
    queue = unique("deep-api")
    try:
        with WireClient(url, timeout=10) as client:
            client.connect()
            client.open_channel(1)
            _declare(client, queue, fb.table(fb.entry("x-deep", fb.nested(15000))))
            header = fb.content_header(4, fb.FLAG_HEADERS, headers=_deep_headers(15000))
            client.send_raw(fb.publish(1, header, b"deep", routing_key=queue))
            client.message_count_eventually(queue, 1)
            client.close_connection()
        for path in (f"/api/queues/%2F/{queue}", "/api/queues", "/api/queues/%2F"):
            status, text = _api_text(api, "GET", path)
            assert status == 200, text[:300]
            assert queue in text
        get = {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
        status, text = _api_text(api, "POST", f"/api/queues/%2F/{queue}/get", get)
        assert status == 200, text[:300]
        assert re.search(r'"payload"\s*:\s*"deep"', text), text[:300]
    finally:
        api("DELETE", f"/api/queues/%2F/{queue}")
