"""Durability across a restart: in-process brokers on a ``tmp_path`` data dir, driven through
aio-pika and pika.

Each test starts a :class:`BrokerThread` with ``Config(data_dir=tmp_path / "data")``, stops it
(a clean shutdown: ``Server.stop()``) and starts a new one on the same directory. What must
hold is what a RabbitMQ user expects of a restarted node:

* durable exchanges, queues and bindings between durable ends come back (exchange-to-exchange
  bindings and headers bindings with their arguments included) and still route;
* transient exchanges, queues and bindings, and exclusive queues, are gone;
* persistent messages of durable queues come back in order, ``redelivered`` set on those
  that had been delivered (and not acked) before the restart and only on those; transient
  messages, acked messages, purged and deleted queues do not come back;
* an auto-delete durable queue survives until a consumer comes and goes;
* a committed transaction of persistent messages survives; rolled back or uncommitted ones
  do not;
* ``leveret log dump`` / ``leveret log check`` read the definitions log.

Async tests stop the broker with ``asyncio.to_thread`` so that aio-pika can answer the
server's ``Connection.Close`` while ``Server.stop()`` waits for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import pika
import pytest
from aio_pika import DeliveryMode, ExchangeType, Message
from aiormq.exceptions import ChannelNotFoundEntity, ChannelPreconditionFailed

from leveret.config import Config
from tests.conftest import BrokerThread

REPO = Path(__file__).resolve().parents[1]
PERSISTENT = DeliveryMode.PERSISTENT
TRANSIENT = DeliveryMode.NOT_PERSISTENT


class Node:
    """A restartable in-process broker on one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.broker: BrokerThread | None = None

    def start(self) -> Node:
        config = Config(host="127.0.0.1", port=0, data_dir=self.data_dir, shutdown_timeout=3.0)
        self.broker = BrokerThread(config).start()
        return self

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        assert self.broker is not None
        return self.broker.url

    def pika(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.url))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path / "data").start()
    yield node
    node.stop()


@pytest.fixture
async def anode(node: Node) -> AsyncIterator[Node]:
    """The same node for async tests: stopped from a worker thread at the end."""
    yield node
    await asyncio.to_thread(node.stop)


async def restart(node: Node) -> None:
    await asyncio.to_thread(node.restart)


async def exists(conn: aio_pika.abc.AbstractConnection, kind: str, name: str) -> bool:
    """Passive declare of a queue or exchange on a fresh channel: False on 404."""
    channel = await conn.channel()
    try:
        if kind == "queue":
            await channel.declare_queue(name, passive=True)
        else:
            await channel.get_exchange(name, ensure=True)
    except ChannelNotFoundEntity:
        return False
    await channel.close()
    return True


async def depth(channel: aio_pika.abc.AbstractChannel, name: str) -> int:
    queue = await channel.declare_queue(name, passive=True)
    count = queue.declaration_result.message_count
    assert count is not None
    return count


async def drain(channel: aio_pika.abc.AbstractChannel, name: str) -> list[tuple[bytes, bool]]:
    """Basic.Get (auto-ack) until the queue is empty: (body, redelivered) in order."""
    queue = await channel.declare_queue(name, passive=True)
    got = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        got.append((message.body, bool(message.redelivered)))
    return got


async def persistent(exchange: aio_pika.abc.AbstractExchange, key: str, body: bytes) -> None:
    await exchange.publish(Message(body, delivery_mode=PERSISTENT), routing_key=key)


# ------------------------------------------------------------------------------------------
# topology


