"""RabbitMQ's own ``rabbitmqadmin`` (3.10.8, from Debian's package; ``make test`` extracts it
into the venv) driving Leveret's management API: what an operator's scripts would do.

The script talks HTTP only; it runs as a subprocess against a broker in the test's loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest

from .helpers import Mgmt

SCRIPT = Path(sys.executable).parent / "rabbitmqadmin"


async def admin(mgmt: Mgmt, *args: str) -> str:
    """Run ``rabbitmqadmin`` against ``mgmt``; its stdout (a failure fails the test)."""
    assert SCRIPT.exists(), f"{SCRIPT} is missing: `make test` extracts it (Makefile)"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "-H",
        "127.0.0.1",
        "-P",
        str(mgmt.handle.port),
        "-u",
        "guest",
        "-p",
        "guest",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, (args, out.decode(), err.decode())
    return out.decode()


async def listing(mgmt: Mgmt, what: str, *columns: str) -> list[dict[str, Any]]:
    """``rabbitmqadmin -f raw_json list WHAT``, each row cut to ``columns`` (raw_json prints
    whole objects)."""
    rows: list[dict[str, Any]] = json.loads(await admin(mgmt, "-f", "raw_json", "list", what))
    return [{c: row.get(c) for c in columns} for row in rows] if columns else rows


async def test_topology_messages_and_definitions(mgmt: Mgmt, tmp_path: Path) -> None:
    assert await admin(mgmt, "declare", "exchange", "name=orders", "type=topic") == (
        "exchange declared\n"
    )
    await admin(mgmt, "declare", "queue", "name=orders.eu", "durable=true")
    await admin(
        mgmt, "declare", "binding", "source=orders", "destination=orders.eu", "routing_key=*.eu"
    )
    queues = await listing(mgmt, "queues", "name", "durable", "messages")
    assert queues == [{"name": "orders.eu", "durable": True, "messages": 0}]
    bindings = await listing(mgmt, "bindings", "source", "destination", "routing_key")
    assert {"source": "orders", "destination": "orders.eu", "routing_key": "*.eu"} in bindings
    exchanges = {row["name"]: row["type"] for row in await listing(mgmt, "exchanges")}
    assert exchanges["orders"] == "topic" and exchanges["amq.topic"] == "topic"

    # A message published through the API is routed by the broker and read back by it.
    published = await admin(
        mgmt, "publish", "exchange=orders", "routing_key=paid.eu", "payload=hello"
    )
    assert published == "Message published\n"
    await admin(mgmt, "publish", "exchange=orders", "routing_key=paid.us", "payload=lost")
    got = json.loads(
        await admin(mgmt, "-f", "raw_json", "get", "queue=orders.eu", "ackmode=ack_requeue_false")
    )
    assert [(m["payload"], m["routing_key"], m["message_count"]) for m in got] == [
        ("hello", "paid.eu", 0)
    ]

    # An AMQP client sees what rabbitmqadmin declared.
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("orders.eu", passive=True)
        exchange = await channel.get_exchange("orders")
        await exchange.publish(aio_pika.Message(b"via amqp"), "shipped.eu")
        message = await queue.get(timeout=5)
        assert message is not None and message.body == b"via amqp"
        await message.ack()

    # Definitions out and back in: the export is RabbitMQ's format.
    exported = tmp_path / "definitions.json"
    assert "Exported definitions" in await admin(mgmt, "export", str(exported))
    definitions = json.loads(exported.read_text())
    assert {q["name"] for q in definitions["queues"]} == {"orders.eu"}
    assert {"source": "orders", "destination": "orders.eu"}.items() <= next(
        b for b in definitions["bindings"] if b["source"] == "orders"
    ).items()
    await admin(mgmt, "delete", "queue", "name=orders.eu")
    assert await listing(mgmt, "queues", "name") == []
    assert "Uploaded definitions" in await admin(mgmt, "import", str(exported))
    assert [q["name"] for q in await listing(mgmt, "queues", "name")] == ["orders.eu"]


async def test_users_vhosts_and_permissions(mgmt: Mgmt) -> None:
    await admin(mgmt, "declare", "vhost", "name=shop")
    await admin(mgmt, "declare", "user", "name=alice", "password=secret", "tags=monitoring")
    await admin(
        mgmt,
        "declare",
        "permission",
        "vhost=shop",
        "user=alice",
        "configure=^alice\\.",
        "write=.*",
        "read=.*",
    )
    assert {row["name"] for row in await listing(mgmt, "vhosts", "name")} == {"/", "shop"}
    users = {row["name"]: row["tags"] for row in await listing(mgmt, "users", "name", "tags")}
    assert users["alice"] in ("monitoring", ["monitoring"])
    permissions = await listing(mgmt, "permissions", "vhost", "user", "configure")
    assert {"vhost": "shop", "user": "alice", "configure": "^alice\\."} in permissions

    # The new user can log in over AMQP and is held to its configure permission.
    connection = await aio_pika.connect(f"amqp://alice:secret@127.0.0.1:{mgmt.server.port}/shop")
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("alice.inbox")
        refused = "configure access to queue 'bob.inbox' in vhost 'shop' refused for user 'alice'"
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match=refused):
            await channel.declare_queue("bob.inbox")

    overview = json.loads(await admin(mgmt, "-f", "raw_json", "show", "overview"))
    assert overview[0]["object_totals"]["queues"] == 1
    await admin(mgmt, "delete", "user", "name=alice")
    await admin(mgmt, "delete", "vhost", "name=shop")
    assert [row["name"] for row in await listing(mgmt, "vhosts", "name")] == ["/"]


async def test_policies(mgmt: Mgmt) -> None:
    await admin(mgmt, "declare", "queue", "name=jobs.mail", "durable=true")
    assert await admin(
        mgmt,
        "declare",
        "policy",
        "name=jobs-limit",
        "pattern=^jobs\\.",
        'definition={"max-length": 1, "overflow": "reject-publish"}',
        "priority=7",
        "apply-to=queues",
    ) == ("policy declared\n")
    rows = await listing(mgmt, "policies", "name", "pattern", "definition", "priority", "apply-to")
    assert rows == [
        {
            "name": "jobs-limit",
            "pattern": "^jobs\\.",
            "definition": {"max-length": 1, "overflow": "reject-publish"},
            "priority": 7,
            "apply-to": "queues",
        }
    ]
    queue = await mgmt.get("queues", "/", "jobs.mail")
    assert (queue["policy"], queue["effective_policy_definition"]) == (
        "jobs-limit",
        {"max-length": 1, "overflow": "reject-publish"},
    )
    # In force over AMQP: the second publish is refused (a nack with confirms).
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.default_exchange.publish(aio_pika.Message(b"1"), "jobs.mail")
        with pytest.raises(aio_pika.exceptions.DeliveryError):
            await channel.default_exchange.publish(aio_pika.Message(b"2"), "jobs.mail")
    await admin(mgmt, "delete", "policy", "name=jobs-limit")
    assert await listing(mgmt, "policies") == []


FORMATS = ("raw_json", "pretty_json", "tsv", "table", "long", "kvp", "bash")
LISTINGS = (
    "connections",
    "channels",
    "consumers",
    "exchanges",
    "queues",
    "bindings",
    "users",
    "vhosts",
    "permissions",
    "nodes",
    "parameters",
    "policies",
    "operator_policies",
    "vhost_limits",
)


# Runs the real script once per argument list in one interpreter (a process per run costs
# 0.3 s each on this loaded machine, 30 s for the hundred runs below).
MANY = """
import contextlib, io, json, runpy, sys, traceback
script, common, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
results = []
for args in runs:
    out = io.StringIO()
    sys.argv = [script, *common, *args]
    code = 0
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code or 0
        except BaseException:
            code, out = 1, io.StringIO(traceback.format_exc())
    results.append([code, out.getvalue()])
