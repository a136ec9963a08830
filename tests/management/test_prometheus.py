"""The Prometheus listener against rabbitmq_prometheus 3.10.8: the families it serves
(complete against tests/management/data/rabbitmq-3.10.8-prometheus.json, captured from a
running 3.10.8 by prometheus_families.py), and values that move as a client works.

The churn and family-set tests also run against a real RabbitMQ with ``-m rabbitmq``
(``RABBITMQ_URL``, ``RABBITMQ_PROMETHEUS_URL``, default http://127.0.0.1:15692; the node
needs ``rabbitmq-plugins enable rabbitmq_prometheus``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import aiohttp
import pytest

from leveret.config import Config
from leveret.management import client_metrics, metrics, ops
from leveret.server import Server

from .helpers import Mgmt, Target
from .prometheus_families import families

DATA = Path(__file__).parent / "data" / "rabbitmq-3.10.8-prometheus.json"
RABBITMQ = json.loads(DATA.read_text(encoding="utf-8"))
# prometheus_client's process collector: beside process_start_time_seconds, which 3.10.8
# has too, the families every Python exporter serves.
PROCESS_EXTRAS = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
}


def meaningful(names: dict[str, Any]) -> dict[str, Any]:
    """RabbitMQ's families less the Erlang VM's and those Leveret leaves out."""
    return {
        name: family
        for name, family in names.items()
        if not name.startswith("erlang_") and name not in metrics.LEFT_OUT
    }


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer that leaves its deliveries unacknowledged."""


async def busy(amqp_url: str) -> list[aio_pika.abc.AbstractConnection]:
    """Connections, channels, queues, consumers and messages, as the data file was
    captured with (prometheus_families.py's docstring): labelled families show labels."""
    connections = [await aio_pika.connect(amqp_url) for _ in range(2)]
    publisher = await connections[0].channel()
    queue = await publisher.declare_queue("prom-q", auto_delete=True)
    for _ in range(5):
        await publisher.default_exchange.publish(aio_pika.Message(b"x"), routing_key="prom-q")
    consumer = await connections[1].channel()
    await consumer.set_qos(prefetch_count=3)
    await (await consumer.get_queue("prom-q")).consume(ignore)
    await queue.get(fail=False)
    await asyncio.sleep(0.5)  # RabbitMQ's metrics are collected asynchronously
    return connections


async def test_families_are_rabbitmq_s(target: Target) -> None:
    """Every family of 3.10.8's /metrics and /metrics/per-object that has a meaning here
    is served with RabbitMQ's type, help text and labels, and nothing else is (but
    prometheus_client's process families)."""
    connections = await busy(target.amqp_url)
    try:
        for path in ("/metrics", "/metrics/per-object"):
            await target.text(path)  # telemetry_scrape_* counts the scrapes before
            served = families(await target.text(path))
            expected = meaningful(RABBITMQ[path])
            served = meaningful(served)  # the same rule, for RabbitMQ under -m rabbitmq
            missing = sorted(set(expected) - set(served))
            assert not missing, (path, missing)
            extra = set(served) - set(expected) - PROCESS_EXTRAS
            assert not extra, (path, sorted(extra))
            for name, family in expected.items():
                mine = served[name]
                assert (mine["type"], mine["help"]) == (family["type"], family["help"]), name
                if name != "telemetry_scrape_encoded_size_bytes":
                    assert mine["labels"] == family["labels"], (path, name)
    finally:
        for connection in connections:
            await connection.close()


async def test_detailed_groups(target: Target) -> None:
    """/metrics/detailed?family=GROUP serves the group's families, as 3.10.8 does."""
    connections = await busy(target.amqp_url)
    base = set(families(await target.text("/metrics/detailed")))
    try:
        for group, names in RABBITMQ["detailed groups"].items():
            served = set(families(await target.text(f"/metrics/detailed?family={group}")))
            # the same rule for both, so that RabbitMQ is held to it under -m rabbitmq
            assert served_here(served - base) == served_here(set(names)), group
    finally:
        for connection in connections:
            await connection.close()


def served_here(names: set[str]) -> set[str]:
    """Detailed families less those Leveret leaves out."""
    left_out = metrics.LEFT_OUT.keys()
    return {n for n in names if "rabbitmq_" + n.removeprefix("rabbitmq_detailed_") not in left_out}


