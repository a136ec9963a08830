"""Day-to-day broker features through pika's BlockingConnection.

Every scenario runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ; the
expected reply codes and texts below were observed on RabbitMQ (3.10.8 from Debian, checked
against the 3.13 sources where the two could differ). The few scenarios that only run against
Leveret say why: the Debian RabbitMQ is not 3.13 there, or the profile deliberately differs.

Names are unique per test (uuid suffix); queues are exclusive or deleted at the end. Reply
texts name the vhost: both broker URLs use the default vhost ``/``.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from .helpers import unique
from .wire import parse_url

pytestmark = pytest.mark.timeout(30)

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
LOGIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)


# -- helpers ----------------------------------------------------------------------------------


def params(url: str) -> pika.URLParameters:
    p = pika.URLParameters(url)
    p.connection_attempts = 1
    p.socket_timeout = 5
    p.stack_timeout = 10
    p.blocked_connection_timeout = 10
    return p


def connect(url: str, **overrides: Any) -> pika.BlockingConnection:
    p = params(url)
    for key, value in overrides.items():
        setattr(p, key, value)
    return pika.BlockingConnection(p)


def with_credentials(url: str, user: str, password: str, vhost: str | None = None) -> str:
    parts = urllib.parse.urlparse(url)
    netloc = f"{user}:{password}@{parts.hostname}:{parts.port or 5672}"
    path = parts.path if vhost is None else "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunparse(parts._replace(netloc=netloc, path=path))


def pump(conn: pika.BlockingConnection, done: Callable[[], bool], within: float = 5.0) -> None:
    """Process I/O until ``done()`` holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        conn.process_data_events(time_limit=0.02)


def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll a check that does its own broker round trip until it holds."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"


