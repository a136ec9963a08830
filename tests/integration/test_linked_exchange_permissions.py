"""Declaring an exchange with an ``alternate-exchange`` or a queue with an
``x-dead-letter-exchange`` routes messages into that exchange, so it takes write permission
on it (and read on the new object), or a user could publish where it may not write.

Each scenario runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ
(a vhost and user of its own, the ``tenant`` fixture). Source: rabbit_channel.erl,
handle_method/6 for exchange.declare and queue.declare (3.10.8): check_read_permitted on the
new object, then check_write_permitted on the linked exchange, only when it does not exist
yet; the text is rabbit_access_control's.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker

from .helpers import PASSWORD, Http, Tenant, unique

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fenced(tenant: Tenant) -> Iterator[Tenant]:
    """The tenant user may configure and read everything in its vhost but write only to
    exchanges and queues named ``mine.*``; ``other.x`` exists (guest declared it)."""
    quoted = urllib.parse.quote(tenant.vhost, safe="")
    permissions = {"configure": ".*", "write": "^mine\\.", "read": ".*"}
    assert tenant.api("PUT", f"/api/permissions/{quoted}/{tenant.user}", permissions)[0] == 204
    connection = tenant.connect(user="guest")
    connection.channel().exchange_declare("other.x", "fanout")
    connection.close()
    yield tenant


def outcome(tenant: Tenant, action: Callable[[BlockingChannel], Any]) -> tuple[int, str]:
    """(reply code, text) of the channel error ``action`` gets, or (200, "ok")."""
    connection: pika.BlockingConnection = tenant.connect()
    try:
        action(connection.channel())
        return 200, "ok"
    except ChannelClosedByBroker as closed:
        return closed.reply_code, str(closed.reply_text)
    finally:
        if connection.is_open:
            connection.close()


def refusal(tenant: Tenant, resource: str, broker_kind: str) -> tuple[int, str]:
    """RabbitMQ 3.10.8 writes "access to ..." (observed; rabbit_access_control leaves the
    permission out), 3.13 and Leveret, which presents itself as 3.13, "write access to"."""
    kind = "" if broker_kind == "rabbitmq" else "write "
    return (
        403,
        f"ACCESS_REFUSED - {kind}access to {resource} in vhost '{tenant.vhost}' refused for "
        f"user '{tenant.user}'",
    )


def test_an_alternate_exchange_the_user_may_not_write_to_is_refused(
    fenced: Tenant, broker_kind: str
) -> None:
    name = unique("mine.x")
    declare = lambda ch: ch.exchange_declare(  # noqa: E731
        name, "direct", arguments={"alternate-exchange": "other.x"}
    )
    assert outcome(fenced, declare) == refusal(fenced, "exchange 'other.x'", broker_kind)
    # Nothing was declared.
    passive = lambda ch: ch.exchange_declare(name, passive=True)  # noqa: E731
    assert outcome(fenced, passive)[0] == 404


def test_a_dead_letter_exchange_the_user_may_not_write_to_is_refused(
    fenced: Tenant, broker_kind: str
) -> None:
    name = unique("mine.q")
    declare = lambda ch: ch.queue_declare(  # noqa: E731
        name, arguments={"x-dead-letter-exchange": "other.x"}
    )
    assert outcome(fenced, declare) == refusal(fenced, "exchange 'other.x'", broker_kind)
    assert outcome(fenced, lambda ch: ch.queue_declare(name, passive=True))[0] == 404


def test_linked_exchanges_the_user_may_write_to_are_accepted(fenced: Tenant) -> None:
    target = unique("mine.target")
    assert outcome(fenced, lambda ch: ch.exchange_declare(target, "fanout")) == (200, "ok")

    def declare_both(channel: BlockingChannel) -> None:
        channel.exchange_declare(
            unique("mine.x"), "direct", arguments={"alternate-exchange": target}
        )
        channel.queue_declare(unique("mine.q"), arguments={"x-dead-letter-exchange": target})

    assert outcome(fenced, declare_both) == (200, "ok")


def test_an_existing_object_is_not_checked_again(fenced: Tenant) -> None:
    # guest declares the exchange and queue; the fenced user's equivalent redeclare is the
    # plain declare of an existing object (only configure is checked), as in RabbitMQ.
    exchange, queue = unique("mine.x"), unique("mine.q")
    connection = fenced.connect(user="guest")
    channel = connection.channel()
    channel.exchange_declare(exchange, "direct", arguments={"alternate-exchange": "other.x"})
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": "other.x"})
    connection.close()

    def redeclare(channel: BlockingChannel) -> None:
        channel.exchange_declare(exchange, "direct", arguments={"alternate-exchange": "other.x"})
        channel.queue_declare(queue, arguments={"x-dead-letter-exchange": "other.x"})

    assert outcome(fenced, redeclare) == (200, "ok")


@pytest.mark.parametrize(
    ("kind", "argument"),
    [("exchanges", "alternate-exchange"), ("queues", "x-dead-letter-exchange")],
)
def test_the_management_api_refuses_the_same_declares(
    fenced: Tenant, kind: str, argument: str
) -> None:
    # rabbit_mgmt_util:direct_request/6 answers a refused declare with 401 "Access refused."
    tagged = {"password": PASSWORD, "tags": "management"}
    assert fenced.api("PUT", f"/api/users/{fenced.user}", tagged)[0] == 204
    user_api = Http(fenced.api.base, fenced.user, PASSWORD)
    name = unique("mine.api")
    body: dict[str, Any] = {"arguments": {argument: "other.x"}}
    if kind == "exchanges":
        body["type"] = "direct"
    assert user_api("PUT", fenced.path(kind, name), body) == (
        401,
        {"error": "not_authorised", "reason": "Access refused."},
    )
    assert user_api("GET", fenced.path(kind, name))[0] == 404
