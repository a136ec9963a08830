"""Topic permissions: set through the management HTTP API (and definitions), felt through
AMQP (pika) and the API's own publish and bindings.

Each scenario runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ and its
management plugin, with a vhost and user of its own (the ``tenant`` fixture). Every
expectation was observed on RabbitMQ 3.10.8 first. Its refusal texts leave out the
permission ("access to topic ..."), which 3.11 and later put first ("write access to topic
..."), as Leveret does: the scenarios compare the common tail, and Leveret's whole text is
checked when the broker under test is Leveret.

Sources: rabbit_channel.erl (basic.publish: check_write_permitted_on_topic/4 after the
internal-exchange check; binding_action/10: check_read_permitted_on_topic/4 for a topic
source), rabbit_auth_backend_internal:check_topic_access/4 (no permission for the exchange:
allowed; an empty pattern is ``^$``; ``{username}`` and ``{vhost}`` expanded),
rabbit_access_control:check_topic_access/4 (the text), rabbit_mgmt_wm_topic_permission*.erl,
rabbit_mgmt_wm_exchange_publish:bad/3 (every refusal a 400), rabbit_mgmt_util:direct_request/6
(bindings: 401 "Access refused."); docs: access-control.md "Topic Authorisation".
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

from .helpers import PASSWORD, Http, Tenant, unique

pytestmark = pytest.mark.timeout(60)

NOT_FOUND = (404, {"error": "Object Not Found", "reason": "Not Found"})


def q(name: str) -> str:
    """A path segment."""
    return urllib.parse.quote(name, safe="")


def grant(tenant: Tenant, exchange: str, write: str, read: str) -> int:
    """PUT the tenant user's topic permission on ``exchange``; the status."""
    path = f"/api/topic-permissions/{q(tenant.vhost)}/{q(tenant.user)}"
    status, _ = tenant.api("PUT", path, {"exchange": exchange, "write": write, "read": read})
    return status


def listed(api: Http, path: str) -> list[dict[str, Any]]:
    """A listing, sorted by exchange (RabbitMQ lists in table order)."""
    status, items = api("GET", path)
    assert status == 200, items
    return sorted(items, key=lambda item: str(item["exchange"]))


def refused(tenant: Tenant, action: Callable[[BlockingChannel], Any], code: int = 403) -> str:
    """Run ``action`` on a fresh channel of the tenant user (in confirm mode, so that a
    refused publish raises); the text of the channel error (``code``) it gets."""
    connection = tenant.connect()
    try:
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel = connection.channel()
            channel.confirm_delivery()
            action(channel)
        assert closed.value.reply_code == code
        return str(closed.value.reply_text)
    finally:
        if connection.is_open:
            connection.close()


def allowed(tenant: Tenant, action: Callable[[BlockingChannel], Any]) -> Any:
    """Run ``action`` on a fresh channel of the tenant user (in confirm mode)."""
    connection = tenant.connect()
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        return action(channel)
    finally:
        connection.close()


def tail(tenant: Tenant, key: str, exchange: str = "amq.topic") -> str:
    """The end of a topic refusal common to RabbitMQ 3.10 and 3.11+."""
    return (
        f"access to topic '{key}' in exchange '{exchange}' in vhost '{tenant.vhost}' "
        f"refused for user '{tenant.user}'"
    )


# -- the management API -------------------------------------------------------------------


