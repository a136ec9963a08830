"""Creating and deleting vhosts, users, permissions, exchanges, queues and bindings over
HTTP, each checked over AMQP with aio-pika: what the API does is real."""

from __future__ import annotations

import asyncio

import aio_pika
import aiormq
import pytest

from .helpers import Mgmt


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer callback that leaves messages unacknowledged."""


async def consume_one(queue: aio_pika.abc.AbstractQueue) -> bytes:
    """The body of the next message of ``queue`` (acked), waiting up to 5 s."""
    async with asyncio.timeout(5):
        while True:
            message = await queue.get(fail=False)
            if message is not None:
                await message.ack()
                return message.body
            await asyncio.sleep(0.02)


async def test_queue_put_is_consumable_over_amqp(mgmt: Mgmt) -> None:
    status, body = await mgmt.request(
        "PUT", "queues", "/", "jobs", body={"durable": True, "arguments": {"x-max-length": 10}}
    )
    assert (status, body) == (201, None)
    status, _ = await mgmt.request(
        "PUT", "queues", "/", "jobs", body={"durable": True, "arguments": {"x-max-length": 10}}
    )
    assert status == 204  # exists, equivalent
    queue = await mgmt.get("queues", "/", "jobs")
    assert (queue["durable"], queue["auto_delete"], queue["exclusive"]) == (True, False, False)
    assert queue["arguments"] == {"x-max-length": 10}
    assert queue["state"] == "running"
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        # A passive declare finds it, and an equivalent declare over AMQP agrees with it.
        await channel.declare_queue("jobs", passive=True)
        amqp_queue = await channel.declare_queue(
            "jobs", durable=True, arguments={"x-max-length": 10}
        )
        await channel.default_exchange.publish(aio_pika.Message(b"work"), routing_key="jobs")
        assert await consume_one(amqp_queue) == b"work"


async def test_inequivalent_declare_is_400(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "q", body={"durable": True})
    status, body = await mgmt.request("PUT", "queues", "/", "q", body={"durable": False})
    assert status == 400
    assert body == {
        "error": "bad_request",
        "reason": "inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'false' but current is 'true'",
    }
    status, body = await mgmt.request("PUT", "exchanges", "/", "x", body={"type": "nope"})
    assert (status, body["reason"]) == (400, "unknown exchange type 'nope'")
    status, body = await mgmt.request("PUT", "queues", "/", "amq.mine", body={})
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Access refused."})


async def test_exchange_and_bindings_route_amqp_publishes(mgmt: Mgmt) -> None:
    assert (
        await mgmt.request(
            "PUT", "exchanges", "/", "events", body={"type": "topic", "durable": True}
        )
    )[0] == 201
    assert (await mgmt.request("PUT", "queues", "/", "audit", body={}))[0] == 201
    status, _ = await mgmt.request(
        "POST", "bindings", "/", "e", "events", "q", "audit", body={"routing_key": "order.*"}
    )
    assert status == 201
    # Exchange-to-exchange binding, with arguments.
    await mgmt.request("PUT", "exchanges", "/", "fan", body={"type": "fanout"})
    status, _ = await mgmt.request(
        "POST",
        "bindings",
        "/",
        "e",
        "events",
        "e",
        "fan",
        body={"routing_key": "pay.#", "arguments": {"x-note": "e2e"}},
    )
    assert status == 201
    await mgmt.request("POST", "bindings", "/", "e", "fan", "q", "audit", body={})
    bindings = await mgmt.get("bindings", "/", "e", "events", "q", "audit")
    assert bindings == [
        {
            "source": "events",
            "vhost": "/",
            "destination": "audit",
            "destination_type": "queue",
            "routing_key": "order.*",
            "arguments": {},
            "properties_key": "order.%2A",  # quote_plus leaves only [A-Za-z0-9._~-]
        }
    ]
    [e2e] = await mgmt.get("bindings", "/", "e", "events", "e", "fan")
    assert e2e["properties_key"].startswith("pay.%23~")
    listed = await mgmt.get("queues", "/", "audit", "bindings")
    assert listed[0]["source"] == ""  # the default exchange's implicit binding comes first
    assert {b["source"] for b in listed} == {"", "events", "fan"}
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange("events")
        queue = await channel.get_queue("audit")
        await exchange.publish(aio_pika.Message(b"o1"), routing_key="order.created")
        assert await consume_one(queue) == b"o1"
        await exchange.publish(aio_pika.Message(b"p1"), routing_key="pay.done")
        assert await consume_one(queue) == b"p1"
        # Delete the bindings by their properties_key; publishes no longer arrive.
        status, _ = await mgmt.request(
            "DELETE", "bindings", "/", "e", "events", "q", "audit", "order.*"
        )
        assert status == 204
        status, _ = await mgmt.request(
            "DELETE", "bindings", "/", "e", "events", "e", "fan", e2e["properties_key"]
        )
        assert status == 204
        status, _ = await mgmt.request(
            "DELETE", "bindings", "/", "e", "events", "e", "fan", e2e["properties_key"]
        )
        assert status == 404
        await exchange.publish(aio_pika.Message(b"lost"), routing_key="order.created")
        await exchange.publish(aio_pika.Message(b"lost"), routing_key="pay.done")
        await asyncio.sleep(0.1)
        assert await queue.get(fail=False) is None


async def test_binding_properties_key_forms(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "q", body={})
    for body in ({}, {"routing_key": "a~b c"}, {"routing_key": "", "arguments": {"x": 1}}):
        status, _ = await mgmt.request(
            "POST", "bindings", "/", "e", "amq.direct", "q", "q", body=body
        )
        assert status == 201
    keys = {
        b["routing_key"]: b["properties_key"]
        for b in await mgmt.get("bindings", "/", "e", "amq.direct", "q", "q")
        if not b["arguments"]
    }
    # rabbit_mgmt_format:pack_binding_props/2: "~" for an empty key, quote_plus with ~ as %7E.
    assert keys == {"": "~", "a~b c": "a%7Eb+c"}
    for b in await mgmt.get("bindings", "/", "e", "amq.direct", "q", "q"):
        status, _ = await mgmt.request(
            "DELETE", "bindings", "/", "e", "amq.direct", "q", "q", b["properties_key"]
        )
        assert status == 204, b
    assert await mgmt.get("bindings", "/", "e", "amq.direct", "q", "q") == []


async def test_binding_to_missing_queue_is_404(mgmt: Mgmt) -> None:
    status, body = await mgmt.request(
        "POST", "bindings", "/", "e", "amq.direct", "q", "nowhere", body={}
    )
    # queue.bind's 404, through direct_request (observed on 3.10.8).
    assert (status, body) == (
        404,
        {"error": "not_found", "reason": "no queue 'nowhere' in vhost '/'"},
    )


async def test_delete_queue_and_exchange(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "gone", body={})
    await mgmt.request("PUT", "exchanges", "/", "xgone", body={"type": "direct"})
    await mgmt.request(
        "POST", "bindings", "/", "e", "xgone", "q", "gone", body={"routing_key": "k"}
    )
    status, body = await mgmt.request(
        "DELETE", "exchanges", "/", "xgone", params={"if-unused": "true"}
    )
    assert status == 400
    assert body["reason"] == "exchange 'xgone' in vhost '/' in use"
    assert (await mgmt.request("DELETE", "exchanges", "/", "xgone"))[0] == 204
    assert (await mgmt.request("DELETE", "queues", "/", "gone"))[0] == 204
    assert (await mgmt.request("DELETE", "queues", "/", "gone"))[0] == 404
    status, body = await mgmt.request("DELETE", "exchanges", "/", "amq.direct")
    assert (status, body["error"]) == (401, "not_authorised")
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
            await channel.declare_queue("gone", passive=True)


async def test_queue_delete_if_empty_and_if_unused(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "busy", body={})
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.get_queue("busy")
        await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key="busy")
        status, body = await mgmt.request(
            "DELETE", "queues", "/", "busy", params={"if-empty": "true"}
        )
        assert (status, body["reason"]) == (400, "queue 'busy' in vhost '/' not empty")
        await consume_one(queue)
        tag = await queue.consume(ignore)
        status, body = await mgmt.request(
            "DELETE", "queues", "/", "busy", params={"if-unused": "true"}
        )
        assert (status, body["reason"]) == (400, "queue 'busy' in vhost '/' in use")
        await queue.cancel(tag)


async def test_vhost_user_permissions_lifecycle(mgmt: Mgmt) -> None:
    status, _ = await mgmt.request(
        "PUT", "vhosts", "orders", body={"description": "Orders", "tags": "prod,eu"}
    )
    assert status == 201
    assert (await mgmt.request("PUT", "vhosts", "orders", body={}))[0] == 204
    vhost = await mgmt.get("vhosts", "orders")
    assert (vhost["description"], vhost["tags"]) == ("Orders", ["prod", "eu"])
    status, _ = await mgmt.request(
        "PUT", "users", "alice", body={"password": "wonder", "tags": "management"}
    )
    assert status == 201
    user = await mgmt.get("users", "alice")
    assert user["tags"] == ["management"]
    status, _ = await mgmt.request(
        "PUT",
        "permissions",
        "orders",
        "alice",
        body={"configure": "^alice\\.", "write": ".*", "read": ".*"},
    )
    assert status == 201
    url = f"amqp://alice:wonder@127.0.0.1:{mgmt.server.port}/orders"
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("alice.inbox")
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await channel.declare_queue("bob.inbox")
    # The management user sees only its vhost, and the queue in it.
    assert [v["name"] for v in await mgmt.get("vhosts", auth=("alice", "wonder"))] == ["orders"]
    queues = await mgmt.get("queues", auth=("alice", "wonder"))
    assert [q["name"] for q in queues] == ["alice.inbox"]
    # Its permissions apply to API operations too.
    status, body = await mgmt.request(
        "PUT", "queues", "orders", "bob.q", body={}, auth=("alice", "wonder")
    )
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Access refused."})
    # Users may be given a RabbitMQ password hash instead of a password.
    from leveret.node.auth import hash_password

    status, _ = await mgmt.request(
        "PUT", "users", "hashed", body={"password_hash": hash_password("h4sh"), "tags": ""}
    )
    assert status == 201
    await mgmt.request(
        "PUT", "permissions", "/", "hashed", body={"configure": ".*", "write": ".*", "read": ".*"}
    )
    connection = await aio_pika.connect(f"amqp://hashed:h4sh@127.0.0.1:{mgmt.server.port}/")
    await connection.close()
    status, body = await mgmt.request(
        "PUT", "users", "both", body={"password": "a", "password_hash": "b", "tags": ""}
    )
    assert (status, body["reason"]) == (400, "both_password_and_password_hash_are_provided")
    status, body = await mgmt.request("PUT", "users", "notags", body={"password": "a"})
    assert (status, body["reason"]) == (400, "tags_not_present")
    # Deleting the permission, the user and the vhost.
    assert (await mgmt.request("DELETE", "permissions", "orders", "alice"))[0] == 204
    with pytest.raises(aiormq.exceptions.AMQPError):  # 530 NOT_ALLOWED at connection.open
        await aio_pika.connect(url)
    assert (await mgmt.request("DELETE", "users", "alice"))[0] == 204
    assert (await mgmt.request("DELETE", "users", "alice"))[0] == 404
    assert (await mgmt.request("DELETE", "vhosts", "orders"))[0] == 204
    assert (await mgmt.request("GET", "vhosts", "orders"))[0] == 404
    status, body = await mgmt.request(
        "PUT", "permissions", "orders", "guest", body={"configure": "", "write": "", "read": ""}
    )
    assert (status, body["reason"]) == (400, "vhost_or_user_not_found")
