"""Read-only endpoints, authentication and list options, against a running broker with
real AMQP clients connected."""

from __future__ import annotations

import asyncio
from unittest import mock

import aio_pika
import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from leveret.config import Config
from leveret.management.access import authenticate
from leveret.management.errors import ApiError
from leveret.node.auth import Permission
from leveret.server import Server

from .helpers import Mgmt, basic

NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer callback that leaves messages unacknowledged."""


async def test_overview_shape(mgmt: Mgmt) -> None:
    data = await mgmt.get("overview")
    for key in (
        "management_version",
        "rabbitmq_version",
        "product_name",
        "cluster_name",
        "node",
        "exchange_types",
        "listeners",
    ):
        assert key in data
    assert data["object_totals"] == {
        "connections": 0,
        "channels": 0,
        "exchanges": 7,  # the predeclared ones of vhost "/"
        "queues": 0,
        "consumers": 0,
    }
    types = {t["name"]: t["description"] for t in data["exchange_types"]}
    assert types["topic"] == "AMQP topic exchange, as per the AMQP specification"
    assert types["x-consistent-hash"] == "Consistent Hashing Exchange"  # as the plugin's
    assert types["x-delayed-message"] == "Delayed Message Exchange."  # description/0
    assert "x-rtopic" in types
    assert data["queue_totals"]["messages"] == 0
    assert data["queue_totals"]["messages_details"] == {"rate": 0.0}
    for counter in ("publish", "deliver_get", "ack"):
        assert data["message_stats"][counter] == 0
        assert data["message_stats"][f"{counter}_details"] == {"rate": 0.0}
    protocols = {item["protocol"]: item["port"] for item in data["listeners"]}
    assert protocols["amqp"] == mgmt.server.port
    assert protocols["http"] == mgmt.handle.port


async def test_authentication_failures_as_rabbitmq(mgmt: Mgmt) -> None:
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.get(mgmt.url("overview")) as response,
    ):
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'
        assert await response.json() == {"error": "not_authorized", "reason": "Not_Authorized"}
    status, body = await mgmt.request("GET", "overview", auth=("guest", "wrong"))
    assert (status, body) == (401, {"error": "not_authorized", "reason": "Not_Authorized"})
    # A user without a management tag cannot use the API at all.
    mgmt.server.state.access.add_user("app", password="pw", tags=[])
    status, body = await mgmt.request("GET", "overview", auth=("app", "pw"))
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not management user"})
    # A management user is not an administrator.
    mgmt.server.state.access.add_user("viewer", password="pw", tags=["management"])
    status, body = await mgmt.request("GET", "users", auth=("viewer", "pw"))
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not administrator user"})
    status, body = await mgmt.request("GET", "queues", "/", auth=("viewer", "pw"))
    assert status == 401
    assert body["reason"] == "User not authorised to access virtual host"
    # ...and sees only the vhosts it has permissions on.
    assert await mgmt.get("vhosts", auth=("viewer", "pw")) == []
    assert await mgmt.get("queues", auth=("viewer", "pw")) == []


async def test_unknown_paths_and_objects_are_404(mgmt: Mgmt) -> None:
    for segments in (
        ("no-such-endpoint",),
        ("queues", "/", "missing"),
        ("exchanges", "/", "missing"),
        ("vhosts", "missing"),
        ("queues", "missing-vhost"),
        ("users", "nobody"),
        ("permissions", "/", "nobody"),
    ):
        status, body = await mgmt.request("GET", *segments)
        assert (status, body) == (404, NOT_FOUND), segments
    status, body = await mgmt.request("PATCH", "overview")
    assert status == 405
    assert body["error"] == "method_not_allowed"


async def test_vhosts_users_permissions(mgmt: Mgmt) -> None:
    vhosts = await mgmt.get("vhosts")
    assert [v["name"] for v in vhosts] == ["/"]
    assert vhosts[0]["description"] == "Default virtual host"
    assert vhosts[0]["messages"] == 0
    users = await mgmt.get("users")
    assert users == [
        {
            "name": "guest",
            "password_hash": mgmt.server.state.access.users["guest"].password_hash,
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["administrator"],
            "limits": {},
        }
    ]
    expected = {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    assert await mgmt.get("permissions") == [expected]
    assert await mgmt.get("permissions", "/", "guest") == expected
    assert await mgmt.get("vhosts", "/", "permissions") == [expected]
    assert await mgmt.get("users", "guest", "permissions") == [expected]
    assert await mgmt.get("whoami") == {"name": "guest", "tags": ["administrator"]}


async def test_exchanges_listing(mgmt: Mgmt) -> None:
    exchanges = await mgmt.get("exchanges", "/")
    names = [x["name"] for x in exchanges]
    assert names == sorted(names)
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= set(names)
    topic = await mgmt.get("exchanges", "/", "amq.topic")
    assert topic == {
        "name": "amq.topic",
        "vhost": "/",
        "type": "topic",
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
        "user_who_performed_action": "rmq-internal",
    }
    default = await mgmt.get("exchanges", "/", "amq.default")
    assert default["name"] == ""


async def test_connections_channels_consumers(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url, client_properties={"connection_name": "t1"})
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=7)
        queue = await channel.declare_queue("work", durable=False)
        await queue.consume(ignore, consumer_tag="ctag-1")
        connections = await mgmt.get("connections")
        assert len(connections) == 1
        conn = connections[0]
        assert conn["user"] == "guest"
        assert conn["vhost"] == "/"
        assert conn["protocol"] == "AMQP 0-9-1"
        assert conn["state"] == "running"
        assert conn["port"] == mgmt.server.port
        assert conn["name"] == f"127.0.0.1:{conn['peer_port']} -> 127.0.0.1:{mgmt.server.port}"
        assert conn["client_properties"]["connection_name"] == "t1"
        assert conn["client_properties"]["capabilities"]["publisher_confirms"] is True
        assert (await mgmt.get("connections", conn["name"]))["name"] == conn["name"]
        channels = await mgmt.get("channels")
        assert [c["number"] for c in channels] == [1]
        assert channels[0]["name"] == conn["name"] + " (1)"
        assert channels[0]["consumer_count"] == 1
        assert channels[0]["connection_details"]["name"] == conn["name"]
        assert channels[0]["confirm"] is True  # aio-pika channels are in confirm mode
        consumers = await mgmt.get("consumers", "/")
        assert len(consumers) == 1
        consumer = consumers[0]
        assert consumer["consumer_tag"] == "ctag-1"
        assert consumer["queue"] == {"name": "work", "vhost": "/"}
        assert consumer["ack_required"] is True
        assert consumer["prefetch_count"] == 7
        assert consumer["channel_details"]["connection_name"] == conn["name"]
        overview = await mgmt.get("overview")
        assert overview["object_totals"]["connections"] == 1
        assert overview["object_totals"]["consumers"] == 1
        detail = await mgmt.get("queues", "/", "work")
        assert detail["consumers"] == 1
        assert detail["consumer_details"][0]["consumer_tag"] == "ctag-1"
    finally:
        await connection.close()


async def test_delete_connection_closes_it(mgmt: Mgmt) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url)
    [conn] = await mgmt.get("connections")
    status, _ = await mgmt.request("DELETE", "connections", conn["name"])
    assert status == 204
    for _ in range(100):
        if not mgmt.server.state.connections:
            break
        await asyncio.sleep(0.02)
    assert await mgmt.get("connections") == []
    with pytest.raises(Exception):  # noqa: B017 - whatever aiormq raises for a closed link
        await connection.channel()
    await connection.close()


async def test_list_options_columns_sort_pagination(mgmt: Mgmt) -> None:
    for name in ("b", "a", "c"):
        status, _ = await mgmt.request("PUT", "queues", "/", name, body={})
        assert status == 201
    data = await mgmt.get("queues", params={"columns": "name,messages"})
    assert data == [
        {"name": "a", "messages": 0},
        {"name": "b", "messages": 0},
        {"name": "c", "messages": 0},
    ]
    data = await mgmt.get(
        "queues", params={"sort": "name", "sort_reverse": "true", "columns": "name"}
    )
    assert [q["name"] for q in data] == ["c", "b", "a"]
    page = await mgmt.get("queues", params={"page": "2", "page_size": "2", "columns": "name"})
    assert page["items"] == [{"name": "c"}]
    assert (page["page"], page["page_count"], page["total_count"]) == (2, 2, 3)
    nested = await mgmt.get("queues", "/", params={"columns": "name,message_stats.publish"})
    assert nested[0] == {"name": "a", "message_stats": {"publish": 0}}


async def test_health_check(mgmt: Mgmt) -> None:
    assert await mgmt.get("health", "checks", "alarms") == {"status": "ok"}
    [node] = await mgmt.get("nodes")
    assert node["running"] is True


async def test_scripts_get_no_basic_auth_challenge(mgmt: Mgmt) -> None:
    """The page's requests carry X-Requested-With, so a failed login does not make the
    browser open its own dialog (the 401 body is the same)."""
    headers = {**basic("guest", "wrong"), "X-Requested-With": "XMLHttpRequest"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(mgmt.url("overview"), headers=headers) as response,
    ):
        assert response.status == 401
        assert "WWW-Authenticate" not in response.headers
        assert await response.json() == {"error": "not_authorized", "reason": "Not_Authorized"}


def test_loopback_users_only_from_loopback() -> None:
    """guest is in loopback_users: refused from any other address, as RabbitMQ does."""
    server = Server(Config(port=0))
    for peer, refused in ((("10.1.2.3", 40000), True), (("127.0.0.1", 40000), False)):
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda key, default=None, peer=peer: (
            peer if key == "peername" else default
        )
        request = make_mocked_request(
            "GET", "/api/overview", headers=basic("guest", "guest"), transport=transport
        )
        if refused:
            with pytest.raises(ApiError) as caught:
                authenticate(server.state, request)
            assert (caught.value.status, caught.value.reason) == (
                401,
                "User can only log in via localhost",
            )
        else:
            assert authenticate(server.state, request).name == "guest"


async def test_policies_need_policymaker_or_administrator(mgmt: Mgmt) -> None:
    # rabbit_mgmt_util:is_authorized_policies/2: administrators, or policymakers on the
    # vhosts they may access.
    body = {"pattern": "^x$", "definition": {"expires": 60000}}
    mgmt.server.state.access.add_user("viewer", password="pw", tags=["management"])
    mgmt.server.state.access.set_permissions("viewer", "/", Permission())
    refused = {"error": "not_authorised", "reason": "User not authorised to access object"}
    assert await mgmt.request("GET", "policies", auth=("viewer", "pw")) == (401, refused)
    assert await mgmt.request("PUT", "policies", "/", "p", body=body, auth=("viewer", "pw")) == (
        401,
        refused,
    )
    mgmt.server.state.access.add_user("maker", password="pw", tags=["policymaker"])
    assert await mgmt.request("PUT", "policies", "/", "p", body=body, auth=("maker", "pw")) == (
        401,
        refused,
    )  # no permissions on "/" yet
    mgmt.server.state.access.set_permissions("maker", "/", Permission())
    assert (await mgmt.request("PUT", "policies", "/", "p", body=body, auth=("maker", "pw")))[
        0
    ] == 201
    assert [p["name"] for p in await mgmt.get("policies", auth=("maker", "pw"))] == ["p"]
    assert (await mgmt.request("DELETE", "policies", "/", "p", auth=("maker", "pw")))[0] == 204
