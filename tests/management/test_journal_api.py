"""The traffic journal over HTTP (broker/management/journal.py): PUT to record, GET the
records, for suites in other languages; administrators only, RabbitMQ-style errors."""

from __future__ import annotations

import asyncio

import aio_pika

from .helpers import Mgmt


async def test_journal_records_while_switched_on(mgmt: Mgmt) -> None:
    assert await mgmt.get("leveret", "journal", "/") == []
    status, _ = await mgmt.request("PUT", "leveret", "journal", "/", body={"recording": True})
    assert status == 204
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("jobs")
        await channel.default_exchange.publish(
            aio_pika.Message(b"text", content_type="text/plain"), "jobs"
        )
        await channel.default_exchange.publish(aio_pika.Message(b"\xff\x00"), "nowhere")
        message = await queue.get()
        await message.ack()
        for _ in range(200):  # the ack is processed after the client sent it
            records = await mgmt.get("leveret", "journal", "/")
            if records and records[-1]["kind"] == "acked":
                break
            await asyncio.sleep(0.01)
    kinds = [r["kind"] for r in records]
    assert kinds[:2] == ["published", "confirmed"]
    assert [k for k in kinds if k != "confirmed"] == [
        "published",
        "published",
        "returned",  # aio-pika publishes with mandatory=True
        "delivered",
        "acked",
    ]
    first = records[0]
    assert (first["routing_key"], first["queues"], first["payload"]) == ("jobs", ["jobs"], "text")
    assert (first["payload_encoding"], first["properties"]["content_type"]) == (
        "string",
        "text/plain",
    )
    [lost] = [r for r in records if r["kind"] == "published" and r["routing_key"] == "nowhere"]
    assert (lost["queues"], lost["payload"], lost["payload_encoding"]) == ([], "/wA=", "base64")
    assert lost["returned"] is True

    status, _ = await mgmt.request("PUT", "leveret", "journal", "/", body={"recording": False})
    assert status == 204
    assert mgmt.server.state.vhosts["/"].events is None
    assert len(await mgmt.get("leveret", "journal", "/")) == len(records)  # still readable


async def test_journal_errors(mgmt: Mgmt) -> None:
    status, body = await mgmt.request("GET", "leveret", "journal", "nope")
    assert (status, body) == (404, {"error": "Object Not Found", "reason": "Not Found"})
    status, body = await mgmt.request("PUT", "leveret", "journal", "nope", body={"recording": True})
    assert status == 404
    status, body = await mgmt.request("PUT", "leveret", "journal", "/", body={"recording": "yes"})
    assert (status, body["error"]) == (400, "bad_request")
    status, _ = await mgmt.request(
        "PUT", "users", "plain", body={"password": "secret", "tags": "management"}
    )
    assert status in (201, 204)
    status, _ = await mgmt.request("GET", "leveret", "journal", "/", auth=("plain", "secret"))
    assert status == 401