def test_topic_permissions_are_set_listed_and_cleared(tenant: Tenant) -> None:
    api, vhost, user = tenant.api, tenant.vhost, tenant.user
    assert grant(tenant, "amq.topic", "^a\\.{username}", "^r\\.{vhost}") == 201
    assert grant(tenant, "amq.topic", "^a\\.{username}", "^r\\.{vhost}") == 204
    # One permission per exchange; a second exchange is one more (the user had some: 204),
    # and the exchange need not exist.
    assert grant(tenant, "not-there", "", "") == 204
    mine = [
        {"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^a\\.{username}",
         "read": "^r\\.{vhost}"},
        {"user": user, "vhost": vhost, "exchange": "not-there", "write": "", "read": ""},
    ]  # fmt: skip
    assert listed(api, f"/api/topic-permissions/{q(vhost)}/{q(user)}") == mine
    assert listed(api, f"/api/users/{q(user)}/topic-permissions") == mine
    everyone = listed(api, "/api/topic-permissions")
    assert [item for item in everyone if item["user"] == user] == mine
    by_vhost = api("GET", f"/api/vhosts/{q(vhost)}/topic-permissions")
    assert by_vhost[0] == 200
    assert [list(item) for item in by_vhost[1]] == [
        ["vhost", "user", "exchange", "write", "read"]
    ] * 2
    # A user without topic permissions lists none; unknown users and vhosts are 404s.
    assert api("GET", "/api/users/guest/topic-permissions") == (200, [])
    assert api("GET", f"/api/topic-permissions/{q(vhost)}/guest") == NOT_FOUND
    assert api("GET", f"/api/users/{unique('tp-nobody')}/topic-permissions") == NOT_FOUND
    assert api("GET", f"/api/vhosts/{unique('tp-nowhere')}/topic-permissions") == NOT_FOUND
    # DELETE clears them all, whatever exchange the query names.
    path = f"/api/topic-permissions/{q(vhost)}/{q(user)}"
    assert api("DELETE", path + "?exchange=not-there") == (204, None)
    assert api("GET", path) == NOT_FOUND
    assert api("DELETE", path) == NOT_FOUND


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"write": "x", "read": "y"}, "[{key_missing,exchange}]"),
        ({"exchange": "e"}, "[{key_missing,write},{key_missing,read}]"),
    ],
)
def test_refused_topic_permission_bodies(tenant: Tenant, body: Any, reason: str) -> None:
    path = f"/api/topic-permissions/{q(tenant.vhost)}/{q(tenant.user)}"
    assert tenant.api("PUT", path, body) == (400, {"error": "bad_request", "reason": reason})


def test_refused_topic_permission_targets(tenant: Tenant) -> None:
    api, vhost, user = tenant.api, tenant.vhost, tenant.user
    body = {"exchange": "e", "write": "x", "read": "y"}
    nowhere = {"error": "bad_request", "reason": "vhost_or_user_not_found"}
    assert api("PUT", f"/api/topic-permissions/{unique('tp-nowhere')}/{q(user)}", body) == (
        400,
        nowhere,
    )
    assert api("PUT", f"/api/topic-permissions/{q(vhost)}/{unique('tp-nobody')}", body) == (
        400,
        nowhere,
    )
    status, answer = api(
        "PUT", f"/api/topic-permissions/{q(vhost)}/{q(user)}", {**body, "write": "("}
    )
    # The last element is the regular-expression compiler's message (PCRE's or Python's).
    assert (status, answer["error"], answer["reason"][:2]) == (
        400,
        "bad_request",
        ["invalid_regexp", "("],
    )
    assert api("GET", f"/api/topic-permissions/{q(vhost)}/{q(user)}") == NOT_FOUND
    # A vhost permission's invalid pattern is refused the same way (RabbitMQ shows the
    # pattern there as a list of character codes).
    invalid = {"configure": "(", "write": ".*", "read": ".*"}
    status, answer = api("PUT", f"/api/permissions/{q(vhost)}/{q(user)}", invalid)
    assert (status, answer["reason"][0]) == (400, "invalid_regexp")


# -- AMQP -----------------------------------------------------------------------------------


def test_publish_checks_the_routing_key(tenant: Tenant, broker_kind: str) -> None:
    assert grant(tenant, "amq.topic", "^a\\.{username}\\.", ".*") == 201
    key = f"a.{tenant.user}.x"

    def publish_ok(channel: BlockingChannel) -> tuple[int, bytes]:
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "amq.topic", "#")
        channel.basic_publish("amq.topic", key, b"allowed")
        # CC keys are not checked: the routing key alone is.
        cc = pika.BasicProperties(headers={"CC": ["b.other"]})
        channel.basic_publish("amq.topic", key, b"with cc", cc)
        first = channel.basic_get(queue, auto_ack=True)
        second = channel.basic_get(queue, auto_ack=True)
        return first[0].message_count, first[2] + b"+" + second[2]

    assert allowed(tenant, publish_ok) == (1, b"allowed+with cc")
    # The same channel: an allowed key again, then a refused one.
    text = refused(
        tenant,
        lambda ch: (
            ch.basic_publish("amq.topic", key, b"ok"),
            ch.basic_publish("amq.topic", "b.x", b"no"),
        ),
    )
    assert text.endswith(tail(tenant, "b.x")), text
    if broker_kind == "leveret":
        assert text == "ACCESS_REFUSED - write " + tail(tenant, "b.x")
    # Another user's name does not match {username}.
    text = refused(tenant, lambda ch: ch.basic_publish("amq.topic", "a.guest.x", b"no"))
    assert text.endswith(tail(tenant, "a.guest.x")), text


