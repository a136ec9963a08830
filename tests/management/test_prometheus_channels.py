"""The channel counters per channel and exchange, per channel and queue, and per channel,
exchange and queue on /metrics/per-object, as rabbitmq_prometheus 3.10.8 serves them
(channel_exchange_metrics, channel_queue_metrics, channel_queue_exchange_metrics): a
publisher into two exchanges and a consumer of two queues through aio-pika, the rows a user
scrapes, and the rows going with their queue and their channel. The scenario runs against a
real RabbitMQ too with ``-m rabbitmq`` (conftest.py's ``target``).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import aio_pika
import pytest

from leveret.config import Config
from leveret.server import Server
from leveret.session.publish import ExchangeStats
from leveret.session.tx import confirms_due
from leveret.wire.channel.stats import (
    CHANNEL_COUNTERS,
    EXCHANGE_COUNTERS,
    QUEUE_COUNTERS,
    count_confirms,
)

from .helpers import Target

# What a user sees, by family: exchange families first, then the queue families.
EXCHANGE_FAMILIES = (
    "rabbitmq_channel_messages_published_total",
    "rabbitmq_channel_messages_confirmed_total",
    "rabbitmq_channel_messages_unroutable_returned_total",
    "rabbitmq_channel_messages_unroutable_dropped_total",
)
QUEUE_FAMILIES = (
    "rabbitmq_channel_get_ack_total",
    "rabbitmq_channel_get_total",
    "rabbitmq_channel_messages_delivered_ack_total",
    "rabbitmq_channel_messages_delivered_total",
    "rabbitmq_channel_messages_redelivered_total",
    "rabbitmq_channel_messages_acked_total",
    "rabbitmq_channel_get_empty_total",
)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def rows(
    values: dict[str, dict[str, float]], families: tuple[str, ...], kind: str, names: set[str]
) -> dict[str, tuple[str, tuple[float, ...]]]:
    """The rows of the objects ``names`` (``kind``: exchange or queue): object -> (its
    channel label, its values in ``families`` order). One channel per object here."""
    found: dict[str, dict[str, float]] = {}
    channels: dict[str, set[str]] = {}
    for family in families:
        for labels, value in values.get(family, {}).items():
            pairs = dict(LABEL.findall(labels))
            assert set(pairs) == {"channel", kind, "vhost"}, (family, labels)
            if pairs[kind] in names and pairs["vhost"] == "/":
                found.setdefault(pairs[kind], {})[family] = value
                channels.setdefault(pairs[kind], set()).add(pairs["channel"])
    result = {}
    for name, by_family in found.items():
        (channel,) = channels[name]
        result[name] = (channel, tuple(by_family.get(f, -1.0) for f in families))
    return result


def routed(
    values: dict[str, dict[str, float]], exchanges: set[str]
) -> dict[tuple[str, ...], float]:
    """rabbitmq_queue_messages_published_total per object, for ``exchanges``: (channel,
    exchange, queue) -> publishes."""
    found = {}
    for labels, value in values.get("rabbitmq_queue_messages_published_total", {}).items():
        pairs = dict(LABEL.findall(labels))
        assert set(pairs) == {"channel", "exchange", "exchange_vhost", "queue", "queue_vhost"}
        if pairs["exchange"] in exchanges:
            assert pairs["exchange_vhost"] == pairs["queue_vhost"] == "/"
            found[pairs["channel"], pairs["exchange"], pairs["queue"]] = value
    return found


async def scrape(target: Target) -> dict[str, dict[str, float]]:
    await asyncio.sleep(0.5)  # RabbitMQ writes its channels' metrics asynchronously
    return await target.values("/metrics/per-object")


async def rows_gone(target: Target, families: tuple[str, ...], kind: str, names: set[str]) -> None:
    """Scrape until no row of ``names`` is left. RabbitMQ 3.10.8 marks the rows of a
    deleted queue or a closed channel (rabbit_core_metrics: queue_deleted/1,
    channel_queue_down/1, channel_exchange_down/1) and its management agent's collector
    deletes them on its next pass (``collect_statistics_interval``, 5 s: observed 2.5 to
    8.5 s); Leveret at once."""
    for _ in range(30):
        if not rows(await scrape(target), families, kind, names):
            return
    raise AssertionError(f"rows of {sorted(names)} are still served")


async def test_rows_per_exchange_and_queue(target: Target) -> None:
    """A publisher with confirms into two exchanges (routed, mandatory unroutable,
    non-mandatory unroutable) and a consumer of two queues (basic.get with and without
    ack, get-empty, a no-ack consumer, an ack consumer, redeliveries after a nack):
    a row per (channel, exchange) and (channel, queue) with the counts a user expects;
    a queue's rows go with the queue, a channel's with the channel."""
    tag = uuid.uuid4().hex[:8]
    x1, x2, q1, q2 = (f"pc-{name}-{tag}" for name in ("x1", "x2", "q1", "q2"))
    connection = await aio_pika.connect(target.amqp_url)
    async with connection:
        publisher = await connection.channel()  # publisher confirms (aio-pika's default)
        ex1 = await publisher.declare_exchange(x1)
        ex2 = await publisher.declare_exchange(x2)
        await (await publisher.declare_queue(q1)).bind(ex1, "k")
        await (await publisher.declare_queue(q2)).bind(ex2, "k")
        for _ in range(3):
            await ex1.publish(aio_pika.Message(b"1"), "k")
        await ex1.publish(aio_pika.Message(b"r"), "none", mandatory=True)  # returned
        for _ in range(2):
            await ex2.publish(aio_pika.Message(b"2"), "k")
        await ex2.publish(aio_pika.Message(b"d"), "none", mandatory=False)  # dropped

        consumer = await connection.channel(publisher_confirms=False)
        queue1, queue2 = await consumer.get_queue(q1), await consumer.get_queue(q2)
        assert await queue1.get(no_ack=True) is not None
        first = await queue2.get(no_ack=False)
        await first.nack(requeue=True)
        again = await queue2.get(no_ack=False)
        assert again.redelivered
        await again.ack()
        no_ack_seen: asyncio.Queue[Any] = asyncio.Queue()
        await queue1.consume(no_ack_seen.put, no_ack=True)
        for _ in range(2):
            await asyncio.wait_for(no_ack_seen.get(), 5)
        acked = asyncio.Event()

        async def nack_then_ack(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            if message.redelivered:
                await message.ack()
                acked.set()
            else:
                await message.nack(requeue=True)

        await queue2.consume(nack_then_ack)
        await asyncio.wait_for(acked.wait(), 5)
        assert await queue1.get(fail=False) is None  # the consumer took them all

        values = await scrape(target)
        by_exchange = rows(values, EXCHANGE_FAMILIES, "exchange", {x1, x2})
        by_queue = rows(values, QUEUE_FAMILIES, "queue", {q1, q2})
        (publisher_label,) = {channel for channel, _ in by_exchange.values()}
        (consumer_label,) = {channel for channel, _ in by_queue.values()}
        assert publisher_label != consumer_label
        # published, confirmed, returned, dropped
        assert {x: v for x, (_, v) in by_exchange.items()} == {
            x1: (4, 4, 1, 0),
            x2: (3, 3, 0, 1),
        }
        # get with ack, get, delivered with ack, delivered, redelivered, acked, get-empty
        assert {q: v for q, (_, v) in by_queue.items()} == {
            q1: (0, 1, 0, 2, 0, 0, 1),
            q2: (2, 0, 2, 0, 2, 2, 0),
        }

        # rabbitmq_queue_messages_published_total per channel, exchange and queue
        # (channel_queue_exchange_metrics): what each exchange's publishes took to a queue.
        assert routed(values, {x1, x2}) == {
            (publisher_label, x1, q1): 3,
            (publisher_label, x2, q2): 2,
        }

        await publisher.queue_delete(q1)  # its consumer is cancelled, its row erased
        await rows_gone(target, QUEUE_FAMILIES, "queue", {q1})
        values = await scrape(target)
        assert set(rows(values, QUEUE_FAMILIES, "queue", {q1, q2})) == {q2}
        await consumer.close()
        await rows_gone(target, QUEUE_FAMILIES, "queue", {q2})
        values = await scrape(target)
        assert set(rows(values, EXCHANGE_FAMILIES, "exchange", {x1, x2})) == {x1, x2}
        await publisher.queue_delete(q2)
        await publisher.close()
        await rows_gone(target, EXCHANGE_FAMILIES, "exchange", {x1, x2})
        cleaner = await connection.channel()
        for name in (x1, x2):
            await cleaner.exchange_delete(name)


# -- Leveret only -----------------------------------------------------------------------


class Everything:
    """Every exchange name (a channel's rows of exchanges that have gone too)."""

    def __contains__(self, _name: object) -> bool:
        return True


def check_sums(server: Server) -> int:
    """Every open channel's totals are the sums of its rows; returns the channels seen."""
    seen = 0
    for connection in server.state.connections:
        for channel in connection.channels.values():
            totals = dict(zip(CHANNEL_COUNTERS, channel.message_counts(), strict=True))
            exchange_sums = dict.fromkeys(EXCHANGE_COUNTERS, 0)
            for _name, counts in channel.exchange_rows(Everything()):
                for key, value in zip(EXCHANGE_COUNTERS, counts, strict=True):
                    exchange_sums[key] += value
            queue_sums = dict.fromkeys(QUEUE_COUNTERS, 0)
            for _name, counts in channel.queue_rows():
                for key, value in zip(QUEUE_COUNTERS, counts, strict=True):
                    queue_sums[key] += value
            assert exchange_sums == {k: totals[k] for k in EXCHANGE_COUNTERS}, channel.id
            assert queue_sums == {k: totals[k] for k in QUEUE_COUNTERS}, channel.id
            seen += 1
    return seen


@pytest.fixture
async def server() -> Any:
    broker = Server(Config(host="127.0.0.1", port=0, prometheus_port=0))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def test_channel_totals_are_the_sums_of_its_rows(server: Server) -> None:
    """After publishes in confirm mode alternating between exchanges, in a transaction,
    and deliveries settled every way (ack, multiple ack, nack with and without requeue,
    reject, recover, acks staged in a transaction and rolled back, acks after the
    consumer was cancelled), each channel's totals (its message_stats, /metrics) equal
    the sums of its rows per exchange and per queue."""
    url = f"amqp://guest:guest@127.0.0.1:{server.port}/"
    connection = await aio_pika.connect(url)
    async with connection:
        publisher = await connection.channel()
        exchanges = [
            await publisher.declare_exchange(f"sum-x{i}", auto_delete=True) for i in range(2)
        ]
        queues = [await publisher.declare_queue(f"sum-q{i}") for i in range(2)]
        for exchange, queue in zip(exchanges, queues, strict=True):
            await queue.bind(exchange, "k")
        for i in range(10):
            await exchanges[i % 2].publish(aio_pika.Message(b"m"), "k")
        await exchanges[0].publish(aio_pika.Message(b"r"), "none", mandatory=True)
        await exchanges[1].publish(aio_pika.Message(b"d"), "none", mandatory=False)
        transacted = await connection.channel(publisher_confirms=False)
        async with transacted.transaction():
            for i in range(4):
                await (await transacted.get_exchange(f"sum-x{i % 2}")).publish(
                    aio_pika.Message(b"t"), "k"
                )
        assert check_sums(server) == 2

        consumer = await connection.channel(publisher_confirms=False)
        await consumer.set_qos(prefetch_count=100)
        held: list[aio_pika.abc.AbstractIncomingMessage] = []
        got: asyncio.Queue[Any] = asyncio.Queue()

        async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            held.append(message)
            await got.put(None)

        q0 = await consumer.get_queue("sum-q0")
        tag = await q0.consume(hold)
        for _ in range(7):
            await asyncio.wait_for(got.get(), 5)
        await held[0].ack()
        await held[2].ack(multiple=True)  # and 1
        await held[3].nack(requeue=True)  # back to the consumer, redelivered
        await asyncio.wait_for(got.get(), 5)
        await held[4].reject(requeue=False)
        await held[5].nack(requeue=False)
        await asyncio.sleep(0.2)
        assert check_sums(server) == 3
        await q0.cancel(tag)  # its unacked ones stay unacked: acked after
        for message in held[6:]:
            await message.ack()
        q1 = await consumer.get_queue("sum-q1")
        for no_ack in (True, False, False):
            await q1.get(no_ack=no_ack)
        underlay = await consumer.get_underlay_channel()
        await underlay.basic_recover(requeue=True)  # the unacked get comes back
        await q1.consume(hold, no_ack=True)
        await asyncio.sleep(0.2)
        assert await q0.get(fail=False) is None
        assert check_sums(server) == 3

        transactional = await connection.channel(publisher_confirms=False)
        await (await transactional.get_exchange("sum-x0")).publish(aio_pika.Message(b"x"), "k")
        mine = await (await transactional.get_queue("sum-q0")).get(no_ack=False)
        underlay = await transactional.get_underlay_channel()
        await underlay.tx_select()
        await mine.ack()
        await asyncio.sleep(0.1)
        assert check_sums(server) == 4  # an ack staged in the transaction
        await underlay.tx_rollback()
        assert check_sums(server) == 4
        for queue in queues:
            await queue.delete(if_unused=False, if_empty=False)


async def test_a_deleted_queues_counts_stay_in_the_channels_totals(server: Server) -> None:
    """A queue's row goes with the queue, but the channel's totals (its message_stats)
    keep what the row counted, and the acks that come after for the deliveries it held."""
    url = f"amqp://guest:guest@127.0.0.1:{server.port}/"
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("gone-q")
        for _ in range(3):
            await channel.default_exchange.publish(aio_pika.Message(b"m"), "gone-q")
        held: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await queue.consume(held.put)
        first, second, third = [await asyncio.wait_for(held.get(), 5) for _ in range(3)]
        await first.ack()
        await asyncio.sleep(0.1)
        (mine,) = [
            ch for conn in server.state.connections for ch in conn.channels.values() if ch.consumers
        ]
        totals = dict(zip(CHANNEL_COUNTERS, mine.message_counts(), strict=True))
        assert (totals["deliver"], totals["ack"]) == (3, 1)
        other = await connection.channel()
        await other.queue_delete("gone-q")  # the consumer is cancelled, the row erased
        await asyncio.sleep(0.1)
        assert mine.queue_rows() == []
        await second.ack()
        await third.ack()
        await asyncio.sleep(0.1)
        totals = dict(zip(CHANNEL_COUNTERS, mine.message_counts(), strict=True))
        assert (totals["deliver"], totals["ack"]) == (3, 3)


def test_publishes_count_into_the_queues_their_routes_reached() -> None:
    """An exchange's entry counts a publish once, into its route; the queues' counts come
    out when the route changes or when read, equal routes (a new set of the same queues, as
    a headers exchange makes) counting as one."""
    stats = ExchangeStats()

    def publish(route: Any) -> None:
        if route is not stats.route and route != stats.route:
            stats.switch(route)
        stats.route_count += 1

    a, b = frozenset({"q1", "q2"}), frozenset({"q2"})
    for route in (a, a, b, frozenset({"q1", "q2"}), a, b):
        publish(route)
    stats.unroutable_dropped += 1
    assert stats.per_queue() == {"q1": 4, "q2": 6}
    assert stats.published == 7
    assert stats.per_queue() == {"q1": 4, "q2": 6}  # reading changes nothing


def test_confirms_count_into_their_publishes_exchanges() -> None:
    """Confirms flushed in pieces (an fsync holding some back) count into the exchange of
    each publish, by the runs of publishes into one exchange; a nack counts nowhere, and
    runs confirmed in full are dropped."""
    placeholder, a, b = ExchangeStats(), ExchangeStats(), ExchangeStats()
    # publishes 1-3 into a, 4 into b, 5-6 into a, 7 into b (still open)
    runs = [(1, placeholder), (1, a), (4, b), (5, a), (7, b)]
    nacks = [5]
    confirms, upto, acked = confirms_due(0, 5, nacks)  # 6 and 7 wait for an fsync
    count_confirms(runs, 0, confirms)
    assert (upto, acked, a.confirmed, b.confirmed) == (5, 4, 3, 1)
    assert runs == [(5, a), (7, b)]
    confirms, upto, acked = confirms_due(5, 7, nacks)
    count_confirms(runs, 5, confirms)
    assert (upto, acked, a.confirmed, b.confirmed) == (7, 2, 4, 2)
    assert runs == [(7, b)]
    assert placeholder.confirmed == 0
