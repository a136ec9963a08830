"""Which ``queue.declare`` argument a new queue is refused for, and with which text, for the
three queue types (pika).

Each expectation was observed on RabbitMQ 3.10.8 (``-m rabbitmq``). The order, where
several arguments are wrong: ``x-queue-type`` itself first, then the values of the
arguments the type takes (in rabbit_amqqueue:declare_args/0's order, whatever the table's),
then an argument only other types take (in table order), whatever its value.
"""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ..helpers import unique

pytestmark = pytest.mark.timeout(30)

QUORUM = {"x-queue-type": "quorum"}
STREAM = {"x-queue-type": "stream"}


@pytest.mark.parametrize(
    ("arguments", "key", "why"),
    [
        ({"x-queue-type": "weird"}, "x-queue-type", ": \"unsupported queue type 'weird'\""),
        ({"x-queue-type": 5}, "x-queue-type", ": {unacceptable_type,signedint}"),
        # The queue type is looked at before any other argument.
        (
            {"x-max-length": "3", "x-queue-type": "weird"},
            "x-queue-type",
            ": \"unsupported queue type 'weird'\"",
        ),
        ({"x-queue-mode": "fast"}, "x-queue-mode", ": \"unsupported queue mode 'fast'\""),
        ({"x-queue-version": 3}, "x-queue-version", ": \"unsupported queue version '3'\""),
        ({"x-queue-version": 0}, "x-queue-version", ": \"unsupported queue version '0'\""),
        ({"x-queue-version": "2"}, "x-queue-version", ': "expected integer, got longstr"'),
        ({"x-queue-version": True}, "x-queue-version", ': "expected integer, got bool"'),
        (
            {**QUORUM, "x-quorum-initial-group-size": 0},
            "x-quorum-initial-group-size",
            ": {value_zero,0}",
        ),
        (
            {**QUORUM, "x-quorum-initial-group-size": -1},
            "x-quorum-initial-group-size",
            ": {value_negative,-1}",
        ),
        (
            {**QUORUM, "x-quorum-initial-group-size": "3"},
            "x-quorum-initial-group-size",
            ': "expected integer, got longstr"',
        ),
        (
            {**QUORUM, "x-dead-letter-strategy": "maybe"},
            "x-dead-letter-strategy",
            ": invalid_dlx_strategy",
        ),
        (
            {**QUORUM, "x-dead-letter-strategy": 5},
            "x-dead-letter-strategy",
            ": {unacceptable_type,signedint}",
        ),
        (
            {**QUORUM, "x-queue-leader-locator": "x"},
            "x-queue-leader-locator",
            ": invalid_queue_locator_arg",
        ),
        (
            {**QUORUM, "x-queue-leader-locator": 5},
            "x-queue-leader-locator",
            ": {unacceptable_type,signedint}",
        ),
        (
            {**QUORUM, "x-max-in-memory-length": -1},
            "x-max-in-memory-length",
            ": {value_negative,-1}",
        ),
        (
            {**QUORUM, "x-max-in-memory-bytes": "5"},
            "x-max-in-memory-bytes",
            ': "expected integer, got longstr"',
        ),
        ({**STREAM, "x-initial-cluster-size": 0}, "x-initial-cluster-size", ": {value_zero,0}"),
        (
            {**STREAM, "x-initial-cluster-size": -2},
            "x-initial-cluster-size",
            ": {value_negative,-2}",
        ),
        (
            {**STREAM, "x-queue-leader-locator": "x"},
            "x-queue-leader-locator",
            ": invalid_queue_locator_arg",
        ),
        # Another type's argument is refused whatever its value...
        ({**QUORUM, "x-queue-mode": "x"}, "x-queue-mode", " of queue type rabbit_quorum_queue"),
        ({**QUORUM, "x-max-priority": "x"}, "x-max-priority", " of queue type rabbit_quorum_queue"),
        # ... after the values of the type's own arguments, wherever it is in the table.
        (
            {**QUORUM, "x-max-priority": 5, "x-quorum-initial-group-size": 0},
            "x-quorum-initial-group-size",
            ": {value_zero,0}",
        ),
        (
            {"x-delivery-limit": 3, "x-max-length": "3"},
            "x-max-length",
            ': "expected integer, got longstr"',
        ),
        # Several of other types': the first in the table.
        (
            {"x-quorum-initial-group-size": 3, "x-delivery-limit": 3},
            "x-quorum-initial-group-size",
            " of queue type rabbit_classic_queue",
        ),
    ],
)
def test_the_argument_a_new_queue_is_refused_for(
    ch: BlockingChannel, arguments: dict[str, Any], key: str, why: str
) -> None:
    name = unique("qa-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(name, durable=True, arguments=arguments)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/'{why}",
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-queue-version": 1},
        {"x-queue-version": 2},
        {"x-queue-mode": "lazy"},
        {"x-queue-master-locator": "min-masters"},
        {"x-queue-master-locator": "client-local"},
        {"x-queue-master-locator": "random"},
        {**QUORUM, "x-quorum-initial-group-size": 3},
        {**QUORUM, "x-dead-letter-strategy": "at-least-once"},
        {**QUORUM, "x-dead-letter-strategy": "at-most-once"},
        *(
            {**QUORUM, "x-queue-leader-locator": locator}
            for locator in ("client-local", "balanced", "random", "least-leaders")
        ),
        {**STREAM, "x-initial-cluster-size": 1, "x-queue-leader-locator": "client-local"},
    ],
)
def test_valid_arguments_are_taken(
    ch: BlockingChannel, cleanup: list[str], arguments: dict[str, Any]
) -> None:
    name = unique("qa-good")
    cleanup.append(name)
    ch.queue_declare(name, durable=True, arguments=arguments)


