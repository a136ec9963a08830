"""A channel's ``messages_unconfirmed``: publishes whose confirm the broker still owes.

Persistent messages for a durable queue are confirmed after the fsync that covers them
(broker/persistence.py, group commit). The test holds that fsync back, so the count can be
seen before the confirms go out, and falls to 0 once they have. Leveret only: RabbitMQ
gives no way to hold its fsync, and confirms so fast that the count is rarely seen.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aio_pika
import aiohttp

from leveret.config import Config
from leveret.management import start_management
from leveret.server import Server

from .helpers import basic


async def test_unconfirmed_publishes_are_counted_until_confirmed(tmp_path: Path) -> None:
    server = Server(Config(host="127.0.0.1", port=0, data_dir=tmp_path))
    await server.start()
    handle = await start_management(server.state, "127.0.0.1", 0, stats_interval=0.2)
    persistence = server.state.persistence
    assert persistence is not None
    held = threading.Event()
    sync = persistence.store.sync

    def held_sync() -> int:
        held.wait(10)  # in the persistence's worker thread, not on the loop
        return sync()

    persistence.store.sync = held_sync  # type: ignore[method-assign]

    async def unconfirmed(http: aiohttp.ClientSession) -> list[int]:
        async with http.get(f"{handle.url}/api/channels") as response:
            assert response.status == 200
            return [c["messages_unconfirmed"] for c in await response.json() if c["confirm"]]

    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.port}/")
    try:
        channel = await connection.channel()  # publisher confirms on
        queue = await channel.declare_queue("durable-unconfirmed", durable=True)
        message = aio_pika.Message(b"x", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        publishes = [
            asyncio.create_task(channel.default_exchange.publish(message, queue.name))
            for _ in range(3)
        ]
        async with aiohttp.ClientSession(headers=basic("guest", "guest")) as http:
            for _ in range(100):
                if await unconfirmed(http) == [3]:
                    break
                await asyncio.sleep(0.02)
            assert await unconfirmed(http) == [3]
            assert not any(task.done() for task in publishes)
            held.set()
            await asyncio.wait_for(asyncio.gather(*publishes), 5)
            assert await unconfirmed(http) == [0]
    finally:
        held.set()
        await connection.close()
        await handle.close()
        await server.stop()