async def test_durable_topology_survives_restart_and_still_routes(anode: Node) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    direct = await ch.declare_exchange("d.direct", ExchangeType.DIRECT, durable=True)
    topic = await ch.declare_exchange("d.topic", ExchangeType.TOPIC, durable=True)
    headers = await ch.declare_exchange("d.headers", ExchangeType.HEADERS, durable=True)
    fanout = await ch.declare_exchange("d.fanout", ExchangeType.FANOUT, durable=True)
    q_direct = await ch.declare_queue("d.q.direct", durable=True)
    q_topic = await ch.declare_queue("d.q.topic", durable=True)
    q_headers = await ch.declare_queue("d.q.headers", durable=True)
    # Queue arguments survive too: at most 2 ready messages.
    q_limited = await ch.declare_queue("d.q.limited", durable=True, arguments={"x-max-length": 2})
    await q_direct.bind(direct, routing_key="k")
    await q_topic.bind(topic, routing_key="a.*.c")
    await q_headers.bind(headers, arguments={"x-match": "all", "color": "red", "size": 7})
    await q_limited.bind(direct, routing_key="limited")
    # Exchange-to-exchange: whatever reaches d.fanout goes on to d.direct.
    await direct.bind(fanout)
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    for name in ("d.direct", "d.topic", "d.headers", "d.fanout"):
        assert await exists(conn, "exchange", name), name
    for name in ("d.q.direct", "d.q.topic", "d.q.headers", "d.q.limited"):
        assert await exists(conn, "queue", name), name
        assert await depth(ch, name) == 0
    # The exchange type came back as it was: a different one is inequivalent (406).
    other = await conn.channel()
    with pytest.raises(ChannelPreconditionFailed):
        await other.declare_exchange("d.topic", ExchangeType.DIRECT, durable=True)
    # And so did durability: redeclaring with the same properties is fine.
    direct = await ch.declare_exchange("d.direct", ExchangeType.DIRECT, durable=True)
    topic = await ch.get_exchange("d.topic")
    headers = await ch.get_exchange("d.headers")
    fanout = await ch.get_exchange("d.fanout")

    await persistent(direct, "k", b"direct")
    await persistent(direct, "other", b"unrouted")
    await persistent(topic, "a.b.c", b"topic")
    await persistent(topic, "a.b", b"no-topic")
    await headers.publish(Message(b"headers", headers={"color": "red", "size": 7}), "")
    await headers.publish(Message(b"half", headers={"color": "red"}), "")
    await persistent(fanout, "k", b"via-e2e")
    await persistent(fanout, "nomatch", b"e2e-unrouted")
    for i in range(3):
        await persistent(direct, "limited", b"lim%d" % i)

    assert await drain(ch, "d.q.direct") == [(b"direct", False), (b"via-e2e", False)]
    assert await drain(ch, "d.q.topic") == [(b"topic", False)]
    assert await drain(ch, "d.q.headers") == [(b"headers", False)]
    assert await drain(ch, "d.q.limited") == [(b"lim1", False), (b"lim2", False)]
    await conn.close()


async def test_transient_topology_and_exclusive_queues_do_not_survive(anode: Node) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    durable_x = await ch.declare_exchange("t.durable.x", ExchangeType.DIRECT, durable=True)
    transient_x = await ch.declare_exchange("t.transient.x", ExchangeType.DIRECT, durable=False)
    durable_q = await ch.declare_queue("t.durable.q", durable=True)
    transient_q = await ch.declare_queue("t.transient.q", durable=False)
    await ch.declare_queue("t.exclusive.q", durable=True, exclusive=True)
    await ch.declare_queue("t.exclusive.transient.q", durable=False, exclusive=True)
    # Bindings with a transient end are transient.
    await transient_q.bind(durable_x, routing_key="to-transient-q")
    await durable_q.bind(transient_x, routing_key="from-transient-x")
    await transient_x.bind(durable_x, routing_key="to-transient-x")
    # The one durable binding.
    await durable_q.bind(durable_x, routing_key="durable")
    assert await exists(conn, "queue", "t.exclusive.q")
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    assert await exists(conn, "exchange", "t.durable.x")
    assert await exists(conn, "queue", "t.durable.q")
    for kind, name in [
        ("exchange", "t.transient.x"),
        ("queue", "t.transient.q"),
        ("queue", "t.exclusive.q"),
        ("queue", "t.exclusive.transient.q"),
    ]:
        assert not await exists(conn, kind, name), name
    durable_x = await ch.get_exchange("t.durable.x")
    for key in ("to-transient-q", "from-transient-x", "to-transient-x", "durable"):
        await persistent(durable_x, key, key.encode())
    # Only the durable binding routes; a re-declared transient exchange has no bindings.
    assert await drain(ch, "t.durable.q") == [(b"durable", False)]
    transient_x = await ch.declare_exchange("t.transient.x", ExchangeType.DIRECT, durable=False)
    await persistent(transient_x, "from-transient-x", b"x")
    assert await depth(ch, "t.durable.q") == 0
    await transient_x.delete()
    # An exclusive queue's name is free again: another connection may declare it.
    other = await aio_pika.connect(anode.url)
    other_ch = await other.channel()
    await other_ch.declare_queue("t.exclusive.q", durable=True, exclusive=True)
    await other.close()
    await conn.close()


