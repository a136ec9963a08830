"""Dynamic shovels between two Leveret nodes, defined through the management API as
rabbitmq_shovel 3.10 defines them (PUT /api/parameters/shovel/VHOST/NAME), watched through
GET /api/shovels, and checked by real clients (aio-pika) on both nodes.

The same scenarios against RabbitMQ 3.10.8 are in tests/test_shovel_rabbitmq.py
(``-m rabbitmq``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import pytest

from leveret.config import Config
from leveret.management import start_management
from leveret.server import Server
from tests.integration.helpers import wait_until

from .helpers import Mgmt, basic

pytestmark = pytest.mark.timeout(60)


async def _node(data_dir: Path | None = None) -> Mgmt:
    server = Server(Config(host="127.0.0.1", port=0, data_dir=data_dir))
    await server.start()
    handle = await start_management(server.state, "127.0.0.1", 0)
    return Mgmt(server, handle, aiohttp.ClientSession(headers=basic("guest", "guest")))


async def _close(node: Mgmt) -> None:
    await node.http.close()
    await node.handle.close()
    await node.server.stop()


@pytest.fixture
async def two() -> AsyncIterator[tuple[Mgmt, Mgmt]]:
    """Two nodes: the shovels run on the first, the second is the far side."""
    a, b = await _node(), await _node()
    try:
        yield a, b
    finally:
        await _close(a)
        await _close(b)


async def publish(url: str, queue: str, count: int, **properties: Any) -> None:
    """``count`` persistent messages ``0``, ``1``... to ``queue`` (declared durable),
    confirmed."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        for i in range(count):
            await channel.default_exchange.publish(
                aio_pika.Message(
                    str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT, **properties
                ),
                routing_key=queue,
            )


async def drain(url: str, queue: str, within: float = 20.0) -> list[aio_pika.IncomingMessage]:
    """Every message of ``queue`` (acked), once it stays empty for a moment."""
    got: list[aio_pika.IncomingMessage] = []
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, durable=True)
        deadline = asyncio.get_running_loop().time() + within
        while True:
            message = await q.get(fail=False)
            if message is None:
                if asyncio.get_running_loop().time() > deadline or got:
                    await asyncio.sleep(0.3)
                    message = await q.get(fail=False)
                    if message is None:
                        return got
                else:
                    await asyncio.sleep(0.05)
                    continue
            await message.ack()
            got.append(message)


async def count(node: Mgmt, queue: str) -> int:
    status, data = await node.request("GET", "queues", "/", queue)
    return int(data["messages"]) if status == 200 else -1


async def state_of(node: Mgmt, name: str) -> dict[str, Any]:
    for item in await node.get("shovels"):
        if item["name"] == name:
            return dict(item)
    raise AssertionError(f"no shovel {name}")


async def until_state(node: Mgmt, name: str, state: str) -> dict[str, Any]:
    async def reached() -> bool:
        return (await state_of(node, name))["state"] == state

    await wait_until(reached, within=15)
    return await state_of(node, name)


async def test_moves_every_message_to_another_node(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    await publish(a.amqp_url, "outbox", 500)
    remote = f"amqp://guest:guest@127.0.0.1:{b.server.port}"
    value = {"src-uri": "amqp://", "src-queue": "outbox", "dest-uri": remote, "dest-queue": "inbox"}
    status, _ = await a.request("PUT", "parameters", "shovel", "/", "move", body={"value": value})
    assert status == 201
    running = await until_state(a, "move", "running")
    assert (
        running["src_uri"] == "amqp://"
        and running["dest_uri"] == f"amqp://127.0.0.1:{b.server.port}"
    )
    assert (running["src_queue"], running["dest_queue"], running["type"]) == (
        "outbox",
        "inbox",
        "dynamic",
    )
    got = await drain(b.amqp_url, "inbox")
    assert sorted(int(m.body) for m in got) == list(range(500))
    assert all(m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT for m in got)
    assert await count(a, "outbox") == 0
    # Still running: what is published later follows, its properties as they were (the
    # management API's publish sets no message_id, which a client library would add).
    for i in range(3):
        body = {
            "properties": {"priority": 3},
            "routing_key": "outbox",
            "payload": str(i),
            "payload_encoding": "string",
        }
        await a.request("POST", "exchanges", "/", "amq.default", "publish", body=body)
    later = await drain(b.amqp_url, "inbox")
    assert sorted(int(m.body) for m in later) == [0, 1, 2]
    assert [(m.message_id, m.priority, m.headers) for m in later] == [(None, 3, {})] * 3
    [parameter] = await a.get("parameters", "shovel", "/")
    assert parameter == {"value": value, "vhost": "/", "component": "shovel", "name": "move"}
    status, _ = await a.request("PUT", "parameters", "shovel", "/", "move", body={"value": value})
    assert status == 204
    status, _ = await a.request("DELETE", "parameters", "shovel", "/", "move")
    assert status == 204
    assert await a.get("shovels") == []
    status, _ = await a.request("DELETE", "parameters", "shovel", "/", "move")
    assert status == 404
