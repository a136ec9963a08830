"""Quorum queues (``x-queue-type: quorum``) as a client sees them, through pika.

Leveret keeps a quorum queue on one node like any queue, with what a client can observe of
RabbitMQ's: the declare rules, the delivery count and limit, no global qos, every message
on disk. Each expectation was observed on RabbitMQ 3.10.8 (``-m rabbitmq``); sources:
rabbit_quorum_queue.erl (declare, consume), rabbit_fifo.erl (delivery count and limit),
rabbit_amqqueue:check_arguments_key/4 (arguments of another queue type).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from leveret.config import Config
from leveret.inspect import BrokerThread

from ..helpers import durable_queue, unique

pytestmark = pytest.mark.timeout(30)

QUORUM = {"x-queue-type": "quorum"}


def quorum_queue(ch: BlockingChannel, cleanup: list[str], **arguments: Any) -> str:
    return durable_queue(ch, cleanup, "quorum", "qq", **arguments)


def get(ch: BlockingChannel, queue: str, within: float = 5.0) -> tuple[Any, Any, bytes]:
    """basic.get, retried: a quorum queue makes a publish visible asynchronously."""
    deadline = time.monotonic() + within
    while True:
        method, properties, body = ch.basic_get(queue)
        if method is not None or time.monotonic() > deadline:
            return method, properties, body
        time.sleep(0.02)


def delivery_count(properties: Any) -> Any:
    return (properties.headers or {}).get("x-delivery-count")


# -- declare --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "arguments", "text"),
    [
        (
            {"durable": False},
            QUORUM,
            "invalid property 'non-durable' for queue '{q}' in vhost '/'",
        ),
        (
            {"durable": True, "exclusive": True},
            QUORUM,
            "invalid property 'exclusive-owner' for queue '{q}' in vhost '/'",
        ),
        (
            {"durable": True, "exclusive": True, "auto_delete": True},
            QUORUM,
            "invalid property 'auto-delete' for queue '{q}' in vhost '/'",
        ),
        (
            {"durable": False},
            {**QUORUM, "x-max-priority": 5},  # arguments are checked first
            "invalid arg 'x-max-priority' for queue '{q}' in vhost '/' "
            "of queue type rabbit_quorum_queue",
        ),
        (
            {"durable": True},
            {**QUORUM, "x-queue-mode": "lazy"},
            "invalid arg 'x-queue-mode' for queue '{q}' in vhost '/' "
            "of queue type rabbit_quorum_queue",
        ),
        (
            {"durable": True},
            {"x-delivery-limit": 3},
            "invalid arg 'x-delivery-limit' for queue '{q}' in vhost '/' "
            "of queue type rabbit_classic_queue",
        ),
        (
            {"durable": True},
            {"x-queue-type": "classic", "x-max-age": "1D"},
            "invalid arg 'x-max-age' for queue '{q}' in vhost '/' "
            "of queue type rabbit_classic_queue",
        ),
    ],
)
def test_declare_rules(
    ch: BlockingChannel, flags: dict[str, bool], arguments: dict[str, Any], text: str
) -> None:
    name = unique("qq-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(name, arguments=arguments, **flags)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - " + text.format(q=name),
    )


def test_server_named_quorum_queue_is_refused(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare("", durable=True, arguments=QUORUM)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
    )


def test_quorum_arguments_are_taken(ch: BlockingChannel, cleanup: list[str]) -> None:
    quorum_queue(
        ch,
        cleanup,
        **{"x-delivery-limit": 5, "x-max-length": 10, "x-single-active-consumer": True},
    )


# -- consumers ------------------------------------------------------------------------------


def test_global_qos_consumer_is_refused_with_540(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = quorum_queue(ch, cleanup)
    ch.basic_qos(prefetch_count=5, global_qos=True)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_consume(name, lambda *_: None)
    assert (err.value.reply_code, err.value.reply_text) == (
        540,
        f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos",
    )


def test_per_consumer_qos_is_fine(ch: BlockingChannel, cleanup: list[str]) -> None:
    name = quorum_queue(ch, cleanup)
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(name, lambda *_: None)
    ch.basic_qos(prefetch_count=0, global_qos=True)  # global 0 is no limit: fine too


# -- delivery count and limit ---------------------------------------------------------------


def test_redeliveries_carry_x_delivery_count_and_the_limit_dead_letters(
    ch: BlockingChannel, cleanup: list[str]
) -> None:
    dlx = unique("qq-dlx")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    dead = unique("qq-dead")
    ch.queue_declare(dead, exclusive=True)
    ch.queue_bind(dead, dlx)
    name = quorum_queue(ch, cleanup, **{"x-delivery-limit": 2, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", name, b"poison", pika.BasicProperties(headers={"app": "x"}))
    counts = []
    for _ in range(3):
        method, properties, _body = get(ch, name)
        assert method is not None
        counts.append((method.redelivered, delivery_count(properties)))
        assert properties.headers["app"] == "x"
        ch.basic_nack(method.delivery_tag, requeue=True)
    # The first delivery's header is left out: RabbitMQ 3.10 sets 0 on basic.get only.
    assert counts[1:] == [(True, 1), (True, 2)]
    assert counts[0][0] is False
    # A third return is past the limit of 2: dead-lettered, reason delivery_limit.
    method, properties, body = get(ch, dead)
    assert body == b"poison"
    (death,) = properties.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", name, 1)
    assert properties.headers["x-first-death-reason"] == "delivery_limit"
    assert "x-delivery-count" not in properties.headers
    assert ch.basic_get(name)[0] is None


def test_a_closed_channel_counts_as_a_return(
    connection: pika.BlockingConnection, ch: BlockingChannel, cleanup: list[str]
) -> None:
    name = quorum_queue(ch, cleanup, **{"x-delivery-limit": 1})
    ch.basic_publish("", name, b"once")
    assert get(ch, name)[0] is not None
    ch.close()  # the delivery comes back: count 1
    other = connection.channel()
    method, properties, _body = get(other, name)
    assert (method.redelivered, delivery_count(properties)) == (True, 1)
    other.basic_reject(method.delivery_tag, requeue=True)  # count 2 > 1: dropped (no DLX)
    time.sleep(0.3)
    assert other.basic_get(name)[0] is None


# -- durability (Leveret's data dir) --------------------------------------------------------


def test_transient_messages_in_a_quorum_queue_survive_a_restart(tmp_path: Path) -> None:
    # A quorum queue keeps every message in its Raft log, whatever the delivery mode, so a
    # confirmed transient message is on disk too.
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare("jobs", durable=True, arguments=QUORUM)
        channel.queue_declare("plain", durable=True)
        for queue in ("jobs", "plain"):
            channel.basic_publish("", queue, b"t", pika.BasicProperties(delivery_mode=1))
        conn.close()
    finally:
        broker.stop()
    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(again.url))
        channel = conn.channel()
        assert channel.queue_declare("jobs", passive=True).method.message_count == 1
        assert channel.queue_declare("plain", passive=True).method.message_count == 0
        conn.close()
    finally:
        again.stop()


def test_redeclare_compares_the_quorum_arguments(ch: BlockingChannel, cleanup: list[str]) -> None:
    name = quorum_queue(ch, cleanup, **{"x-delivery-limit": 2})
    ch.queue_declare(name, durable=True, arguments={**QUORUM, "x-delivery-limit": 2})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(name, durable=True, arguments={**QUORUM, "x-delivery-limit": 3})
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue '{name}' "
        "in vhost '/': received '3' but current is '2'",
    )
