"""The delivery acknowledgement timeout (RabbitMQ's ``consumer_timeout``, 30 min by default).

Leveret-only: the scenario needs a broker started with a short timeout. The reply is what
RabbitMQ 3.10.8 sent with ``consumer_timeout = 3000`` (observed through pika and a raw
socket: channel close 406, class and method 0, the unacknowledged deliveries requeued).
RabbitMQ checks once a minute; Leveret checks every twentieth of the timeout, so a channel
closes between one and 1.05 timeouts (plus a check period of at least 0.1 s) after the
delivery.

A queue's own timeout (``x-consumer-timeout``, policy key ``consumer-timeout``) is RabbitMQ
3.12's (rabbitmq-server#7981; per-consumer timeouts were dropped before release, #8260), so
the RabbitMQ 3.10.8 here cannot check those scenarios. The expectations come from RabbitMQ's
source and tests: ``rabbit_channel:get_queue_consumer_timeout/2`` (the lower of argument and
policy, else the broker's), ``evaluate_consumer_timeout/1`` (only the channel's oldest
delivery is looked at, with its queue's timeout, which must be an integer) and
``consumer_timeout_SUITE`` (the same 406 whichever way the timeout is set).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from leveret.cli import build_parser, config_from
from leveret.config import CONSUMER_TIMEOUT, Config
from leveret.inspect import BrokerThread
from leveret.settings import resolve
from tests.integration.helpers import Http, unique

pytestmark = pytest.mark.timeout(30)

TIMEOUT_MS = 600


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    started = BrokerThread(Config(host="127.0.0.1", port=0, consumer_timeout=TIMEOUT_MS))
    yield started.start()
    started.stop()


@pytest.fixture(scope="module")
def default_broker() -> Iterator[BrokerThread]:
    """A broker with RabbitMQ's default timeout (30 min) and the management API."""
    started = BrokerThread(Config(host="127.0.0.1", port=0, management_port=0))
    yield started.start()
    started.stop()


def expected_text(channel: int, timeout: int = TIMEOUT_MS) -> str:
    return (
        f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. "
        f"Timeout value used: {timeout} ms. This timeout value can be configured, see "
        "consumers doc guide to learn more"
    )


def closed_after(
    connection: pika.BlockingConnection, channel: object, limit: float = 10
) -> tuple[float, object]:
    """Seconds until the broker closes ``channel``, and the close reason (None: still open
    after ``limit`` seconds)."""
    reasons: list[object] = []
    channel._impl.add_on_close_callback(lambda _ch, reason: reasons.append(reason))  # type: ignore[attr-defined]
    started = time.monotonic()
    while not reasons and time.monotonic() - started < limit:
        connection.process_data_events(0.02)
    return time.monotonic() - started, reasons[0] if reasons else None


def test_an_unacked_delivery_closes_its_channel_and_is_requeued(broker: BrokerThread) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    slow = connection.channel()
    slow.queue_declare("ct.jobs", auto_delete=False)
    slow.basic_publish("", "ct.jobs", b"job")
    slow.basic_consume("ct.jobs", lambda *_: None)  # never acks
    waited, reason = closed_after(connection, slow)
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert (reason.reply_code, reason.reply_text) == (406, expected_text(slow.channel_number))
    assert TIMEOUT_MS / 1000 * 0.9 <= waited <= TIMEOUT_MS / 1000 * 1.05 + 0.3
    # The delivery went back to the queue, redelivered; the connection is still open.
    other = connection.channel()
    method, _properties, body = other.basic_get("ct.jobs", auto_ack=True)
    assert (body, method.redelivered) == (b"job", True)
    other.queue_delete("ct.jobs")
    connection.close()


def test_basic_get_deliveries_count_too(broker: BrokerThread) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("ct.get", auto_delete=False)
    channel.basic_publish("", "ct.get", b"got")
    assert channel.basic_get("ct.get")[0] is not None  # not acked
    _waited, reason = closed_after(connection, channel)
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert reason.reply_code == 406
    connection.channel().queue_delete("ct.get")
    connection.close()


def test_acks_in_time_keep_the_channel_open(broker: BrokerThread) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("ct.quick", auto_delete=False)
    # Deliveries keep coming for over twice the timeout, each acked within a third of it.
    started = time.monotonic()
    while time.monotonic() - started < TIMEOUT_MS / 1000 * 2.5:
        channel.basic_publish("", "ct.quick", b"x")
        method, _properties, _body = channel.basic_get("ct.quick")
        connection.process_data_events(TIMEOUT_MS / 1000 / 3)
        channel.basic_ack(method.delivery_tag)
    assert channel.is_open
    channel.queue_delete("ct.quick")
    connection.close()


def test_the_default_is_rabbitmqs_thirty_minutes() -> None:
    assert Config().consumer_timeout == CONSUMER_TIMEOUT == 30 * 60 * 1000


def test_the_setting_reaches_the_config() -> None:
    args = build_parser().parse_args(["serve", "--consumer-timeout", "5000"])
    assert config_from(resolve(args, {})).consumer_timeout == 5000
    from_env = resolve(build_parser().parse_args(["serve"]), {"LEVERET_CONSUMER_TIMEOUT": "0"})
    assert config_from(from_env).consumer_timeout == 0


# -- a queue's own timeout --------------------------------------------------------------


def api(broker: BrokerThread) -> Http:
    management = broker.server.management
    assert management is not None
    return Http(management.url)


def still_open_after(connection: pika.BlockingConnection, channel: object, seconds: float) -> bool:
    return closed_after(connection, channel, seconds)[1] is None


