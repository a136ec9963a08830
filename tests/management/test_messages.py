"""Messages through the API: publish (then consumed over AMQP), get with every ackmode
(after AMQP publishes), purge, and durability of API publishes across a restart."""

from __future__ import annotations

import asyncio
import base64
import datetime
from pathlib import Path

import aio_pika
import aiohttp
import pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread
from leveret.management import start_management
from leveret.server import Server

from .helpers import Mgmt, basic


def publish_body(payload: str, routing_key: str, **properties: object) -> dict[str, object]:
    return {
        "properties": properties,
        "routing_key": routing_key,
        "payload": payload,
        "payload_encoding": "string",
    }


async def test_publish_via_api_then_get_over_amqp(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "inbox", body={})
    status, body = await mgmt.request(
        "POST",
        "exchanges",
        "/",
        "amq.default",
        "publish",
        body=publish_body(
            "héllo",
            "inbox",
            content_type="text/plain",
            delivery_mode=2,
            priority=3,
            headers={"trace": "t-1", "n": 7},
            message_id="m-1",
            timestamp=1700000000,
            type="greeting",
        ),
    )
    assert (status, body) == (200, {"routed": True})
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.get_queue("inbox")
        message = await queue.get(timeout=5)
        assert message.body == "héllo".encode()
        assert message.content_type == "text/plain"
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert message.priority == 3
        assert message.headers == {"trace": "t-1", "n": 7}
        assert message.message_id == "m-1"
        assert message.type == "greeting"
        assert message.timestamp == datetime.datetime.fromtimestamp(1700000000, datetime.UTC)
        assert message.routing_key == "inbox"
        await message.ack()


async def test_publish_unroutable_base64_and_errors(mgmt: Mgmt) -> None:
    status, body = await mgmt.request(
        "POST", "exchanges", "/", "amq.direct", "publish", body=publish_body("x", "nobody")
    )
    assert (status, body) == (200, {"routed": False})
    await mgmt.request("PUT", "queues", "/", "bin", body={})
    raw = bytes(range(256))
    status, body = await mgmt.request(
        "POST",
        "exchanges",
        "/",
        "amq.default",
        "publish",
        body={
            "properties": {},
            "routing_key": "bin",
            "payload": base64.b64encode(raw).decode(),
            "payload_encoding": "base64",
        },
    )
    assert (status, body) == (200, {"routed": True})
    [got] = await post_get(mgmt, "bin", ackmode="ack_requeue_false", encoding="auto")
    assert got["payload_encoding"] == "base64"  # not valid UTF-8: base64 even with "auto"
    assert base64.b64decode(got["payload"]) == raw
    assert got["payload_bytes"] == 256
    assert got["properties"] == []  # RabbitMQ's encoding of an empty property list
    # Mandatory keys, and the errors of a channel.
    status, body = await mgmt.request(
        "POST", "exchanges", "/", "amq.direct", "publish", body={"payload": "x"}
    )
    assert status == 400
    # In with_decode's key order, printed with ~p: too long for one line (observed, 3.10.8).
    assert body["reason"] == (
        "[{key_missing,routing_key},\n {key_missing,properties},\n {key_missing,payload_encoding}]"
    )
    status, body = await mgmt.request(
        "POST",
        "exchanges",
        "/",
        "amq.direct",
        "publish",
        body=publish_body("x", "k", expiration="soon"),
    )
    assert status == 400
    assert body["reason"] == ("406 PRECONDITION_FAILED - invalid expiration 'soon': no_integer")
    status, body = await mgmt.request(
        "POST", "exchanges", "/", "missing", "publish", body=publish_body("x", "k")
    )
    # The publish's channel error, as a publish reports every one (observed, 3.10.8).
    assert (status, body) == (
        400,
        {"error": "bad_request", "reason": "404 NOT_FOUND - no exchange 'missing' in vhost '/'"},
    )


async def post_get(mgmt: Mgmt, queue: str, **body: object) -> list[dict[str, object]]:
    request = {"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto", **body}
    status, data = await mgmt.request("POST", "queues", "/", queue, "get", body=request)
    assert status == 200, data
    assert isinstance(data, list)
    return data