def channel_error(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[int, str]:
    exc = excinfo.value
    assert isinstance(exc, pika.exceptions.ChannelClosedByBroker), repr(exc)
    return exc.reply_code, exc.reply_text


def connection_error(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[int, str]:
    exc = excinfo.value
    assert isinstance(exc, pika.exceptions.ConnectionClosedByBroker), repr(exc)
    return exc.reply_code, exc.reply_text


def ready_count(ch: BlockingChannel, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def wait_ready(ch: BlockingChannel, queue: str, count: int) -> None:
    """Poll until the queue holds ``count`` ready messages.

    RabbitMQ answers queue.declare's message_count with a prioritised call to the queue
    process, which can overtake publishes still on their way: counts must be polled.
    """
    eventually(lambda: ready_count(ch, queue) == count)


def assert_empty(ch: BlockingChannel, queue: str) -> None:
    """No message is (or will turn up) in the queue: a marker published on the same channel
    after the messages in question arrives first."""
    marker = unique("marker").encode()
    ch.basic_publish("", queue, marker)
    eventually(lambda: ready_count(ch, queue) >= 1)
    assert ch.basic_get(queue, auto_ack=True)[2] == marker
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def conn(amqp_url: str) -> Iterator[pika.BlockingConnection]:
    connection = connect(amqp_url)
    yield connection
    if connection.is_open:
        connection.close()


@pytest.fixture
def ch(conn: pika.BlockingConnection) -> BlockingChannel:
    return conn.channel()


@pytest.fixture
def queue(ch: BlockingChannel) -> str:
    """A fresh exclusive server-named queue on ``ch``."""
    return str(ch.queue_declare("", exclusive=True).method.queue)


@pytest.fixture
def cleanup(amqp_url: str) -> Iterator[list[tuple[str, str]]]:
    """Register ("queue"|"exchange", name) pairs to delete after the test."""
    items: list[tuple[str, str]] = []
    yield items
    if items:
        connection = connect(amqp_url)
        channel = connection.channel()
        for kind, name in items:
            if kind == "queue":
                channel.queue_delete(name)
            else:
                channel.exchange_delete(name)
        connection.close()


# -- connection -------------------------------------------------------------------------------


def test_server_properties_and_capabilities(conn: pika.BlockingConnection) -> None:
    props = conn._impl.server_properties
    assert props["capabilities"] == CAPABILITIES
    for key in ("product", "version", "platform", "copyright", "information"):
        assert isinstance(props[key], str) and props[key], key


def test_wrong_password_is_refused_with_403(amqp_url: str) -> None:
    url = parse_url(amqp_url)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as excinfo:
        connect(with_credentials(amqp_url, url.user, "wrong-password"))
    # pika keeps the broker's Connection.Close as the repr of a ConnectionClosedByBroker.
    assert excinfo.value.args == (f"ConnectionClosedByBroker: (403) {LOGIN_REFUSED!r}",)


def test_unknown_user_is_refused_with_403(amqp_url: str) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as excinfo:
        connect(with_credentials(amqp_url, unique("nobody"), "guest"))
    assert excinfo.value.args == (f"ConnectionClosedByBroker: (403) {LOGIN_REFUSED!r}",)


def test_unknown_vhost_is_refused_with_530(amqp_url: str) -> None:
    # RabbitMQ checks the vhost connection limit first, and that check is what fails for a
    # vhost that does not exist: the text is "vhost <name> not found", not "access to vhost
    # ... refused" (that one is for an existing vhost the user has no permissions on).
    url = parse_url(amqp_url)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as excinfo:
        connect(with_credentials(amqp_url, url.user, url.password, vhost="nope"))
    assert excinfo.value.args == (
        "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost nope not found'",
    )


def test_many_channels_on_one_connection(conn: pika.BlockingConnection) -> None:
    channels = [conn.channel() for _ in range(200)]
    numbers = {c.channel_number for c in channels}
    assert len(numbers) == 200
    q = channels[0].queue_declare("", exclusive=True).method.queue
    for i, c in enumerate(channels):
        c.basic_publish("", q, str(i).encode())
    # Publishes on different channels are not ordered against each other: poll.
    wait_ready(channels[-1], q, 200)
    for c in channels[1:]:
        c.close()
    bodies = set()
    while True:
        method, _, body = channels[0].basic_get(q, auto_ack=True)
        if method is None:
            break
        bodies.add(body)
    assert bodies == {str(i).encode() for i in range(200)}


def test_closed_channel_number_can_be_reused(conn: pika.BlockingConnection) -> None:
    first = conn.channel(channel_number=7)
    first.close()
    again = conn.channel(channel_number=7)
    assert again.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")


# -- exchanges --------------------------------------------------------------------------------


def test_exchange_declare_bind_publish_unbind_delete(
    ch: BlockingChannel, queue: str, cleanup: list[tuple[str, str]]
) -> None:
    x = unique("x")
    cleanup.append(("exchange", x))
    ch.exchange_declare(x, "direct")
    ch.exchange_declare(x, "direct")  # equivalent re-declare is fine
    ch.exchange_declare(x, passive=True)
    ch.queue_bind(queue, x, "rk")
    ch.basic_publish(x, "rk", b"one")
    ch.basic_publish(x, "other", b"lost")
    method, _, body = ch.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (x, "rk", b"one")
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)
    ch.queue_unbind(queue, x, "rk")
    ch.basic_publish(x, "rk", b"after-unbind")
    assert_empty(ch, queue)
    ch.exchange_delete(x)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_declare(x, passive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no exchange '{x}' in vhost '/'")


def test_exchange_to_exchange_binding(
    ch: BlockingChannel, queue: str, cleanup: list[tuple[str, str]]
) -> None:
    src, dst = unique("x-src"), unique("x-dst")
    cleanup += [("exchange", src), ("exchange", dst)]
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src, "a.*")
    ch.queue_bind(queue, dst)
    ch.basic_publish(src, "a.b", b"routed")
    ch.basic_publish(src, "b.a", b"dropped")
    method, _, body = ch.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (src, "a.b", b"routed")
    assert_empty(ch, queue)


def test_passive_declare_of_missing_exchange_is_404(ch: BlockingChannel) -> None:
    x = unique("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_declare(x, passive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no exchange '{x}' in vhost '/'")
    assert ch.is_closed


def test_redeclare_exchange_with_other_type_is_406(
    ch: BlockingChannel, cleanup: list[tuple[str, str]]
) -> None:
    x = unique("x")
    cleanup.append(("exchange", x))
    ch.exchange_declare(x, "direct", auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_declare(x, "fanout", auto_delete=True)
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in vhost '/': "
        "received 'fanout' but current is 'direct'",
    )


def test_redeclare_exchange_with_other_durable_is_406(
    ch: BlockingChannel, cleanup: list[tuple[str, str]]
) -> None:
    x = unique("x")
    cleanup.append(("exchange", x))
    ch.exchange_declare(x, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_declare(x, "direct", durable=True)
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{x}' in vhost '/': "
        "received 'true' but current is 'false'",
    )


@pytest.mark.parametrize(
    ("action", "text"),
    [
        (
            lambda ch: ch.exchange_declare("amq.leveret-test", "direct"),
            "ACCESS_REFUSED - exchange name 'amq.leveret-test' contains reserved prefix 'amq.*'",
        ),
        (
            lambda ch: ch.exchange_delete("amq.direct"),
            "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
        ),
        (
            lambda ch: ch.exchange_declare("", "direct"),
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        ),
        (
            lambda ch: ch.queue_bind(ch.queue_declare("", exclusive=True).method.queue, "", "k"),
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        ),
        (
            lambda ch: ch.queue_declare("amq.leveret-test"),
            "ACCESS_REFUSED - queue name 'amq.leveret-test' contains reserved prefix 'amq.*'",
        ),
    ],
    ids=["declare-amq", "delete-amq.direct", "declare-default", "bind-default", "queue-amq"],
)
def test_reserved_names_are_403(ch: BlockingChannel, action: Any, text: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        action(ch)
    assert channel_error(excinfo) == (403, text)


def test_redeclare_amq_exchange_with_same_properties_is_fine(ch: BlockingChannel) -> None:
    ch.exchange_declare("amq.topic", "topic", durable=True)
    ch.exchange_declare("amq.direct", passive=True)


def test_exchange_delete_if_unused_is_406(
    ch: BlockingChannel, queue: str, cleanup: list[tuple[str, str]]
) -> None:
    x = unique("x")
    cleanup.append(("exchange", x))
    ch.exchange_declare(x, "direct")
    ch.queue_bind(queue, x, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.exchange_delete(x, if_unused=True)
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - exchange '{x}' in vhost '/' in use",
    )


def test_publish_to_missing_exchange_closes_channel_with_404(
    conn: pika.BlockingConnection, ch: BlockingChannel
) -> None:
    x = unique("missing")
    ch.basic_publish(x, "k", b"lost")  # asynchronous: the error arrives with the next reply
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare("", exclusive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no exchange '{x}' in vhost '/'")
    assert conn.is_open
    assert conn.channel().queue_declare("", exclusive=True).method.queue


def test_unknown_exchange_type_is_channel_406(leveret: Any) -> None:
    # Leveret only: the profile takes this one from RabbitMQ 4.x (406, channel-level). RabbitMQ
    # 3.13 (and the Debian 3.10) close the connection instead with
    # 503 "COMMAND_INVALID - unknown exchange type 'x-foo'" (peers.md 2.13).
    connection = connect(leveret.url)
    try:
        channel = connection.channel()
        x = unique("x")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            channel.exchange_declare(x, "x-foo")
        assert channel_error(excinfo) == (
            406,
            "PRECONDITION_FAILED - unknown exchange type 'x-foo'",
        )
        assert connection.is_open
        connection.channel().exchange_declare("amq.direct", passive=True)
    finally:
        if connection.is_open:
            connection.close()


# -- queues -----------------------------------------------------------------------------------


def test_server_named_queue(ch: BlockingChannel) -> None:
    ok = ch.queue_declare("", exclusive=True).method
    assert ok.queue.startswith("amq.gen-")
    assert len(ok.queue) == len("amq.gen-") + 22
    assert (ok.message_count, ok.consumer_count) == (0, 0)


def test_queue_declare_bind_purge_delete(
    ch: BlockingChannel, cleanup: list[tuple[str, str]]
) -> None:
    q = unique("q")
    cleanup.append(("queue", q))
    ok = ch.queue_declare(q, durable=False).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)
    ch.queue_bind(q, "amq.direct", "k")
    for _ in range(3):
        ch.basic_publish("amq.direct", "k", b"m")
    eventually(lambda: ch.queue_declare(q).method.message_count == 3)
    assert ch.queue_purge(q).method.message_count == 3
    ch.basic_publish("", q, b"m")
    wait_ready(ch, q, 1)
    assert ch.queue_delete(q).method.message_count == 1
    # Deleting what is not there is not an error.
    assert ch.queue_delete(q).method.message_count == 0


def test_passive_declare_of_missing_queue_is_404(ch: BlockingChannel) -> None:
    q = unique("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(q, passive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no queue '{q}' in vhost '/'")


@pytest.mark.parametrize("what", ["bind-queue", "bind-exchange", "get", "consume"])
def test_missing_queue_or_exchange_is_404(ch: BlockingChannel, what: str) -> None:
    name = unique("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        if what == "bind-queue":
            ch.queue_bind(name, "amq.direct", "k")
        elif what == "bind-exchange":
            ch.queue_bind(ch.queue_declare("", exclusive=True).method.queue, name, "k")
        elif what == "get":
            ch.basic_get(name)
        else:
            ch.basic_consume(name, lambda *a: None)
    kind = "exchange" if what == "bind-exchange" else "queue"
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no {kind} '{name}' in vhost '/'")


def test_empty_queue_name_without_previous_declare_is_404(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_bind("", "amq.direct", "k")
    assert channel_error(excinfo) == (404, "NOT_FOUND - no previously declared queue")


def test_redeclare_queue_with_other_durable_is_406(
    ch: BlockingChannel, cleanup: list[tuple[str, str]]
) -> None:
    q = unique("q")
    cleanup.append(("queue", q))
    ch.queue_declare(q, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(q, durable=True, auto_delete=True)
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{q}' in vhost '/': "
        "received 'true' but current is 'false'",
    )


def test_redeclare_queue_with_other_arguments_is_406(
    ch: BlockingChannel, cleanup: list[tuple[str, str]]
) -> None:
    q = unique("q")
    cleanup.append(("queue", q))
    ch.queue_declare(q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(q, arguments={"x-message-ttl": 2000})
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{q}' in vhost '/': "
        "received the value '2000' of type 'signedint' but current is none",
    )


def test_invalid_queue_argument_is_406(ch: BlockingChannel) -> None:
    q = unique("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(q, arguments={"x-message-ttl": -1})
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{q}' in vhost '/': "
        "{value_negative,-1}",
    )


@pytest.mark.parametrize("passive", [False, True])
def test_exclusive_queue_from_another_connection_is_405(
    amqp_url: str, ch: BlockingChannel, passive: bool
) -> None:
    q = ch.queue_declare(unique("excl"), exclusive=True).method.queue
    other = connect(amqp_url)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            other.channel().queue_declare(q, exclusive=not passive, passive=passive)
        assert channel_error(excinfo) == (
            405,
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost "
            "'/'. It could be originally declared on another connection or the exclusive "
            "property value does not match that of the original declaration.",
        )
    finally:
        other.close()


def test_exclusive_queue_goes_away_with_its_connection(amqp_url: str, ch: BlockingChannel) -> None:
    owner = connect(amqp_url)
    q = owner.channel().queue_declare(unique("excl"), exclusive=True).method.queue
    owner.close()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(q, passive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no queue '{q}' in vhost '/'")


def test_queue_delete_if_empty_and_if_unused_are_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"m")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_delete(q, if_empty=True)
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty",
    )
    ch = conn.channel()
    ch.basic_consume(q, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_delete(q, if_unused=True)
    assert channel_error(excinfo) == (406, f"PRECONDITION_FAILED - queue '{q}' in vhost '/' in use")


def test_exclusive_consumer_conflicts_are_403(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_consume(q, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().basic_consume(q, lambda *a: None, exclusive=True)
    assert channel_error(excinfo) == (
        403,
        f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use",
    )

    q2 = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_consume(q2, lambda *a: None, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().basic_consume(q2, lambda *a: None)
    assert channel_error(excinfo) == (
        403,
        f"ACCESS_REFUSED - queue '{q2}' in vhost '/' in exclusive use",
    )


# -- publish, get, consume, acks ----------------------------------------------------------------


def test_publish_and_get_round_trip_properties(ch: BlockingChannel, queue: str) -> None:
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers={"a": 1, "b": "two", "c": True, "nested": {"x": [1, 2]}},
        delivery_mode=2,
        priority=3,
        correlation_id="corr-1",
        reply_to="replies",
        expiration="60000",
        message_id="m-1",
        timestamp=1700000000,
        type="kind",
        user_id="guest",
        app_id="tests",
    )
    ch.basic_publish("", queue, b'{"k": 1}', props)
    method, got, body = ch.basic_get(queue)
    assert body == b'{"k": 1}'
    assert (method.delivery_tag, method.redelivered, method.exchange, method.routing_key) == (
        1,
        False,
        "",
        queue,
    )
    assert method.message_count == 0
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(got, name) == getattr(props, name), name
    assert got.headers == {"a": 1, "b": "two", "c": True, "nested": {"x": [1, 2]}}
    ch.basic_ack(method.delivery_tag)


def test_user_id_must_match_the_login(ch: BlockingChannel, queue: str) -> None:
    ch.basic_publish("", queue, b"m", pika.BasicProperties(user_id="someone-else"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(queue, passive=True)
    assert channel_error(excinfo) == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user "
        "was 'guest'",
    )


def test_get_reports_remaining_count_and_empty(ch: BlockingChannel, queue: str) -> None:
    for i in range(3):
        ch.basic_publish("", queue, str(i).encode())
    first = ch.basic_get(queue, auto_ack=True)
    assert (first[0].message_count, first[2]) == (2, b"0")
    assert ch.basic_get(queue, auto_ack=True)[2] == b"1"
    assert ch.basic_get(queue, auto_ack=True)[2] == b"2"
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)


def test_nack_and_reject_requeue_and_drop(ch: BlockingChannel, queue: str) -> None:
    ch.basic_publish("", queue, b"m")
    m1 = ch.basic_get(queue)[0]
    assert (m1.delivery_tag, m1.redelivered) == (1, False)
    ch.basic_nack(m1.delivery_tag, requeue=True)
    m2 = ch.basic_get(queue)[0]
    assert (m2.delivery_tag, m2.redelivered) == (2, True)
    ch.basic_reject(m2.delivery_tag, requeue=True)
    m3 = ch.basic_get(queue)[0]
    assert (m3.delivery_tag, m3.redelivered) == (3, True)
    ch.basic_reject(m3.delivery_tag, requeue=False)
    assert ch.basic_get(queue) == (None, None, None)
    ch.basic_publish("", queue, b"n")
    m4 = ch.basic_get(queue)[0]
    assert (m4.delivery_tag, m4.redelivered) == (4, False)
    ch.basic_nack(m4.delivery_tag, requeue=False)
    assert_empty(ch, queue)


def test_ack_multiple_and_nack_multiple(ch: BlockingChannel, queue: str) -> None:
    for i in range(6):
        ch.basic_publish("", queue, str(i).encode())
    tags = [ch.basic_get(queue)[0].delivery_tag for _ in range(6)]
    assert tags == [1, 2, 3, 4, 5, 6]
    ch.basic_ack(3, multiple=True)  # 1, 2, 3
    ch.basic_nack(5, multiple=True, requeue=True)  # 4, 5 back to the queue
    # In RabbitMQ the requeue travels from the channel to the queue asynchronously: poll.
    wait_ready(ch, queue, 2)
    ch.basic_ack(6)
    redelivered = [ch.basic_get(queue, auto_ack=True) for _ in range(2)]
    assert [(m.redelivered, body) for m, _, body in redelivered] == [(True, b"3"), (True, b"4")]


@pytest.mark.parametrize("case", ["unknown", "double", "no-ack"])
def test_bad_delivery_tag_is_406(ch: BlockingChannel, queue: str, case: str) -> None:
    ch.basic_publish("", queue, b"m")
    if case == "unknown":
        tag = 42
    elif case == "double":
        tag = ch.basic_get(queue)[0].delivery_tag
        ch.basic_ack(tag)
    else:
        tag = ch.basic_get(queue, auto_ack=True)[0].delivery_tag
    ch.basic_ack(tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(queue, passive=True)
    assert channel_error(excinfo) == (406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")


def test_consume_ack_and_cancel(
    conn: pika.BlockingConnection, ch: BlockingChannel, queue: str
) -> None:
    got: list[tuple[int, bool, bytes]] = []

    def on_message(channel: BlockingChannel, method: Any, _props: Any, body: bytes) -> None:
        got.append((method.delivery_tag, method.redelivered, body))
        channel.basic_ack(method.delivery_tag)

    tag = ch.basic_consume(queue, on_message)
    for i in range(5):
        ch.basic_publish("", queue, str(i).encode())
    pump(conn, lambda: len(got) == 5)
    assert got == [(i + 1, False, str(i).encode()) for i in range(5)]
    assert ch.queue_declare(queue, passive=True).method.consumer_count == 1
    ch.basic_cancel(tag)
    assert ch.queue_declare(queue, passive=True).method.consumer_count == 0
    ch.basic_publish("", queue, b"after-cancel")
    wait_ready(ch, queue, 1)


def test_consumer_is_told_when_its_queue_is_deleted(
    conn: pika.BlockingConnection, ch: BlockingChannel, queue: str
) -> None:
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(queue, lambda *a: None)
    conn.channel().queue_delete(queue)
    pump(conn, lambda: bool(cancelled))
    assert cancelled == [tag]


def test_unacked_messages_are_requeued_when_channel_closes(
    conn: pika.BlockingConnection, queue: str
) -> None:
    first = conn.channel()
    first.basic_publish("", queue, b"m")
    method = first.basic_get(queue)[0]
    assert (method.delivery_tag, method.redelivered) == (1, False)
    second = conn.channel()
    first.close()
    again = second.basic_get(queue, auto_ack=True)[0]
    assert (again.delivery_tag, again.redelivered) == (1, True)


def test_basic_recover_requeues_with_redelivered(ch: BlockingChannel, queue: str) -> None:
    ch.basic_publish("", queue, b"m")
    first = ch.basic_get(queue)[0]
    assert (first.delivery_tag, first.redelivered) == (1, False)
    ch.basic_recover(requeue=True)
    again, _, body = ch.basic_get(queue)
    # Tags are never reused on a channel, even after basic.recover.
    assert (again.delivery_tag, again.redelivered, body) == (2, True, b"m")
    ch.basic_ack(again.delivery_tag)
    assert_empty(ch, queue)


def test_prefetch_count_limits_unacked_deliveries(
    conn: pika.BlockingConnection, ch: BlockingChannel, queue: str
) -> None:
    ch.basic_qos(prefetch_count=2)
    got: list[int] = []
    ch.basic_consume(queue, lambda _c, m, _p, _b: got.append(m.delivery_tag))
    for i in range(5):
        ch.basic_publish("", queue, str(i).encode())
    pump(conn, lambda: len(got) == 2)
    # Had the broker ignored the limit, the queue would be empty and stay so.
    wait_ready(ch, queue, 3)
    conn.process_data_events(time_limit=0)
    assert got == [1, 2]
    ch.basic_ack(1)
    pump(conn, lambda: len(got) == 3)
    wait_ready(ch, queue, 2)
    ch.basic_ack(3, multiple=True)
    pump(conn, lambda: len(got) == 5)
    assert got == [1, 2, 3, 4, 5]


def test_large_message_spanning_many_frames(ch: BlockingChannel, queue: str) -> None:
    body = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes over 131072-byte frames
    ch.basic_publish("", queue, body)
    _, _, got = ch.basic_get(queue, auto_ack=True)
    assert got == body


def test_large_message_with_small_frame_max(amqp_url: str) -> None:
    connection = connect(amqp_url, frame_max=4096)
    try:
        channel = connection.channel()
        q = channel.queue_declare("", exclusive=True).method.queue
        body = b"0123456789abcdef" * 20000  # 320000 bytes in ~79 body frames
        channel.basic_publish("", q, body)
        assert channel.basic_get(q, auto_ack=True)[2] == body
        channel.basic_publish("", q, b"")
        assert channel.basic_get(q, auto_ack=True)[2] == b""
    finally:
        connection.close()


# -- confirms, mandatory, tx ------------------------------------------------------------------


def test_confirms_ack_routable_and_raise_unroutable_mandatory(
    ch: BlockingChannel, queue: str
) -> None:
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"ok", mandatory=True)
    ch.basic_publish("amq.direct", unique("nowhere"), b"dropped")  # not mandatory: just acked
    with pytest.raises(pika.exceptions.UnroutableError) as excinfo:
        ch.basic_publish("amq.direct", "nowhere", b"returned", mandatory=True)
    (returned,) = excinfo.value.messages
    assert returned.method.reply_code == 312
    assert returned.method.reply_text == "NO_ROUTE"
    assert (returned.method.exchange, returned.method.routing_key) == ("amq.direct", "nowhere")
    assert returned.body == b"returned"
    assert ready_count(ch, queue) == 1


def test_mandatory_return_without_confirms(
    conn: pika.BlockingConnection, ch: BlockingChannel
) -> None:
    returned: list[tuple[int, str, str, str, bytes]] = []
    ch.add_on_return_callback(
        lambda _c, m, _p, body: returned.append(
            (m.reply_code, m.reply_text, m.exchange, m.routing_key, body)
        )
    )
    ch.basic_publish("amq.direct", "nowhere", b"r", mandatory=True)
    pump(conn, lambda: bool(returned))
    assert returned == [(312, "NO_ROUTE", "amq.direct", "nowhere", b"r")]


def test_tx_commit_and_rollback(ch: BlockingChannel, queue: str) -> None:
    ch.tx_select()
    ch.basic_publish("", queue, b"rolled-back")
    assert ready_count(ch, queue) == 0
    ch.tx_rollback()
    assert ready_count(ch, queue) == 0
    ch.basic_publish("", queue, b"committed")
    ch.tx_commit()
    wait_ready(ch, queue, 1)
    method, _, body = ch.basic_get(queue)
    assert body == b"committed"
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()  # the ack is rolled back: the message stays unacked, not requeued
    assert ready_count(ch, queue) == 0
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()
    assert ready_count(ch, queue) == 0


def test_tx_commit_on_non_transactional_channel_is_406(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.tx_commit()
    assert channel_error(excinfo) == (406, "PRECONDITION_FAILED - channel is not transactional")


@pytest.mark.parametrize("order", ["confirm-then-tx", "tx-then-confirm"])
def test_confirm_and_tx_exclude_each_other(ch: BlockingChannel, order: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        if order == "confirm-then-tx":
            ch.confirm_delivery()
            ch.tx_select()
        else:
            ch.tx_select()
            ch.confirm_delivery()
    source, target = ("confirm", "tx") if order == "confirm-then-tx" else ("tx", "confirm")
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - cannot switch from {source} to {target} mode",
    )


# -- connection-level errors --------------------------------------------------------------------


def test_channel_flow_true_is_accepted(ch: BlockingChannel) -> None:
    assert ch.flow(True) is True


def test_update_secret_is_accepted_and_the_connection_goes_on(
    conn: pika.BlockingConnection, ch: BlockingChannel
) -> None:
    # connection.update-secret (credential rotation): with the internal auth backend
    # RabbitMQ 3.10.8 replies update-secret-ok to any new secret and keeps serving.
    conn.update_secret("guest", "rotation")
    name = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", name, b"after")
    assert ch.basic_get(name, auto_ack=True)[2] == b"after"


@pytest.mark.parametrize(
    ("action", "text"),
    [
        (lambda ch: ch.flow(False), "NOT_IMPLEMENTED - active=false"),
        (lambda ch: ch.basic_qos(prefetch_size=10), "NOT_IMPLEMENTED - prefetch_size!=0 (10)"),
        (lambda ch: ch.basic_recover(requeue=False), "NOT_IMPLEMENTED - requeue=false"),
    ],
    ids=["flow-false", "qos-prefetch-size", "recover-requeue-false"],
)
def test_not_implemented_closes_connection_with_540(
    amqp_url: str, conn: pika.BlockingConnection, ch: BlockingChannel, action: Any, text: str
) -> None:
    bystander = connect(amqp_url)
    try:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
            action(ch)
        assert connection_error(excinfo) == (540, text)
        assert conn.is_closed
        # Another connection is not affected.
        assert bystander.channel().queue_declare("", exclusive=True).method.queue
    finally:
        bystander.close()
