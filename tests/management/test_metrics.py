"""The Prometheus listener's samples (rabbitmq_prometheus names) and the message rates of
the API, after real AMQP traffic."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import aio_pika
import aiohttp

from .helpers import Mgmt
from .prometheus_families import families, samples

PROTOCOL = '{protocol="amqp091"}'
CLASSIC = '{protocol="amqp091",queue_type="rabbit_classic_queue"}'


async def scrape(mgmt: Mgmt, path: str = "/metrics/per-object") -> dict[str, dict[str, float]]:
    """The samples of a Prometheus endpoint (no credentials, as rabbitmq_prometheus)."""
    assert mgmt.server.prometheus is not None
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.get(mgmt.server.prometheus.url + path) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4"
        text = await response.text()
    families(text)  # every sample belongs to a family with a TYPE line
    return samples(text)


async def test_metrics_after_traffic(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("m/q")  # a name that needs no escaping but a /
        for i in range(5):
            await channel.default_exchange.publish(aio_pika.Message(b"x" * i), routing_key="m/q")
        for _ in range(3):
            message = await queue.get(timeout=5)
            await message.ack()
        unacked = await queue.get(timeout=5)
        metrics = await scrape(mgmt)
        labels = '{queue="m/q",vhost="/"}'
        assert metrics["rabbitmq_connections"] == {"": 1}
        assert metrics["rabbitmq_channels"] == {"": 1}
        assert metrics["rabbitmq_queues"] == {"": 1}
        assert metrics["rabbitmq_queue_messages_ready"][labels] == 1
        assert metrics["rabbitmq_queue_messages_unacked"][labels] == 1
        assert metrics["rabbitmq_queue_messages"][labels] == 2
        assert metrics["rabbitmq_queue_consumers"][labels] == 0
        protocol = PROTOCOL
        assert metrics["rabbitmq_global_messages_received_total"][protocol] == 5
        assert metrics["rabbitmq_global_messages_delivered_total"][CLASSIC] == 4
        assert metrics["rabbitmq_global_messages_acknowledged_total"][CLASSIC] == 3
        assert protocol in metrics["rabbitmq_global_messages_unroutable_dropped_total"]
        assert metrics["rabbitmq_identity_info"]
        await unacked.ack()
        await queue.delete(if_unused=False, if_empty=False)
    # Counters are totals since start: they survive the queue's deletion.
    after = await scrape(mgmt)
    assert after["rabbitmq_global_messages_received_total"][protocol] == 5
    assert after["rabbitmq_global_messages_acknowledged_total"][CLASSIC] == 4
    assert after["rabbitmq_queues"] == {"": 0}
    assert (
        "rabbitmq_queue_messages_ready" not in after or not after["rabbitmq_queue_messages_ready"]
    )


async def test_unroutable_api_publishes_are_counted(mgmt: Mgmt) -> None:
    body = {"properties": {}, "routing_key": "none", "payload": "x", "payload_encoding": "string"}
    status, data = await mgmt.request("POST", "exchanges", "/", "amq.direct", "publish", body=body)
    assert (status, data) == (200, {"routed": False})
    metrics = await scrape(mgmt)
    assert (
        metrics["rabbitmq_global_messages_unroutable_returned_total"]['{protocol="amqp091"}'] == 1
    )


async def test_label_values_are_escaped(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "vhosts", 'odd"vhost\\', body={})
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    await mgmt.request("PUT", "permissions", 'odd"vhost\\', "guest", body=full)
    await mgmt.request("PUT", "queues", 'odd"vhost\\', "q", body={})
    metrics = await scrape(mgmt)
    assert '{queue="q",vhost="odd\\"vhost\\\\"}' in metrics["rabbitmq_queue_messages_ready"]


async def test_rates_in_overview_and_queues(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("busy")
        # Publish across a few sampling periods (0.2 s in these tests).
        for _ in range(8):
            for _ in range(20):
                await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="busy")
            await asyncio.sleep(0.1)
        overview = await mgmt.get("overview")
        assert overview["message_stats"]["publish"] == 160
        assert overview["message_stats"]["publish_details"]["rate"] > 0
        assert overview["queue_totals"]["messages_ready"] == 160
        queue = await mgmt.get("queues", "/", "busy")
        assert queue["message_stats"]["publish"] == 160
        assert queue["message_stats"]["publish_details"]["rate"] > 0
        vhost = await mgmt.get("vhosts", "/")
        assert vhost["messages_ready"] == 160


async def test_broker_counters_hook_is_used_when_present(mgmt: Mgmt) -> None:
    """With ``Server.counters`` (per-publish counters kept by the channels) the global
    counters come from it; API publishes add to it."""
    counters = SimpleNamespace(
        received=10, routed=7, unroutable_dropped=2, unroutable_returned=1, confirmed=6
    )
    mgmt.server.state.counters = counters  # type: ignore[attr-defined]
    body = {"properties": {}, "routing_key": "none", "payload": "x", "payload_encoding": "string"}
    await mgmt.request("POST", "exchanges", "/", "amq.direct", "publish", body=body)
    metrics = await scrape(mgmt)
    protocol = '{protocol="amqp091"}'
    assert metrics["rabbitmq_global_messages_received_total"][protocol] == 11
    assert metrics["rabbitmq_global_messages_routed_total"][protocol] == 7
    assert metrics["rabbitmq_global_messages_unroutable_dropped_total"][protocol] == 2
    assert metrics["rabbitmq_global_messages_unroutable_returned_total"][protocol] == 2
    assert metrics["rabbitmq_global_messages_confirmed_total"][protocol] == 6