async def publish_amqp(mgmt: Mgmt, queue: str, bodies: list[bytes]) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, arguments={"x-dead-letter-exchange": "amq.fanout"})
        for body in bodies:
            await channel.default_exchange.publish(
                aio_pika.Message(body, headers={"i": body.decode()}), routing_key=queue
            )


async def test_get_ackmodes(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "dead", body={})
    await mgmt.request("POST", "bindings", "/", "e", "amq.fanout", "q", "dead", body={})
    await publish_amqp(mgmt, "src", [b"m1", b"m2", b"m3"])
    # ack_requeue_true: seen, then back in place, redelivered.
    first = await post_get(mgmt, "src", count=2)
    assert [m["payload"] for m in first] == ["m1", "m2"]
    assert [m["message_count"] for m in first] == [2, 1]
    assert [m["redelivered"] for m in first] == [False, False]
    assert first[0]["exchange"] == ""
    assert first[0]["routing_key"] == "src"
    assert first[0]["properties"]["headers"] == {"i": "m1"}
    again = await post_get(mgmt, "src", count=5)
    assert [(m["payload"], m["redelivered"]) for m in again] == [
        ("m1", True),
        ("m2", True),
        ("m3", False),
    ]
    # reject_requeue_true puts them back too; truncate shortens the payload only.
    cut = await post_get(mgmt, "src", count=1, ackmode="reject_requeue_true", truncate=1)
    assert (cut[0]["payload"], cut[0]["payload_bytes"]) == ("m", 2)
    # ack_requeue_false removes; reject_requeue_false removes and dead-letters.
    taken = await post_get(mgmt, "src", count=1, ackmode="ack_requeue_false")
    assert [m["payload"] for m in taken] == ["m1"]
    rejected = await post_get(mgmt, "src", count=1, ackmode="reject_requeue_false")
    assert [m["payload"] for m in rejected] == ["m2"]
    remaining = await post_get(mgmt, "src", encoding="base64")
    assert [base64.b64decode(m["payload"]) for m in remaining] == [b"m3"]
    assert remaining[0]["payload_encoding"] == "base64"
    dead = await post_get(mgmt, "dead", ackmode="ack_requeue_false")
    assert [m["payload"] for m in dead] == ["m2"]
    assert dead[0]["properties"]["headers"]["x-death"][0]["reason"] == "rejected"
    queue = await mgmt.get("queues", "/", "src")
    assert queue["messages_ready"] == 1
    assert queue["message_stats"]["ack"] == 0  # API gets are no-ack or rejected, not acked
    status, body = await mgmt.request(
        "POST", "queues", "/", "src", "get", body={"count": 1, "ackmode": "x", "encoding": "auto"}
    )
    assert status == 400
    status, body = await mgmt.request("POST", "queues", "/", "src", "get", body={"count": 1})
    assert body["reason"] == "[{key_missing,ackmode},{key_missing,encoding}]"


async def test_purge(mgmt: Mgmt) -> None:
    await publish_amqp(mgmt, "full", [b"a", b"b", b"c"])
    assert (await mgmt.get("queues", "/", "full"))["messages"] == 3
    status, _ = await mgmt.request("DELETE", "queues", "/", "full", "contents")
    assert status == 204
    queue = await mgmt.get("queues", "/", "full")
    assert (queue["messages"], queue["message_bytes_ready"]) == (0, 0)
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        amqp_queue = await channel.declare_queue("full", passive=True)
        assert amqp_queue.declaration_result.message_count == 0
    assert (await mgmt.request("DELETE", "queues", "/", "missing", "contents"))[0] == 404


async def test_unacked_counts_and_bytes(mgmt: Mgmt) -> None:
    await publish_amqp(mgmt, "work", [b"12345", b"678"])
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.get_queue("work")
        message = await queue.get(timeout=5)
        data = await mgmt.get("queues", "/", "work")
        assert (data["messages"], data["messages_ready"], data["messages_unacknowledged"]) == (
            2,
            1,
            1,
        )
        assert (data["message_bytes_ready"], data["message_bytes_unacknowledged"]) == (3, 5)
        assert data["message_bytes"] == 8
        await message.ack()


