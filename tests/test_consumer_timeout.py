"""The delivery acknowledgement timeout (RabbitMQ's ``consumer_timeout``, 30 min by default).

Leveret-only: the scenario needs a broker started with a short timeout. The reply is what
RabbitMQ 3.10.8 sent with ``consumer_timeout = 3000`` (observed through pika and a raw
socket: channel close 406, class and method 0, the unacknowledged deliveries requeued).
RabbitMQ checks once a minute; Leveret checks every twentieth of the timeout, so a channel
closes between one and 1.05 timeouts (plus a check period of at least 0.1 s) after the
delivery.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from broker.cli import build_parser, config_from
from broker.config import CONSUMER_TIMEOUT, Config
from broker.inspect import BrokerThread
from broker.settings import resolve

pytestmark = pytest.mark.timeout(30)

TIMEOUT_MS = 600


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    started = BrokerThread(Config(host="127.0.0.1", port=0, consumer_timeout=TIMEOUT_MS))
    yield started.start()
    started.stop()


def expected_text(channel: int) -> str:
    return (
        f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. "
        f"Timeout value used: {TIMEOUT_MS} ms. This timeout value can be configured, see "
        "consumers doc guide to learn more"
    )


def closed_after(connection: pika.BlockingConnection, channel: object) -> tuple[float, object]:
    """Seconds until the broker closes ``channel``, and the close reason."""
    reasons: list[object] = []
    channel._impl.add_on_close_callback(lambda _ch, reason: reasons.append(reason))  # type: ignore[attr-defined]
    started = time.monotonic()
    while not reasons and time.monotonic() - started < 10:
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
