"""RabbitMQ definitions: a RabbitMQ 3.13-style export (written by hand in data/, with real
SHA-256 password hashes) loads as it is; its users log in over AMQP with their original
passwords and its topology routes messages; export and import round-trip."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest

from leveret.config import Config
from leveret.management import (
    DefinitionsError,
    export_definitions,
    load_definitions,
    load_definitions_file,
)
from leveret.server import Server

from .helpers import Mgmt

FIXTURE = Path(__file__).parent / "data" / "rabbitmq-3.13-definitions.json"
# The passwords behind the fixture's hashes. "test12" with salt 908DC60A is the worked
# example of RabbitMQ's password documentation (docs/passwords.md, "Computing a hash").
PASSWORDS = {"admin": "guest", "test": "test12", "ops": "s3cr3t-ops"}


def rabbit_hash(password: str, salt: bytes) -> str:
    """RabbitMQ's rabbit_password_hashing_sha256, written out independently of the broker."""
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def test_fixture_hashes_are_rabbitmq_hashes() -> None:
    for user in fixture()["users"]:
        salt = base64.b64decode(user["password_hash"])[:4]
        assert rabbit_hash(PASSWORDS[user["name"]], salt) == user["password_hash"]


async def drain_messages(
    channel: aio_pika.abc.AbstractChannel, queue: str
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Every message ready in ``queue`` (acked)."""
    amqp_queue = await channel.get_queue(queue, ensure=False)
    found = []
    while (message := await amqp_queue.get(fail=False)) is not None:
        await message.ack()
        found.append(message)
    return found


async def drain(channel: aio_pika.abc.AbstractChannel, queue: str) -> list[bytes]:
    """The bodies of every message ready in ``queue``."""
    return [m.body for m in await drain_messages(channel, queue)]


async def test_rabbitmq_export_loads_and_works(mgmt: Mgmt) -> None:
    status, body = await mgmt.request("POST", "definitions", body=fixture())
    assert (status, body) == (204, None)
    port = mgmt.server.port
    # The users log in with their original passwords, with the exported permissions.
    connection = await aio_pika.connect(f"amqp://test:test12@127.0.0.1:{port}/shop")
    async with connection:
        channel = await connection.channel()
        events = await channel.get_exchange("shop.events")
        await events.publish(aio_pika.Message(b"order-1"), routing_key="order.created")
        # Topic -> headers (e2e binding) -> queue, matched with x-match any.
        await events.publish(
            aio_pika.Message(b"mail-1", headers={"kind": "email"}), routing_key="user.signup"
        )
        await events.publish(aio_pika.Message(b"no-match"), routing_key="user.signup")
        assert await drain(channel, "orders.created") == [b"order-1"]
        assert await drain(channel, "emails") == [b"mail-1"]
        # What the headers exchange could not route went to its alternate exchange,
        # shop.dlx, which fans out to orders.dead: order-1 (matched "#" but no headers)
        # and no-match.
        assert await drain(channel, "orders.dead") == [b"order-1", b"no-match"]
        # Dead-lettering: orders.created has x-dead-letter-exchange shop.dlx.
        await events.publish(aio_pika.Message(b"order-2"), routing_key="order.created")
        assert await drain(channel, "orders.dead") == [b"order-2"]  # via the AE again
        queue = await channel.get_queue("orders.created", ensure=False)
        message = await queue.get(timeout=5)
        await message.reject(requeue=False)
        [dead] = await drain_messages(channel, "orders.dead")
        assert dead.body == b"order-2"
        assert dead.headers["x-death"][0]["reason"] == "rejected"  # type: ignore[index]
        # Permissions came along: "test" may configure orders.* but nothing else.
        await channel.declare_queue("orders.tmp", auto_delete=True)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await channel.declare_queue("other")
    with pytest.raises(aiormq.exceptions.AMQPError):
        await aio_pika.connect(f"amqp://test:wrong@127.0.0.1:{port}/shop")
    # Tags came along: admin administers, ops monitors, test only manages.
    assert (await mgmt.request("GET", "users", auth=("admin", "guest")))[0] == 200
    # ops has no permissions: as a monitor it sees every vhost, but not their queues
    # (rabbit_mgmt_util:filter_vhost/3 lists those for administrators only).
    status, vhosts = await mgmt.request("GET", "vhosts", auth=("ops", "s3cr3t-ops"))
    assert (status, {v["name"] for v in vhosts} >= {"/", "shop"}) == (200, True)
    assert await mgmt.request("GET", "queues", auth=("ops", "s3cr3t-ops")) == (200, [])
    assert (await mgmt.request("GET", "users", auth=("ops", "s3cr3t-ops")))[0] == 401
    shop = await mgmt.get("vhosts", "shop")
    assert (shop["description"], shop["tags"]) == ("Web shop", ["production"])
    queue = await mgmt.get("queues", "shop", "orders.created")
    assert queue["arguments"]["x-max-length"] == 10000
    # Loading the same file again changes nothing (everything is equivalent).
    before = export_definitions(mgmt.server.state)
    assert (await mgmt.request("POST", "definitions", body=fixture()))[0] == 204
    assert export_definitions(mgmt.server.state) == before


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """A definitions export with its lists in a stable order."""
    out = copy.deepcopy(data)
    for key, value in out.items():
        if isinstance(value, list):
            out[key] = sorted(value, key=lambda item: json.dumps(item, sort_keys=True))
    return out


async def test_export_import_round_trip() -> None:
    first = Server(Config(host="127.0.0.1", port=0))
    second = Server(Config(host="127.0.0.1", port=0, users={}))
    await first.start()
    await second.start()
    try:
        load_definitions(first.state, fixture())
        exported = export_definitions(first.state)
        # The export has the file's objects (and the broker's own guest user).
        wanted = fixture()
        names = {(q["vhost"], q["name"]) for q in exported["queues"]}
        assert names == {(q["vhost"], q["name"]) for q in wanted["queues"]}
        assert {u["name"] for u in exported["users"]} == {"guest", "admin", "test", "ops"}
        hashes = {u["name"]: u["password_hash"] for u in exported["users"]}
        assert hashes["test"] == "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
        assert len(exported["bindings"]) == len(wanted["bindings"])
        # Through JSON and into an empty broker: the same definitions come out.
        load_definitions(second.state, json.loads(json.dumps(exported)))
        assert comparable(export_definitions(second.state)) == comparable(exported)
    finally:
        await first.stop()
        await second.stop()


async def test_load_definitions_file_for_the_command_line(tmp_path: Path) -> None:
    server = Server(Config(host="127.0.0.1", port=0))
    await server.start()
    try:
        load_definitions_file(server.state, FIXTURE)
        assert "orders.created" in server.state.vhosts["shop"].queues
        assert server.state.access.authenticate("test", "test12") is not None
        # A directory: every *.json in name order.
        (tmp_path / "01-vhost.json").write_text(json.dumps({"vhosts": [{"name": "extra"}]}))
        (tmp_path / "02-queue.json").write_text(
            json.dumps({"queues": [{"name": "q", "vhost": "extra", "durable": True}]})
        )
        load_definitions_file(server.state, tmp_path)
        assert "q" in server.state.vhosts["extra"].queues
        bad = tmp_path / "bad" / "broken.json"
        bad.parent.mkdir()
        bad.write_text("{not json")
        with pytest.raises(DefinitionsError, match=r"broken\.json: not valid JSON"):
            load_definitions_file(server.state, bad)
        with pytest.raises(DefinitionsError, match=r"missing\.json"):
            load_definitions_file(server.state, tmp_path / "missing.json")
    finally:
        await server.stop()


async def test_import_errors_as_rabbitmq(mgmt: Mgmt) -> None:
    # A conflicting exchange (immutable object): an error, and what came before it stays.
    await mgmt.request("PUT", "exchanges", "/", "celery", body={"type": "fanout", "durable": True})
    status, body = await mgmt.request("POST", "definitions", body=fixture())
    assert status == 400
    assert body["error"] == "bad_request"
    assert body["reason"].startswith("precondition_failed: inequivalent arg 'type'")
    assert "admin" in mgmt.server.state.access.users  # users were applied before exchanges
    # Objects in a vhost that neither exists nor is in the file.
    data = {"queues": [{"name": "q", "vhost": "nowhere", "durable": True, "arguments": {}}]}
    status, body = await mgmt.request("POST", "definitions", body=data)
    assert (status, body["reason"]) == (
        400,
        'Please create virtual host "nowhere" prior to importing definitions.',
    )
    # A file from before 3.6 carries MD5 hashes without saying so (checked with MD5; logins
    # with such hashes: tests/management/test_definitions_roundtrip.py).
    old = {
        "rabbit_version": "3.5.7",
        "users": [{"name": "simon", "password_hash": "ytUIm8s3AnKsXQjptplKFytfVxI=", "tags": ""}],
    }
    status, body = await mgmt.request("POST", "definitions", body=old)
    assert (status, body) == (204, None)
    simon = mgmt.server.state.access.users["simon"]
    assert simon.hashing_algorithm == "rabbit_password_hashing_md5"
    status, body = await mgmt.request("POST", "definitions", body=None)
    assert status == 204  # an empty body is an empty set of definitions


async def test_older_tag_format_and_skipped_objects(mgmt: Mgmt) -> None:
    data = {
        "rabbit_version": "3.8.9",
        "users": [
            {
                "name": "legacy",
                "password_hash": rabbit_hash("pw", b"\x01\x02\x03\x04"),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": "administrator,monitoring",
            }
        ],
        "exchanges": [
            {"name": "amq.topic", "vhost": "/", "type": "topic", "durable": True},
            {"name": "", "vhost": "/", "type": "direct", "durable": True},
        ],
        "queues": [{"name": "amq.reserved", "vhost": "/", "durable": True, "arguments": {}}],
    }
    assert (await mgmt.request("POST", "definitions", body=data))[0] == 204
    assert await mgmt.get("users", "legacy") == {
        "name": "legacy",
        "password_hash": data["users"][0]["password_hash"],  # type: ignore[index]
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": ["administrator", "monitoring"],
        "limits": {},
    }
    assert "amq.reserved" not in mgmt.server.state.vhosts["/"].queues


async def test_definitions_endpoints(mgmt: Mgmt) -> None:
    await mgmt.request("POST", "definitions", body=fixture())
    exported = await mgmt.get("definitions")
    assert exported == export_definitions(mgmt.server.state)
    for key in ("rabbit_version", "users", "vhosts", "permissions", "queues", "exchanges"):
        assert key in exported
    assert all(not x["name"].startswith("amq.") and x["name"] for x in exported["exchanges"])
    shop = await mgmt.get("definitions", "shop")
    assert {q["name"] for q in shop["queues"]} == {"orders.created", "orders.dead", "emails"}
    assert all("vhost" not in q for q in shop["queues"])
    assert "users" not in shop
    # A single-vhost file loads into another vhost.
    await mgmt.request("PUT", "vhosts", "staging", body={})
    assert (await mgmt.request("POST", "definitions", "staging", body=shop))[0] == 204
    staging = await mgmt.get("definitions", "staging")
    # Policies and parameters name their vhost (RabbitMQ 3.10.8's per-vhost export): the one
    # they were loaded into.
    for item in (*shop["policies"], *shop["parameters"]):
        assert item["vhost"] == "shop"
        item["vhost"] = "staging"
    assert comparable(staging) == comparable(shop)
    # Only administrators may read definitions (they contain password hashes).
    status, _ = await mgmt.request("GET", "definitions", auth=("ops", "s3cr3t-ops"))
    assert status == 401
    async with mgmt.http.get(mgmt.url("definitions"), params={"download": "defs.json"}) as r:
        assert r.headers["Content-Disposition"] == 'attachment; filename="defs.json"'
