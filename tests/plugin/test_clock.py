"""The virtual clock (``leveret.clock``, broker/clock.py) with real clients over real sockets.

Every time-based feature runs here on a frozen clock: message TTL and per-message
``expiration`` with dead-lettering (and its ``x-death`` time), a chain of expiries,
``x-expires``, ``x-delayed-message`` releases, consumer timeouts, and stream ``max-age``.
Each test's time limit is far below the times it advances through: a test that waited on
the real clock would fail, not pass slowly.
"""

from __future__ import annotations

import datetime
from typing import Any

import aio_pika
import pika
import pytest

from leveret.inspect import BrokerThread, Inspector, VHostNotFoundError
from leveret.testing import LeveretBroker

pytestmark = pytest.mark.timeout(20)


def get(channel: Any, queue: str) -> tuple[Any, Any, bytes | None]:
    """basic.get with automatic ack: (method or None, properties, body)."""
    method, properties, body = channel.basic_get(queue, auto_ack=True)
    return method, properties, body


def dead_letter_pair(channel: Any, ttl_ms: int, queue: str = "work") -> None:
    """``queue`` with a message TTL, dead-lettering to ``dead`` through exchange ``dlx``."""
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx")
    arguments = {"x-message-ttl": ttl_ms, "x-dead-letter-exchange": "dlx"}
    channel.queue_declare(queue, arguments=arguments)