async def test_delete_and_unbind_are_durable(anode: Node) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    gone_x = await ch.declare_exchange("del.x", ExchangeType.FANOUT, durable=True)
    kept_x = await ch.declare_exchange("del.kept", ExchangeType.DIRECT, durable=True)
    queue = await ch.declare_queue("del.q", durable=True)
    doomed = await ch.declare_queue("del.doomed", durable=True)
    await queue.bind(gone_x)
    await queue.bind(kept_x, routing_key="a")
    await queue.bind(kept_x, routing_key="b")
    await kept_x.bind(gone_x)  # e2e, goes with del.x
    await queue.unbind(kept_x, routing_key="a")
    await gone_x.delete()
    await doomed.delete()
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    assert not await exists(conn, "exchange", "del.x")
    assert not await exists(conn, "queue", "del.doomed")
    kept_x = await ch.get_exchange("del.kept")
    await persistent(kept_x, "a", b"a")
    await persistent(kept_x, "b", b"b")
    assert await drain(ch, "del.q") == [(b"b", False)]
    await conn.close()


async def test_auto_delete_durable_queue_survives_until_a_consumer_comes_and_goes(
    anode: Node,
) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    queue = await ch.declare_queue("ad.q", durable=True, auto_delete=True)
    await persistent(ch.default_exchange, "ad.q", b"kept")
    assert queue.declaration_result.message_count == 0
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    assert await exists(conn, "queue", "ad.q")
    assert await depth(ch, "ad.q") == 1
    queue = await ch.declare_queue("ad.q", passive=True)
    got: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
    tag = await queue.consume(got.put, no_ack=True)
    message = await asyncio.wait_for(got.get(), 5)
    assert message.body == b"kept"
    await queue.cancel(tag)
    assert not await exists(conn, "queue", "ad.q")
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    assert not await exists(conn, "queue", "ad.q")
    await conn.close()


# ------------------------------------------------------------------------------------------
# messages


async def test_persistent_messages_survive_in_order_with_redelivered_flag(anode: Node) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    queue = await ch.declare_queue("m.q", durable=True)
    for i in range(10):
        await persistent(ch.default_exchange, "m.q", b"m%d" % i)
    # m0 acked, m1 and m2 delivered and still unacked when the broker goes down.
    first = await queue.get(no_ack=False)
    assert first.body == b"m0"
    await first.ack()
    held = [await queue.get(no_ack=False) for _ in range(2)]
    assert [m.body for m in held] == [b"m1", b"m2"]
    assert not any(m.redelivered for m in held)

    await restart(anode)  # with the consumer connection still open
    try:
        await conn.close()
    except Exception:
        pass  # the broker closed it (320)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    expected = [(b"m1", True), (b"m2", True)] + [(b"m%d" % i, False) for i in range(3, 10)]
    assert await drain(ch, "m.q") == expected
    await conn.close()


async def test_redelivered_survives_and_new_messages_follow_old_ones(anode: Node) -> None:
    """Two restarts: order across both, and the flag of a message requeued in between."""
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    for _ in range(3):
        await persistent(ch.default_exchange, "m2.q", b"unroutable")  # no queue yet
    await ch.declare_queue("m2.q", durable=True)
    for i in range(3):
        await persistent(ch.default_exchange, "m2.q", b"a%d" % i)
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    for i in range(3):
        await persistent(ch.default_exchange, "m2.q", b"b%d" % i)
    queue = await ch.declare_queue("m2.q", passive=True)
    message = await queue.get(no_ack=False)
    assert (message.body, message.redelivered) == (b"a0", False)
    await message.reject(requeue=True)
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    expected = [(b"a0", True), (b"a1", False), (b"a2", False)]
    expected += [(b"b%d" % i, False) for i in range(3)]
    assert await drain(ch, "m2.q") == expected
    await conn.close()


