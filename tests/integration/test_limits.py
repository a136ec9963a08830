"""Vhost limits (max-connections, max-queues) and user limits (max-connections,
max-channels): set through the management HTTP API, felt through AMQP (pika).

Each scenario runs against Leveret (an in-process broker with its management API) and, with
``-m rabbitmq``, against a real RabbitMQ and its management plugin; each makes its own vhost
and user and deletes them afterwards, so the broker's own guest and ``/`` keep no limit.
Every expectation was observed on RabbitMQ 3.10.8 first.

Sources: rabbit_reader.erl (handle_method0 for connection.open: the vhost's, then the
user's connection limit; create_channel/2: the user's channel limit after channel_max),
rabbit_channel.erl (check_vhost_queue_limit/2), rabbit_vhost_limit.erl (a negative limit is
none), rabbit_mgmt_wm_limit.erl and rabbit_mgmt_wm_user_limit.erl; docs: vhosts.md
"Limits", user-limits.md.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import pytest
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker, ConnectionClosedByBroker

from .helpers import PASSWORD, Tenant, unique

pytestmark = pytest.mark.timeout(60)


def refusal(exc: BaseException) -> str:
    """The reply text of a refused connection (pika wraps it in its message)."""
    found = re.search(r"\(530\) ['\"]NOT_ALLOWED - (.*)['\"]", str(exc))
    assert found is not None, str(exc)
    return found.group(1).replace("\\'", "'")


# -- vhost limits -------------------------------------------------------------------------


def test_vhost_limits_are_set_listed_and_cleared(tenant: Tenant) -> None:
    api, vhost = tenant.api, tenant.vhost
    assert tenant.set("vhost-limits", "max-queues", 5) == (204, None)
    assert tenant.set("vhost-limits", "max-connections", -1) == (204, None)
    mine = {"vhost": vhost, "value": {"max-queues": 5, "max-connections": -1}}
    assert api("GET", tenant.path("vhost-limits")) == (200, [mine])
    status, everyone = api("GET", "/api/vhost-limits")
    assert status == 200 and mine in everyone
    assert api("DELETE", tenant.path("vhost-limits", "max-queues")) == (204, None)
    assert api("GET", tenant.path("vhost-limits")) == (
        200,
        [{"vhost": vhost, "value": {"max-connections": -1}}],
    )
    assert api("DELETE", tenant.path("vhost-limits", "max-connections")) == (204, None)
    assert api("GET", tenant.path("vhost-limits")) == (200, [])
    # Clearing a limit that is not set is no error.
    assert api("DELETE", tenant.path("vhost-limits", "max-queues")) == (204, None)
    assert api("GET", "/api/vhost-limits/" + unique("lt-none")) == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )
    assert api("PUT", f"/api/vhost-limits/{unique('lt-none')}/max-queues", {"value": 1}) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )


@pytest.mark.parametrize(
    ("name", "body", "reason"),
    [
        ("max-queues", {"value": "x"}, 'max-queues should be a number, actually was <<"x">>'),
        ("max-queues", {"value": "7"}, 'max-queues should be a number, actually was <<"7">>'),
        ("max-connections", {"value": 1.5}, "max-connections should be a number, actually was 1.5"),
        ("max-queues", {"value": True}, "max-queues should be a number, actually was true"),
        ("max-foo", {"value": 5}, 'Unrecognised terms [{<<"max-foo">>,5}] in limits'),
    ],
)
def test_refused_vhost_limits(tenant: Tenant, name: str, body: Any, reason: str) -> None:
    assert tenant.api("PUT", tenant.path("vhost-limits", name), body) == (
        400,
        {"error": "bad_request", "reason": f"Validation failed\n\n{reason}\n"},
    )
    assert tenant.api("PUT", tenant.path("vhost-limits", name), {}) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,value}]"},
    )
    assert tenant.api("GET", tenant.path("vhost-limits")) == (200, [])


def test_queue_limit(tenant: Tenant) -> None:
    assert tenant.set("vhost-limits", "max-queues", 1)[0] == 204
    connection = tenant.connect()
    ch = connection.channel()
    ch.queue_declare("first")
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.queue_declare("second")
    assert refused.value.reply_code == 406
    assert refused.value.reply_text == (
        f"PRECONDITION_FAILED - cannot declare queue 'second': queue limit in vhost "
        f"'{tenant.vhost}' (1) is reached"
    )
    # An existing queue may be declared again, passively or not.
    ch = connection.channel()
    ch.queue_declare("first")
    ch.queue_declare("first", passive=True)
    # A server-named queue is refused under the name it would have had.
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.queue_declare("", exclusive=True)
    assert re.fullmatch(
        r"PRECONDITION_FAILED - cannot declare queue 'amq\.gen-[\w-]{22}': queue limit in "
        rf"vhost '{re.escape(tenant.vhost)}' \(1\) is reached",
        refused.value.reply_text,
    )
    # Through the management API too (the same text, 400).
    path = f"/api/queues/{urllib.parse.quote(tenant.vhost, safe='')}/api-made"
    assert tenant.api("PUT", path, {"durable": True}) == (
        400,
        {
            "error": "bad_request",
            "reason": f"cannot declare queue 'api-made': queue limit in vhost '{tenant.vhost}' "
            "(1) is reached",
        },
    )
    # Room again once a queue goes; a negative limit is no limit.
    ch = connection.channel()
    ch.queue_delete("first")
    ch.queue_declare("second")
    assert tenant.set("vhost-limits", "max-queues", -5)[0] == 204
    for name in ("third", "fourth"):
        ch.queue_declare(name)
    assert tenant.set("vhost-limits", "max-queues", 0)[0] == 204
    with pytest.raises(ChannelClosedByBroker, match=r"queue limit in vhost '.*' \(0\) is reached"):
        ch.queue_declare("fifth")
    connection.close()


def test_vhost_connection_limit(tenant: Tenant) -> None:
    assert tenant.set("vhost-limits", "max-connections", 1)[0] == 204
    first = tenant.connect()
    with pytest.raises(AMQPConnectionError) as refused:
        tenant.connect(user="guest")
    assert refusal(refused.value) == (
        f"access to vhost '{tenant.vhost}' refused for user 'guest': connection limit (1) "
        "is reached"
    )
    # Other vhosts are not counted, nor limited.
    tenant.connect(vhost="/").close()
    first.close()
    tenant.connect().close()
    assert tenant.set("vhost-limits", "max-connections", 0)[0] == 204
    with pytest.raises(AMQPConnectionError) as refused:
        tenant.connect()
    assert refusal(refused.value) == (
        f"access to vhost '{tenant.vhost}' refused for user '{tenant.user}': connection limit "
        "(0) is reached"
    )


# -- user limits --------------------------------------------------------------------------


def test_user_limits_are_set_listed_and_cleared(tenant: Tenant) -> None:
    api, user = tenant.api, tenant.user
    assert tenant.set("user-limits", "max-channels", 2) == (204, None)
    assert tenant.set("user-limits", "max-connections", 3) == (204, None)
    mine = {"user": user, "value": {"max-channels": 2, "max-connections": 3}}
    assert api("GET", tenant.path("user-limits")) == (200, [mine])
    status, everyone = api("GET", "/api/user-limits")
    assert status == 200 and mine in everyone
    # The user's own record shows them, and replacing the user keeps them.
    assert api("GET", f"/api/users/{user}")[1]["limits"] == mine["value"]
    assert api("PUT", f"/api/users/{user}", {"password": PASSWORD, "tags": "management"})[0] == 204
    assert api("GET", f"/api/users/{user}")[1]["limits"] == mine["value"]
    assert api("DELETE", tenant.path("user-limits", "max-channels")) == (204, None)
    assert api("DELETE", tenant.path("user-limits", "max-connections")) == (204, None)
    assert api("GET", tenant.path("user-limits")) == (200, [])
    assert api("GET", f"/api/users/{user}")[1]["limits"] == {}
    assert api("GET", "/api/user-limits/" + unique("lt-nobody"))[0] == 404


def test_refused_user_limits(tenant: Tenant) -> None:
    assert tenant.set("user-limits", "max-foo", 5) == (
        400,
        {"error": "bad_request", "reason": 'Unrecognised terms [{<<"max-foo">>,5}] in user-limits'},
    )
    assert tenant.set("user-limits", "max-connections", "x") == (
        400,
        {
            "error": "bad_request",
            "reason": 'max-connections should be a number, actually was <<"x">>',
        },
    )
    nobody = unique("lt-nobody")
    assert tenant.api("PUT", f"/api/user-limits/{nobody}/max-channels", {"value": 1}) == (
        400,
        {"error": "bad_request", "reason": ["no_such_user", nobody]},
    )
    assert tenant.api("GET", tenant.path("user-limits")) == (200, [])


def test_user_connection_limit_counts_every_vhost(tenant: Tenant) -> None:
    assert tenant.set("user-limits", "max-connections", 2)[0] == 204
    here, there = tenant.connect(), tenant.connect(vhost="/")
    with pytest.raises(AMQPConnectionError) as refused:
        tenant.connect()
    assert refusal(refused.value) == (
        f"connection refused for user '{tenant.user}': user connection limit (2) is reached"
    )
    # Other users are not limited by it.
    tenant.connect(user="guest").close()
    here.close()
    tenant.connect().close()
    there.close()


def test_user_channel_limit_closes_the_connection_that_asks(tenant: Tenant) -> None:
    assert tenant.set("user-limits", "max-channels", 2)[0] == 204
    first, second = tenant.connect(), tenant.connect(vhost="/")
    kept = first.channel()
    second.channel()
    with pytest.raises(ConnectionClosedByBroker) as refused:
        second.channel()
    assert refused.value.reply_code == 530
    assert refused.value.reply_text == (
        f"NOT_ALLOWED - number of channels opened for user '{tenant.user}' has reached the "
        "maximum allowed user limit of (2)"
    )
    # The other connection goes on, and the closed one's channel was given back.
    kept.queue_declare("still-here", exclusive=True)
    first.channel().close()
    assert tenant.set("user-limits", "max-channels", 0)[0] == 204
    with pytest.raises(ConnectionClosedByBroker, match=r"user limit of \(0\)"):
        first.channel()


# -- definitions ------------------------------------------------------------------------


def test_limits_in_definitions(tenant: Tenant) -> None:
    api = tenant.api
    assert tenant.set("vhost-limits", "max-queues", 7)[0] == 204
    assert tenant.set("user-limits", "max-channels", 4)[0] == 204
    status, exported = api("GET", "/api/definitions")
    assert status == 200
    assert {
        "value": {"max-queues": 7},
        "vhost": tenant.vhost,
        "component": "vhost-limits",
        "name": "limits",
    } in exported["parameters"]
    (user,) = [u for u in exported["users"] if u["name"] == tenant.user]
    assert user["limits"] == {"max-channels": 4}
    # Imported: a vhost's limits replace its own; a user without "limits" keeps its.
    loaded = {
        "parameters": [
            {
                "value": {"max-connections": 9},
                "vhost": tenant.vhost,
                "component": "vhost-limits",
                "name": "limits",
            }
        ],
        "users": [{"name": tenant.user, "password_hash": "", "tags": ""}],
    }
    assert api("POST", "/api/definitions", loaded) == (204, None)
    assert api("GET", tenant.path("vhost-limits")) == (
        200,
        [{"vhost": tenant.vhost, "value": {"max-connections": 9}}],
    )
    assert api("GET", tenant.path("user-limits")) == (
        200,
        [{"user": tenant.user, "value": {"max-channels": 4}}],
    )
    loaded["parameters"][0]["value"] = {"max-foo": 3}
    assert api("POST", "/api/definitions", loaded) == (
        400,
        {
            "error": "bad_request",
            "reason": 'Validation failed\n\nUnrecognised terms [{&lt;&lt;"max-foo"&gt;&gt;,3}] '
            f"in limits\n ({tenant.vhost}/vhost-limits/limits)",
        },
    )
