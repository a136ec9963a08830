"""A shovel loses nothing when the Leveret node that runs it is killed (SIGKILL) half-way:
10,000 persistent messages moved with ``ack-mode`` on-confirm, from a Leveret process to
another broker and from that broker back into the Leveret process; after the kill the node
starts again on its data directory, its shovel (durable, defined with ``leveret ctl
set_parameter``) runs again, and every message is at the destination (duplicates allowed,
as https://www.rabbitmq.com/shovel.html warns).

The other broker is a second Leveret (in this process), or with ``-m rabbitmq`` RabbitMQ
3.10.8 (``RABBITMQ_URL``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread
from tests.control.conftest import Node, start_node, stop_node
from tests.integration.helpers import unique

pytestmark = pytest.mark.timeout(240)

MESSAGES = 10_000


@pytest.fixture(params=["leveret", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
def far(request: pytest.FixtureRequest) -> Iterator[str]:
    """The other broker's AMQP URL (no path: its vhost ``/``, as a shovel URI says it)."""
    if request.param == "rabbitmq":
        yield os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/").rstrip("/")
        return
    broker = BrokerThread(Config(host="127.0.0.1", port=0)).start()
    try:
        yield f"amqp://guest:guest@127.0.0.1:{broker.server.port}"
    finally:
        broker.stop()


async def publish_all(url: str, queue: str) -> None:
    """MESSAGES persistent messages ``0``...``9999`` to ``queue`` (durable), confirmed."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        for start in range(0, MESSAGES, 500):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(
                            str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                        ),
                        routing_key=queue,
                    )
                    for i in range(start, start + 500)
                )
            )


async def length(url: str, queue: str) -> int:
    """Messages in ``queue`` (-1 while the broker does not answer)."""
    try:
        connection = await aio_pika.connect(url, timeout=2)
    except (TimeoutError, OSError, aio_pika.exceptions.AMQPError):
        return -1
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, durable=True, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def until(url: str, queue: str, check: object, within: float = 120.0) -> int:
    deadline = time.monotonic() + within
    while True:
        found = await length(url, queue)
        if callable(check) and check(found):
            return found
        assert time.monotonic() < deadline, f"{queue} at {url}: {found} messages"
        await asyncio.sleep(0.02)


async def bodies(url: str, queue: str, within: float = 60.0) -> set[int]:
    """The distinct bodies consumed (and acked) from ``queue`` until all MESSAGES came, or
    nothing more came for 5 s."""
    got: set[int] = set()
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        q = await channel.declare_queue(queue, durable=True, passive=True)
        deadline = time.monotonic() + within
        async with q.iterator(timeout=5) as messages:
            try:
                async for message in messages:
                    got.add(int(message.body))
                    await message.ack()
                    if len(got) == MESSAGES or time.monotonic() > deadline:
                        break
            except TimeoutError:
                pass
    return got


async def drop(url: str, *queues: str) -> None:
    """Delete the test's queues on the other broker (a shared RabbitMQ keeps nothing)."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)


def define(node: Node, name: str, value: dict[str, object]) -> None:
    result = node.ctl("set_parameter", "shovel", name, json.dumps(value))
    assert result.returncode == 0, result.stderr


async def kill_mid_way(node: Node, url: str, queue: str) -> int:
    """SIGKILL the node once ``queue`` at ``url`` holds 2,000 messages; how many it held."""
    moved = await until(url, queue, lambda n: n >= 2000)
    node.proc.kill()
    node.proc.wait(10)
    return moved


def check(got: set[int]) -> None:
    assert got == set(range(MESSAGES)), f"missing: {sorted(set(range(MESSAGES)) - got)[:20]}"


async def test_kill_the_source_node_mid_way(far: str, tmp_path: Path) -> None:
    src, dst = unique("crash-src"), unique("crash-dst")
    node = start_node(tmp_path / "data")
    try:
        await publish_all(node.url(), src)
        value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": far, "dest-queue": dst}
        define(node, "out", value)
        moved = await kill_mid_way(node, far, dst)
        assert moved < MESSAGES, "the shovel was done before the kill"
        node = start_node(tmp_path / "data")
        await until(node.url(), src, lambda n: n == 0)
        await until(far, dst, lambda n: n >= MESSAGES)
        check(await bodies(far, dst))
    finally:
        stop_node(node)
        await drop(far, dst)


async def test_kill_the_destination_node_mid_way(far: str, tmp_path: Path) -> None:
    src, dst = unique("crash-src"), unique("crash-dst")
    await publish_all(far, src)
    node = start_node(tmp_path / "data")
    try:
        value = {"src-uri": far, "src-queue": src, "dest-uri": "amqp://", "dest-queue": dst}
        define(node, "in", value)
        moved = await kill_mid_way(node, node.url(), dst)
        assert moved < MESSAGES, "the shovel was done before the kill"
        node = start_node(tmp_path / "data")
        await until(far, src, lambda n: n == 0)
        await until(node.url(), dst, lambda n: n >= MESSAGES)
        check(await bodies(node.url(), dst))
    finally:
        stop_node(node)
        await drop(far, src)