def unacked_delivery(connection: pika.BlockingConnection, queue: str, **arguments: object) -> Any:
    """A channel that consumes one message of a new ``queue`` and never acks it."""
    channel = connection.channel()
    channel.queue_declare(queue, arguments=arguments or None)
    channel.basic_publish("", queue, b"job")
    channel.basic_consume(queue, lambda *_: None)
    return channel


def assert_timed_out(
    connection: pika.BlockingConnection, channel: Any, queue: str, timeout_ms: int
) -> None:
    waited, reason = closed_after(connection, channel)
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert (reason.reply_code, reason.reply_text) == (
        406,
        expected_text(channel.channel_number, timeout_ms),
    )
    assert timeout_ms / 1000 * 0.9 <= waited <= timeout_ms / 1000 * 1.05 + 0.3
    other = connection.channel()
    method, _properties, body = other.basic_get(queue, auto_ack=True)
    assert (body, method.redelivered) == (b"job", True)
    other.queue_delete(queue)


def test_a_queue_argument_sets_the_queues_timeout(default_broker: BrokerThread) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(default_broker.url))
    queue = unique("ct-arg")
    slow = unacked_delivery(connection, queue, **{"x-consumer-timeout": 500})
    assert_timed_out(connection, slow, queue, 500)
    connection.close()


def test_a_policy_sets_the_timeout_of_queues_it_applies_to(default_broker: BrokerThread) -> None:
    http = api(default_broker)
    connection = pika.BlockingConnection(pika.URLParameters(default_broker.url))
    queue = unique("ct-policy")
    slow = unacked_delivery(connection, queue)
    # Set after the delivery: a policy applies to the queues it matches at once.
    policy = {"pattern": f"^{queue}$", "definition": {"consumer-timeout": 500}}
    assert http("PUT", f"/api/policies/%2F/{queue}", policy)[0] == 201
    try:
        shown = http("GET", f"/api/queues/%2F/{urllib.parse.quote(queue)}")[1]
        assert shown["effective_policy_definition"] == {"consumer-timeout": 500}
        assert_timed_out(connection, slow, queue, 500)
    finally:
        http("DELETE", f"/api/policies/%2F/{queue}")
    connection.close()


@pytest.mark.parametrize(("argument", "policy"), [(5000, 400), (400, 5000)])
def test_the_lower_of_argument_and_policy_applies(
    default_broker: BrokerThread, argument: int, policy: int
) -> None:
    http = api(default_broker)
    connection = pika.BlockingConnection(pika.URLParameters(default_broker.url))
    queue = unique("ct-both")
    body = {"pattern": f"^{queue}$", "definition": {"consumer-timeout": policy}}
    assert http("PUT", f"/api/policies/%2F/{queue}", body)[0] == 201
    try:
        slow = unacked_delivery(connection, queue, **{"x-consumer-timeout": argument})
        assert_timed_out(connection, slow, queue, 400)
    finally:
        http("DELETE", f"/api/policies/%2F/{queue}")
    connection.close()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1000", '<<"1000">> is not a valid consumer timeout'),
        (-1, "-1 is not a valid consumer timeout"),
    ],
)
def test_a_policy_timeout_must_be_a_non_negative_integer(
    default_broker: BrokerThread, value: object, reason: str
) -> None:
    body = {"pattern": "^never$", "definition": {"consumer-timeout": value}}
    status, answer = api(default_broker)("PUT", "/api/policies/%2F/ct-invalid", body)
    assert (status, answer["error"]) == (400, "bad_request")
    # The management plugin escapes the reason's < and > (observed on 3.10.8).
    escaped = reason.replace("<", "&lt;").replace(">", "&gt;")
    assert answer["reason"] == f"Validation failed\n\n{escaped}\n"


def test_only_the_oldest_delivery_of_a_channel_is_looked_at(default_broker: BrokerThread) -> None:
    # rabbit_channel:evaluate_consumer_timeout/1 peeks at the oldest pending ack only: a
    # later delivery from a queue with a short timeout waits behind an older one.
    connection = pika.BlockingConnection(pika.URLParameters(default_broker.url))
    channel = connection.channel()
    patient, hasty = unique("ct-patient"), unique("ct-hasty")
    channel.queue_declare(patient)
    channel.queue_declare(hasty, arguments={"x-consumer-timeout": 300})
    for queue in (patient, hasty):
        channel.basic_publish("", queue, b"job")
    first = channel.basic_get(patient)[0]  # 30 min, the broker's
    assert channel.basic_get(hasty)[0] is not None  # 300 ms, got later
    assert still_open_after(connection, channel, 1.0)
    channel.basic_ack(first.delivery_tag)
    # Now the hasty queue's delivery is the oldest, and long overdue.
    waited, reason = closed_after(connection, channel, 2.0)
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert reason.reply_text == expected_text(channel.channel_number, 300)
    assert waited <= 0.3
    cleanup = connection.channel()
    cleanup.queue_delete(patient)
    cleanup.queue_delete(hasty)
    connection.close()


@pytest.mark.parametrize("own", [60_000, "30000", True])
def test_a_queues_own_timeout_replaces_the_brokers(broker: BrokerThread, own: object) -> None:
    # The broker's timeout here is 600 ms. A longer one of the queue's own applies instead,
    # and one that is no integer means no timeout at all (the guard of
    # evaluate_consumer_timeout1/2 is is_integer(Timeout)).
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    queue = unique("ct-own")
    channel = unacked_delivery(connection, queue, **{"x-consumer-timeout": own})
    assert still_open_after(connection, channel, TIMEOUT_MS / 1000 * 2.5)
    channel.queue_delete(queue)
    connection.close()
