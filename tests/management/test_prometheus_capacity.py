"""rabbitmq_queue_consumer_capacity and _utilisation, moved by real consumers: none (0),
one that can take every message (1.0), one held at its prefetch limit (falls with a
half-life of a second) and freed by an ack (rises again)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import aiohttp
import pytest

from leveret.config import Config
from leveret.server import Server

from .prometheus_families import samples

HELD = '{queue="cap-held",vhost="/"}'
FREE = '{queue="cap-free",vhost="/"}'


@pytest.fixture
async def urls() -> AsyncIterator[tuple[str, str]]:
    server = Server(Config(host="127.0.0.1", port=0, prometheus_port=0))
    await server.start()
    assert server.prometheus is not None
    try:
        yield f"amqp://guest:guest@127.0.0.1:{server.port}/", server.prometheus.url
    finally:
        await server.stop()


async def scrape(url: str) -> dict[str, dict[str, float]]:
    """The samples at ``url``."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return samples(await response.text())


async def drop(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A no-ack consumer's callback."""


async def capacities(url: str) -> dict[str, float]:
    """Per queue, rabbitmq_queue_consumer_capacity; utilisation is the same figure."""
    values = await scrape(url + "/metrics/per-object")
    found = values["rabbitmq_queue_consumer_capacity"]
    same = values["rabbitmq_queue_consumer_utilisation"]
    assert found.keys() == same.keys()
    for key, value in found.items():
        assert same[key] == pytest.approx(value, abs=0.01), key
    return found


async def test_consumer_capacity_follows_the_prefetch(urls: tuple[str, str]) -> None:
    amqp_url, metrics_url = urls
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("cap-held")
        free = await channel.declare_queue("cap-free")
        assert await capacities(metrics_url) == {HELD: 0, FREE: 0}  # no consumers

        # A no-ack consumer takes every message at once: always active, 1.0.
        await free.consume(drop, no_ack=True)
        for _ in range(50):
            await channel.default_exchange.publish(aio_pika.Message(b"f"), routing_key="cap-free")
        # A consumer with a prefetch of 1 that holds its first message.
        consumer = await connection.channel()
        await consumer.set_qos(prefetch_count=1)
        taken: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await (await consumer.get_queue("cap-held")).consume(taken.put)
        await channel.default_exchange.publish(aio_pika.Message(b"1"), routing_key="cap-held")
        first = await taken.get()
        start = await capacities(metrics_url)
        assert start[FREE] == pytest.approx(1.0)
        assert start[HELD] == pytest.approx(1.0)  # it took the first at once

        # The second cannot go anywhere: inactive from now, halving every second.
        await channel.default_exchange.publish(aio_pika.Message(b"2"), routing_key="cap-held")
        await asyncio.sleep(1.5)
        blocked = await capacities(metrics_url)
        assert 0 < blocked[HELD] < 0.5, blocked  # 0.5 ** 1.5 = 0.35, plus the active start
        assert blocked[FREE] == pytest.approx(1.0)

        # The ack frees the prefetch: the second goes out, and the queue is active again.
        await first.ack()
        second = await taken.get()
        assert second.body == b"2"
        await asyncio.sleep(1.0)
        freed = await capacities(metrics_url)
        assert freed[HELD] > blocked[HELD] + 0.2, (blocked, freed)
        assert freed[HELD] < 1.0
        await second.ack()

    aggregated = await scrape(metrics_url + "/metrics")
    # 3.10.8 sums the per-queue figures in /metrics; no consumers left: 0.
    assert aggregated["rabbitmq_queue_consumer_capacity"] == {"": 0}