def test_only_topic_exchanges_are_checked(tenant: Tenant) -> None:
    assert grant(tenant, "amq.direct", "^nothing$", "^nothing$") == 201
    assert grant(tenant, "amq.topic", "^nothing$", "^nothing$") == 204

    def direct(channel: BlockingChannel) -> int:
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "amq.direct", queue)
        channel.basic_publish("amq.direct", queue, b"direct")
        # A topic exchange as the *destination* of an exchange binding is not checked.
        channel.exchange_bind("amq.topic", "amq.direct", "anything")
        channel.exchange_unbind("amq.topic", "amq.direct", "anything")
        return int(channel.queue_declare(queue, passive=True).method.message_count)

    assert allowed(tenant, direct) == 1


def test_empty_pattern_allows_only_the_empty_key(tenant: Tenant) -> None:
    exchange = unique("tp-topic")
    assert grant(tenant, exchange, "", "") == 201
    allowed(tenant, lambda ch: ch.exchange_declare(exchange, "topic", auto_delete=False))
    allowed(tenant, lambda ch: ch.basic_publish(exchange, "", b"empty key"))
    text = refused(tenant, lambda ch: ch.basic_publish(exchange, "a", b"no"))
    assert text.endswith(tail(tenant, "a", exchange)), text


def test_bindings_check_the_binding_key(tenant: Tenant, broker_kind: str) -> None:
    assert grant(tenant, "amq.topic", ".*", "^r\\.{vhost}\\.") == 201
    key = f"r.{tenant.vhost}.#"

    def bind_ok(channel: BlockingChannel) -> None:
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "amq.topic", key)
        channel.queue_unbind(queue, "amq.topic", key)

    allowed(tenant, bind_ok)

    def bind(routing_key: str) -> Callable[[BlockingChannel], None]:
        def action(channel: BlockingChannel) -> None:
            queue = channel.queue_declare("", exclusive=True).method.queue
            channel.queue_bind(queue, "amq.topic", routing_key)

        return action

    def unbind(channel: BlockingChannel) -> None:
        # Checked before the binding is looked up: one that does not exist is refused too.
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_unbind(queue, "amq.topic", "nope")

    def exchange_bind(channel: BlockingChannel) -> None:
        channel.exchange_bind("amq.fanout", "amq.topic", "x.y")

    for action, key_refused in ((bind("x.#"), "x.#"), (unbind, "nope"), (exchange_bind, "x.y")):
        text = refused(tenant, action)
        assert text.endswith(tail(tenant, key_refused)), text
        if broker_kind == "leveret":
            assert text == "ACCESS_REFUSED - read " + tail(tenant, key_refused)


def test_refusals_come_after_the_exchange_checks(tenant: Tenant) -> None:
    """A missing exchange is 404 and an internal one 403 'cannot publish' first."""
    internal = unique("tp-internal")
    assert grant(tenant, internal, "^nothing$", "^nothing$") == 201
    allowed(tenant, lambda ch: ch.exchange_declare(internal, "topic", internal=True))
    text = refused(tenant, lambda ch: ch.basic_publish(internal, "k", b"no"))
    assert text == (
        f"ACCESS_REFUSED - cannot publish to internal exchange '{internal}' in vhost "
        f"'{tenant.vhost}'"
    )
    missing = unique("tp-missing")
    assert grant(tenant, missing, "^nothing$", "^nothing$") == 204
    text = refused(tenant, lambda ch: ch.basic_publish(missing, "k", b"no"), code=404)
    assert text == f"NOT_FOUND - no exchange '{missing}' in vhost '{tenant.vhost}'"


def test_a_new_permission_applies_to_new_channels(tenant: Tenant) -> None:
    connection = tenant.connect()
    try:
        connection.channel().basic_publish("amq.topic", "b.x", b"before")
        assert grant(tenant, "amq.topic", "^a\\.", ".*") == 201
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("amq.topic", "b.x", b"after")
        assert str(closed.value.reply_text).endswith(tail(tenant, "b.x"))
    finally:
        if connection.is_open:
            connection.close()