async def test_transient_messages_and_transient_queues_do_not_survive(anode: Node) -> None:
    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    await ch.declare_queue("tm.durable", durable=True)
    await ch.declare_queue("tm.transient", durable=False)
    default = ch.default_exchange
    for i in range(6):
        mode = PERSISTENT if i % 2 == 0 else TRANSIENT
        await default.publish(Message(b"%d" % i, delivery_mode=mode), routing_key="tm.durable")
        await persistent(default, "tm.transient", b"%d" % i)
    assert await depth(ch, "tm.durable") == 6
    await conn.close()

    await restart(anode)

    conn = await aio_pika.connect(anode.url)
    ch = await conn.channel()
    assert await drain(ch, "tm.durable") == [(b"0", False), (b"2", False), (b"4", False)]
    assert not await exists(conn, "queue", "tm.transient")
    # A new queue of that name starts empty.
    await ch.declare_queue("tm.transient", durable=True)
    assert await depth(ch, "tm.transient") == 0
    await conn.close()


def test_acked_messages_do_not_come_back(node: Node) -> None:
    connection = node.pika()
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("ack.q", durable=True)
    persistent_props = pika.BasicProperties(delivery_mode=2)
    for i in range(100):
        channel.basic_publish("", "ack.q", b"%d" % i, persistent_props)
    # 0-24: Basic.Get with auto-ack; 25-49: acked one by one; 50-74: one multiple ack;
    # 75-79: delivered, then rejected without requeue; 80-99 stay.
    for i in range(25):
        _, _, body = channel.basic_get("ack.q", auto_ack=True)
        assert body == b"%d" % i
    for i in range(25, 50):
        method, _, body = channel.basic_get("ack.q")
        assert body == b"%d" % i
        channel.basic_ack(method.delivery_tag)
    tag = 0
    for _ in range(50, 75):
        method, _, _ = channel.basic_get("ack.q")
        tag = method.delivery_tag
    channel.basic_ack(tag, multiple=True)
    for _ in range(75, 80):
        method, _, _ = channel.basic_get("ack.q")
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert channel.queue_declare("ack.q", passive=True).method.message_count == 20
    connection.close()

    node.restart()

    connection = node.pika()
    channel = connection.channel()
    bodies = []
    while True:
        method, props, body = channel.basic_get("ack.q", auto_ack=True)
        if method is None:
            break
        assert not method.redelivered
        assert props.delivery_mode == 2
        bodies.append(body)
    assert bodies == [b"%d" % i for i in range(80, 100)]
    connection.close()


def test_purge_and_delete_are_durable(node: Node) -> None:
    connection = node.pika()
    channel = connection.channel()
    channel.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    for name in ("pd.purged", "pd.deleted"):
        channel.queue_declare(name, durable=True)
        for i in range(10):
            channel.basic_publish("", name, b"%d" % i, props)
    # One delivered-but-unacked message when the queue is deleted: gone with it.
    method, _, _ = channel.basic_get("pd.deleted")
    assert method is not None
    assert channel.queue_purge("pd.purged").method.message_count == 10
    assert channel.queue_delete("pd.deleted").method.message_count == 9
    channel.basic_publish("", "pd.purged", b"after-purge", props)
    connection.close()

    node.restart()

    connection = node.pika()
    channel = connection.channel()
    assert channel.queue_declare("pd.purged", passive=True).method.message_count == 1
    method, _, body = channel.basic_get("pd.purged", auto_ack=True)
    assert body == b"after-purge"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        channel.queue_declare("pd.deleted", passive=True)
    assert err.value.reply_code == 404
    channel = connection.channel()
    # Re-declared under the same name: none of the old messages.
    assert channel.queue_declare("pd.deleted", durable=True).method.message_count == 0
    connection.close()

    node.restart()

    connection = node.pika()
    channel = connection.channel()
    assert channel.queue_declare("pd.deleted", passive=True).method.message_count == 0
    assert channel.queue_declare("pd.purged", passive=True).method.message_count == 0
    connection.close()


