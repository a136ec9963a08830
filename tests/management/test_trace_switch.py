"""The management API switches the traffic trace on and off at run time."""

from __future__ import annotations

import json
from pathlib import Path

import aio_pika
import aiohttp

from broker.config import Config
from broker.management import start_management
from broker.server import Server


async def test_trace_switch_records_publishes(tmp_path: Path) -> None:
    server = Server(Config(port=0))
    await server.start()
    handle = await start_management(server, "127.0.0.1", 0)
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    url = f"http://127.0.0.1:{handle.port}/api/leveret/trace"
    try:
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(url) as response:
                assert (await response.json())["enabled"] is False
            body = {"enabled": True, "directory": str(tmp_path / "trace")}
            async with http.put(url, json=body) as response:
                assert response.status == 200
                assert (await response.json())["enabled"] is True
            connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.port}/")
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"x" * 7), queue.name)
            await channel.default_exchange.publish(aio_pika.Message(b"y"), "nowhere")
            await connection.close()
            async with http.put(url, json={"enabled": False}) as response:
                state = await response.json()
            assert state == {"enabled": False, "directory": None, "written": 0, "dropped": 0}
            async with http.put(url, json={"enabled": True}) as response:
                assert response.status == 400  # no directory configured
    finally:
        await handle.close()
        await server.stop()
    lines = [
        json.loads(line)
        for path in sorted((tmp_path / "trace").glob("trace-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [(r["key"], r["size"], r["queues"]) for r in lines] == [
        (queue.name, 7, [queue.name]),
        ("nowhere", 1, []),
    ]
