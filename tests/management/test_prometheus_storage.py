"""The Prometheus families of persistent messages and of the message store's I/O
(rabbitmq_queue_messages_persistent*, rabbitmq_queue_disk_*, rabbitmq_io_*,
rabbitmq_msg_store_*, rabbitmq_queue_index_*), moved by a real client publishing
persistent and transient messages, consuming with a prefetch, acking, and by a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
import aiohttp

from leveret.config import Config
from leveret.server import Server

from .prometheus_families import samples

DURABLE = '{queue="p-q",vhost="/"}'
TRANSIENT = '{queue="t-q",vhost="/"}'
PERSISTENT = aio_pika.DeliveryMode.PERSISTENT


@asynccontextmanager
async def broker(data_dir: Path | None) -> AsyncIterator[tuple[str, str]]:
    """A broker (with ``data_dir``, or none) and its AMQP and Prometheus URLs."""
    server = Server(Config(host="127.0.0.1", port=0, prometheus_port=0, data_dir=data_dir))
    await server.start()
    assert server.prometheus is not None
    try:
        yield f"amqp://guest:guest@127.0.0.1:{server.port}/", server.prometheus.url
    finally:
        await server.stop()


async def scrape(url: str, path: str = "/metrics") -> dict[str, dict[str, float]]:
    """The samples of one scrape."""
    async with aiohttp.ClientSession() as session, session.get(url + path) as response:
        assert response.status == 200
        return samples(await response.text())


def node(values: dict[str, dict[str, float]], name: str) -> float:
    """An aggregated sample."""
    return values["rabbitmq_" + name][""]


async def test_persistent_messages_and_store_io(tmp_path: Path) -> None:
    async with broker(tmp_path) as (amqp_url, metrics_url):
        before = await scrape(metrics_url)
        for name in ("io_write_ops_total", "io_sync_ops_total", "msg_store_write_total"):
            assert node(before, name) == 0, name
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            channel = await connection.channel()  # confirms: each publish is on disk after
            await channel.declare_queue("p-q", durable=True)
            await channel.declare_queue("t-q")
            publish = channel.default_exchange.publish
            for size in (10, 20, 30):
                await publish(
                    aio_pika.Message(b"p" * size, delivery_mode=PERSISTENT), routing_key="p-q"
                )
            for _ in range(2):  # transient, into the durable queue
                await publish(aio_pika.Message(b"t" * 5), routing_key="p-q")
                # persistent, into a non-durable queue: nothing to keep over a restart
                await publish(
                    aio_pika.Message(b"n" * 7, delivery_mode=PERSISTENT), routing_key="t-q"
                )
            per_object = await scrape(metrics_url, "/metrics/per-object")
            assert per_object["rabbitmq_queue_messages_persistent"] == {DURABLE: 3, TRANSIENT: 0}
            assert per_object["rabbitmq_queue_messages_persistent_bytes"] == {
                DURABLE: 60,
                TRANSIENT: 0,
            }
            assert per_object["rabbitmq_queue_disk_writes_total"] == {DURABLE: 3, TRANSIENT: 0}
            assert per_object["rabbitmq_queue_disk_reads_total"] == {DURABLE: 0, TRANSIENT: 0}
            after = await scrape(metrics_url)
            assert node(after, "queue_messages_persistent") == 3
            assert node(after, "queue_messages_persistent_bytes") == 60
            assert node(after, "queue_disk_writes_total") == 3
            assert node(after, "msg_store_write_total") == 3
            assert node(after, "io_write_ops_total") >= 1
            assert node(after, "io_write_bytes_total") > 60
            assert node(after, "io_sync_ops_total") >= 1  # the confirms waited for it
            assert node(after, "io_sync_time_seconds_total") > 0
            assert node(after, "io_seek_ops_total") == 0
            assert node(after, "queue_index_write_ops_total") == 0  # nothing delivered yet

            # A consumer with a prefetch of 2 holds two unacknowledged: still persistent.
            consumer = await connection.channel()
            await consumer.set_qos(prefetch_count=2)
            taken: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
            await (await consumer.get_queue("p-q")).consume(taken.put)
            first, second = await taken.get(), await taken.get()
            assert (len(first.body), len(second.body)) == (10, 20)
            await asyncio.sleep(0.1)
            held = await scrape(metrics_url, "/metrics/per-object")
            assert held["rabbitmq_queue_messages_unacked"][DURABLE] == 2
            assert held["rabbitmq_queue_messages_persistent"][DURABLE] == 3
            await first.ack()
            await asyncio.sleep(0.2)  # the ack, then the store's next sync writes its mark
            acked = await scrape(metrics_url)
            assert node(acked, "queue_messages_persistent") == 2
            assert node(acked, "queue_messages_persistent_bytes") == 50
            assert node(acked, "queue_index_write_ops_total") >= 1  # delivered and acked marks
    # A restart reads the two left back from the segments and the marks.
    async with broker(tmp_path) as (_amqp_url, metrics_url):
        per_object = await scrape(metrics_url, "/metrics/per-object")
        assert per_object["rabbitmq_queue_messages_persistent"] == {DURABLE: 2}
        assert per_object["rabbitmq_queue_messages_persistent_bytes"] == {DURABLE: 50}
        assert per_object["rabbitmq_queue_messages_ready"] == {DURABLE: 2}  # the transient gone
        assert per_object["rabbitmq_queue_disk_reads_total"] == {DURABLE: 2}
        assert per_object["rabbitmq_queue_disk_writes_total"] == {DURABLE: 0}
        restarted = await scrape(metrics_url)
        assert node(restarted, "msg_store_read_total") == 2
        assert node(restarted, "queue_index_read_ops_total") >= 1
        assert node(restarted, "io_read_ops_total") >= 2
        assert node(restarted, "io_read_bytes_total") > 50
        assert node(restarted, "msg_store_write_total") == 0


async def test_no_data_dir_no_io() -> None:
    """Without a data directory nothing is written: persistent messages in a durable queue
    are kept in memory only, and every I/O counter stays 0 (true, not left out)."""
    async with broker(None) as (amqp_url, metrics_url):
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue("p-q", durable=True)
            await channel.default_exchange.publish(
                aio_pika.Message(b"x", delivery_mode=PERSISTENT), routing_key="p-q"
            )
            values = await scrape(metrics_url)
        assert node(values, "queue_messages_persistent") == 0
        assert node(values, "queue_messages_ready") == 1
        for name in ("io_write_ops_total", "io_read_ops_total", "msg_store_write_total"):
            assert node(values, name) == 0, name
