"""POST /api/leveret/faults/{vhost}/{fault} (broker/management/faults.py): each fault as a
real aio-pika client sees it, and RabbitMQ-style errors for bad requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import pytest

from leveret.config import Config
from leveret.server import Server
from tests.plugin.test_faults import acking_consumer, wait_cancelled

from .helpers import Mgmt, basic

pytestmark = pytest.mark.timeout(30)


async def closed_with(connection: aio_pika.abc.AbstractConnection) -> BaseException | None:
    """Wait until ``connection`` closes; what it closed with."""
    closed: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    connection.close_callbacks.add(
        lambda _c, exc=None: closed.done() or closed.set_result(exc)  # type: ignore[misc]
    )
    return await asyncio.wait_for(closed, 10)


async def test_drop_connections(mgmt: Mgmt) -> None:
    named = await aio_pika.connect(mgmt.amqp_url, client_properties={"connection_name": "a"})
    other = await aio_pika.connect(mgmt.amqp_url)
    try:
        status, body = await mgmt.request(
            "POST", "leveret", "faults", "/", "drop-connections", body={"client": "a"}
        )
        assert (status, body) == (
            200,
            {"vhost": "/", "fault": "drop-connections", "connections": 1},
        )
        exc = await closed_with(named)
        assert exc is not None and "320" not in str(exc)  # a reset, not a connection.close
        assert not other.is_closed
    finally:
        await other.close()


async def test_close_connections_with_a_reason(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    status, body = await mgmt.request(
        "POST", "leveret", "faults", "/", "close-connections", body={"reason": "bye"}
    )
    assert (status, body["connections"]) == (200, 1)
    exc = await closed_with(connection)
    assert exc is not None and "CONNECTION_FORCED - bye" in str(exc)


async def test_alarms_delay_and_cancel(mgmt: Mgmt) -> None:
    for fault, monitor in (
        ("memory-alarm", mgmt.server.state.memory),
        ("disk-alarm", mgmt.server.state.disk),
    ):
        status, body = await mgmt.request("POST", "leveret", "faults", "/", fault)
        assert (status, body["on"], monitor.alarm) == (200, True, True)
        status, body = await mgmt.request(
            "POST", "leveret", "faults", "/", fault, body={"on": False}
        )
        assert (status, body["on"], monitor.alarm) == (200, False, False)
    status, body = await mgmt.request("POST", "leveret", "faults", "/", "delay", body={"ms": 20})
    assert (status, mgmt.server.state.vhosts["/"].write_delay) == (200, 0.02)
    await mgmt.request("POST", "leveret", "faults", "/", "delay", body={"ms": 0})
    connection = await aio_pika.connect(mgmt.amqp_url)
    try:
        channel = await connection.channel()
        tag = await acking_consumer(channel, "q")
        status, body = await mgmt.request(
            "POST", "leveret", "faults", "/", "cancel-consumers", body={"queue": "q"}
        )
        assert (status, body["consumers"]) == (200, 1)
        await wait_cancelled(channel, tag)
    finally:
        await connection.close()


@pytest.mark.parametrize(
    ("path", "body", "status", "reason"),
    [
        (("no-such-vhost", "drop-connections"), None, 404, "no vhost 'no-such-vhost'"),
        (("/", "cancel-consumers"), {"queue": "nope"}, 404, "no queue 'nope' in vhost '/'"),
        (("/", "explode"), None, 404, "Not Found"),
        (("/", "delay"), {"ms": -5}, 400, "ms must be 0 or more, not -5"),
        (("/", "delay"), {}, 400, "delay needs ms"),
        (("/", "delay"), "not json", 400, "not_json"),
        (("/", "memory-alarm"), {"on": "yes"}, 400, "on must be true or false, not 'yes'"),
        (
            ("/", "drop-connections"),
            {"colour": 1},
            400,
            "drop-connections takes no argument colour",
        ),
        (("/", "restart"), None, 400, "restart() needs a broker with a data directory"),
    ],
)
async def test_errors(
    mgmt: Mgmt, path: tuple[str, str], body: Any, status: int, reason: str
) -> None:
    url = mgmt.url("leveret", "faults", *path)
    data = body if isinstance(body, str) else None
    async with mgmt.http.post(url, data=data, json=None if data else body) as response:
        got = await response.json(content_type=None)
        assert response.status == status, got
    assert got["error"] == ("bad_request" if status == 400 else "Object Not Found")
    assert got["reason"].startswith(reason)
    assert not mgmt.server.state.memory.alarm  # nothing changed


async def test_administrators_only(mgmt: Mgmt) -> None:
    mgmt.server.state.access.add_user("mon", password="pw", tags=["monitoring"])
    status, body = await mgmt.request(
        "POST", "leveret", "faults", "/", "memory-alarm", auth=("mon", "pw")
    )
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not administrator user"})
    status, _ = await mgmt.request(
        "POST", "leveret", "faults", "/", "memory-alarm", auth=("guest", "wrong")
    )
    assert status == 401
    assert not mgmt.server.state.memory.alarm


async def test_restart_answers_202_and_the_node_comes_back(tmp_path: Path) -> None:
    config = Config(host="127.0.0.1", port=0, management_port=0, data_dir=tmp_path)
    server = Server(config)
    await server.start()
    try:
        assert server.management is not None
        base = server.management.url
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/"
        connection = await aio_pika.connect(url)
        channel = await connection.channel()
        await channel.declare_queue("durable", durable=True)
        async with aiohttp.ClientSession(headers=basic("guest", "guest")) as http:
            # A journal and a manual clock started through the API carry on after it.
            for path, body in (("journal", {"recording": True}), ("clock", {"mode": "manual"})):
                async with http.put(f"{base}/api/leveret/{path}/%2F", json=body) as response:
                    assert response.status == 204
            await channel.default_exchange.publish(aio_pika.Message(b"before"), "durable")
            async with http.get(f"{base}/api/leveret/clock/%2F") as response:
                frozen_at = (await response.json())["now"]
            async with http.post(
                f"{base}/api/leveret/faults/%2F/restart", json={"kill": True}
            ) as response:
                assert response.status == 202
                assert await response.json() == {"vhost": "/", "fault": "restart", "kill": True}
            await closed_with(connection)
            for _ in range(500):  # the same port, once the node is back
                try:
                    async with http.get(f"{base}/api/aliveness-test/%2F") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.01)
            assert response.status == 200
            again = await aio_pika.connect(url)
            channel = await again.channel()
            await channel.declare_queue("durable", durable=True, passive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"after"), "durable")
            await again.close()
            async with http.get(f"{base}/api/leveret/journal/%2F") as response:
                records = await response.json()
                published = [
                    r for r in records if r["kind"] == "published" and r["routing_key"] == "durable"
                ]
                assert [r["payload"] for r in published] == ["before", "after"]
            async with http.get(f"{base}/api/leveret/clock/%2F") as response:
                clock = await response.json()
                assert (clock["mode"], clock["now"]) == ("manual", frozen_at)
    finally:
        await server.stop()
