"""The permission matrix: every AMQP operation that RabbitMQ checks, with each of the three
permissions (configure, write, read) taken away in turn, refused or allowed as RabbitMQ does.

The table is the one in RabbitMQ's access-control guide ("How Permissions Work": which
permission each AMQP 0-9-1 operation needs on which resource) and rabbit_channel.erl's
check_configure_permitted / check_write_permitted / check_read_permitted calls; each case
runs against Leveret and, with ``-m rabbitmq``, against RabbitMQ 3.10.8 (the ``tenant``
fixture: a vhost and a user of the test's own, made through the management API). The
tenant user's permission under test is set to ``^nothing$`` (it matches none of the names
used here), the other two to ``.*``; the objects are declared beforehand by guest.

A refusal is a channel error 403 whose text ends ``access to <kind> '<name>' in vhost
'<vhost>' refused for user '<user>'``: RabbitMQ 3.10.8 puts nothing before ``access``,
3.11 and later (and Leveret) the permission (``configure access to ...``); the common tail
is compared, and Leveret's whole text when the broker under test is Leveret.
``bench/faults.py permissions`` reports the counts for both brokers (RELIABILITY.md).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

from .helpers import Tenant

pytestmark = pytest.mark.timeout(60)

KINDS = ("configure", "write", "read")

Action = Callable[[BlockingChannel], Any]

# operation -> (what the client does, {permission taken away: (kind, name) refused}); a
# permission missing from the dict is not needed: the operation succeeds without it.
MATRIX: dict[str, tuple[Action, dict[str, tuple[str, str]]]] = {
    "exchange.declare": (
        lambda ch: ch.exchange_declare("new-x", "direct"),
        {"configure": ("exchange", "new-x")},
    ),
    "exchange.declare passive": (lambda ch: ch.exchange_declare("mx", passive=True), {}),
    "exchange.delete": (lambda ch: ch.exchange_delete("mx"), {"configure": ("exchange", "mx")}),
    "queue.declare": (lambda ch: ch.queue_declare("new-q"), {"configure": ("queue", "new-q")}),
    "queue.declare passive": (lambda ch: ch.queue_declare("mq", passive=True), {}),
    "queue.delete": (lambda ch: ch.queue_delete("mq"), {"configure": ("queue", "mq")}),
    "queue.purge": (lambda ch: ch.queue_purge("mq"), {"read": ("queue", "mq")}),
    "queue.bind": (
        lambda ch: ch.queue_bind("mq", "mx", "k2"),
        {"write": ("queue", "mq"), "read": ("exchange", "mx")},
    ),
    "queue.unbind": (
        lambda ch: ch.queue_unbind("mq", "mx", "k"),
        {"write": ("queue", "mq"), "read": ("exchange", "mx")},
    ),
    "exchange.bind": (
        lambda ch: ch.exchange_bind("mx2", "mx", "k2"),
        {"write": ("exchange", "mx2"), "read": ("exchange", "mx")},
    ),
    "exchange.unbind": (
        lambda ch: ch.exchange_unbind("mx2", "mx", "k"),
        {"write": ("exchange", "mx2"), "read": ("exchange", "mx")},
    ),
    "basic.publish": (
        lambda ch: ch.basic_publish("mx", "k", b"m"),
        {"write": ("exchange", "mx")},
    ),
    "basic.get": (lambda ch: ch.basic_get("mq", auto_ack=True), {"read": ("queue", "mq")}),
    "basic.consume": (
        lambda ch: ch.basic_consume("mq", lambda *_: None, auto_ack=True),
        {"read": ("queue", "mq")},
    ),
}

CASES = [(op, kind) for op in MATRIX for kind in KINDS]


def q(name: str) -> str:
    """A path segment."""
    return urllib.parse.quote(name, safe="")


def prepare(tenant: Tenant, without: str) -> None:
    """Objects declared by guest in the tenant's vhost (exchanges mx, mx2, queue mq, mq
    bound to mx with key k, mx2 bound to mx with key k); the tenant user gets every
    permission but ``without``."""
    connection = tenant.connect(user="guest")
    try:
        ch = connection.channel()
        ch.exchange_declare("mx", "direct")
        ch.exchange_declare("mx2", "direct")
        ch.queue_declare("mq")
        ch.queue_bind("mq", "mx", "k")
        ch.exchange_bind("mx2", "mx", "k")
    finally:
        connection.close()
    permissions = {kind: "^nothing$" if kind == without else ".*" for kind in KINDS}
    path = f"/api/permissions/{q(tenant.vhost)}/{q(tenant.user)}"
    assert tenant.api("PUT", path, permissions)[0] in (201, 204)


def attempt(tenant: Tenant, action: Action) -> tuple[int, str] | None:
    """Run ``action`` on a fresh channel of the tenant user in confirm mode (so that a
    refused publish is seen), then a round trip; the channel error, or None."""
    connection = tenant.connect()
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        try:
            action(channel)
            channel.basic_qos(prefetch_count=0)  # a round trip, after asynchronous ones
        except ChannelClosedByBroker as closed:
            return closed.reply_code, str(closed.reply_text)
        return None
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.parametrize(("operation", "without"), CASES, ids=[f"{o}-{k}" for o, k in CASES])
def test_each_operation_needs_exactly_its_permissions(
    tenant: Tenant, broker_kind: str, operation: str, without: str
) -> None:
    action, needs = MATRIX[operation]
    prepare(tenant, without)
    got = attempt(tenant, action)
    if without not in needs:
        assert got is None, f"{operation} without {without} permission: {got}"
        return
    kind, name = needs[without]
    tail = f"access to {kind} '{name}' in vhost '{tenant.vhost}' refused for user '{tenant.user}'"
    assert got is not None, f"{operation} without {without} permission was allowed"
    code, text = got
    assert code == 403 and text.endswith(tail), got
    if broker_kind == "leveret":
        assert text == f"ACCESS_REFUSED - {without} {tail}"


def test_the_matrix_covers_every_checked_operation() -> None:
    # Every refusal names a permission this module takes away, and every permission is
    # needed somewhere: a table that lost a row would pass the other test vacuously.
    needed = {kind for _, needs in MATRIX.values() for kind in needs}
    assert needed == set(KINDS)
    assert sum(len(needs) for _, needs in MATRIX.values()) == 16
