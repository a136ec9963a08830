"""Queue features through aio-pika: TTL, queue expiry, length limits, dead-lettering,
priorities, consumer priorities, single active consumer, argument checks, direct reply-to.

Every scenario that takes ``amqp_url`` was run against a real RabbitMQ (3.10.8 from Debian)
with ``-m rabbitmq``; the texts, header values and orders asserted here are what it produced.
Where RabbitMQ 3.13 (the profile, DESIGN.md) behaves differently from 3.10, the test takes the
``leveret`` fixture instead and says why (the ``x-last-death-*`` headers are the only case).

Time-based scenarios use TTLs of 50-300 ms and poll for the expected state; a fixed sleep is
only used to show that something did *not* happen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import pytest
from aio_pika import Message
from aio_pika.exceptions import DeliveryError
from aiormq.exceptions import ChannelNotFoundEntity, ChannelPreconditionFailed
from pamqp.commands import Basic

from .helpers import aio_reply, unique, wait_until

pytestmark = pytest.mark.timeout(30)

REPLY_TO = "amq.rabbitmq.reply-to"

# ---------------------------------------------------------------------------------------------
# fixtures and small helpers


@pytest.fixture
def declare(ch, cleanup) -> Callable[..., Awaitable[Any]]:
    """``await declare(prefix, name=None, **arguments)``: a queue deleted after the test."""

    async def make(prefix: str = "q", name: str | None = None, **arguments: Any) -> Any:
        queue = await ch.declare_queue(name or unique(prefix), arguments=arguments or None)
        cleanup.queues.append(queue.name)
        return queue

    return make


def ms(milliseconds: int) -> timedelta:
    """aio-pika takes ``expiration`` in seconds; this gives the exact millisecond string."""
    return timedelta(milliseconds=milliseconds)


async def publish(channel, routing_key: str, *bodies: bytes, **properties: Any) -> None:
    """Publish to the default exchange (confirmed: aio-pika channels use confirms)."""
    for body in bodies:
        await channel.default_exchange.publish(Message(body, **properties), routing_key)


async def publish_raw(channel, routing_key: str, body: bytes, **properties: Any) -> Any:
    """Publish with exactly these pamqp properties (e.g. ``expiration="0"``)."""
    underlay = await channel.get_underlay_channel()
    return await underlay.basic_publish(
        body, exchange="", routing_key=routing_key, properties=Basic.Properties(**properties)
    )


async def ready_count(channel, name: str) -> int:
    ok = await channel.declare_queue(name, passive=True)
    return ok.declaration_result.message_count


async def wait_ready(channel, name: str, count: int, within: float = 5.0) -> None:
    async def check() -> bool:
        return await ready_count(channel, name) == count

    await wait_until(check, within=within)


async def take(inbox: asyncio.Queue, count: int, within: float = 5.0) -> list:
    return [await asyncio.wait_for(inbox.get(), within) for _ in range(count)]


async def _ignore(message) -> None:
    """A consumer callback that does nothing."""


def assert_recent(stamp: Any) -> None:
    """An ``x-death`` ``time``: an AMQP timestamp (decoded as an aware UTC datetime), now-ish."""
    assert isinstance(stamp, datetime)
    assert stamp.tzinfo is not None
    assert abs((datetime.now(UTC) - stamp).total_seconds()) < 120


def deaths(message) -> list[dict[str, Any]]:
    """The ``x-death`` entries without their ``time`` (checked with :func:`assert_recent`)."""
    entries = message.headers["x-death"]
    assert isinstance(entries, list)
    for entry in entries:
        assert_recent(entry["time"])
    return [{k: v for k, v in entry.items() if k != "time"} for entry in entries]


def death(queue: str, reason: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    """One expected ``x-death`` entry (published via the default exchange to ``queue``)."""
    entry = {
        "count": count,
        "reason": reason,
        "queue": queue,
        "exchange": "",
        "routing-keys": [queue],
    }
    entry.update(extra)
    return entry


LAST_DEATH = ("x-last-death-queue", "x-last-death-reason", "x-last-death-exchange")


def other_headers(message, last: tuple[str, str, str]) -> dict[str, Any]:
    """The headers besides ``x-death``, without ``x-last-death-*``.

    RabbitMQ 3.13 (mc:record_death) sets x-last-death-queue/-reason/-exchange on every
    dead-lettering; 3.10 never does. When present they must equal ``last`` (queue, reason,
    exchange); test_x_last_death_headers (Leveret only) checks that they are there.
    """
    headers = {k: v for k, v in message.headers.items() if k != "x-death"}
    found = tuple(headers.pop(key) for key in LAST_DEATH if key in headers)
    assert found in ((), last), found
    return headers


def first_death(queue: str, reason: str, exchange: str = "") -> dict[str, str]:
    return {
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
        "x-first-death-exchange": exchange,
    }


async def dead_letter_queue(ch, declare, cleanup) -> tuple[Any, Any]:
    """A fanout DLX and the queue bound to it."""
    dlx = await ch.declare_exchange(unique("dlx"), aio_pika.ExchangeType.FANOUT)
    cleanup.exchanges.append(dlx.name)
    dlq = await declare("dlq")
    await dlq.bind(dlx)
    return dlx, dlq


# ---------------------------------------------------------------------------------------------
# message TTL


async def test_queue_ttl_expires_idle_queue_without_consumer(ch, declare):
    queue = await declare("ttl", **{"x-message-ttl": 300})
    started = time.monotonic()
    await publish(ch, queue.name, b"0", b"1", b"2")
    assert await ready_count(ch, queue.name) == 3
    # Nobody consumes or polls the messages out: the queue's own timer drops them.
    await wait_ready(ch, queue.name, 0)
    assert time.monotonic() - started >= 0.25
    assert await queue.get(fail=False) is None


async def test_message_expiration_is_dropped(ch, declare):
    queue = await declare("exp")
    await publish(ch, queue.name, b"short", expiration=ms(100))
    await publish(ch, queue.name, b"kept")
    await wait_ready(ch, queue.name, 1)
    got = await queue.get(no_ack=True)
    assert got.body == b"kept"
    assert got.properties.expiration is None


async def test_lower_of_queue_and_message_ttl_wins(ch, declare):
    long_queue = await declare("ttl-long", **{"x-message-ttl": 60000})
    await publish(ch, long_queue.name, b"message-ttl-wins", expiration=ms(100))
    await publish(ch, long_queue.name, b"queue-ttl-applies")
    await wait_ready(ch, long_queue.name, 1)
    assert (await long_queue.get(no_ack=True)).body == b"queue-ttl-applies"

    short_queue = await declare("ttl-short", **{"x-message-ttl": 100})
    await publish(ch, short_queue.name, b"queue-ttl-wins", expiration=ms(60000))
    await wait_ready(ch, short_queue.name, 0)
    assert await short_queue.get(fail=False) is None


async def test_expiration_property_is_delivered_unchanged(ch, declare):
    queue = await declare("exp", **{"x-message-ttl": 60000})
    await publish(ch, queue.name, b"m", expiration=ms(30000))
    got = await queue.get(no_ack=True)
    assert got.properties.expiration == "30000"


async def test_per_message_ttl_expires_only_at_the_head(ch, declare):
    # RabbitMQ drops (or dead-letters) an expired message only when it reaches the head of
    # the queue: a short-lived message behind a long-lived one stays counted.
    queue = await declare("head")
    await publish(ch, queue.name, b"long", expiration=ms(60000))
    await publish(ch, queue.name, b"short", expiration=ms(50))
    await asyncio.sleep(0.3)
    assert await ready_count(ch, queue.name) == 2
    assert (await queue.get(no_ack=True)).body == b"long"
    assert await queue.get(fail=False) is None  # it expired on reaching the head


async def test_queue_ttl_zero_delivers_only_to_a_waiting_consumer(ch, declare):
    queue = await declare("ttl0", **{"x-message-ttl": 0})
    await publish(ch, queue.name, b"dropped")
    assert await ready_count(ch, queue.name) == 0
    inbox: asyncio.Queue = asyncio.Queue()
    await queue.consume(inbox.put, no_ack=True)
    await publish(ch, queue.name, b"delivered")
    (got,) = await take(inbox, 1)
    assert got.body == b"delivered"


async def test_message_expiration_zero_delivers_only_to_a_waiting_consumer(ch, declare):
    queue = await declare("exp0")
    await publish_raw(ch, queue.name, b"dropped", expiration="0")
    assert await ready_count(ch, queue.name) == 0
    inbox: asyncio.Queue = asyncio.Queue()
    await queue.consume(inbox.put, no_ack=True)
    await publish_raw(ch, queue.name, b"delivered", expiration="0")
    (got,) = await take(inbox, 1)
    assert (got.body, got.properties.expiration) == (b"delivered", "0")


@pytest.mark.parametrize(
    ("expiration", "reason"),
    [
        ("abc", "no_integer"),
        (" 100", "no_integer"),
        ("-1", "{value_negative,-1}"),
        ("1.5", '{leftover_string,".5"}'),
        # rabbit_misc ?MAX_EXPIRY_TIMER: ten years (315360000000 ms) is the largest.
        ("315360000001", "{value_too_large,315360000001}"),
    ],
)
async def test_invalid_expiration_property_is_406(conn, expiration, reason):
    channel = await conn.channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await publish_raw(channel, unique("q"), b"x", expiration=expiration)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}",
    )
    assert not conn.is_closed


# ---------------------------------------------------------------------------------------------
# argument validation and equivalence

# pamqp encodes Python ints in the smallest AMQP integer type that fits (RabbitMQ names them
# byte, short, signedint, long) and floats as 32-bit ``float``; RabbitMQ prints those names.
INVALID_ARGUMENTS = [
    ("x-message-ttl", -1, "{value_negative,-1}"),
    ("x-message-ttl", "100", '"expected integer, got longstr"'),
    ("x-message-ttl", 1.5, '"expected integer, got float"'),
    ("x-message-ttl", True, '"expected integer, got bool"'),
    ("x-message-ttl", 2**40, "{value_too_large,1099511627776}"),
    ("x-message-ttl", 315360000001, "{value_too_large,315360000001}"),
    ("x-expires", 315360000001, "{value_too_large,315360000001}"),
    ("x-expires", 0, "{value_zero,0}"),
    ("x-expires", -5, "{value_negative,-5}"),
    ("x-max-length", -1, "{value_negative,-1}"),
    ("x-max-length-bytes", "a", '"expected integer, got longstr"'),
    ("x-max-priority", 256, "{max_value_exceeded,256}"),
    ("x-max-priority", -1, "{value_negative,-1}"),
    ("x-overflow", "foo", "invalid_overflow"),
    ("x-single-active-consumer", "yes", "{unacceptable_type,longstr}"),
]


@pytest.mark.parametrize(("key", "value", "reason"), INVALID_ARGUMENTS)
async def test_invalid_queue_argument_is_406(conn, key, value, reason):
    channel = await conn.channel()
    name = unique("q")
    with pytest.raises(ChannelPreconditionFailed) as err:
        await channel.declare_queue(name, arguments={key: value})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/': {reason}",
    )
    assert not conn.is_closed


async def test_ten_years_is_the_longest_ttl_expiry_and_expiration(ch, cleanup):
    # Ten years, not 2^32 - 1 ms (49.7 days): Celery's native delayed delivery declares
    # queues with TTLs of up to 2^27 s.
    name = unique("q")
    cleanup.queues.append(name)
    ten_years = 315360000000
    queue = await ch.declare_queue(
        name, arguments={"x-message-ttl": ten_years, "x-expires": ten_years}
    )
    await publish_raw(ch, queue.name, b"kept", expiration=str(ten_years))
    assert (await queue.declare()).message_count == 1


async def test_dead_letter_routing_key_without_exchange_is_406(ch):
    name = unique("q")
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(name, arguments={"x-dead-letter-routing-key": "rk"})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue '{name}' "
        "in vhost '/': routing_key_but_no_dlx_defined",
    )


async def test_dead_letter_exchange_of_wrong_type_is_406(ch):
    # rabbit_channel checks x-dead-letter-exchange itself (for permissions) before the queue
    # arguments are validated: a different text format.
    name = unique("q")
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(name, arguments={"x-dead-letter-exchange": 5})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid type 'byte' for arg 'x-dead-letter-exchange' in "
        f"queue '{name}' in vhost '/'",
    )


async def test_invalid_consumer_priority_is_406(ch, declare):
    queue = await declare("cp")
    with pytest.raises(ChannelPreconditionFailed) as err:
        await queue.consume(_ignore, arguments={"x-priority": "high"})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{queue.name}' in vhost "
        "'/': \"expected integer, got longstr\"",
    )


@pytest.mark.parametrize(
    ("first", "second", "detail"),
    [
        (
            {},
            {"x-message-ttl": 2000},
            "'x-message-ttl' for queue '{q}' in vhost '/': "
            "received the value '2000' of type 'short' but current is none",
        ),
        (
            {"x-message-ttl": 1000},
            {},
            "'x-message-ttl' for queue '{q}' in vhost '/': "
            "received none but current is the value '1000' of type 'short'",
        ),
        (
            {"x-message-ttl": 1000},
            {"x-message-ttl": 2000},
            "'x-message-ttl' for queue '{q}' in vhost '/': received '2000' but current is '1000'",
        ),
        (
            # Integer types compare by value: a short against a signedint.
            {"x-message-ttl": 100000},
            {"x-message-ttl": 2000},
            "'x-message-ttl' for queue '{q}' in vhost '/': received '2000' but current is '100000'",
        ),
        (
            {},
            {"x-single-active-consumer": True},
            "'x-single-active-consumer' for queue '{q}' in vhost '/': "
            "received the value 'true' of type 'bool' but current is none",
        ),
        (
            {"x-overflow": "drop-head"},
            {"x-overflow": "reject-publish"},
            "'x-overflow' for queue '{q}' in vhost '/': "
            "received 'reject-publish' but current is 'drop-head'",
        ),
        (
            # A missing x-queue-type equals 'classic' only (rabbit_misc:assert_field_equivalence/4).
            {},
            {"x-queue-type": "quorum"},
            "'x-queue-type' for queue '{q}' in vhost '/': "
            "received the value 'quorum' of type 'longstr' but current is none",
        ),
        (
            {"x-queue-type": "classic"},
            {"x-queue-type": "stream"},
            "'x-queue-type' for queue '{q}' in vhost '/': "
            "received 'stream' but current is 'classic'",
        ),
        (
            {"x-max-priority": 5},
            {"x-max-priority": 6},
            "'x-max-priority' for queue '{q}' in vhost '/': received '6' but current is '5'",
        ),
    ],
)
async def test_redeclare_with_other_arguments_is_406(conn, cleanup, first, second, detail):
    channel = await conn.channel()
    name = unique("q")
    cleanup.queues.append(name)
    await channel.declare_queue(name, arguments=first or None)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await channel.declare_queue(name, arguments=second or None)
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg " + detail.format(q=name),
    )


async def test_redeclare_equivalent_arguments_is_fine(ch, cleanup):
    name = unique("q")
    cleanup.queues.append(name)
    await ch.declare_queue(name, arguments={"x-message-ttl": 1000, "x-max-length": 5})
    # Same values, a different integer width, the default queue type, an unknown x- key.
    await ch.declare_queue(name, arguments={"x-message-ttl": 1000, "x-max-length": 5})
    await ch.declare_queue(name, arguments={"x-message-ttl": 1000, "x-max-length": 5, "x-foo": 1})
    await ch.declare_queue(
        name, arguments={"x-message-ttl": 1000, "x-max-length": 5, "x-queue-type": "classic"}
    )
    explicit = unique("q")
    cleanup.queues.append(explicit)
    await ch.declare_queue(explicit, arguments={"x-queue-type": "classic"})
    await ch.declare_queue(explicit)


# ---------------------------------------------------------------------------------------------
# queue expiry (x-expires)


async def _exists(channel, name: str) -> bool:
    """Whether a queue exists, asked without "using" it (a passive declare would reset
    x-expires): a mandatory publish comes back as basic.return once the queue is gone."""
    result = await channel.default_exchange.publish(Message(b"probe"), name, mandatory=True)
    return not isinstance(getattr(result, "delivery", None), Basic.Return)


async def test_x_expires_deletes_an_unused_queue(conn, ch, declare):
    queue = await declare("expires", **{"x-expires": 200})
    started = time.monotonic()

    async def gone() -> bool:
        return not await _exists(ch, queue.name)

    await wait_until(gone, within=5)
    assert time.monotonic() - started >= 0.15
    channel = await conn.channel()
    with pytest.raises(ChannelNotFoundEntity) as err:
        await channel.declare_queue(queue.name, passive=True)
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{queue.name}' in vhost '/'")


async def test_x_expires_spares_a_queue_with_a_consumer(ch, declare):
    queue = await declare("expires", **{"x-expires": 150})
    tag = await queue.consume(_ignore, no_ack=True)
    await asyncio.sleep(0.5)
    assert await _exists(ch, queue.name)
    await queue.cancel(tag)

    async def gone() -> bool:
        return not await _exists(ch, queue.name)

    await wait_until(gone, within=5)


# ---------------------------------------------------------------------------------------------
# length limits and overflow


async def test_max_length_drop_head_keeps_the_newest(ch, declare):
    queue = await declare("maxlen", **{"x-max-length": 2})
    await publish(ch, queue.name, b"0", b"1", b"2", b"3")
    assert await ready_count(ch, queue.name) == 2
    assert [(await queue.get(no_ack=True)).body for _ in range(2)] == [b"2", b"3"]


async def test_max_length_counts_ready_messages_only(ch, declare):
    queue = await declare("maxlen", **{"x-max-length": 1})
    await publish(ch, queue.name, b"unacked")
    held = await queue.get()
    await publish(ch, queue.name, b"ready")
    assert await ready_count(ch, queue.name) == 1
    await publish(ch, queue.name, b"newer")
    assert (await queue.get(no_ack=True)).body == b"newer"
    await held.ack()


async def test_max_length_bytes_counts_body_bytes(ch, declare):
    queue = await declare("maxbytes", **{"x-max-length-bytes": 10})
    await publish(ch, queue.name, b"aaaa", b"bbbb", b"cccc", b"dd")
    # 4, 8, then 12 > 10 drops the head; adding 2 makes exactly 10, which fits.
    assert await ready_count(ch, queue.name) == 3
    assert [(await queue.get(no_ack=True)).body for _ in range(3)] == [b"bbbb", b"cccc", b"dd"]


async def test_reject_publish_nacks_and_does_not_enqueue(ch, declare):
    queue = await declare("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    assert isinstance(await ch.default_exchange.publish(Message(b"1"), queue.name), Basic.Ack)
    with pytest.raises(DeliveryError) as err:
        await ch.default_exchange.publish(Message(b"2"), queue.name)
    assert isinstance(err.value.frame, Basic.Nack)
    assert err.value.frame.delivery_tag == 2
    assert await ready_count(ch, queue.name) == 1
    assert (await queue.get(no_ack=True)).body == b"1"
    # With room again, publishes are accepted.
    assert isinstance(await ch.default_exchange.publish(Message(b"3"), queue.name), Basic.Ack)
    assert (await queue.get(no_ack=True)).body == b"3"


async def test_reject_publish_still_delivers_to_other_queues(ch, declare, cleanup):
    fanout = await ch.declare_exchange(unique("fan"), aio_pika.ExchangeType.FANOUT)
    cleanup.exchanges.append(fanout.name)
    full = await declare("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    roomy = await declare("roomy")
    await full.bind(fanout)
    await roomy.bind(fanout)
    await fanout.publish(Message(b"1"), "")
    with pytest.raises(DeliveryError) as err:
        await fanout.publish(Message(b"2"), "")
    assert isinstance(err.value.frame, Basic.Nack)
    assert await ready_count(ch, full.name) == 1
    assert await ready_count(ch, roomy.name) == 2


async def test_reject_publish_dlx_nacks_and_dead_letters(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare(
        "full",
        **{
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": dlx.name,
        },
    )
    await publish(ch, queue.name, b"kept")
    with pytest.raises(DeliveryError) as err:
        await ch.default_exchange.publish(Message(b"refused", expiration=ms(5000)), queue.name)
    assert isinstance(err.value.frame, Basic.Nack)
    await wait_ready(ch, dlq.name, 1)
    got = await dlq.get(no_ack=True)
    assert got.body == b"refused"
    assert (got.exchange, got.routing_key) == (dlx.name, queue.name)
    assert got.properties.expiration is None
    assert deaths(got) == [death(queue.name, "maxlen", **{"original-expiration": "5000"})]
    assert await ready_count(ch, queue.name) == 1


# ---------------------------------------------------------------------------------------------
# dead-lettering


async def test_dead_letter_on_reject_with_x_death(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    await publish(
        ch,
        queue.name,
        b"payload",
        expiration=ms(60000),
        headers={"app": "kept", "n": 1},
        correlation_id="corr-1",
        priority=3,
    )
    got = await queue.get()
    await got.reject(requeue=False)
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)

    assert dead.body == b"payload"
    assert (dead.exchange, dead.routing_key, dead.redelivered) == (dlx.name, queue.name, False)
    # The expiration property is removed and kept as original-expiration.
    assert dead.properties.expiration is None
    assert (dead.correlation_id, dead.priority) == ("corr-1", 3)
    assert deaths(dead) == [death(queue.name, "rejected", **{"original-expiration": "60000"})]
    assert other_headers(dead, (queue.name, "rejected", "")) == {
        "app": "kept",
        "n": 1,
        **first_death(queue.name, "rejected"),
    }


async def test_dead_letter_on_nack_without_requeue(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    await publish(ch, queue.name, b"a", b"b")
    await queue.get()
    second = await queue.get()
    await second.nack(multiple=True, requeue=False)  # both, in order
    await wait_ready(ch, dlq.name, 2)
    dead = [await dlq.get(no_ack=True) for _ in range(2)]
    assert [m.body for m in dead] == [b"a", b"b"]
    for message in dead:
        assert deaths(message) == [death(queue.name, "rejected")]


async def test_dead_lettered_copies_keep_their_own_properties_and_queue(ch, declare, cleanup):
    """Messages dead-lettered in a burst, some with the same properties, from two queues:
    each copy carries its own properties and the queue it died in."""
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    first = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    second = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    same = {"message_id": "m-1", "headers": {"n": 1}}
    await publish(ch, first.name, b"a", b"b", **same)
    await publish(ch, first.name, b"c", message_id="m-2", headers={"n": 2})
    await publish(ch, second.name, b"d", **same)
    for queue, count in ((first, 3), (second, 1)):
        for _ in range(count):
            await (await queue.get()).reject(requeue=False)
    await wait_ready(ch, dlq.name, 4)
    dead = [await dlq.get(no_ack=True) for _ in range(4)]

    assert [(m.body, m.message_id, m.routing_key) for m in dead] == [
        (b"a", "m-1", first.name),
        (b"b", "m-1", first.name),
        (b"c", "m-2", first.name),
        (b"d", "m-1", second.name),
    ]
    for message, queue, n in zip(dead, [first, first, first, second], [1, 1, 2, 1], strict=True):
        assert deaths(message) == [death(queue.name, "rejected")]
        assert other_headers(message, (queue.name, "rejected", "")) == {
            "n": n,
            **first_death(queue.name, "rejected"),
        }


async def test_dead_letter_keeps_a_large_headers_table(ch, declare, cleanup):
    """A 20 KB headers table survives dead-lettering (Leveret decodes such properties
    without its cache: leveret.message.CACHED_PROPERTIES_MAX)."""
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    blob = "x" * 20_000
    await publish(ch, queue.name, b"big", headers={"blob": blob})
    await (await queue.get()).reject(requeue=False)
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)
    assert dead.headers["blob"] == blob
    assert deaths(dead) == [death(queue.name, "rejected")]


async def test_no_dead_letter_on_requeue_or_without_dlx(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name})
    await publish(ch, queue.name, b"m")
    await (await queue.get()).reject(requeue=True)
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)
    assert again.headers == {}
    plain = await declare("plain")
    await publish(ch, plain.name, b"dropped")
    await (await plain.get()).reject(requeue=False)
    await asyncio.sleep(0.2)
    assert await ready_count(ch, dlq.name) == 0


async def test_dead_letter_on_expiry(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name, "x-message-ttl": 100})
    await publish(ch, queue.name, b"queue-ttl")
    await publish(ch, queue.name, b"message-ttl", expiration=ms(50))
    await wait_ready(ch, dlq.name, 2)
    by_queue_ttl = await dlq.get(no_ack=True)
    by_message_ttl = await dlq.get(no_ack=True)
    assert by_queue_ttl.body == b"queue-ttl"
    assert deaths(by_queue_ttl) == [death(queue.name, "expired")]
    assert by_message_ttl.body == b"message-ttl"
    assert by_message_ttl.properties.expiration is None
    assert deaths(by_message_ttl) == [death(queue.name, "expired", **{"original-expiration": "50"})]
    assert other_headers(by_message_ttl, (queue.name, "expired", "")) == first_death(
        queue.name, "expired"
    )


async def test_dead_letter_on_max_length_drop_head(ch, declare, cleanup):
    dlx, dlq = await dead_letter_queue(ch, declare, cleanup)
    queue = await declare("src", **{"x-dead-letter-exchange": dlx.name, "x-max-length": 1})
    await publish(ch, queue.name, b"old", b"new")
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)
    assert dead.body == b"old"
    assert deaths(dead) == [death(queue.name, "maxlen")]
    assert (await queue.get(no_ack=True)).body == b"new"


async def test_dead_letter_routing_key_overrides_the_routing_key(ch, declare, cleanup):
    target = await declare("target")
    queue = await declare(
        "src",
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target.name},
    )
    await publish(ch, queue.name, b"m")
    await (await queue.get()).reject(requeue=False)
    await wait_ready(ch, target.name, 1)
    dead = await target.get(no_ack=True)
    assert (dead.exchange, dead.routing_key) == ("", target.name)
    # routing-keys records the keys the message was published with, not the new one.
    assert deaths(dead) == [death(queue.name, "rejected")]


async def test_dead_letter_to_missing_exchange_drops(ch, declare):
    queue = await declare("src", **{"x-dead-letter-exchange": unique("no-such-exchange")})
    await publish(ch, queue.name, b"m")
    await (await queue.get()).reject(requeue=False)
    assert await queue.get(fail=False) is None
    assert await ready_count(ch, queue.name) == 0


async def test_dead_letter_cycle_without_rejection_is_dropped(ch, declare):
    # The queue dead-letters expired messages to the default exchange with their own routing
    # key, i.e. back to itself: a cycle with no rejection in it, so the message is dropped.
    queue = await declare("cycle", **{"x-dead-letter-exchange": "", "x-message-ttl": 50})
    await publish(ch, queue.name, b"m")
    await wait_ready(ch, queue.name, 0)
    await asyncio.sleep(0.3)
    assert await ready_count(ch, queue.name) == 0
    assert await queue.get(fail=False) is None


async def test_two_queue_expiry_cycle_drops_only_for_the_queue_seen_before(ch, declare, cleanup):
    # a (TTL) -> b (TTL) -> fanout -> {a, monitor}. Back at a, the message has died in a
    # before with no rejection since: dropped for a. The monitor queue has not seen it: it
    # gets its copy, exactly one.
    a_name, b_name = unique("cycle-a"), unique("cycle-b")
    back = await ch.declare_exchange(unique("back"), aio_pika.ExchangeType.FANOUT)
    cleanup.exchanges.append(back.name)
    queue_a = await declare(
        name=a_name,
        **{
            "x-message-ttl": 50,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": b_name,
        },
    )
    await declare(name=b_name, **{"x-message-ttl": 50, "x-dead-letter-exchange": back.name})
    monitor = await declare("monitor")
    await queue_a.bind(back)
    await monitor.bind(back)

    await publish(ch, a_name, b"m")
    await wait_ready(ch, monitor.name, 1)
    await asyncio.sleep(0.3)
    assert await ready_count(ch, a_name) == 0
    assert await ready_count(ch, b_name) == 0
    assert await ready_count(ch, monitor.name) == 1
    copy = await monitor.get(no_ack=True)
    assert deaths(copy) == [death(b_name, "expired"), death(a_name, "expired")]


async def test_rejection_cycle_increments_the_count(ch, declare):
    # Dead-lettering back to the same queue is allowed when a consumer rejected the message;
    # the {queue, reason} entry is reused and its count goes up.
    queue = await declare("self", **{"x-dead-letter-exchange": ""})
    await publish(ch, queue.name, b"m")
    for expected in (1, 2, 3):
        got = await queue.get()
        if expected > 1:
            assert deaths(got) == [death(queue.name, "rejected", count=expected - 1)]
            assert not got.redelivered
        await got.reject(requeue=False)
        await wait_ready(ch, queue.name, 1)
    final = await queue.get(no_ack=True)
    assert deaths(final) == [death(queue.name, "rejected", count=3)]
    assert other_headers(final, (queue.name, "rejected", "")) == first_death(queue.name, "rejected")


async def test_retry_queue_round_trip(ch, declare):
    """Work queue -> reject -> delay queue (TTL) -> back to work, with x-death counts."""
    work_name, delay_name = unique("work"), unique("delay")
    work = await declare(
        name=work_name,
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": delay_name},
    )
    await declare(
        name=delay_name,
        **{
            "x-message-ttl": 150,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": work_name,
        },
    )
    inbox: asyncio.Queue = asyncio.Queue()
    await work.consume(inbox.put)
    await publish(ch, work_name, b"job", message_id="job-1")

    (first,) = await take(inbox, 1)
    assert (first.body, first.headers) == (b"job", {})
    rejected_at = time.monotonic()
    await first.reject(requeue=False)

    (second,) = await take(inbox, 1)
    assert time.monotonic() - rejected_at >= 0.12
    assert (second.body, second.message_id, second.redelivered) == (b"job", "job-1", False)
    assert (second.exchange, second.routing_key) == ("", work_name)
    assert deaths(second) == [
        death(delay_name, "expired"),
        death(work_name, "rejected"),
    ]
    assert other_headers(second, (delay_name, "expired", "")) == first_death(work_name, "rejected")
    await second.reject(requeue=False)

    (third,) = await take(inbox, 1)
    # Each repeated {queue, reason} moves to the front with its count incremented.
    assert deaths(third) == [
        death(delay_name, "expired", count=2),
        death(work_name, "rejected", count=2),
    ]
    await third.ack()
    await asyncio.sleep(0.3)
    assert inbox.empty()
    assert await ready_count(ch, delay_name) == 0


async def test_x_death_records_the_exchange_published_to(ch, declare):
    dlq = await declare("dlq")
    queue = await declare(
        "src", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq.name}
    )
    await queue.bind("amq.direct", "orders.new")
    direct = await ch.get_exchange("amq.direct")
    await direct.publish(Message(b"m"), "orders.new")
    await (await queue.get()).reject(requeue=False)
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)
    assert (dead.exchange, dead.routing_key) == ("", dlq.name)
    assert deaths(dead) == [
        death(queue.name, "rejected", exchange="amq.direct", **{"routing-keys": ["orders.new"]})
    ]
    assert other_headers(dead, (queue.name, "rejected", "amq.direct")) == first_death(
        queue.name, "rejected", "amq.direct"
    )


async def test_x_last_death_headers(leveret):
    # Leveret only: RabbitMQ 3.13 (message containers, mc:record_death) also sets
    # x-last-death-queue/-reason/-exchange, updated on every dead-lettering, while the
    # x-first-death-* headers keep the first one; the Debian RabbitMQ 3.10 sets only
    # x-first-death-*.
    connection = await aio_pika.connect(leveret.url)
    channel = await connection.channel()
    work_name, delay_name = unique("work"), unique("delay")
    try:
        work = await channel.declare_queue(
            work_name,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": delay_name},
        )
        await channel.declare_queue(
            delay_name,
            arguments={
                "x-message-ttl": 50,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": work_name,
            },
        )
        await work.bind("amq.direct", work_name)
        await (await channel.get_exchange("amq.direct")).publish(Message(b"job"), work_name)
        await (await work.get()).reject(requeue=False)
        await wait_ready(channel, work_name, 1)
        back = await work.get()
        assert {k: v for k, v in back.headers.items() if k != "x-death"} == {
            **first_death(work_name, "rejected", "amq.direct"),
            "x-last-death-queue": delay_name,
            "x-last-death-reason": "expired",
            "x-last-death-exchange": "",
        }
        await back.reject(requeue=False)
        await wait_ready(channel, work_name, 1)
        again = await work.get(no_ack=True)
        assert {k: v for k, v in again.headers.items() if k.startswith("x-last-death-")} == {
            "x-last-death-queue": delay_name,
            "x-last-death-reason": "expired",
            "x-last-death-exchange": "",
        }
        assert again.headers["x-first-death-exchange"] == "amq.direct"
        assert [(d["queue"], d["count"]) for d in again.headers["x-death"]] == [
            (delay_name, 2),
            (work_name, 2),
        ]
    finally:
        await channel.queue_delete(work_name)
        await channel.queue_delete(delay_name)
        await connection.close()


# ---------------------------------------------------------------------------------------------
# priority queues


async def test_priority_queue_orders_by_priority_then_fifo(ch, declare):
    queue = await declare("prio", **{"x-max-priority": 5})
    for body, priority in [
        (b"lo1", 1),
        (b"none", None),
        (b"hi1", 5),
        (b"over", 9),  # above the maximum: treated as 5, keeps its property
        (b"hi2", 5),
        (b"mid", 3),
        (b"lo2", 1),
    ]:
        await ch.default_exchange.publish(Message(body, priority=priority), queue.name)
    got = [await queue.get() for _ in range(7)]
    assert [m.body for m in got] == [b"hi1", b"over", b"hi2", b"mid", b"lo1", b"lo2", b"none"]
    assert [m.properties.priority for m in got[:2]] == [5, 9]

    # Requeued messages go back to their original places, whatever the requeue order.
    for index in (2, 0, 6, 4, 1, 3, 5):
        await got[index].nack(requeue=True)
    again = [await queue.get(no_ack=True) for _ in range(7)]
    assert [m.body for m in again] == [b"hi1", b"over", b"hi2", b"mid", b"lo1", b"lo2", b"none"]
    assert all(m.redelivered for m in again)


async def test_priority_queue_delivers_highest_first_to_a_consumer(ch, conn, declare):
    queue = await declare("prio", **{"x-max-priority": 10})
    for body, priority in [(b"a", 1), (b"b", 10), (b"c", 5), (b"d", 10)]:
        await ch.default_exchange.publish(Message(body, priority=priority), queue.name)
    consumer_channel = await conn.channel()
    inbox: asyncio.Queue = asyncio.Queue()
    await (await consumer_channel.get_queue(queue.name)).consume(inbox.put, no_ack=True)
    assert [m.body for m in await take(inbox, 4)] == [b"b", b"d", b"c", b"a"]


async def test_plain_queue_requeue_restores_order(ch, declare):
    queue = await declare("plain")
    await publish(ch, queue.name, b"a", b"b", b"c", b"d")
    got = [await queue.get() for _ in range(3)]
    for index in (2, 0, 1):
        await got[index].reject(requeue=True)
    assert [(await queue.get(no_ack=True)).body for _ in range(4)] == [b"a", b"b", b"c", b"d"]


# ---------------------------------------------------------------------------------------------
# consumer priorities and single active consumer


async def test_consumer_priority_prefers_the_higher_consumer(conn, ch, declare):
    queue = await declare("cp")
    low_channel, high_channel = await conn.channel(), await conn.channel()
    low: asyncio.Queue = asyncio.Queue()
    high: asyncio.Queue = asyncio.Queue()
    await (await low_channel.get_queue(queue.name)).consume(low.put, no_ack=True)
    await (await high_channel.get_queue(queue.name)).consume(
        high.put, no_ack=True, arguments={"x-priority": 10}
    )
    await publish(ch, queue.name, *[str(i).encode() for i in range(6)])
    assert [m.body for m in await take(high, 6)] == [str(i).encode() for i in range(6)]
    await asyncio.sleep(0.2)
    assert low.empty()


async def test_consumer_priority_falls_back_when_the_higher_is_full(conn, ch, declare):
    queue = await declare("cp")
    low_channel, high_channel = await conn.channel(), await conn.channel()
    await high_channel.set_qos(prefetch_count=2)
    low: asyncio.Queue = asyncio.Queue()
    high: asyncio.Queue = asyncio.Queue()
    await (await low_channel.get_queue(queue.name)).consume(low.put, no_ack=True)
    await (await high_channel.get_queue(queue.name)).consume(high.put, arguments={"x-priority": 10})
    await publish(ch, queue.name, *[str(i).encode() for i in range(6)])
    held = await take(high, 2)
    assert [m.body for m in held] == [b"0", b"1"]
    assert [m.body for m in await take(low, 4)] == [b"2", b"3", b"4", b"5"]
    # Capacity again: the higher-priority consumer gets the next message.
    await held[0].ack()
    await publish(ch, queue.name, b"6")
    assert [m.body for m in await take(high, 1)] == [b"6"]
    assert low.empty()


async def test_single_active_consumer_and_failover_on_cancel(conn, ch, declare):
    queue = await declare("sac", **{"x-single-active-consumer": True})
    first_channel, second_channel = await conn.channel(), await conn.channel()
    first: asyncio.Queue = asyncio.Queue()
    second: asyncio.Queue = asyncio.Queue()
    first_queue = await first_channel.get_queue(queue.name)
    first_tag = await first_queue.consume(first.put, no_ack=True)
    await (await second_channel.get_queue(queue.name)).consume(second.put, no_ack=True)
    # Both are consumers (declare-ok counts all of them), only one is active.
    assert (await ch.declare_queue(queue.name, passive=True)).declaration_result.consumer_count == 2

    await publish(ch, queue.name, b"0", b"1", b"2", b"3")
    assert [m.body for m in await take(first, 4)] == [b"0", b"1", b"2", b"3"]
    assert second.empty()

    await first_queue.cancel(first_tag)
    await publish(ch, queue.name, b"4", b"5")
    assert [m.body for m in await take(second, 2)] == [b"4", b"5"]
    assert first.empty()


async def test_single_active_consumer_failover_requeues_unacked(conn, ch, declare):
    queue = await declare("sac", **{"x-single-active-consumer": True})
    first_channel, second_channel = await conn.channel(), await conn.channel()
    first: asyncio.Queue = asyncio.Queue()
    second: asyncio.Queue = asyncio.Queue()
    await (await first_channel.get_queue(queue.name)).consume(first.put)
    await (await second_channel.get_queue(queue.name)).consume(second.put)
    await publish(ch, queue.name, b"0", b"1", b"2")
    assert [m.body for m in await take(first, 3)] == [b"0", b"1", b"2"]
    await asyncio.sleep(0.1)
    assert second.empty()

    await first_channel.close()  # the active consumer goes; its unacked messages come back
    taken = await take(second, 3)
    assert [(m.body, m.redelivered) for m in taken] == [
        (b"0", True),
        (b"1", True),
        (b"2", True),
    ]
    for message in taken:
        await message.ack()


# ---------------------------------------------------------------------------------------------
# direct reply-to


async def test_direct_reply_to_rpc_round_trip(amqp_url, conn, ch, declare):
    requests = await declare("rpc")
    replies: asyncio.Queue = asyncio.Queue()
    reply_queue = await ch.get_queue(REPLY_TO, ensure=False)
    tag = await reply_queue.consume(replies.put, no_ack=True)

    # The responder lives on another connection.
    responder = await aio_pika.connect(amqp_url)
    try:
        responder_channel = await responder.channel()
        incoming: asyncio.Queue = asyncio.Queue()
        await (await responder_channel.get_queue(requests.name)).consume(incoming.put)

        await ch.default_exchange.publish(
            Message(b"2+2", reply_to=REPLY_TO, correlation_id="call-1"), requests.name
        )
        (request,) = await take(incoming, 1)
        reply_name = request.reply_to
        assert reply_name.startswith(REPLY_TO + ".")
        assert len(reply_name) > len(REPLY_TO) + 1
        assert request.correlation_id == "call-1"

        await responder_channel.default_exchange.publish(
            Message(b"4", correlation_id=request.correlation_id), reply_name
        )
        await request.ack()
        (reply,) = await take(replies, 1)
        assert (reply.body, reply.correlation_id) == (b"4", "call-1")
        assert (reply.exchange, reply.routing_key) == ("", reply_name)
        assert (reply.consumer_tag, reply.redelivered) == (tag, False)

        # A second call on the same channel gets the same reply name.
        await ch.default_exchange.publish(
            Message(b"3+3", reply_to=REPLY_TO, correlation_id="call-2"), requests.name
        )
        (request2,) = await take(incoming, 1)
        assert request2.reply_to == reply_name
        await request2.ack()
    finally:
        await responder.close()


async def test_direct_reply_to_consumer_must_be_no_ack(conn):
    channel = await conn.channel()
    reply_queue = await channel.get_queue(REPLY_TO, ensure=False)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await reply_queue.consume(_ignore, no_ack=False)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")
    assert not conn.is_closed  # channel-level


async def test_direct_reply_to_second_consumer_is_refused(conn):
    channel = await conn.channel()
    reply_queue = await channel.get_queue(REPLY_TO, ensure=False)
    await reply_queue.consume(_ignore, no_ack=True)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await reply_queue.consume(_ignore, no_ack=True)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - reply consumer already set")
    assert not conn.is_closed


async def test_direct_reply_to_publish_without_reply_consumer(conn, declare):
    # The reply consumer must be on the publishing channel: one on another channel of the
    # same connection does not count.
    other = await conn.channel()
    await (await other.get_queue(REPLY_TO, ensure=False)).consume(_ignore, no_ack=True)
    requests = await declare("rpc")
    channel = await conn.channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await channel.default_exchange.publish(Message(b"q", reply_to=REPLY_TO), requests.name)
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - fast reply consumer does not exist",
    )
    assert not conn.is_closed
    assert not other.is_closed


async def test_direct_reply_to_pseudo_queue_declare_and_get(conn):
    channel = await conn.channel()
    # Declaring the pseudo-queue itself (passively) succeeds: 0 messages, 1 consumer.
    ok = await channel.declare_queue(REPLY_TO, passive=True)
    assert (ok.declaration_result.message_count, ok.declaration_result.consumer_count) == (0, 1)
    # It is not a real queue: basic.get finds nothing of that name.
    handle = await channel.get_queue(REPLY_TO, ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await handle.get()
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{REPLY_TO}' in vhost '/'")


async def test_direct_reply_to_unknown_reply_name_is_unroutable(ch):
    # A reply to a name no requester owns is dropped silently (confirmed), or returned when
    # mandatory (RabbitMQ 4.2 would count it as routed; 3.13 returns it).
    bogus = REPLY_TO + ".bogus"
    ack = await ch.default_exchange.publish(Message(b"r"), bogus, mandatory=False)
    assert isinstance(ack, Basic.Ack)
    result = await ch.default_exchange.publish(Message(b"r"), bogus, mandatory=True)
    assert isinstance(result.delivery, Basic.Return)
    assert (result.delivery.reply_code, result.delivery.reply_text) == (312, "NO_ROUTE")