sys.__stdout__.write(json.dumps(results))
"""


async def admin_many(mgmt: Mgmt, runs: list[tuple[str, ...]]) -> list[str]:
    """``rabbitmqadmin ARGS`` for each of ``runs``; their outputs (a failure fails)."""
    common = ["-H", "127.0.0.1", "-P", str(mgmt.handle.port), "-u", "guest", "-p", "guest"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        MANY,
        str(SCRIPT),
        json.dumps(common),
        json.dumps(runs),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    results = json.loads(out)
    for args, (code, text) in zip(runs, results, strict=True):
        assert code == 0, (args, text)
    return [text for _code, text in results]


async def leave(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer that leaves its deliveries unacknowledged."""


async def test_every_listing_in_every_format(mgmt: Mgmt) -> None:
    """Every ``rabbitmqadmin list`` subcommand in every format, with something of each
    kind to list (a consumer, a policy, an operator policy, vhost limits), and the queue
    columns that are not always there (``policy``: 3.10.8 sends null, which its own
    rabbitmqadmin cannot print; Leveret leaves such fields out)."""
    await admin(mgmt, "declare", "queue", "name=listed")
    await admin(
        mgmt, "declare", "policy", "name=p1", "pattern=^listed$", 'definition={"max-length": 9}'
    )
    await admin(
        mgmt,
        "declare",
        "operator_policy",
        "name=op1",
        "pattern=^nothing$",
        'definition={"max-length": 5}',
    )
    status, _ = await mgmt.request(
        "PUT", "vhost-limits", "/", "max-connections", body={"value": 100}
    )
    assert status == 204
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("listed", passive=True)
        await queue.consume(leave, consumer_tag="tag-1")
        await channel.declare_queue("unpolicied")

        runs = [("-f", f, "list", what) for what in LISTINGS for f in FORMATS]
        runs += [("-f", f, "list", "queues", "name", "policy") for f in FORMATS]
        runs += [("list", "queues", "name", "policy", "exclusive_consumer_tag")]
        outputs = dict(zip(runs, await admin_many(mgmt, runs), strict=True))
    for what in LISTINGS:
        rows = json.loads(outputs[("-f", "raw_json", "list", what)])
        assert rows, what  # something of each kind was listed
        for fmt in FORMATS:
            assert "Traceback" not in outputs[("-f", fmt, "list", what)], (what, fmt)
    tsv = outputs[("-f", "tsv", "list", "queues", "name", "policy")].splitlines()
    assert tsv == ["name\tpolicy", "listed\tp1", "unpolicied\t"]
    assert json.loads(outputs[("-f", "raw_json", "list", "parameters")])[0]["component"] in (
        "vhost-limits",
        "operator_policy",
    )
    table = outputs[("list", "queues", "name", "policy", "exclusive_consumer_tag")]
    assert "| listed     | p1     |" in table
    consumers = json.loads(outputs[("-f", "raw_json", "list", "consumers")])
    assert [c["consumer_tag"] for c in consumers] == ["tag-1"]
    nodes = json.loads(outputs[("-f", "raw_json", "list", "nodes")])
    assert nodes[0]["mem_used"] > 10_000_000  # the process's memory, not message bytes


async def test_parameters_list_empty(mgmt: Mgmt) -> None:
    """``list parameters`` with none set is an empty listing, as RabbitMQ answers []."""
    assert json.loads(await admin(mgmt, "-f", "raw_json", "list", "parameters")) == []
    assert await admin(mgmt, "-f", "tsv", "list", "parameters") == "No items\n"  # as on 3.10.8
