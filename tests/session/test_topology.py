"""Topology semantics without a socket (leveret.session.topology): the permissions, the
reserved names, declare equivalence, exclusive access and the binding rules, with
RabbitMQ's codes and texts (checked against 3.10.8 by the integration suite, which asks
the same questions over the wire)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pamqp import commands

from leveret.exchanges.model import Binding, DestKind
from leveret.node.auth import AccessControl, Permission, TopicPermission
from leveret.node.fieldtable import marshal_content_header
from leveret.node.message import Message
from leveret.node.vhost import VHost
from leveret.session.topology import (
    Actor,
    QueueInUseError,
    QueueNotEmptyError,
    bind,
    declare_exchange,
    declare_queue,
    delete_exchange,
    delete_queue,
    expand_queue_name,
    purge_queue,
)

from .helpers import refusal

LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'x' in vhost '/'. It "
    "could be originally declared on another connection or the exclusive property value does "
    "not match that of the original declaration."
)


@pytest.fixture
def access() -> AccessControl:
    access = AccessControl.with_users({"guest": "guest", "app": "secret"}, ("/",))
    access.set_permissions("app", "/", Permission(configure="^app", write="^app", read="^app"))
    return access


def connection() -> Any:
    """An AMQP connection as the session sees one: an identity owning exclusive queues."""
    return SimpleNamespace(exclusive_queues=set())


def queue(actor: Actor, name: str, exclusive: bool = False, **arguments: Any) -> Any:
    return declare_queue(actor, name, False, False, exclusive, False, arguments)


async def test_exchange_redeclare_must_be_equivalent(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    assert declare_exchange(guest, "x", "direct", False, False, False, False, {}) is True
    assert declare_exchange(guest, "x", "direct", False, False, False, False, {}) is False
    what = "exchange 'x' in vhost '/'"
    for args, field, new, old in (
        (("topic", False, False, False), "type", "topic", "direct"),
        (("direct", True, False, False), "durable", "true", "false"),
        (("direct", False, True, False), "auto_delete", "true", "false"),
        (("direct", False, False, True), "internal", "true", "false"),
    ):
        type_name, durable, auto_delete, internal = args
        assert refusal(
            lambda t=type_name, d=durable, a=auto_delete, i=internal: declare_exchange(
                guest, "x", t, False, d, a, i, {}
            )
        ) == (
            406,
            f"PRECONDITION_FAILED - inequivalent arg '{field}' for {what}: received '{new}' "
            f"but current is '{old}'",
        )
    assert refusal(
        lambda: declare_exchange(guest, "x", "nope", False, False, False, False, {})
    ) == (406, "PRECONDITION_FAILED - unknown exchange type 'nope'")


async def test_queue_redeclare_must_be_equivalent(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    declare_queue(guest, "q", False, False, False, True, {})
    assert refusal(lambda: declare_queue(guest, "q", False, True, False, True, {})) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'true' but current is 'false'",
    )
    assert refusal(lambda: declare_queue(guest, "q", False, False, False, False, {})) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue 'q' in vhost '/': "
        "received 'false' but current is 'true'",
    )
    assert refusal(
        lambda: declare_queue(guest, "q", False, False, False, True, {"x-max-length": 10})
    ) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received the value '10' of type 'signedint' but current is none",
    )
    # A passive declare of a missing queue is 404; a queue that exists is left as it is.
    assert refusal(lambda: declare_queue(guest, "nope", True, False, False, False, {})) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )


async def test_amq_names_are_reserved(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    assert refusal(
        lambda: declare_exchange(guest, "amq.mine", "direct", False, False, False, False, {})
    ) == (403, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'")
    # A predeclared amq.* exchange re-declares as itself (equivalence, not the name).
    declare_exchange(guest, "amq.direct", "direct", False, True, False, False, {})
    assert refusal(lambda: delete_exchange(guest, "amq.direct", False)) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    assert refusal(lambda: delete_exchange(guest, "", False)) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    assert refusal(lambda: queue(guest, "amq.q")) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'",
    )
    # A server-named queue is amq.gen-*, and may be.
    named, created = declare_queue(guest, "amq.gen-abc", False, False, True, False, {}, True)
    assert (named.name, created) == ("amq.gen-abc", True)


async def test_server_named_queues_are_classic(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    assert refusal(
        lambda: declare_queue(
            guest, "amq.gen-x", False, True, False, False, {"x-queue-type": "quorum"}, True
        )
    ) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
    )


async def test_exclusive_queues_are_locked_to_their_connection(
    access: AccessControl, vhost: VHost
) -> None:
    owner, other = connection(), connection()
    mine = Actor(access, "guest", vhost, owner)
    theirs = Actor(access, "guest", vhost, other)
    management = Actor(access, "guest", vhost)
    created, _ = queue(mine, "x", exclusive=True)
    assert created in owner.exclusive_queues and not created.durable
    queue(mine, "x", exclusive=True)  # its owner re-declares it
    locked = (405, LOCKED)
    assert refusal(lambda: queue(theirs, "x", exclusive=True)) == locked
    assert refusal(lambda: declare_queue(theirs, "x", True, False, False, False, {})) == locked
    assert refusal(lambda: purge_queue(theirs, "x")) == locked
    assert refusal(lambda: purge_queue(management, "x")) == locked
    assert refusal(lambda: delete_queue(management, "x", False, False)) == locked
    assert refusal(lambda: bind(theirs, "amq.direct", DestKind.QUEUE, "x", "k", {}, True)) == locked
    # Strict on a re-declare: a non-exclusive queue re-declared exclusive is locked too.
    queue(mine, "shared")
    assert refusal(lambda: queue(mine, "shared", exclusive=True))[0] == 405
    assert delete_queue(mine, "x", False, False) == 0
    assert "x" not in vhost.queues and not owner.exclusive_queues


async def test_bindings_need_both_ends(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    queue(guest, "q")
    assert refusal(lambda: bind(guest, "nowhere", DestKind.QUEUE, "q", "k", {}, True)) == (
        404,
        "NOT_FOUND - no exchange 'nowhere' in vhost '/'",
    )
    assert refusal(lambda: bind(guest, "amq.direct", DestKind.QUEUE, "nope", "k", {}, True)) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )
    assert refusal(lambda: bind(guest, "", DestKind.QUEUE, "q", "k", {}, True)) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    bind(guest, "amq.direct", DestKind.QUEUE, "q", "k", {}, True)
    assert vhost.projection.has_binding(Binding("amq.direct", "q", DestKind.QUEUE, "k", {}))
    # Unbinding what is not bound is unbind-ok, even with a missing end.
    bind(guest, "nowhere", DestKind.QUEUE, "nope", "k", {}, False)
    bind(guest, "amq.direct", DestKind.QUEUE, "q", "k", {}, False)
    assert not vhost.projection.has_bindings_from("amq.direct")


async def test_permissions_come_first_and_in_rabbitmq_order(
    access: AccessControl, vhost: VHost
) -> None:
    app = Actor(access, "app", vhost)
    refused = "ACCESS_REFUSED - {} access to {} '{}' in vhost '/' refused for user 'app'"
    # Configure before the reserved name (the permission is checked first).
    assert refusal(lambda: queue(app, "amq.q")) == (
        403,
        refused.format("configure", "queue", "amq.q"),
    )
    assert refusal(
        lambda: declare_exchange(app, "other", "nope", False, False, False, False, {})
    ) == (403, refused.format("configure", "exchange", "other"))
    # A new queue's dead-letter exchange: write on it.
    assert refusal(lambda: queue(app, "app.q", **{"x-dead-letter-exchange": "dlx"})) == (
        403,
        refused.format("write", "exchange", "dlx"),
    )
    queue(app, "app.q")
    # A binding: write on the destination, then read on the source, then the topic key.
    assert refusal(lambda: bind(app, "amq.topic", DestKind.QUEUE, "app.q", "k", {}, True)) == (
        403,
        refused.format("read", "exchange", "amq.topic"),
    )
    guest = Actor(access, "guest", vhost)
    declare_exchange(guest, "app.t", "topic", False, False, False, False, {})
    access.set_topic_permission("app", "/", "app.t", TopicPermission(write="", read="^ok"))
    assert refusal(lambda: bind(app, "app.t", DestKind.QUEUE, "app.q", "no", {}, True)) == (
        403,
        "ACCESS_REFUSED - read access to topic 'no' in exchange 'app.t' in vhost '/' refused "
        "for user 'app'",
    )
    bind(app, "app.t", DestKind.QUEUE, "app.q", "ok", {}, True)
    assert refusal(lambda: purge_queue(app, "nope")) == (
        403,
        refused.format("read", "queue", "nope"),
    )


async def test_delete_conditions(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    declare_exchange(guest, "src", "direct", False, False, False, False, {})
    q, _ = queue(guest, "q")
    bind(guest, "src", DestKind.QUEUE, "q", "k", {}, True)
    assert refusal(lambda: delete_exchange(guest, "src", True)) == (
        406,
        "PRECONDITION_FAILED - exchange 'src' in vhost '/' in use",
    )
    header = marshal_content_header(1, commands.Basic.Properties())
    q.publish(Message("", "q", header, b"m"))
    with pytest.raises(QueueNotEmptyError) as raised:
        delete_queue(guest, "q", False, True)
    assert raised.value.text == "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty"
    q.consumers.append(object())  # type: ignore[arg-type]
    with pytest.raises(QueueInUseError) as used:
        delete_queue(guest, "q", True, False)
    assert used.value.text == "PRECONDITION_FAILED - queue 'q' in vhost '/' in use"
    q.consumers.clear()
    assert purge_queue(guest, "q") == 1
    assert delete_queue(guest, "q", True, True) == 0
    assert delete_queue(guest, "q", True, True) == 0  # gone already: delete-ok
    delete_exchange(guest, "src", True)
    delete_exchange(guest, "src", True)  # idempotent


def test_the_empty_queue_name_is_the_last_declared() -> None:
    assert expand_queue_name("last", "") == "last"
    assert expand_queue_name(None, "q") == "q"
    assert refusal(lambda: expand_queue_name(None, "")) == (
        404,
        "NOT_FOUND - no previously declared queue",
    )