def churn(values: dict[str, dict[str, float]]) -> dict[str, float]:
    """The churn and login counters."""
    names = [f"rabbitmq_{f.name}" for f in metrics.CHURN]
    found = {name[9:]: values[name][""] for name in names}
    for family in metrics.AUTH:
        found[family.name] = values["rabbitmq_" + family.name]['{protocol="amqp091"}']
    return found


async def test_churn_counters(target: Target) -> None:
    """Each step moves the counters as it moves RabbitMQ 3.10.8's (observed step by step on
    3.10.8, rabbit_core_metrics): an open counts once the connection is open, a close for
    every socket that ends; passive declares and deletes of missing queues count nothing."""
    steps: list[tuple[str, dict[str, float]]] = []
    before = churn(await target.values())

    async def step(name: str) -> None:
        nonlocal before
        await asyncio.sleep(0.3)
        after = churn(await target.values())
        steps.append((name, {k: v - before[k] for k, v in after.items() if v != before[k]}))
        before = after

    connection = await aio_pika.connect(target.amqp_url)
    await step("open")
    channel = await connection.channel()
    await step("channel")
    await channel.declare_queue("churn-q")
    await step("declare")
    await channel.declare_queue("churn-q")
    await step("redeclare")
    await channel.declare_queue("churn-q", passive=True)
    await step("passive")
    await channel.declare_queue(exclusive=True)
    await step("server-named")
    await channel.queue_delete("churn-q")
    await step("delete")
    await channel.close()
    await step("channel close")
    await connection.close()
    await step("close")
    url = urlsplit(target.amqp_url)
    host, port = url.hostname, url.port
    with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
        await aio_pika.connect(url._replace(netloc=f"guest:wrong@{host}:{port}").geturl())
    await step("refused login")
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"AMQP\x00\x00\x09\x01")
    await reader.read(4096)  # connection.start
    writer.close()
    await step("header only")
    assert steps == [
        (
            "open",
            {
                "connections_opened_total": 1,
                "auth_attempts_total": 1,
                "auth_attempts_succeeded_total": 1,
            },
        ),
        ("channel", {"channels_opened_total": 1}),
        ("declare", {"queues_declared_total": 1, "queues_created_total": 1}),
        ("redeclare", {"queues_declared_total": 1}),
        ("passive", {}),
        ("server-named", {"queues_declared_total": 1, "queues_created_total": 1}),
        ("delete", {"queues_deleted_total": 1}),
        ("channel close", {"channels_closed_total": 1}),
        # the exclusive queue goes with its connection
        ("close", {"connections_closed_total": 1, "queues_deleted_total": 1}),
        (
            "refused login",
            {
                "connections_closed_total": 1,
                "auth_attempts_total": 1,
                "auth_attempts_failed_total": 1,
            },
        ),
        ("header only", {"connections_closed_total": 1}),
    ]


# -- Leveret only -----------------------------------------------------------------------