# -- the API's own publish and bindings, definitions, clean-up ------------------------------


def test_api_publish_and_bindings_are_checked(tenant: Tenant) -> None:
    api, vhost, user = tenant.api, tenant.vhost, tenant.user
    assert (
        api("PUT", f"/api/users/{q(user)}", {"password": PASSWORD, "tags": "management"})[0] == 204
    )
    assert grant(tenant, "amq.topic", "^a\\.", "^a\\.") == 201
    as_user = Http(api.base, user, PASSWORD)
    publish = f"/api/exchanges/{q(vhost)}/amq.topic/publish"
    body = {"properties": {}, "payload": "x", "payload_encoding": "string"}
    status, answer = as_user("POST", publish, {**body, "routing_key": "b.x"})
    # The publish's channel dies; rabbit_mgmt_wm_exchange_publish answers 400 with the code.
    assert (status, answer["error"]) == (400, "bad_request"), answer
    assert answer["reason"].startswith("403 ACCESS_REFUSED - ")
    assert answer["reason"].endswith(tail(tenant, "b.x")), answer
    assert as_user("POST", publish, {**body, "routing_key": "a.x"}) == (200, {"routed": False})

    queue = unique("tp-queue")
    assert as_user("PUT", f"/api/queues/{q(vhost)}/{queue}", {})[0] == 201
    bindings = f"/api/bindings/{q(vhost)}/e/amq.topic/q/{queue}"
    access_refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    assert as_user("POST", bindings, {"routing_key": "b.x"}) == access_refused
    assert as_user("POST", bindings, {"routing_key": "a.x"})[0] == 201
    assert grant(tenant, "amq.topic", "^b\\.", "^b\\.") == 204
    assert as_user("DELETE", bindings + "/a.x") == access_refused
    assert [b["routing_key"] for b in as_user("GET", bindings)[1]] == ["a.x"]


def test_topic_permissions_in_definitions(tenant: Tenant) -> None:
    api, vhost, user = tenant.api, tenant.vhost, tenant.user
    mine = {"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^w", "read": "^r"}
    assert api("POST", "/api/definitions", {"topic_permissions": [mine]}) == (204, None)
    assert listed(api, f"/api/topic-permissions/{q(vhost)}/{q(user)}") == [mine]
    status, exported = api("GET", "/api/definitions")
    assert status == 200 and mine in exported["topic_permissions"]

    def load(item: dict[str, Any]) -> tuple[int, Any]:
        status, answer = api("POST", "/api/definitions", {"topic_permissions": [item]})
        return status, answer["reason"]

    nobody, nowhere = unique("tp-nobody"), unique("tp-nowhere")
    assert load({**mine, "user": nobody}) == (400, ["no_such_user", nobody])
    assert load({**mine, "vhost": nowhere}) == (400, ["no_such_vhost", nowhere])
    assert load({key: value for key, value in mine.items() if key != "read"}) == (400, "badarg")
    status, reason = load({**mine, "write": "("})
    assert (status, reason[:2]) == (400, ["invalid_regexp", "("])


def test_deleting_the_user_or_vhost_drops_them(tenant: Tenant) -> None:
    api, vhost, user = tenant.api, tenant.vhost, tenant.user
    assert grant(tenant, "amq.topic", "a", "b") == 201
    assert api("DELETE", f"/api/users/{q(user)}") == (204, None)
    assert api("PUT", f"/api/users/{q(user)}", {"password": PASSWORD, "tags": ""})[0] == 201
    assert api("GET", f"/api/topic-permissions/{q(vhost)}/{q(user)}") == NOT_FOUND
    assert grant(tenant, "amq.topic", "a", "b") == 201
    assert api("DELETE", f"/api/vhosts/{q(vhost)}") == (204, None)
    assert api("PUT", f"/api/vhosts/{q(vhost)}", {})[0] == 201
    assert api("GET", f"/api/topic-permissions/{q(vhost)}/{q(user)}") == NOT_FOUND
    assert [p for p in listed(api, "/api/topic-permissions") if p["user"] == user] == []
