"""The delayed-message exchange ``x-delayed-message``, through pika over real sockets.

Leveret only: RabbitMQ gets this exchange type from the community plugin
rabbitmq-delayed-message-exchange, which the RabbitMQ package does not ship (a GitHub
release download), so these scenarios cannot run against the local RabbitMQ. The expected
behaviour is the plugin's 3.10-era source, cited per test:
``src/rabbit_exchange_type_delayed_message.erl`` (declare checks, route),
``src/rabbit_delayed_message_utils.erl`` (reading ``x-delay``, the negated header on
release), ``src/rabbit_delayed_message.erl`` (due order, one routing attempt, disc storage)
and the README's limitations (mandatory is not supported: a delayed message is returned).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from leveret.inspect import BrokerThread
from tests.integration.helpers import unique
from tests.test_crash import crash


@pytest.fixture
def ch(leveret: BrokerThread) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(leveret.url))
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


def delayed_exchange(ch: BlockingChannel, kind: str = "direct", **arguments: Any) -> str:
    name = unique("delayed")
    ch.exchange_declare(
        name, "x-delayed-message", auto_delete=True, arguments={"x-delayed-type": kind, **arguments}
    )
    return name


def bound_queue(ch: BlockingChannel, exchange: str, key: str = "k") -> str:
    queue = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(queue, exchange, key)
    return queue


def publish(ch: BlockingChannel, exchange: str, body: bytes, delay: Any = None, **kw: Any) -> None:
    headers = None if delay is None else {"x-delay": delay}
    ch.basic_publish(
        exchange, kw.pop("key", "k"), body, pika.BasicProperties(headers=headers), **kw
    )


def receive(ch: BlockingChannel, queue: str, count: int, within: float = 5.0) -> list[Any]:
    """``count`` messages from ``queue`` as (seconds since the call, body, headers)."""
    started = time.monotonic()
    got: list[Any] = []
    while len(got) < count and time.monotonic() - started < within:
        method, properties, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.01)
            continue
        got.append((time.monotonic() - started, body, properties.headers))
    return got


def empty(ch: BlockingChannel, queue: str) -> bool:
    return ch.queue_declare(queue, passive=True).method.message_count == 0


# -- declaring ---------------------------------------------------------------------------

MUST_NAME_A_TYPE = "Invalid argument, 'x-delayed-type' must be an existing exchange type"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        # validate/1: no x-delayed-type, or one that is not a string
        ({}, MUST_NAME_A_TYPE),
        ({"x-delayed-type": 5}, MUST_NAME_A_TYPE),
        # validate/1 of the 3.10-era plugin refuses itself as the type
        (
            {"x-delayed-type": "x-delayed-message"},
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'",
        ),
        # rabbit_exchange:check_type/1 of the named type (Leveret's unknown-type answer)
        ({"x-delayed-type": "nope"}, "unknown exchange type 'nope'"),
        # the named type's own validate/1 (here the consistent-hash exchange's)
        (
            {"x-delayed-type": "x-consistent-hash", "hash-header": "h", "hash-property": "p"},
            "hash-header and hash-property are mutually exclusive",
        ),
    ],
)
def test_declare_refusals(ch: BlockingChannel, arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        ch.exchange_declare(unique("bad"), "x-delayed-message", arguments=arguments)
    assert caught.value.reply_code == 406
    assert caught.value.reply_text.startswith(f"PRECONDITION_FAILED - {text}")


@pytest.mark.parametrize(
    ("kind", "key", "arguments", "text"),
    [
        # the wrapped type's validate_binding/2 (the plugin's ?EXCHANGE(X):validate_binding)
        (
            "x-consistent-hash",
            "heavy",
            {},
            'PRECONDITION_FAILED - The binding key must be an integer: <<"heavy">>',
        ),
        ("headers", "", {"x-match": "nope"}, "PRECONDITION_FAILED - Invalid x-match field value"),
    ],
)
def test_bindings_are_checked_by_the_wrapped_type(
    ch: BlockingChannel, kind: str, key: str, arguments: dict[str, Any], text: str
) -> None:
    exchange = delayed_exchange(ch, kind)
    queue = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        ch.queue_bind(queue, exchange, key, arguments=arguments)
    assert caught.value.reply_code == 406
    assert caught.value.reply_text.startswith(text)


def test_redeclare_and_passive_declare(ch: BlockingChannel) -> None:
    exchange = delayed_exchange(ch)
    ch.exchange_declare(
        exchange, "x-delayed-message", auto_delete=True, arguments={"x-delayed-type": "direct"}
    )
    ch.exchange_declare(exchange, "x-delayed-message", passive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        ch.exchange_declare(exchange, "direct", auto_delete=True)
    assert caught.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange}' in vhost '/': "
        "received 'direct' but current is 'x-delayed-message'"
    )


# -- delaying ----------------------------------------------------------------------------


def test_messages_come_in_due_order_with_the_delay_negated(ch: BlockingChannel) -> None:
    exchange = delayed_exchange(ch)
    queue = bound_queue(ch, exchange)
    publish(ch, exchange, b"late", 700)
    publish(ch, exchange, b"soon", 250)
    publish(ch, exchange, b"now")
    got = receive(ch, queue, 3)
    assert [body for _, body, _ in got] == [b"now", b"soon", b"late"]
    assert [headers for _, _, headers in got] == [None, {"x-delay": -250}, {"x-delay": -700}]
    now, soon, late = (at for at, _, _ in got)
    assert now < 0.2
    assert 0.2 <= soon < 0.6
    assert late >= 0.65


@pytest.mark.parametrize(
    "delay",
    # get_delay/1 and delay_message/2: only 1..2^32-1 ms of an integer type, an integer
    # string or a float delay; anything else is routed at once, the header left as it is
    [0, -5, 2**32, True, datetime(2026, 1, 1, tzinfo=UTC), [250], {"ms": 250}],
    ids=["zero", "negative", "too-long", "bool", "timestamp", "array", "table"],
)
def test_no_delay_routes_at_once_header_untouched(ch: BlockingChannel, delay: Any) -> None:
    exchange = delayed_exchange(ch)
    queue = bound_queue(ch, exchange)
    publish(ch, exchange, b"m", delay)
    method, properties, _ = ch.basic_get(queue, auto_ack=True)
    assert method is not None
    assert properties.headers == {"x-delay": delay}


@pytest.mark.parametrize(
    ("delay", "negated"),
    # strings are read with binary_to_integer/1, floats truncated (try_convert_to_int/2)
    [("300", -300), ("+300", -300), (2**32 - 1, None)],
    ids=["string", "signed-string", "longest"],
)
def test_other_delay_types(ch: BlockingChannel, delay: Any, negated: int | None) -> None:
    exchange = delayed_exchange(ch)
    queue = bound_queue(ch, exchange)
    publish(ch, exchange, b"m", delay)
    time.sleep(0.1)
    assert ch.basic_get(queue, auto_ack=True)[0] is None  # still kept back
    if negated is not None:
        got = receive(ch, queue, 1)
        assert got and got[0][2] == {"x-delay": negated}


async def test_a_float_delay_is_truncated(leveret: BrokerThread) -> None:
    # try_convert_to_int/2: trunc/1 of a float or double (pika cannot send floats; aio-pika
    # sends a 32-bit float, 300.9 -> 300.899...)
    connection = await aio_pika.connect(leveret.url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            unique("delayed"),
            "x-delayed-message",
            auto_delete=True,
            arguments={"x-delayed-type": "fanout"},
        )
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(exchange)
        await exchange.publish(aio_pika.Message(b"m", headers={"x-delay": 300.9}), "")
        await asyncio.sleep(0.15)
        assert await queue.get(fail=False) is None  # kept back
        message = None
        for _ in range(100):  # released about 0.3 s after the publish
            message = await queue.get(fail=False)
            if message is not None:
                break
            await asyncio.sleep(0.05)
        assert message is not None
        assert message.headers == {"x-delay": -300}


@pytest.mark.parametrize("delay", ["soon", Decimal("1.5")], ids=["string", "decimal"])
def test_a_delay_the_plugin_crashes_on_closes_the_connection(
    leveret: BrokerThread, delay: Any
) -> None:
    # binary_to_integer/1 of a non-integer string and trunc/1 of a decimal crash the
    # publishing channel's process; RabbitMQ's reader then closes the connection with 541.
    connection = pika.BlockingConnection(pika.URLParameters(leveret.url))
    channel = connection.channel()
    exchange = delayed_exchange(channel)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        publish(channel, exchange, b"m", delay)
        channel.queue_declare("", exclusive=True)  # a round trip after the publish
    assert caught.value.reply_code == 541
    assert caught.value.reply_text == "INTERNAL_ERROR"


def test_routes_as_its_type_when_released(ch: BlockingChannel) -> None:
    exchange = delayed_exchange(ch, "topic")
    orders = bound_queue(ch, exchange, "orders.#")
    other = bound_queue(ch, exchange, "stock.*")
    publish(ch, exchange, b"o", 150, key="orders.eu.new")
    assert [body for _, body, _ in receive(ch, orders, 1)] == [b"o"]
    assert empty(ch, other)


def test_a_delayed_mandatory_message_is_returned_and_still_delivered(ch: BlockingChannel) -> None:
    # README, limitations: "the mandatory flag is not supported"; its route is [] at
    # publish time, so the channel returns it (312 NO_ROUTE), and releases it later anyway.
    exchange = delayed_exchange(ch)
    queue = bound_queue(ch, exchange)
    returned: list[Any] = []
    ch.add_on_return_callback(lambda _ch, method, _props, body: returned.append((method, body)))
    publish(ch, exchange, b"m", 150, mandatory=True)
    got = receive(ch, queue, 1)
    ch.connection.process_data_events(0)  # pika runs return callbacks here
    assert [(m.reply_code, m.reply_text, body) for m, body in returned] == [(312, "NO_ROUTE", b"m")]
    assert [body for _, body, _ in got] == [b"m"]


def test_confirms_come_at_publish_time(ch: BlockingChannel) -> None:
    exchange = delayed_exchange(ch)
    queue = bound_queue(ch, exchange)
    ch.confirm_delivery()
    started = time.monotonic()
    publish(ch, exchange, b"m", 400)  # pika waits for the ack
    assert time.monotonic() - started < 0.3
    assert [body for _, body, _ in receive(ch, queue, 1)] == [b"m"]


def test_the_alternate_exchange_takes_it_at_once_and_the_bindings_later(
    ch: BlockingChannel,
) -> None:
    # rabbit_exchange:process_alternate/2 sees the delayed exchange route nowhere.
    alternate = unique("ae")
    ch.exchange_declare(alternate, "fanout", auto_delete=True)
    caught = bound_queue(ch, alternate, "")
    exchange = delayed_exchange(ch, **{"alternate-exchange": alternate})
    queue = bound_queue(ch, exchange)
    publish(ch, exchange, b"m", 200)
    assert [body for _, body, _ in receive(ch, caught, 1)] == [b"m"]
    got = receive(ch, queue, 1)
    assert [(body, headers) for _, body, headers in got] == [(b"m", {"x-delay": -200})]
    assert empty(ch, caught)  # the release found a binding: no second AE copy


def test_reached_through_an_exchange_binding(ch: BlockingChannel) -> None:
    front = unique("front")
    ch.exchange_declare(front, "fanout", auto_delete=True)
    exchange = delayed_exchange(ch)
    ch.exchange_bind(exchange, front, "")
    queue = bound_queue(ch, exchange)
    publish(ch, front, b"m", 150)
    assert empty(ch, queue)
    time.sleep(0.25)
    method, _, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"m"
    # the message keeps the exchange it was published to
    assert method.exchange == front


def test_released_from_the_exchange_as_it_is_then(ch: BlockingChannel) -> None:
    exchange = unique("delayed")
    arguments = {"x-delayed-type": "direct"}
    ch.exchange_declare(exchange, "x-delayed-message", arguments=arguments)
    first = bound_queue(ch, exchange)
    publish(ch, exchange, b"gone", 150)
    publish(ch, exchange, b"rebound", 300)
    ch.exchange_delete(exchange)
    time.sleep(0.2)  # "gone" is released while no exchange of that name exists
    ch.exchange_declare(exchange, "x-delayed-message", arguments=arguments)
    second = bound_queue(ch, exchange)
    try:
        assert [body for _, body, _ in receive(ch, second, 1)] == [b"rebound"]
        assert empty(ch, first)
    finally:
        ch.exchange_delete(exchange)


def test_dead_letters_to_a_delayed_exchange_wait_too(ch: BlockingChannel) -> None:
    exchange = delayed_exchange(ch)
    retry = bound_queue(ch, exchange, "work")
    work = ch.queue_declare(
        "",
        exclusive=True,
        arguments={"x-dead-letter-exchange": exchange, "x-dead-letter-routing-key": "work"},
    ).method.queue
    ch.basic_publish("", work, b"job", pika.BasicProperties(headers={"x-delay": 200}))
    method, _, _ = ch.basic_get(work)
    assert method is not None
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert empty(ch, retry)
    got = receive(ch, retry, 1)
    assert [body for _, body, _ in got] == [b"job"]
    headers = got[0][2]
    assert headers["x-delay"] == -200
    assert headers["x-death"][0]["reason"] == "rejected"


# -- durability --------------------------------------------------------------------------


def test_a_confirmed_delayed_message_survives_kill_9(tmp_path: Path) -> None:
    # rabbit_delayed_message keeps every delayed message in a disc table; here the
    # confirm waits for the fsync, so even a transient message survives SIGKILL.
    # The broker stays down for DOWN seconds, so a delay counted from the restart would
    # release the messages DOWN seconds late, past the bound below; the delay outlasts
    # that and a restart on a loaded machine (a kill and a start took over 1.5 s under a
    # load average of 15), so "not due yet" after the restart is certain.
    delay, down = 8000, 4.0
    broker = crash.BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.exchange_declare(
            "dx", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
        )
        channel.queue_declare("dq", durable=True)
        channel.queue_bind("dq", "dx", "k")
        channel.confirm_delivery()
        publish(channel, "dx", b"transient", delay)
        channel.basic_publish(
            "dx",
            "k",
            b"persistent",
            pika.BasicProperties(headers={"x-delay": delay}, delivery_mode=2),
        )
        published = time.monotonic()
        broker.kill()
        broker.wait()
        time.sleep(down)
        broker.start()
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        assert empty(channel, "dq")  # not due yet
        got = receive(channel, "dq", 2, within=20)
        assert sorted(body for _, body, _ in got) == [b"persistent", b"transient"]
        assert all(headers == {"x-delay": -delay} for _, _, headers in got)
        # Due from the publish, not from the restart: released within the delay and 3 s of
        # slack; counted from the restart it would be the delay and more than DOWN.
        assert time.monotonic() - published < delay / 1000 + 3 < delay / 1000 + down
        # released once: a further restart brings nothing back
        connection.close()
        broker.stop()
        broker.start()
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        time.sleep(0.3)
        assert empty(connection.channel(), "dq")
        connection.close()
    finally:
        broker.stop()
        assert "Traceback" not in broker.log_tail(100_000), broker.log_tail()
