"""Durable exchanges, queues and bindings whose arguments nest thousands of levels deep.

The wire takes such tables (tests/integration/test_deep_tables.py), and RabbitMQ stores them
as it stores any term. Leveret's definitions log wrote arguments as nested JSON, which
Python's encoder and decoder recurse into (about 450 AMQP levels: two JSON levels each), and
bindings froze their arguments recursively into a key: a durable declare or a bind nested
deeper was answered 541 INTERNAL_ERROR. Now a value nested deeper than the log keeps as JSON
is stored as its AMQP octets (storage/records.py), and the identity of a binding's arguments
is built without recursion (exchanges/model.py ``freeze``).

Each test declares through raw frames (pamqp and pika recurse too), restarts the broker on
the same data directory, and checks the topology came back: the declare answers as before, the log
dump shows the deep value's octets exactly as sent, and a deep binding still routes and is
found by its arguments to be removed.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import commands

from tests.integration import fieldbytes as fb
from tests.integration.wire import WireClient
from tests.test_durability import Node, leveret_log

pytestmark = pytest.mark.timeout(120)

DEPTH = 15000
PERSISTENT = commands.Basic.Properties(delivery_mode=2)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path / "data").start()
    yield node
    node.stop()


def _client(node: Node) -> WireClient:
    client = WireClient(node.url, timeout=20)
    client.connect()
    client.open_channel(1)
    return client


def _deep(nesting: str, leaf: str = "bottom") -> bytes:
    value = fb.string(leaf)
    return fb.nested(DEPTH, value) if nesting == "tables" else fb.nested_arrays(DEPTH, value)


def _long(value: int) -> bytes:
    return b"l" + struct.pack(">q", value)


@pytest.mark.parametrize("nesting", ["tables", "arrays"])
def test_a_durable_queue_with_deep_arguments_survives_a_restart(node: Node, nesting: str) -> None:
    deep = _deep(nesting)
    arguments = fb.table(fb.entry("x-deep", deep), fb.entry("x-max-length", _long(5)))
    with _client(node) as client:
        client.send_raw(fb.queue_declare(1, "deep-q", arguments, durable=True))
        assert client.expect(commands.Queue.DeclareOk, channel=1).queue == "deep-q"
        client.publish(1, b"kept", routing_key="deep-q", properties=PERSISTENT)
        client.close_connection()
    node.restart()
    with _client(node) as client:
        client.send_raw(fb.queue_declare(1, "deep-q", arguments, durable=True))
        assert client.expect(commands.Queue.DeclareOk, channel=1).message_count == 1
        # The record came back whole: the argument stored beside the deep one still counts
        # (RabbitMQ compares only the arguments it knows, rabbit_amqqueue:declare_args/0).
        other = fb.table(fb.entry("x-deep", deep), fb.entry("x-max-length", _long(6)))
        client.send_raw(fb.queue_declare(1, "deep-q", other, durable=True))
        close = client.expect(commands.Channel.Close, channel=1)
        assert close.reply_code == 406
        assert close.reply_text.startswith("PRECONDITION_FAILED - inequivalent arg 'x-max-length'")
        client.close_connection()
    node.stop()
    # `leveret log dump` shows the deep value as its AMQP octets, exactly as sent.
    dump = leveret_log("dump", node.data_dir)
    assert dump.returncode == 0, dump.stderr
    (declared,) = [json.loads(line) for line in dump.stdout.splitlines() if '"deep-q"' in line]
    assert base64.b64decode(declared["arguments"]["x-deep"]["$amqp"]) == deep
    assert declared["arguments"]["x-max-length"] == 5


def test_a_durable_exchange_and_binding_with_deep_arguments_survive_a_restart(node: Node) -> None:
    deep = fb.table(fb.entry("x-deep", _deep("tables")))
    with _client(node) as client:
        client.send_raw(fb.exchange_declare(1, "deep-x", "direct", deep, durable=True))
        client.expect(commands.Exchange.DeclareOk, channel=1)
        client.send_raw(fb.queue_declare(1, "deep-bq", fb.table(), durable=True))
        client.expect(commands.Queue.DeclareOk, channel=1)
        client.send_raw(fb.queue_bind(1, "deep-bq", "deep-x", "k", deep))
        client.expect(commands.Queue.BindOk, channel=1)
        client.close_connection()
    node.restart()
    with _client(node) as client:
        client.send_raw(fb.exchange_declare(1, "deep-x", "direct", deep, durable=True))
        client.expect(commands.Exchange.DeclareOk, channel=1)
        client.publish(1, b"routed", exchange="deep-x", routing_key="k", properties=PERSISTENT)
        client.send(commands.Queue.Declare(queue="deep-bq", passive=True), 1)
        assert client.expect(commands.Queue.DeclareOk, channel=1).message_count == 1
        # The binding is found by its arguments, so unbinding with them removes it.
        client.send_raw(
            fb.method(
                1,
                (50, 50),
                b"\x00\x00"
                + fb.shortstr("deep-bq")
                + fb.shortstr("deep-x")
                + fb.shortstr("k")
                + deep,
            )
        )
        client.expect(commands.Queue.UnbindOk, channel=1)
        client.publish(1, b"not routed", exchange="deep-x", routing_key="k")
        client.send(commands.Queue.Declare(queue="deep-bq", passive=True), 1)
        assert client.expect(commands.Queue.DeclareOk, channel=1).message_count == 1
        client.close_connection()
    node.restart()
    with _client(node) as client:
        client.publish(1, b"still not routed", exchange="deep-x", routing_key="k")
        client.send(commands.Queue.Declare(queue="deep-bq", passive=True), 1)
        assert client.expect(commands.Queue.DeclareOk, channel=1).message_count == 1
        client.close_connection()
