"""GET /api/nodes with the process's true figures, and no null field anywhere in the API's
listings (RabbitMQ's clients, rabbitmqadmin first, take a field that is there to have a
value)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aio_pika

from leveret.node.memory import resident_bytes

from .helpers import Mgmt

# Fields of 3.10.8's /api/nodes that Leveret serves (observed on 3.10.8; those it leaves
# out are Erlang's: processes, garbage collection, Mnesia, file_handle_cache I/O,
# applications, plugins, log files, net_ticktime).
NODE_FIELDS = {
    "name",
    "type",
    "running",
    "os_pid",
    "partitions",
    "cluster_links",
    "rates_mode",
    "exchange_types",
    "auth_mechanisms",
    "contexts",
    "mem_used",
    "mem_limit",
    "mem_alarm",
    "mem_calculation_strategy",
    "disk_free",  # without a data dir too: the working directory's file system
    "disk_free_limit",
    "disk_free_alarm",
    "fd_used",
    "fd_total",
    "sockets_used",
    "sockets_total",
    "uptime",
    "run_queue",
    "processors",
    "connection_created",
    "connection_closed",
    "channel_created",
    "channel_closed",
    "queue_declared",
    "queue_created",
    "queue_deleted",
}


def nulls(value: Any, where: str = "") -> list[str]:
    """Where ``value`` holds a JSON null."""
    if value is None:
        return [where]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in nulls(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in nulls(v, f"{where}[{i}]")]
    return []


async def test_node_figures_are_the_process_s(mgmt: Mgmt) -> None:
    connections = [await aio_pika.connect(mgmt.amqp_url) for _ in range(2)]
    try:
        channel = await connections[0].channel()
        await channel.declare_queue("n-q")
        (node,) = await mgmt.get("nodes")
        assert set(node) == NODE_FIELDS
        one = await mgmt.get("nodes", node["name"])
        assert set(one) == NODE_FIELDS and one["name"] == node["name"]
        rss = resident_bytes()
        assert rss is not None
        assert 0.8 * rss < node["mem_used"] < 1.25 * rss  # RSS, not queued message bytes
        assert node["mem_limit"] == mgmt.server.state.memory.limit
        fds = len(os.listdir("/proc/self/fd"))
        assert abs(node["fd_used"] - fds) <= 3
        assert node["sockets_used"] == 2
        assert node["fd_used"] < node["fd_total"]
        assert node["sockets_used"] < node["sockets_total"] <= node["fd_total"]
        assert node["processors"] == len(os.sched_getaffinity(0))
        assert node["run_queue"] >= 1  # the thread answering is running
        assert node["os_pid"] == str(os.getpid())
        assert (node["connection_created"], node["channel_created"]) == (2, 1)
        assert (node["queue_declared"], node["queue_created"]) == (1, 1)
        first = node["uptime"]
        await asyncio.sleep(0.05)
        (later,) = await mgmt.get("nodes")
        assert later["uptime"] >= first + 40
        ports = {c["description"]: c["port"] for c in node["contexts"]}
        assert mgmt.server.prometheus is not None
        assert ports == {
            "RabbitMQ Management": str(mgmt.handle.port),
            "RabbitMQ Prometheus": str(mgmt.server.prometheus.port),
        }
    finally:
        for connection in connections:
            await connection.close()
    status, _ = await mgmt.request("GET", "nodes", "rabbit@elsewhere")
    assert status == 404


async def test_no_null_fields(mgmt: Mgmt) -> None:
    """Every listing, with objects of each kind in it, holds no null."""
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("plain")
        await channel.declare_queue("sac", arguments={"x-single-active-consumer": True})
        await channel.declare_queue(exclusive=True)
        await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="plain")
        listings = (
            "overview",
            "nodes",
            "queues",
            "exchanges",
            "bindings",
            "connections",
            "channels",
            "consumers",
            "vhosts",
            "users",
            "permissions",
            "policies",
            "parameters",
            "definitions",
        )
        await queue.consume(ignore)
        for path in listings:
            data = await mgmt.get(path)
            assert not nulls(data), (path, nulls(data))
        plain = await mgmt.get("queues", "/", "plain")
        assert "policy" not in plain and "exclusive_consumer_tag" not in plain


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer that leaves its deliveries unacknowledged."""
