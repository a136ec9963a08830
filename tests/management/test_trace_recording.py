"""A running broker's trace reaches the writer while publishing has stopped, without a
flush: the open batch is handed over by the event loop at the writer's request."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika

from .helpers import Mgmt


async def test_rows_reach_the_writer_when_publishing_stops(mgmt: Mgmt, tmp_path: Path) -> None:
    body = {"enabled": True, "directory": str(tmp_path / "trace")}
    status, _ = await mgmt.request("PUT", "leveret", "trace", body=body)
    assert status == 200
    connection = await aio_pika.connect(mgmt.amqp_url)
    channel = await connection.channel()
    queue = await channel.declare_queue(exclusive=True)
    for n in range(3):
        await channel.default_exchange.publish(aio_pika.Message(b"x" * n), queue.name)
    written = 0
    for _ in range(50):  # the writer wakes every 0.2 s
        state = await mgmt.get("leveret", "trace")
        written = state["written"]
        if written == 3:
            break
        await asyncio.sleep(0.1)
    await connection.close()
    assert (written, state["dropped"]) == (3, 0)