async def test_api_publish_is_durable_across_restart(tmp_path: Path) -> None:
    async def run(action: str) -> object:
        server = Server(Config(host="127.0.0.1", port=0, data_dir=tmp_path))
        await server.start()
        handle = await start_management(server.state, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession(headers=basic("guest", "guest")) as http:
                api = handle.url + "/api"
                if action == "publish":
                    async with http.put(f"{api}/queues/%2F/keep", json={"durable": True}) as r:
                        assert r.status == 201
                    body = publish_body("persisted", "keep", delivery_mode=2)
                    async with http.post(
                        f"{api}/exchanges/%2F/amq.default/publish", json=body
                    ) as r:
                        return await r.json()
                body = {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}
                async with http.post(f"{api}/queues/%2F/keep/get", json=body) as r:
                    return await r.json()
        finally:
            await handle.close()
            await server.stop()

    assert await run("publish") == {"routed": True}
    [message] = await run("get")  # type: ignore[misc]
    assert message["payload"] == "persisted"
    assert message["properties"] == {"delivery_mode": 2}


def test_pika_sees_api_publishes() -> None:
    """The blocking pika client against a broker thread, the API driven from this thread."""
    broker = BrokerThread(Config(host="127.0.0.1", port=0)).start()
    try:
        handle = asyncio.run_coroutine_threadsafe(
            start_management(broker.server.state, "127.0.0.1", 0), broker.loop
        ).result(10)

        async def drive() -> None:
            async with aiohttp.ClientSession(headers=basic("guest", "guest")) as http:
                api = handle.url + "/api"
                async with http.put(f"{api}/queues/%2F/pq", json={}) as r:
                    assert r.status == 201
                body = publish_body("from http", "pq", correlation_id="c-9")
                async with http.post(f"{api}/exchanges/%2F/amq.default/publish", json=body) as r:
                    assert await r.json() == {"routed": True}

        asyncio.run(drive())
        params = pika.URLParameters(broker.url)
        connection = pika.BlockingConnection(params)
        try:
            channel = connection.channel()
            method, properties, body = channel.basic_get("pq", auto_ack=True)
            assert method is not None
            assert body == b"from http"
            assert properties.correlation_id == "c-9"
        finally:
            connection.close()
        asyncio.run_coroutine_threadsafe(handle.close(), broker.loop).result(10)
    finally:
        broker.stop()


@pytest.mark.parametrize("ackmode", ["ack_requeue_true", "reject_requeue_false"])
async def test_get_from_empty_queue(mgmt: Mgmt, ackmode: str) -> None:
    await mgmt.request("PUT", "queues", "/", "empty", body={})
    assert await post_get(mgmt, "empty", ackmode=ackmode) == []


def test_project_management_client_works_unchanged() -> None:
    """leveret.inspect.ManagementAPI, the stdlib client the pytest plugin uses against a
    real RabbitMQ, drives Leveret's API the same way."""
    from leveret.inspect import ManagementAPI

    broker = BrokerThread(Config(host="127.0.0.1", port=0)).start()
    try:
        handle = asyncio.run_coroutine_threadsafe(
            start_management(broker.server.state, "127.0.0.1", 0), broker.loop
        ).result(10)
        api = ManagementAPI(handle.url)
        assert api.probe() is None
        api.create_vhost("it/1")
        api.set_permissions("it/1", "guest")
        assert api.queue("it/1", "jobs") is None
        connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_url("it/1")))
        try:
            channel = connection.channel()
            channel.confirm_delivery()  # so the publishes are in the queue when we look
            channel.queue_declare("jobs")
            channel.basic_publish("", "jobs", b"one")
            channel.basic_publish("", "jobs", b"two")
            queue = api.queue("it/1", "jobs")
            assert queue is not None
            assert (queue["messages"], queue["messages_ready"]) == (2, 2)
            assert api.queue_names("it/1") == ["jobs"]
        finally:
            connection.close()
        api.delete_vhost("it/1")
        api.delete_vhost("it/1")  # absent is fine: a 404
        assert "it/1" not in broker.server.state.vhosts
        asyncio.run_coroutine_threadsafe(handle.close(), broker.loop).result(10)
    finally:
        broker.stop()
