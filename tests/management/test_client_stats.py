"""Per-channel and per-connection statistics: rates and their samples
(``?msg_rates_age=&msg_rates_incr=`` for a channel, ``?data_rates_age=&data_rates_incr=``
for a connection, as rabbit_mgmt_util:range/1 reads them), the node's publish totals
surviving a channel's close, and ``rabbitmq_global_publishers``.

Leveret only: the counts themselves are compared with RabbitMQ in
tests/integration/test_channel_stats.py; 3.10.8's ``rabbitmq_global_publishers`` goes
negative (fixed after it by rabbitmq-server pull request 6244), so it is not the reference.
"""

from __future__ import annotations

import asyncio

import aio_pika
import aiohttp

from .helpers import Mgmt
from .prometheus_families import samples

PUBLISHERS = "rabbitmq_global_publishers"


async def channel_named(mgmt: Mgmt, number: int) -> dict:
    for _ in range(50):
        for channel in await mgmt.get("channels"):
            if channel["number"] == number:
                return dict(channel)
        await asyncio.sleep(0.1)
    raise AssertionError("no such channel")


async def test_channel_rates_and_samples(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        for _ in range(20):
            await channel.default_exchange.publish(aio_pika.Message(b"x"), queue.name)
        await asyncio.sleep(2.5)  # sampled every 0.2 s: two aligned seconds at least
        name = (await channel_named(mgmt, 1))["name"]
        params = {"msg_rates_age": "3", "msg_rates_incr": "1"}
        found = await mgmt.get("channels", name, params=params)
        stats = found["message_stats"]
        assert stats["publish"] == 20 and stats["confirm"] == 20  # aio-pika confirms
        samples_ = stats["publish_details"]["samples"]
        assert samples_ and samples_[0]["sample"] == 20
        assert "avg_rate" in stats["publish_details"]
        # Without a range: the rate only; the list rows carry the rates too.
        assert set((await mgmt.get("channels", name))["message_stats"]["publish_details"]) == {
            "rate"
        }
        for _ in range(50):
            await channel.default_exchange.publish(aio_pika.Message(b"x"), queue.name)
        rates = []
        for _ in range(20):  # the rate between the sampler's last two samples
            (row,) = await mgmt.get("channels")
            rates.append(row["message_stats"]["publish_details"]["rate"])
            await asyncio.sleep(0.05)
        assert max(rates) > 0, rates

        conn = found["connection_details"]["name"]
        got = await mgmt.get(
            "connections", conn, params={"data_rates_age": "3", "data_rates_incr": "1"}
        )
        assert got["recv_oct_details"]["samples"][0]["sample"] > 0
        assert "rate" in got["send_oct_details"]
    finally:
        await connection.close()


async def test_node_totals_keep_a_closed_channel_s_publishes(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    channel = await connection.channel(publisher_confirms=False)
    for _ in range(7):
        await channel.default_exchange.publish(aio_pika.Message(b"x"), "nowhere", mandatory=False)
    await channel.close()
    await asyncio.sleep(0.3)
    overview = await mgmt.get("overview")
    assert overview["message_stats"]["publish"] == 7
    assert overview["message_stats"]["drop_unroutable"] == 7
    await connection.close()


async def publishers(mgmt: Mgmt) -> float:
    assert mgmt.server.prometheus is not None
    url = mgmt.server.prometheus.url + "/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return samples(await response.text())[PUBLISHERS]['{protocol="amqp091"}']


async def test_global_publishers_counts_open_channels_that_published(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    try:
        quiet = await connection.channel()
        first = await connection.channel()
        second = await connection.channel(publisher_confirms=False)
        assert await publishers(mgmt) == 0
        await first.default_exchange.publish(aio_pika.Message(b"x"), "nowhere")
        await second.default_exchange.publish(aio_pika.Message(b"x"), "nowhere")
        await second.default_exchange.publish(aio_pika.Message(b"x"), "nowhere")
        await asyncio.sleep(0.2)
        assert await publishers(mgmt) == 2
        await second.close()
        await asyncio.sleep(0.2)
        assert await publishers(mgmt) == 1
        assert quiet.is_closed is False
    finally:
        await connection.close()
    await asyncio.sleep(0.2)
    assert await publishers(mgmt) == 0