@pytest.mark.parametrize("locator", ["nowhere", 5])
def test_an_unknown_master_locator_crashes_the_channel(amqp_url: str, locator: Any) -> None:
    # RabbitMQ 3.10.8 does not validate it at declare: the classic queue's start crashes,
    # and the reader closes the connection with a bare 541.
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        channel.queue_declare(unique("qa-locator"), arguments={"x-queue-master-locator": locator})
    assert (err.value.reply_code, err.value.reply_text) == (541, "INTERNAL_ERROR")


# -- basic.consume arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue_arguments", "arguments", "key", "why"),
    [
        ({}, {"x-priority": "a"}, "x-priority", ': "expected integer, got longstr"'),
        (
            {},
            {"x-cancel-on-ha-failover": "x"},
            "x-cancel-on-ha-failover",
            ": {unacceptable_type,longstr}",
        ),
        (
            {},
            {"x-stream-offset": "first"},
            "x-stream-offset",
            " of queue type rabbit_classic_queue",
        ),
        (
            QUORUM,
            {"x-stream-offset": "first"},
            "x-stream-offset",
            " of queue type rabbit_quorum_queue",
        ),
        (
            QUORUM,
            {"x-cancel-on-ha-failover": True},
            "x-cancel-on-ha-failover",
            " of queue type rabbit_quorum_queue",
        ),
        (STREAM, {"x-priority": 5}, "x-priority", " of queue type rabbit_stream_queue"),
        # The values of the type's own arguments first, then another type's.
        (
            {},
            {"x-stream-offset": "zz", "x-priority": "a"},
            "x-priority",
            ': "expected integer, got longstr"',
        ),
        (
            STREAM,
            {"x-stream-offset": "first", "x-priority": "a"},
            "x-priority",
            " of queue type rabbit_stream_queue",
        ),
    ],
)
def test_the_argument_a_consumer_is_refused_for(
    ch: BlockingChannel,
    cleanup: list[str],
    queue_arguments: dict[str, Any],
    arguments: dict[str, Any],
    key: str,
    why: str,
) -> None:
    name = unique("qa-consume")
    cleanup.append(name)
    ch.queue_declare(name, durable=True, arguments=queue_arguments)
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_consume(name, lambda *_: None, arguments=arguments)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/'{why}",
    )


def test_a_streams_string_offset_is_checked_before_its_prefetch(
    ch: BlockingChannel, cleanup: list[str]
) -> None:
    # No basic.qos: the offset's 406 comes before the stream's "prefetch count is not set".
    name = unique("qa-offset")
    cleanup.append(name)
    ch.queue_declare(name, durable=True, arguments=STREAM)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_consume(name, lambda *_: None, arguments={"x-stream-offset": "1x"})
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{name}' in vhost '/': "
        '{invalid_stream_offset_arg,{longstr,<<"1x">>}}',
    )