async def test_values_follow_the_clients(mgmt: Mgmt) -> None:
    """Per-object channel and connection samples and the aggregated totals, as a publisher
    and a consumer work."""
    assert mgmt.server.prometheus is not None
    target = Target(mgmt.amqp_url, mgmt.server.prometheus.url, mgmt.http)
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()  # publisher confirms on (aio-pika's default)
        await channel.set_qos(prefetch_count=7)
        queue = await channel.declare_queue("v-q")
        for _ in range(4):
            await channel.default_exchange.publish(aio_pika.Message(b"abc"), routing_key="v-q")
        await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key="none")
        taken = await queue.get()
        await queue.consume(ignore, consumer_tag="c1")
        await asyncio.sleep(0.2)
        per_object = await target.values("/metrics/per-object")
        (label,) = per_object["rabbitmq_channel_consumers"]
        assert per_object["rabbitmq_channel_consumers"][label] == 1
        assert per_object["rabbitmq_channel_messages_unacked"][label] == 4
        assert per_object["rabbitmq_consumer_prefetch"][label] == 7
        (conn_label,) = per_object["rabbitmq_connection_channels"]
        assert per_object["rabbitmq_connection_channels"][conn_label] == 1
        assert per_object["rabbitmq_connection_incoming_bytes_total"][conn_label] > 4 * 3
        assert per_object["rabbitmq_connection_outgoing_packets_total"][conn_label] > 0
        queue_label = '{queue="v-q",vhost="/"}'
        assert per_object["rabbitmq_queue_messages_unacked"][queue_label] == 4
        assert per_object["rabbitmq_queue_messages_unacked_bytes"][queue_label] == 12
        aggregated = await target.values()
        assert aggregated["rabbitmq_channel_messages_published_total"][""] == 5
        assert aggregated["rabbitmq_channel_messages_confirmed_total"][""] == 5
        # aio-pika publishes with mandatory set: returned, not dropped
        assert aggregated["rabbitmq_channel_messages_unroutable_returned_total"][""] == 1
        assert aggregated["rabbitmq_channel_get_ack_total"][""] == 1
        assert aggregated["rabbitmq_channel_messages_delivered_ack_total"][""] == 3
        assert aggregated["rabbitmq_global_consumers"]['{protocol="amqp091"}'] == 1
        assert (
            aggregated["rabbitmq_global_messages_received_confirm_total"]['{protocol="amqp091"}']
            == 5
        )
        await taken.ack()
        await queue.delete(if_unused=False)
    # Totals never go down when their queue and channel have gone.
    await asyncio.sleep(0.1)
    after = await target.values()
    assert after["rabbitmq_channel_messages_acked_total"][""] == 1
    assert after["rabbitmq_channel_messages_delivered_ack_total"][""] == 3
    assert after["rabbitmq_global_messages_received_confirm_total"]['{protocol="amqp091"}'] == 5
    assert after["rabbitmq_channel_consumers"] == {"": 0}


async def test_detailed_vhost_filter(mgmt: Mgmt) -> None:
    """vhost=V keeps the objects of V; families of groups not asked for are not served."""
    assert mgmt.server.prometheus is not None
    target = Target(mgmt.amqp_url, mgmt.server.prometheus.url, mgmt.http)
    server = mgmt.server
    other = server.state.add_vhost("other")
    ops.declare_queue(other, "there", False, False, {})
    ops.declare_queue(server.state.vhosts["/"], "here", False, False, {})
    values = await target.values("/metrics/detailed?family=queue_coarse_metrics&vhost=other")
    assert values["rabbitmq_detailed_queue_messages"] == {'{queue="there",vhost="other"}': 0}
    assert "rabbitmq_detailed_queue_consumers" not in families(
        await target.text("/metrics/detailed?family=queue_coarse_metrics")
    )
    status = await target.values("/metrics/detailed?family=vhost_status")
    assert status["rabbitmq_cluster_vhost_status"] == {'{vhost="/"}': 1, '{vhost="other"}': 1}


async def test_aggregated_scrape_stays_small_with_3000_queues() -> None:
    """/metrics carries no per-queue labels: its size does not grow with the queues, and a
    scrape of 3,000 queues stays cheap on the loop (figures in the README). A broker of its
    own, without the management API's statistics sampler, which has its own cost."""
    server = Server(Config(host="127.0.0.1", port=0, prometheus_port=0))
    await server.start()
    assert server.prometheus is not None
    try:
        async with aiohttp.ClientSession() as session:
            target = Target("", server.prometheus.url, session)
            await scrape_3000_queues(server, target)
    finally:
        await server.stop()


async def scrape_3000_queues(server: Server, target: Target) -> None:
    """The body of the test above."""
    vhost = server.state.vhosts["/"]
    ops.declare_queue(vhost, "q-0", False, False, {})
    await target.text()
    small = len(await target.text())
    for i in range(1, 3000):
        ops.declare_queue(vhost, f"q-{i}", False, False, {})
    await target.text()
    started = time.perf_counter()
    text = await target.text()
    took = time.perf_counter() - started
    assert "queue=" not in text and 'vhost="' not in text
    # the digits of a few counts and of the scrape telemetry may grow, nothing else
    assert abs(len(text) - small) < 200, (small, len(text))
    assert took < 0.5, took
    # /metrics/per-object is big (a sample per queue and family): it is read a chunk of
    # queues and written a slice of samples at a time, and a ticker on the loop runs in
    # between. Written in one go (0.4-0.8 s here) the ticker ran once or twice; counting
    # its turns rather than timing them holds on a loaded machine.
    gaps: list[float] = []
    scraping = asyncio.create_task(target.text("/metrics/per-object"))
    last = time.perf_counter()
    while not scraping.done():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    per_object = await scraping
    assert per_object.count('queue="q-2999"') == len(metrics.QUEUE_FAMILIES)
    assert len(gaps) >= 20, len(gaps)
    print(
        f"3000 queues: /metrics {len(text)} bytes in {took * 1000:.1f} ms; /metrics/per-object "
        f"{len(per_object)} bytes, {len(gaps)} turns of the loop meanwhile, the longest "
        f"{max(gaps) * 1000:.1f} ms"
    )