def test_tx_commit_of_persistent_messages_survives_restart(node: Node) -> None:
    connection = node.pika()
    channel = connection.channel()
    channel.queue_declare("tx.q", durable=True)
    channel.tx_select()
    props = pika.BasicProperties(delivery_mode=2)
    for i in range(5):
        channel.basic_publish("", "tx.q", b"c%d" % i, props)
    channel.tx_commit()
    for i in range(3):
        channel.basic_publish("", "tx.q", b"r%d" % i, props)
    channel.tx_rollback()
    for i in range(2):
        channel.basic_publish("", "tx.q", b"c%d" % (5 + i), props)
    channel.tx_commit()
    # Published but never committed when the broker goes down.
    for i in range(4):
        channel.basic_publish("", "tx.q", b"u%d" % i, props)
    connection.process_data_events(0)
    node.stop()  # pika does not answer Connection.Close here: the server times out on it
    node.start()

    connection = node.pika()
    channel = connection.channel()
    bodies = []
    while True:
        method, _, body = channel.basic_get("tx.q", auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    assert bodies == [b"c%d" % i for i in range(7)]
    connection.close()


# ------------------------------------------------------------------------------------------
# leveret log dump / check


def leveret_log(command: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leveret", "log", command, "--data-dir", str(data_dir)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def build_some_topology(node: Node) -> None:
    connection = node.pika()
    channel = connection.channel()
    channel.exchange_declare("log.x", "topic", durable=True)
    channel.exchange_declare("log.h", "headers", durable=True)
    channel.exchange_declare("log.transient", "direct", durable=False)
    channel.queue_declare("log.q", durable=True, arguments={"x-max-length": 5})
    channel.queue_declare("log.gone", durable=True)
    channel.queue_declare("log.tq", durable=False)
    channel.queue_bind("log.q", "log.x", "a.#")
    channel.queue_bind("log.q", "log.h", arguments={"x-match": "any", "k": "v"})
    channel.exchange_bind("log.x", "log.h")
    channel.queue_bind("log.tq", "log.x", "b.#")
    channel.queue_delete("log.gone")
    connection.close()


def test_log_dump_prints_one_json_object_per_line(node: Node) -> None:
    build_some_topology(node)
    node.stop()
    result = leveret_log("dump", node.data_dir)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(isinstance(event, dict) for event in events)
    assert len(events) >= 7
    text = result.stdout
    assert "log.transient" not in text
    assert "log.tq" not in text
    names = {(e.get("event"), e.get("name")) for e in events}
    assert ("exchange.declared", "log.x") in names
    assert ("queue.declared", "log.q") in names
    assert ("queue.deleted", "log.gone") in names
    headers_binding = [e for e in events if e.get("source") == "log.h" and "arguments" in e]
    assert any(e["arguments"].get("k") == "v" for e in headers_binding), headers_binding
    e2e = [e for e in events if e.get("destination_type") == "exchange"]
    assert [(e["source"], e["destination"]) for e in e2e] == [("log.h", "log.x")]


def test_log_check_passes_a_good_log_and_fails_a_corrupt_one(node: Node) -> None:
    build_some_topology(node)
    node.stop()
    good = leveret_log("check", node.data_dir)
    assert good.returncode == 0, good.stdout + good.stderr

    path = node.data_dir / "definitions.log"
    data = bytearray(path.read_bytes())
    # Flip a byte inside the first record's payload (12-byte header, 8-byte frame): a CRC
    # mismatch with good records after it.
    data[12 + 8 + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    bad = leveret_log("check", node.data_dir)
    assert bad.returncode != 0, bad.stdout
    # check is read-only: the file is as we left it.
    assert path.read_bytes() == bytes(data)
