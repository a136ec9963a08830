"""Message scenarios through aio-pika: publish, consume, get, acks, QoS, confirms and tx.

Every expectation (reply codes and texts included) was checked against a real RabbitMQ;
run with ``-m rabbitmq`` to check again. Texts follow peers.md section 2.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

import aio_pika
import pytest
from aio_pika import DeliveryMode, Message
from aio_pika.exceptions import DeliveryError, PublishError, QueueEmpty
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
    ConnectionNotAllowed,
    ConnectionNotImplemented,
)
from pamqp.commands import Basic

from .helpers import aio_reply, unique, wait_until

# ---------------------------------------------------------------------------------------------
# fixtures and small helpers


@pytest.fixture
async def queue(ch, cleanup):
    """A fresh, empty, non-exclusive queue (so other connections can use it too)."""
    declared = await ch.declare_queue(unique("q"))
    cleanup.queues.append(declared.name)
    return declared


async def publish(channel, routing_key: str, *bodies: bytes) -> None:
    """Publish to the default exchange (confirmed when the channel is in confirm mode)."""
    for body in bodies:
        await channel.default_exchange.publish(Message(body), routing_key)


async def take(inbox: asyncio.Queue, count: int, within: float = 5.0) -> list:
    return [await asyncio.wait_for(inbox.get(), within) for _ in range(count)]


async def ready_count(channel, name: str) -> int:
    ok = await channel.declare_queue(name, passive=True)
    return ok.declaration_result.message_count


async def _ignore(message) -> None:
    """A consumer callback that does nothing."""


# ---------------------------------------------------------------------------------------------
# publish and consume


async def test_round_trip_preserves_properties_and_headers(ch, queue):
    headers = {
        "str": "text",
        "int": 42,
        "negative": -7,
        "big": 2**40,
        "bool": True,
        "float": 1.5,
        "nested": {"k": "v", "n": 1},
        "list": [1, "two", False],
        "none": None,
    }
    stamp = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    sent = Message(
        b'{"hello": "world"}',
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=DeliveryMode.PERSISTENT,
        priority=5,
        correlation_id="corr-1",
        reply_to="replies",
        expiration=60,
        message_id="mid-1",
        timestamp=stamp,
        type="greeting",
        user_id="guest",
        app_id="leveret-tests",
    )
    inbox: asyncio.Queue = asyncio.Queue()
    tag = await queue.consume(inbox.put, no_ack=True)
    await ch.default_exchange.publish(sent, queue.name)
    (got,) = await take(inbox, 1)

    assert got.body == b'{"hello": "world"}'
    assert (got.exchange, got.routing_key, got.redelivered) == ("", queue.name, False)
    assert (got.consumer_tag, got.delivery_tag) == (tag, 1)
    props = got.properties
    assert props.content_type == "application/json"
    assert props.content_encoding == "utf-8"
    assert props.delivery_mode == 2
    assert props.priority == 5
    assert props.correlation_id == "corr-1"
    assert props.reply_to == "replies"
    assert props.expiration == "60000"
    assert props.message_id == "mid-1"
    assert props.timestamp == stamp
    assert props.message_type == "greeting"
    assert props.user_id == "guest"
    assert props.app_id == "leveret-tests"
    assert got.headers == headers


async def test_sender_selected_cc_and_bcc(ch, cleanup):
    """CC and BCC headers add routing keys; BCC is removed from every copy, CC kept
    (docs/sender-selected.md). Sent twice with the same property bytes: the second
    message routes like the first (stripping BCC from one changes no other message)."""
    to, cc, bcc = [await ch.declare_queue(unique(name)) for name in ("to", "cc", "bcc")]
    cleanup.queues.extend(q.name for q in (to, cc, bcc))
    headers = {"CC": [cc.name], "BCC": [bcc.name], "app": "x"}
    for body in (b"first", b"second"):
        # A fixed message_id: aio-pika would give each message its own.
        message = Message(body, headers=headers, message_id="same")
        await ch.default_exchange.publish(message, to.name)

    for queue in (to, cc, bcc):
        got = [await queue.get(no_ack=True) for _ in range(2)]
        assert [m.body for m in got] == [b"first", b"second"]
        for message in got:
            assert message.routing_key == to.name
            assert message.headers == {"CC": [cc.name], "app": "x"}


async def test_large_body_crossing_frame_max(ch, queue):
    body = os.urandom(1024 * 1024 + 17)  # several body frames at frame_max 131072
    await ch.default_exchange.publish(Message(body), queue.name)
    got = await queue.get(no_ack=True)
    assert got.body_size == len(body)
    assert got.body == body


async def test_empty_body(ch, queue):
    await ch.default_exchange.publish(Message(b"", headers={"k": "v"}), queue.name)
    got = await queue.get(no_ack=True)
    assert got.body == b""
    assert got.headers == {"k": "v"}


async def test_delivery_tags_shared_by_get_and_deliver(ch, queue):
    await publish(ch, queue.name, b"first", b"second")
    got = await queue.get()
    assert (got.body, got.delivery_tag) == (b"first", 1)
    inbox: asyncio.Queue = asyncio.Queue()
    await queue.consume(inbox.put)
    (delivered,) = await take(inbox, 1)
    assert (delivered.body, delivered.delivery_tag) == (b"second", 2)


# ---------------------------------------------------------------------------------------------
# mandatory and returns


async def test_mandatory_unroutable_is_returned(ch):
    key = unique("nowhere")
    callbacks: list = []
    ch.return_callbacks.add(lambda channel, message: callbacks.append(message))
    amq_direct = await ch.get_exchange("amq.direct")

    result = await amq_direct.publish(Message(b"lost", message_id="m-1"), key, mandatory=True)
    assert isinstance(result.delivery, Basic.Return)
    assert result.delivery.reply_code == 312
    assert result.delivery.reply_text == "NO_ROUTE"
    assert result.delivery.exchange == "amq.direct"
    assert result.delivery.routing_key == key
    assert result.body == b"lost"
    assert [(m.body, m.message_id) for m in callbacks] == [(b"lost", "m-1")]

    # Without mandatory the message is dropped silently and still confirmed.
    assert isinstance(await amq_direct.publish(Message(b"x"), key, mandatory=False), Basic.Ack)


async def test_mandatory_unroutable_raises_with_on_return_raises(conn):
    channel = await conn.channel(on_return_raises=True)
    with pytest.raises(PublishError):
        await channel.default_exchange.publish(Message(b"x"), unique("no-such-queue"))
    assert not channel.is_closed


# ---------------------------------------------------------------------------------------------
# basic.get, ack, nack, reject


async def test_basic_get_ok_and_empty(ch, queue):
    await publish(ch, queue.name, b"a", b"b")
    first = await queue.get()
    assert (first.body, first.message_count, first.redelivered) == (b"a", 1, False)
    await first.ack()
    second = await queue.get()
    assert (second.body, second.message_count) == (b"b", 0)
    await second.ack()
    assert await queue.get(fail=False) is None
    with pytest.raises(QueueEmpty):
        await queue.get()


async def test_basic_get_missing_queue(ch):
    name = unique("missing-q")
    handle = await ch.get_queue(name, ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await handle.get()
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


async def test_consume_missing_queue(ch):
    name = unique("missing-q")
    handle = await ch.get_queue(name, ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await handle.consume(_ignore)
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


async def test_reject_and_nack_requeue_sets_redelivered(ch, queue):
    await publish(ch, queue.name, b"m")
    got = await queue.get()
    await got.reject(requeue=True)
    again = await queue.get()
    assert (again.body, again.redelivered, again.delivery_tag) == (b"m", True, 2)
    await again.nack(requeue=True)
    third = await queue.get()
    assert (third.body, third.redelivered, third.delivery_tag) == (b"m", True, 3)
    await third.ack()
    assert await queue.get(fail=False) is None


async def test_reject_and_nack_without_requeue_drop(ch, queue):
    await publish(ch, queue.name, b"one", b"two")
    await (await queue.get()).reject(requeue=False)
    await (await queue.get()).nack(requeue=False)
    assert await queue.get(fail=False) is None
    assert await ready_count(ch, queue.name) == 0


async def test_nack_multiple_requeues_in_order(ch, queue):
    await publish(ch, queue.name, b"0", b"1", b"2", b"3")
    got = [await queue.get() for _ in range(3)]
    assert [m.delivery_tag for m in got] == [1, 2, 3]
    await got[2].nack(multiple=True, requeue=True)
    again = [await queue.get(no_ack=True) for _ in range(4)]
    assert [m.body for m in again] == [b"0", b"1", b"2", b"3"]
    assert [m.redelivered for m in again] == [True, True, True, False]


async def test_ack_multiple(conn, ch, queue):
    await publish(ch, queue.name, b"0", b"1", b"2")
    got = [await queue.get() for _ in range(3)]
    await got[1].ack(multiple=True)  # acks tags 1 and 2
    await ch.close()
    # Closing the channel requeues only what is still unacked.
    channel = await conn.channel()
    handle = await channel.get_queue(queue.name)
    remaining = await handle.get(no_ack=True)
    assert (remaining.body, remaining.redelivered) == (b"2", True)
    assert await handle.get(no_ack=True, fail=False) is None


@pytest.mark.parametrize("method", ["ack", "nack", "reject"])
async def test_unknown_delivery_tag(ch, queue, method):
    underlay = await ch.get_underlay_channel()
    if method == "ack":
        await underlay.basic_ack(999)
    elif method == "nack":
        await underlay.basic_nack(999)
    else:
        await underlay.basic_reject(999)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(queue.name, passive=True)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - unknown delivery tag 999")


async def test_double_ack_is_unknown_delivery_tag(ch, queue):
    await publish(ch, queue.name, b"m")
    got = await queue.get()
    await got.ack()
    underlay = await ch.get_underlay_channel()
    await underlay.basic_ack(got.delivery_tag)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(queue.name, passive=True)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


async def test_ack_of_no_ack_delivery_is_unknown_delivery_tag(ch, queue):
    await publish(ch, queue.name, b"m")
    got = await queue.get(no_ack=True)
    underlay = await ch.get_underlay_channel()
    await underlay.basic_ack(got.delivery_tag)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(queue.name, passive=True)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


# ---------------------------------------------------------------------------------------------
# consumers


async def test_round_robin_over_two_consumers(conn, ch, queue):
    inbox_a: asyncio.Queue = asyncio.Queue()
    inbox_b: asyncio.Queue = asyncio.Queue()
    await queue.consume(inbox_a.put, no_ack=True)
    other = await conn.channel()
    await (await other.get_queue(queue.name)).consume(inbox_b.put, no_ack=True)

    await publish(ch, queue.name, *[str(i).encode() for i in range(6)])
    got_a = [m.body for m in await take(inbox_a, 3)]
    got_b = [m.body for m in await take(inbox_b, 3)]
    assert sorted(got_a + got_b) == [str(i).encode() for i in range(6)]
    assert {tuple(got_a), tuple(got_b)} == {(b"0", b"2", b"4"), (b"1", b"3", b"5")}


async def test_prefetch_limits_unacked_deliveries(conn, ch, queue):
    consumer_channel = await conn.channel()
    await consumer_channel.set_qos(prefetch_count=2)
    inbox: asyncio.Queue = asyncio.Queue()
    await (await consumer_channel.get_queue(queue.name)).consume(inbox.put)
    await publish(ch, queue.name, *[str(i).encode() for i in range(5)])

    first_two = await take(inbox, 2)
    assert [m.body for m in first_two] == [b"0", b"1"]
    await wait_until(lambda: _equals(ready_count(ch, queue.name), 3))
    await asyncio.sleep(0.2)  # a third delivery would have arrived by now
    assert inbox.empty()

    await first_two[0].ack()
    (third,) = await take(inbox, 1)
    assert third.body == b"2"
    await asyncio.sleep(0.2)
    assert inbox.empty()


async def _equals(awaitable, expected) -> bool:
    return await awaitable == expected


async def test_consumer_cancel_stops_deliveries(ch, queue):
    inbox: asyncio.Queue = asyncio.Queue()
    tag = await queue.consume(inbox.put, no_ack=True)
    await publish(ch, queue.name, b"before")
    assert [m.body for m in await take(inbox, 1)] == [b"before"]
    ok = await queue.cancel(tag)
    assert ok.consumer_tag == tag
    await publish(ch, queue.name, b"after")
    assert (await queue.get(no_ack=True)).body == b"after"
    assert inbox.empty()


async def test_server_cancels_consumer_when_queue_deleted(conn, ch, queue):
    cancelled: asyncio.Queue = asyncio.Queue()
    underlay = await ch.get_underlay_channel()
    underlay.on_consumer_cancel_callbacks.add(cancelled.put)
    tag = await queue.consume(_ignore, no_ack=True)

    other = await conn.channel()
    await other.queue_delete(queue.name)
    frame = await asyncio.wait_for(cancelled.get(), 5)
    assert isinstance(frame, Basic.Cancel)
    assert frame.consumer_tag == tag
    assert not ch.is_closed


async def test_exclusive_consume(conn, ch, queue):
    text = f"ACCESS_REFUSED - queue '{queue.name}' in vhost '/' in exclusive use"
    await queue.consume(_ignore, exclusive=True)
    other = await conn.channel()
    with pytest.raises(ChannelAccessRefused) as err:
        await (await other.get_queue(queue.name)).consume(_ignore)
    assert aio_reply(err.value) == (403, text)


async def test_exclusive_consume_on_queue_with_consumers(conn, ch, queue):
    text = f"ACCESS_REFUSED - queue '{queue.name}' in vhost '/' in exclusive use"
    await queue.consume(_ignore)
    other = await conn.channel()
    with pytest.raises(ChannelAccessRefused) as err:
        await (await other.get_queue(queue.name)).consume(_ignore, exclusive=True)
    assert aio_reply(err.value) == (403, text)


async def test_unacked_requeued_in_order_on_channel_close(conn, ch, queue):
    consumer_channel = await conn.channel()
    inbox: asyncio.Queue = asyncio.Queue()
    await (await consumer_channel.get_queue(queue.name)).consume(inbox.put)
    await publish(ch, queue.name, b"0", b"1", b"2")
    assert [m.redelivered for m in await take(inbox, 3)] == [False, False, False]
    await consumer_channel.close()

    await wait_until(lambda: _equals(ready_count(ch, queue.name), 3))
    again = [await queue.get(no_ack=True) for _ in range(3)]
    assert [(m.body, m.redelivered) for m in again] == [
        (b"0", True),
        (b"1", True),
        (b"2", True),
    ]


async def test_unacked_requeued_on_connection_close(amqp_url, ch, queue):
    other = await aio_pika.connect(amqp_url)
    other_channel = await other.channel()
    await publish(ch, queue.name, b"m")
    got = await (await other_channel.get_queue(queue.name)).get()
    assert got.body == b"m"
    await other.close()
    await wait_until(lambda: _equals(ready_count(ch, queue.name), 1))
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)


async def test_basic_recover_requeue(ch, queue):
    await publish(ch, queue.name, b"0", b"1")
    got = [await queue.get() for _ in range(2)]
    assert [m.delivery_tag for m in got] == [1, 2]
    underlay = await ch.get_underlay_channel()
    await underlay.basic_recover(requeue=True)
    again = [await queue.get() for _ in range(2)]
    assert [m.body for m in again] == [b"0", b"1"]
    assert [m.redelivered for m in again] == [True, True]
    # Delivery tags are never reused, not even after basic.recover.
    assert [m.delivery_tag for m in again] == [3, 4]


# ---------------------------------------------------------------------------------------------
# publisher confirms and tx


async def test_publisher_confirms_ack_sequence(ch, queue):
    acks = [await ch.default_exchange.publish(Message(b"m"), queue.name) for _ in range(3)]
    assert all(isinstance(ack, Basic.Ack) for ack in acks)
    assert [ack.delivery_tag for ack in acks] == [1, 2, 3]


async def test_confirm_mandatory_unroutable_returned_before_ack(ch, queue):
    # aiormq settles the publish with whichever of basic.return / basic.ack comes first:
    # RabbitMQ sends the return first, then the ack for the same sequence number.
    result = await ch.default_exchange.publish(Message(b"x"), unique("no-such-queue"))
    assert isinstance(result.delivery, Basic.Return)
    ack = await ch.default_exchange.publish(Message(b"y"), queue.name)
    assert isinstance(ack, Basic.Ack)
    assert ack.delivery_tag == 2


async def test_publisher_confirm_nack_on_reject_publish_overflow(ch, cleanup):
    full = await ch.declare_queue(
        unique("q"), arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    cleanup.queues.append(full.name)
    assert isinstance(await ch.default_exchange.publish(Message(b"1"), full.name), Basic.Ack)
    with pytest.raises(DeliveryError) as err:
        await ch.default_exchange.publish(Message(b"2"), full.name)
    assert isinstance(err.value.frame, Basic.Nack)
    assert err.value.frame.delivery_tag == 2
    assert [m.body for m in [await full.get(no_ack=True)]] == [b"1"]
    assert await full.get(no_ack=True, fail=False) is None


async def test_tx_commit_makes_publishes_visible(conn, ch, queue):
    tx_channel = await conn.channel(publisher_confirms=False)
    tx = tx_channel.transaction()
    await tx.select()
    await publish(tx_channel, queue.name, b"0", b"1")
    # The publishes travel before this round trip, so they would be visible by now.
    assert await ready_count(tx_channel, queue.name) == 0
    assert await ready_count(ch, queue.name) == 0
    await tx.commit()
    assert await ready_count(ch, queue.name) == 2


async def test_tx_rollback_discards_publishes(conn, ch, queue):
    tx_channel = await conn.channel(publisher_confirms=False)
    tx = tx_channel.transaction()
    await tx.select()
    await publish(tx_channel, queue.name, b"discarded")
    await tx.rollback()
    assert await ready_count(ch, queue.name) == 0
    # The channel stays transactional after a rollback.
    await publish(tx_channel, queue.name, b"kept")
    assert await ready_count(ch, queue.name) == 0
    await tx.commit()
    assert (await queue.get(no_ack=True)).body == b"kept"
    assert await queue.get(fail=False) is None


async def test_tx_covers_acks(conn, ch, queue):
    await publish(ch, queue.name, b"m")
    tx_channel = await conn.channel(publisher_confirms=False)
    tx = tx_channel.transaction()
    await tx.select()
    got = await (await tx_channel.get_queue(queue.name)).get()
    await got.ack()
    await tx.rollback()  # the ack is discarded; the message stays unacked (not requeued)
    assert await ready_count(ch, queue.name) == 0
    await tx_channel.close()  # closing the channel requeues the still-unacked message
    await wait_until(lambda: _equals(ready_count(ch, queue.name), 1))
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)


async def test_switch_confirm_to_tx_refused(ch):
    underlay = await ch.get_underlay_channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await underlay.tx_select()
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
    )


async def test_switch_tx_to_confirm_refused(conn):
    channel = await conn.channel(publisher_confirms=False)
    underlay = await channel.get_underlay_channel()
    await underlay.tx_select()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await underlay.confirm_delivery()
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    )


@pytest.mark.parametrize("method", ["commit", "rollback"])
async def test_tx_commit_or_rollback_without_select(conn, method):
    channel = await conn.channel(publisher_confirms=False)
    underlay = await channel.get_underlay_channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await (underlay.tx_commit() if method == "commit" else underlay.tx_rollback())
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - channel is not transactional")


# ---------------------------------------------------------------------------------------------
# publish errors and unsupported features


async def test_user_id_must_match_authenticated_user(ch, queue):
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.default_exchange.publish(Message(b"x", user_id="mallory"), queue.name)
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user "
        "was 'guest'",
    )


@pytest.mark.parametrize(
    ("expiration", "reason"), [("abc", "no_integer"), ("-1", "{value_negative,-1}")]
)
async def test_invalid_expiration(ch, queue, expiration, reason):
    underlay = await ch.get_underlay_channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await underlay.basic_publish(
            b"x", routing_key=queue.name, properties=Basic.Properties(expiration=expiration)
        )
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}",
    )


async def test_consumer_tag_reuse_closes_connection(amqp_url):
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        underlay = await channel.get_underlay_channel()
        # aiormq refuses a duplicate tag client side, so send the raw method twice.
        await underlay.rpc(Basic.Consume(queue=queue.name, consumer_tag="ctag"), timeout=5)
        with pytest.raises(ConnectionNotAllowed) as err:
            await underlay.rpc(Basic.Consume(queue=queue.name, consumer_tag="ctag"), timeout=5)
        assert aio_reply(err.value) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'ctag'")
    finally:
        await connection.close()


async def test_channel_flow_inactive_not_implemented(amqp_url):
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        with pytest.raises(ConnectionNotImplemented) as err:
            await channel.flow(active=False)
        assert aio_reply(err.value) == (540, "NOT_IMPLEMENTED - active=false")
    finally:
        await connection.close()


async def test_immediate_flag_not_implemented(amqp_url):
    connection = await aio_pika.connect(amqp_url)
    closed: asyncio.Queue = asyncio.Queue()
    connection.close_callbacks.add(lambda _connection, exc: closed.put_nowait(exc))
    try:
        channel = await connection.channel()
        with pytest.raises(ConnectionNotImplemented) as err:
            await channel.default_exchange.publish(
                Message(b"x"), unique("q"), immediate=True, timeout=5
            )
        assert aio_reply(err.value) == (540, "NOT_IMPLEMENTED - immediate=true")
        # The whole connection is closed, not only the channel.
        exc = await asyncio.wait_for(closed.get(), 5)
        assert aio_reply(exc) == (540, "NOT_IMPLEMENTED - immediate=true")
    finally:
        await connection.close()


async def test_basic_recover_without_requeue_not_implemented(amqp_url):
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        underlay = await channel.get_underlay_channel()
        with pytest.raises(ConnectionNotImplemented) as err:
            await underlay.basic_recover(requeue=False, timeout=5)
        assert aio_reply(err.value) == (540, "NOT_IMPLEMENTED - requeue=false")
    finally:
        await connection.close()


async def test_qos_prefetch_size_not_implemented(amqp_url):
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        with pytest.raises(ConnectionNotImplemented) as err:
            await channel.set_qos(prefetch_count=1, prefetch_size=1000, timeout=5)
        assert aio_reply(err.value) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)")
    finally:
        await connection.close()
