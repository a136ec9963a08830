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


async def publish(url: str, queue: str, count: int, start: int = 0, **properties: Any) -> None:
    """``count`` persistent messages ``start``, ``start + 1``... to ``queue`` (declared
    durable), confirmed."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        for i in range(start, start + count):
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


async def define(node: Mgmt, name: str, value: dict[str, Any], vhost: str = "/") -> None:
    status, body = await node.request(
        "PUT", "parameters", "shovel", vhost, name, body={"value": value}
    )
    assert status == 201, body


def far(node: Mgmt, user: str = "guest", password: str = "guest") -> str:
    return f"amqp://{user}:{password}@127.0.0.1:{node.server.port}"


async def until_removed(node: Mgmt) -> None:
    """Until the node has no shovel left (one with src-delete-after removes itself)."""

    async def gone() -> bool:
        return await node.get("shovels") == []

    await wait_until(gone, within=15)


async def test_unreachable_destination_then_back(tmp_path: Path) -> None:
    a, b = await _node(), await _node(tmp_path / "b")
    port = b.server.port
    await _close(b)  # nothing listens there now
    try:
        await publish(a.amqp_url, "outbox", 20)
        value = {
            "src-uri": "amqp://",
            "src-queue": "outbox",
            "dest-uri": f"amqp://guest:guest@127.0.0.1:{port}",
            "dest-queue": "inbox",
            "reconnect-delay": 0.2,
        }
        await define(a, "late", value)
        terminated = await until_state(a, "late", "terminated")
        assert "could not connect to destination" in terminated["reason"]
        assert "src_uri" not in terminated
        # The rest of the node is untouched: the messages wait at the source.
        assert await count(a, "outbox") == 20
        server = Server(Config(host="127.0.0.1", port=port, data_dir=tmp_path / "b"))
        await server.start()
        b = Mgmt(
            server,
            await start_management(server.state, "127.0.0.1", 0),
            aiohttp.ClientSession(headers=basic("guest", "guest")),
        )
        await until_state(a, "late", "running")
        assert sorted(int(m.body) for m in await drain(b.amqp_url, "inbox")) == list(range(20))
    finally:
        await _close(a)
        await _close(b)


async def test_refused_login_terminates_with_the_reason(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    value = {
        "src-uri": "amqp://",
        "src-queue": "q",
        "dest-uri": far(b, "guest", "wrong"),
        "dest-queue": "q",
    }
    await define(a, "denied", value)
    state = await until_state(a, "denied", "terminated")
    assert "ACCESS_REFUSED" in state["reason"], state
    # A bad shovel does not stop others.
    await define(a, "fine", {**value, "dest-uri": far(b)})
    await until_state(a, "fine", "running")


async def test_delete_after_queue_length_moves_what_was_there(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    await publish(a.amqp_url, "backlog", 100)
    value = {
        "src-uri": "amqp://",
        "src-queue": "backlog",
        "src-delete-after": "queue-length",
        "src-prefetch-count": 10,
        "dest-uri": far(b),
        "dest-queue": "moved",
    }
    await define(a, "once", value)

    async def counted() -> bool:  # running, or already done: the length is taken
        return [s["state"] for s in await a.get("shovels")] in ([], ["running"])

    await wait_until(counted)
    # Published while it runs (or after): behind the first 100, so not moved.
    await publish(a.amqp_url, "backlog", 30, start=100)

    await until_removed(a)
    assert await a.get("parameters", "shovel", "/") == []
    assert sorted(int(m.body) for m in await drain(b.amqp_url, "moved")) == list(range(100))
    left = await drain(a.amqp_url, "backlog")
    assert sorted(int(m.body) for m in left) == list(range(100, 130))


async def test_delete_after_a_count(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    await publish(a.amqp_url, "some", 10)
    value = {
        "src-uri": "amqp://",
        "src-queue": "some",
        "src-delete-after": 4,
        "dest-uri": far(b),
        "dest-queue": "four",
    }
    await define(a, "four", value)

    await until_removed(a)
    assert sorted(int(m.body) for m in await drain(b.amqp_url, "four")) == [0, 1, 2, 3]
    assert await count(a, "some") == 6


@pytest.mark.parametrize("mode", ["on-publish", "no-ack"])
async def test_other_ack_modes_move_messages(two: tuple[Mgmt, Mgmt], mode: str) -> None:
    a, b = two
    await publish(a.amqp_url, "src", 50)
    await define(
        a,
        "m",
        {
            "src-uri": "amqp://",
            "src-queue": "src",
            "ack-mode": mode,
            "dest-uri": far(b),
            "dest-queue": "dst",
        },
    )
    assert sorted(int(m.body) for m in await drain(b.amqp_url, "dst")) == list(range(50))
    assert await count(a, "src") == 0


async def test_from_an_exchange_to_an_exchange_with_headers(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    value = {
        "src-uri": "amqp://",
        "src-exchange": "amq.topic",
        "src-exchange-key": "orders.#",
        "dest-uri": far(b),
        "dest-exchange": "amq.direct",
        "dest-exchange-key": "routed",
        "dest-add-forward-headers": True,
        "dest-add-timestamp-header": True,
        "dest-publish-properties": {"delivery_mode": 2, "app_id": "shovelled"},
    }
    connection = await aio_pika.connect(b.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("landing")
        await queue.bind("amq.direct", "routed")
        await define(a, "x2x", value)
        await until_state(a, "x2x", "running")
        source = await aio_pika.connect(a.amqp_url)
        async with source:
            out = await source.channel()
            topic = await out.get_exchange("amq.topic")
            await topic.publish(aio_pika.Message(b"kept", headers={"mine": 1}), "orders.eu")
            await topic.publish(aio_pika.Message(b"not me"), "invoices.eu")
        message = await queue.get(timeout=10, fail=False)
        for _ in range(100):
            if message is not None:
                break
            await asyncio.sleep(0.05)
            message = await queue.get(fail=False)
        assert message is not None and message.body == b"kept"
        assert (message.app_id, message.delivery_mode) == (
            "shovelled",
            aio_pika.DeliveryMode.PERSISTENT,
        )
        headers = message.headers
        assert headers["mine"] == 1 and isinstance(headers["x-shovelled-timestamp"], int)
        [forward] = headers["x-shovelled"]
        assert forward["shovel-name"] == "x2x" and forward["src-exchange"] == "amq.topic"
        assert forward["dest-exchange"] == "amq.direct" and forward["dest-exchange-key"] == "routed"
        await asyncio.sleep(0.2)
        assert await queue.get(fail=False) is None  # invoices.eu was not bound


async def test_shovels_survive_a_restart(tmp_path: Path) -> None:
    a, b = await _node(tmp_path / "a"), await _node()
    try:
        value = {
            "src-uri": "amqp://",
            "src-queue": "durable-src",
            "dest-uri": far(b),
            "dest-queue": "durable-dst",
        }
        await define(a, "kept", value)
        await until_state(a, "kept", "running")
        await a.server.restart(kill=True)
        await until_state(a, "kept", "running")
        await publish(a.amqp_url, "durable-src", 5)
        assert sorted(int(m.body) for m in await drain(b.amqp_url, "durable-dst")) == list(range(5))
        [parameter] = await a.get("parameters", "shovel")
        assert parameter["value"] == value
    finally:
        await _close(a)
        await _close(b)


async def test_restart_and_vhost_deletion(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    status, _ = await a.request("PUT", "vhosts", "tenant")
    assert status == 201
    value = {"src-uri": "amqp:///tenant", "src-queue": "q", "dest-uri": far(b), "dest-queue": "q"}
    await define(a, "t", value, vhost="tenant")
    await until_state(a, "t", "running")
    [listed] = await a.get("shovels", "tenant")
    assert listed["vhost"] == "tenant" and listed["node"]
    status, _ = await a.request("DELETE", "shovels", "vhost", "tenant", "t", "restart")
    assert status == 204
    await until_state(a, "t", "running")
    status, _ = await a.request("DELETE", "shovels", "vhost", "tenant", "nope", "restart")
    assert status == 404
    status, _ = await a.request("DELETE", "vhosts", "tenant")
    assert status == 204
    assert await a.get("shovels") == []


async def test_amqps_with_rabbitmqs_tls_options_and_heartbeat(tmp_path: Path) -> None:
    from tests.test_settings_tls import make_certificates

    certs = make_certificates(tmp_path)
    tls = Server(
        Config(
            host="127.0.0.1",
            port=0,
            tls_port=0,
            tls_cert=certs["server_pem"],
            tls_key=certs["server_key"],
            tls_ca=certs["ca_pem"],  # mutual TLS: the shovel shows its certificate
        )
    )
    await tls.start()
    a = await _node()
    try:
        options = (
            f"cacertfile={certs['ca_pem']}&certfile={certs['client_pem']}"
            f"&keyfile={certs['client_key']}&verify=verify_peer&server_name_indication=localhost"
        )
        uri = f"amqps://guest:guest@127.0.0.1:{tls.tls_port}?{options}&heartbeat=7"
        await define(
            a, "tls", {"src-uri": "amqp://", "src-queue": "s", "dest-uri": uri, "dest-queue": "d"}
        )
        running = await until_state(a, "tls", "running")
        assert running["dest_uri"] == f"amqps://127.0.0.1:{tls.tls_port}?{options}&heartbeat=7"
        assert [c.heartbeat for c in tls.state.connections] == [7]
        await publish(a.amqp_url, "s", 3)
        assert sorted(
            int(m.body) for m in await drain(f"amqp://guest:guest@127.0.0.1:{tls.port}", "d")
        ) == [0, 1, 2]
        # Without the CA the server's certificate is refused: terminated, with the reason.
        untrusted = f"amqps://guest:guest@127.0.0.1:{tls.tls_port}?verify=verify_peer"
        await define(
            a, "untrusted", {"src-uri": "amqp://", "src-queue": "s2", "dest-uri": untrusted}
        )
        refused = await until_state(a, "untrusted", "terminated")
        assert "CERTIFICATE_VERIFY_FAILED" in refused["reason"], refused
    finally:
        await _close(a)
        await tls.stop()


async def test_a_missing_source_queue_is_declared_unless_refused(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    # As RabbitMQ 3.10 (rabbit_amqp091_shovel), a source queue that does not exist is
    # declared durable...
    await define(
        a,
        "fresh",
        {"src-uri": far(b), "src-queue": "new-here", "dest-uri": "amqp://", "dest-queue": "x"},
    )
    await until_state(a, "fresh", "running")
    declared = await b.get("queues", "/", "new-here")
    assert declared["durable"] is True
    # ...unless the user may not: then the shovel is terminated with the broker's reason.
    assert (await b.request("PUT", "users", "reader", body={"password": "r", "tags": ""}))[0] == 201
    grant = {"configure": "^$", "write": ".*", "read": ".*"}
    assert (await b.request("PUT", "permissions", "/", "reader", body=grant))[0] == 201
    src = far(b, "reader", "r")
    await define(
        a,
        "limited",
        {"src-uri": src, "src-queue": "not-here", "dest-uri": "amqp://", "dest-queue": "x"},
    )
    refused = await until_state(a, "limited", "terminated")
    assert refused["reason"] == (
        "ACCESS_REFUSED - configure access to queue 'not-here' in vhost '/' "
        "refused for user 'reader'"
    ), refused


async def test_no_ack_with_queue_length_loses_nothing(two: tuple[Mgmt, Mgmt]) -> None:
    a, b = two
    await publish(a.amqp_url, "fast", 200)
    value = {
        "src-uri": "amqp://",
        "src-queue": "fast",
        "ack-mode": "no-ack",
        "src-delete-after": "queue-length",
        "dest-uri": far(b),
        "dest-queue": "fast-copy",
    }
    await define(a, "quick", value)
    await until_removed(a)
    # no-ack: the source forgets a message as it delivers it, so whatever it delivered
    # past the count is moved too rather than dropped.
    moved = sorted(int(m.body) for m in await drain(b.amqp_url, "fast-copy"))
    left = sorted(int(m.body) for m in await drain(a.amqp_url, "fast", within=1.0))
    assert sorted(moved + left) == list(range(200)) and moved[:200] == list(range(len(moved)))