async def test_management_port_serves_no_metrics(mgmt: Mgmt) -> None:
    """The management port keeps everything behind auth: /metrics is not there (it lives
    on the Prometheus listener, as RabbitMQ's management port has none either)."""
    async with aiohttp.ClientSession() as anonymous:
        for path in ("/metrics", "/metrics/per-object", "/api/overview", "/api/queues"):
            async with anonymous.get(mgmt.handle.url + path) as response:
                assert response.status in (401, 404), path
                assert "rabbitmq_" not in await response.text()
    async with mgmt.http.get(mgmt.handle.url + "/metrics") as response:
        assert response.status == 404


def dead_lettered(values: dict[str, dict[str, float]]) -> dict[str, float]:
    """The classic queues' dead-letter counters: 'reason strategy' -> count."""
    found = {}
    for family, _reason, _pairs in client_metrics.DEAD_LETTERED:
        name = "rabbitmq_" + family.name
        for labels, value in values[name].items():
            if "rabbit_classic_queue" in labels:
                reason = family.name.removeprefix("global_messages_dead_lettered_")
                strategy = labels.split('dead_letter_strategy="')[1].split('"')[0]
                found[f"{reason.removesuffix('_total')} {strategy}"] = value
    return found


async def test_dead_letter_counters(target: Target) -> None:
    """Messages dead-lettered count with or without a dead-letter exchange to go to (as
    observed on 3.10.8: ``disabled`` when there is none, or when it does not exist)."""
    connection = await aio_pika.connect(target.amqp_url)
    steps: list[tuple[str, dict[str, float]]] = []
    async with connection:
        channel = await connection.channel()
        before = dead_lettered(await target.values())

        async def step(name: str) -> None:
            nonlocal before
            await asyncio.sleep(0.5)
            after = dead_lettered(await target.values())
            steps.append((name, {k: v - before[k] for k, v in after.items() if v != before[k]}))
            before = after

        async def reject(queue_name: str, arguments: dict[str, Any]) -> None:
            queue = await channel.declare_queue(queue_name, arguments=arguments)
            await channel.default_exchange.publish(aio_pika.Message(b"x"), queue_name)
            message = await queue.get(timeout=5)
            await message.reject(requeue=False)
            await step(queue_name)
            await queue.delete(if_unused=False, if_empty=False)

        await reject("dl-plain", {})
        await reject("dl-to-default", {"x-dead-letter-exchange": ""})
        await reject("dl-to-missing", {"x-dead-letter-exchange": "dl-nowhere"})
        ttl = await channel.declare_queue("dl-ttl", arguments={"x-message-ttl": 1})
        await channel.default_exchange.publish(aio_pika.Message(b"x"), "dl-ttl")
        await asyncio.sleep(0.2)
        await ttl.get(fail=False)  # expired messages go when the queue is read
        await step("dl-ttl")
        await ttl.delete(if_unused=False, if_empty=False)
        short = await channel.declare_queue("dl-max", arguments={"x-max-length": 1})
        for body in (b"1", b"2"):
            await channel.default_exchange.publish(aio_pika.Message(body), "dl-max")
        await step("dl-max")
        message = await short.get(timeout=5)
        await message.nack(requeue=True)
        await step("requeued")
        await short.delete(if_unused=False, if_empty=False)
    assert steps == [
        ("dl-plain", {"rejected disabled": 1}),
        ("dl-to-default", {"rejected at_most_once": 1}),
        ("dl-to-missing", {"rejected disabled": 1}),
        ("dl-ttl", {"expired disabled": 1}),
        ("dl-max", {"maxlen disabled": 1}),
        ("requeued", {}),
    ]