def test_a_minute_of_ttl_passes_in_an_advance(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    dead_letter_pair(channel, 60_000)
    before = leveret.clock.now()  # the vhost's time stands still from here
    channel.basic_publish("", "work", b"retry me")
    leveret.wait_for_messages("work", 1)

    leveret.clock.advance(59)
    assert leveret.messages_ready("work") == 1
    assert leveret.messages_ready("dead") == 0

    now = leveret.clock.advance(2)
    assert now == pytest.approx(before + 61, abs=0.01)
    method, properties, body = get(channel, "dead")  # right after: no wait
    assert body == b"retry me"
    assert method.routing_key == "work"
    (death,) = properties.headers["x-death"]
    assert death["reason"] == "expired"
    assert death["queue"] == "work"
    assert death["count"] == 1
    # x-death's time is the vhost's: the moment the message expired, 60 s after it came.
    assert int(death["time"].timestamp()) == int(before + 60)
    assert leveret.messages_ready("work") == 0


def test_time_stands_still_while_frozen(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("q")
    now = leveret.clock.now()
    channel.basic_publish("", "q", b"m", pika.BasicProperties(expiration="1"))
    leveret.wait_for_messages("q", 1)
    for _ in range(20):  # 20 round trips later it is still the same instant
        channel.queue_declare("q", passive=True)
    assert leveret.clock.now() == now
    assert leveret.messages_ready("q") == 1
    leveret.clock.advance(0.001)
    assert get(channel, "q")[2] is None


def test_a_chain_of_expiries_runs_within_one_advance(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.exchange_declare("to-second", "fanout")
    channel.exchange_declare("to-third", "fanout")
    channel.queue_declare(
        "first", arguments={"x-message-ttl": 10_000, "x-dead-letter-exchange": "to-second"}
    )
    channel.queue_declare(
        "second", arguments={"x-message-ttl": 20_000, "x-dead-letter-exchange": "to-third"}
    )
    channel.queue_declare("third")
    channel.queue_bind("second", "to-second")
    channel.queue_bind("third", "to-third")
    start = leveret.clock.now()
    channel.basic_publish("", "first", b"hop")
    leveret.wait_for_messages("first", 1)

    leveret.clock.advance(31)
    _, properties, body = get(channel, "third")
    assert body == b"hop"
    deaths = properties.headers["x-death"]
    assert [(d["queue"], d["reason"]) for d in deaths] == [
        ("second", "expired"),
        ("first", "expired"),
    ]
    # Each expiry fired at its own instant, not at the end of the advance.
    assert [int(d["time"].timestamp()) for d in deaths] == [int(start + 30), int(start + 10)]


def test_per_message_expiration(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    dead_letter_pair(channel, 3_600_000)
    leveret.clock.freeze()
    channel.basic_publish("", "work", b"short", pika.BasicProperties(expiration="5000"))
    channel.basic_publish("", "work", b"long", pika.BasicProperties(expiration="50000"))
    leveret.wait_for_messages("work", 2)
    leveret.clock.advance(6)
    assert get(channel, "dead")[2] == b"short"
    assert leveret.messages_ready("work") == 1
    leveret.clock.advance(45)
    _, properties, body = get(channel, "dead")
    assert body == b"long"
    assert properties.headers["x-death"][0]["original-expiration"] == "50000"


def test_an_unused_queue_expires(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    leveret.clock.freeze()
    channel.queue_declare("idle", arguments={"x-expires": 600_000})
    leveret.clock.advance(599)
    assert leveret.queue_exists("idle")
    channel.queue_declare("idle", passive=True)  # a use: the ten minutes start again
    leveret.clock.advance(599)
    assert leveret.queue_exists("idle")
    leveret.clock.advance(2)
    assert not leveret.queue_exists("idle")


def test_policy_ttl_and_expiry(
    pika_connection: Any, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    from leveret.exchanges.policies import parse

    body = {
        "pattern": "^policed$",
        "definition": {"message-ttl": 30_000, "expires": 90_000, "dead-letter-exchange": "dlx"},
    }
    policy = parse(leveret.vhost, "ttl", body)
    leveret_broker.call(lambda: leveret_broker.server.state.set_policy(policy))
    channel = pika_connection.channel()
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx")
    channel.queue_declare("policed")
    leveret.clock.freeze()
    channel.basic_publish("", "policed", b"m")
    leveret.wait_for_messages("policed", 1)
    leveret.clock.advance(31)
    assert get(channel, "dead")[2] == b"m"
    leveret.clock.advance(58)
    assert leveret.queue_exists("policed")
    leveret.clock.advance(2)  # 91 s unused since its declare
    assert not leveret.queue_exists("policed")


def test_delayed_messages_are_released_on_the_vhosts_time(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.exchange_declare("later", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    channel.queue_declare("due")
    channel.queue_bind("due", "later", "k")
    leveret.clock.freeze()
    for delay in (30_000, 10_000):
        channel.basic_publish(
            "later",
            "k",
            f"after {delay}".encode(),
            pika.BasicProperties(headers={"x-delay": delay}),
        )
    channel.queue_declare("due", passive=True)  # a round trip: both publishes are in

    leveret.clock.advance(9.9)
    assert leveret.messages_ready("due") == 0
    leveret.clock.advance(0.2)
    _, properties, body = get(channel, "due")
    assert body == b"after 10000"
    assert properties.headers["x-delay"] == -10_000
    leveret.clock.advance(19.8)  # 29.9 s in
    assert leveret.messages_ready("due") == 0
    leveret.clock.advance(0.2)
    assert leveret.messages_ready("due") == 1


def test_a_consumer_timeout_closes_the_channel_on_advance(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("slow", arguments={"x-consumer-timeout": 1_800_000})
    channel.basic_publish("", "slow", b"held")
    leveret.clock.freeze()
    method, _, _ = channel.basic_get("slow")
    assert method is not None
    leveret.clock.advance(1_799)
    assert channel.is_open
    channel.queue_declare("slow", passive=True)
    leveret.clock.advance(2)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("slow", passive=True)
    assert closed.value.reply_code == 406
    assert closed.value.reply_text.startswith(
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. "
        "Timeout value used: 1800000 ms."
    )
    leveret.wait_for_messages("slow", 1)  # requeued


def test_stream_max_age_drops_old_segments(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    arguments = {
        "x-queue-type": "stream",
        "x-max-age": "1h",
        "x-stream-max-segment-size-bytes": 1000,
    }
    channel.queue_declare("events", durable=True, arguments=arguments)
    leveret.clock.freeze()
    for n in range(30):  # three segments and a bit
        channel.basic_publish("", "events", b"old %02d" % n + b"x" * 94)
    channel.queue_declare("events", durable=True, passive=True, arguments=arguments)  # all in
    leveret.clock.advance(3601)
    for n in range(30):  # rolling over a segment applies retention
        channel.basic_publish("", "events", b"new %02d" % n + b"x" * 94)
    channel.queue_declare("events", durable=True, passive=True, arguments=arguments)
    channel.basic_qos(prefetch_count=100)
    seen: list[bytes] = []

    def on_message(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        seen.append(body[:6])
        ch.basic_ack(method.delivery_tag)
        if body.startswith(b"new 29"):
            ch.stop_consuming()

    channel.basic_consume("events", on_message, arguments={"x-stream-offset": "first"})
    channel.start_consuming()
    assert not any(body.startswith(b"old") for body in seen)
    assert seen[-1] == b"new 29"


def test_other_vhosts_keep_the_real_time(
    pika_connection: Any, leveret: Inspector, leveret_broker: LeveretBroker
) -> None:
    leveret.clock.freeze()
    other = f"{leveret.vhost}-other"
    url = leveret_broker.add_vhost(other)
    try:
        with pika.BlockingConnection(pika.URLParameters(url)) as connection:
            channel = connection.channel()
            channel.queue_declare("q", arguments={"x-message-ttl": 50})
            channel.basic_publish("", "q", b"m")
            # Expires on the real clock, while the test's vhost stands still.
            leveret.for_vhost(other).wait_until(
                "q", lambda stats: stats.published == 1 and stats.messages_ready == 0
            )
    finally:
        leveret_broker.delete_vhost(other)


def test_resume_lets_time_run_again(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("q", arguments={"x-message-ttl": 100})
    frozen = leveret.clock.now()
    channel.basic_publish("", "q", b"m")
    leveret.wait_for_messages("q", 1)
    leveret.clock.advance(3600)
    leveret.clock.resume()
    # The clock goes on from where the advance left it, an hour ahead of the machine's.
    assert leveret.clock.now() >= frozen + 3600
    channel.basic_publish("", "q", b"m2")
    leveret.wait_until("q", lambda stats: stats.published == 2 and stats.messages_ready == 0)


def test_bad_input_is_one_clear_exception(leveret: Inspector) -> None:
    with pytest.raises(ValueError, match="seconds must be a finite number >= 0, not -1"):
        leveret.clock.advance(-1)
    with pytest.raises(ValueError, match="seconds must be a number, not 'soon'"):
        leveret.clock.advance("soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not nan"):
        leveret.clock.advance(float("nan"))
    with pytest.raises(VHostNotFoundError, match="no vhost 'nowhere'"):
        leveret.for_vhost("nowhere").clock.advance(1)
    assert leveret.clock.advance(0) == leveret.clock.now()  # nothing broke


@pytest.mark.asyncio
async def test_aio_pika_with_advance_async(amqp_url: str, leveret: Inspector) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        dead = await channel.declare_queue("dead")
        dlx = await channel.declare_exchange("dlx", aio_pika.ExchangeType.FANOUT)
        await dead.bind(dlx)
        work = await channel.declare_queue(
            "work", arguments={"x-message-ttl": 30_000, "x-dead-letter-exchange": "dlx"}
        )
        start = leveret.clock.now()
        await channel.default_exchange.publish(aio_pika.Message(b"later"), routing_key="work")
        await leveret.wait_for_messages_async("work", 1)
        await leveret.clock.advance_async(30)
        message = await dead.get(no_ack=True)
        assert message.body == b"later"
        death = message.headers["x-death"][0]  # type: ignore[index]
        assert death["reason"] == "expired"  # type: ignore[index]
        when = death["time"]  # type: ignore[index]
        assert isinstance(when, datetime.datetime)
        assert int(when.timestamp()) == int(start + 30)
        assert await work.get(fail=False) is None
