"""RabbitMQ rules that are easy to get subtly wrong, checked through real client libraries.

Each scenario takes ``amqp_url`` (through the ``conn``/``ch``/``cleanup`` fixtures), so it runs
against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ. Every expectation below
(reply codes and texts, routing results, header values, orders) was first observed on
RabbitMQ 3.10.8 (Debian) and then checked against the sources of the RabbitMQ 3.13 profile
(peers.md section 2). Where the two RabbitMQ versions may differ (``x-last-death-*`` headers
exist from 3.13 on), the test accepts both and says so.

Sections:

* re-declare equivalence: exchange ``auto_delete``/``internal``/``alternate-exchange`` and
  queue ``auto_delete`` (in test_aio_topology.py);
* acks belong to the channel that received the delivery;
* the predeclared ``amq.rabbitmq.trace`` exchange;
* the "last declared queue" shortcut (empty queue name) for bind, unbind, consume, delete;
* ``basic.qos`` with ``global=true`` (a per-channel limit, as in 3.13);
* transactions: reject/nack are deferred to ``tx.commit``; ``basic.return`` precedes
  ``tx.commit-ok``;
* dead-lettering: a publisher-supplied ``x-death`` is continued; ``routing-keys`` has CC keys;
* headers exchange matching rules;
* topic exchange edge cases (literal ``a*``, empty routing key, empty words, unbinding).

Names are unique per test and everything declared is exclusive or deleted afterwards.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import aio_pika
import pika
import pytest
from aio_pika import ExchangeType, Message
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)
from pika.adapters.asyncio_connection import AsyncioConnection

from .helpers import aio_reply, declare_exchange, declare_queue, unique, wait_until

pytestmark = pytest.mark.timeout(30)

# ---------------------------------------------------------------------------------------------
# helpers


async def publish(channel, routing_key: str, *bodies: bytes, **properties: Any) -> None:
    """Publish to the default exchange (confirmed: aio-pika channels use confirms)."""
    for body in bodies:
        await channel.default_exchange.publish(Message(body, **properties), routing_key)


async def drain(queue) -> list:
    """All messages currently ready in ``queue`` (basic.get, no_ack)."""
    messages = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        messages.append(message)
    return messages


async def ready_count(channel, name: str) -> int:
    ok = await channel.declare_queue(name, passive=True)
    return ok.declaration_result.message_count


async def wait_ready(channel, name: str, count: int) -> None:
    async def check() -> bool:
        return await ready_count(channel, name) == count

    await wait_until(check)


async def _ignore(message) -> None:
    """A consumer callback that does nothing."""


async def take(inbox: asyncio.Queue, count: int, within: float = 5.0) -> list:
    return [await asyncio.wait_for(inbox.get(), within) for _ in range(count)]


LAST_DEATH = ("x-last-death-queue", "x-last-death-reason", "x-last-death-exchange")


def without_last_death(headers: dict[str, Any], last: tuple[str, str, str]) -> dict[str, Any]:
    """``headers`` without ``x-last-death-*``, which must equal ``last`` when present.

    RabbitMQ 3.13 (mc:record_death) sets x-last-death-queue/-reason/-exchange on every
    dead-lettering; 3.10 never does.
    """
    rest = dict(headers)
    found = tuple(rest.pop(key) for key in LAST_DEATH if key in rest)
    assert found in ((), last), found
    return rest


def assert_recent(stamp: Any) -> None:
    """An ``x-death`` ``time``: an AMQP timestamp (decoded as an aware UTC datetime), now-ish."""
    assert isinstance(stamp, datetime)
    assert abs((datetime.now(UTC) - stamp).total_seconds()) < 120


# ---------------------------------------------------------------------------------------------
# re-declare equivalence
#
# rabbit_exchange:assert_equivalence/6 compares type, durable, auto_delete and internal, then
# rabbit_misc:assert_args_equivalence/4 with only <<"alternate-exchange">> in the list;
# rabbit_amqqueue:assert_equivalence/5 does the same for queues. Failures are formatted by
# rabbit_misc:equivalence_fail/4 ("inequivalent arg ... received ... but current is ...").


@pytest.mark.parametrize("flag", ["auto_delete", "internal"])
async def test_exchange_redeclare_with_different_flag(ch, cleanup, flag):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange(exchange.name, ExchangeType.DIRECT, **{flag: True})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{flag}' for exchange '{exchange.name}' in "
        "vhost '/': received 'true' but current is 'false'",
    )


@pytest.mark.parametrize(
    ("first", "second", "difference"),
    [
        ("a1", "a2", "received 'a2' but current is 'a1'"),
        ("a1", None, "received none but current is the value 'a1' of type 'longstr'"),
        (None, "a1", "received the value 'a1' of type 'longstr' but current is none"),
    ],
)
async def test_exchange_redeclare_with_different_alternate_exchange(
    ch, cleanup, first, second, difference
):
    def arguments(ae: str | None) -> dict[str, Any] | None:
        return None if ae is None else {"alternate-exchange": ae}

    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT, arguments=arguments(first))
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange(exchange.name, ExchangeType.DIRECT, arguments=arguments(second))
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange "
        f"'{exchange.name}' in vhost '/': {difference}",
    )


async def test_exchange_arguments_other_than_alternate_exchange_are_not_compared(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT, arguments={"a": 1})
    await ch.declare_exchange(exchange.name, ExchangeType.DIRECT, arguments={"a": 2, "b": "c"})
    await ch.declare_exchange(exchange.name, ExchangeType.DIRECT)
    assert not ch.is_closed


# ---------------------------------------------------------------------------------------------
# acks belong to the receiving channel
#
# Delivery tags are per channel (rabbit_channel.erl:collect_acks/5 looks the tag up in this
# channel's unacked map only): a tag from another channel is "unknown".


async def test_ack_of_a_tag_delivered_on_another_channel(conn, ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    await publish(ch, queue.name, b"m")

    receiver = await conn.channel()
    receiver_queue = await receiver.get_queue(queue.name, ensure=False)
    got = await receiver_queue.get()  # unacked, tag 1 on `receiver`
    assert (got.body, got.delivery_tag) == (b"m", 1)

    other = await conn.channel()
    underlay = await other.get_underlay_channel()
    await underlay.basic_ack(got.delivery_tag)
    # basic.ack has no reply: the next synchronous call on the channel sees the close.
    with pytest.raises(ChannelPreconditionFailed) as err:
        await other.declare_queue(queue.name, passive=True)
    assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")

    # The message is still unacked on the receiving channel: nothing is ready ...
    assert not receiver.is_closed
    assert await ready_count(ch, queue.name) == 0
    # ... until that channel closes, which requeues it as redelivered.
    await receiver.close()
    await wait_ready(ch, queue.name, 1)
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)


# ---------------------------------------------------------------------------------------------
# Unbinding another connection's exclusive queue
#
# rabbit_binding:remove/3 finds nothing to remove before it runs the binding checks (the
# queue's exclusivity among them): unbinding what is not bound is unbind-ok even from an
# exclusive queue of another connection, unbinding what is bound is 405 (observed, 3.10.8).


async def test_unbinding_another_connections_exclusive_queue(conn, ch, amqp_url):
    queue = await ch.declare_queue(unique("excl"), exclusive=True)
    await queue.bind("amq.fanout", routing_key="")
    other = await aio_pika.connect(amqp_url)
    try:
        channel = await other.channel()
        underlay = await channel.get_underlay_channel()
        await underlay.queue_unbind(queue.name, "amq.direct", routing_key="never-bound")
        with pytest.raises(ChannelLockedResource) as err:
            await underlay.queue_unbind(queue.name, "amq.fanout")
        code, text = aio_reply(err.value)
        assert (code, text.split(".")[0]) == (
            405,
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue.name}' "
            "in vhost '/'",
        )
    finally:
        await other.close()


# ---------------------------------------------------------------------------------------------
# amq.rabbitmq.trace
#
# rabbit_vhost.erl:declare_default_exchanges/2 declares it as a durable internal topic
# exchange; rabbit_channel.erl:check_internal_exchange/1 refuses publishes to it.

TRACE = "amq.rabbitmq.trace"


async def test_amq_rabbitmq_trace_is_a_predeclared_internal_topic_exchange(conn, ch):
    await ch.declare_exchange(TRACE, passive=True)
    # Re-declaring with its exact properties is fine (an amq.* name is only checked on
    # creation), so these are its properties ...
    await ch.declare_exchange(TRACE, ExchangeType.TOPIC, durable=True, internal=True)
    # ... and a mismatch names the property that differs.
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange(TRACE, ExchangeType.TOPIC, durable=True, internal=False)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'internal' for exchange '{TRACE}' in "
        "vhost '/': received 'false' but current is 'true'",
    )


async def test_publish_to_amq_rabbitmq_trace_is_refused(conn):
    channel = await conn.channel()
    # aio-pika refuses internal exchanges client side; go around it with a plain handle.
    handle = await channel.get_exchange(TRACE, ensure=False)
    with pytest.raises(ChannelAccessRefused) as err:
        await handle.publish(Message(b"x"), "any.key")
    assert aio_reply(err.value) == (
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange '{TRACE}' in vhost '/'",
    )
    assert not conn.is_closed


# ---------------------------------------------------------------------------------------------
# the "last declared queue" shortcut
#
# rabbit_channel.erl:expand_queue_name_shortcut/2: an empty queue name means the queue this
# channel declared last (any queue.declare, passive or not, updates it); with none,
# 404 "no previously declared queue". basic.get and queue.purge are covered in
# test_aio_topology.py; here bind, unbind, consume and delete.


async def test_empty_queue_name_binds_consumes_and_deletes_the_last_declared_queue(conn, ch):
    declared = await ch.declare_queue("", exclusive=True)
    shortcut = await ch.get_queue("", ensure=False)
    key = unique("rk")

    # queue.bind with queue "" binds the last declared queue.
    await shortcut.bind("amq.direct", key)
    direct = await ch.get_exchange("amq.direct", ensure=False)
    await direct.publish(Message(b"bound"), key)
    assert await ready_count(ch, declared.name) == 1

    # basic.consume with queue "" consumes from it.
    inbox: asyncio.Queue = asyncio.Queue()
    tag = await shortcut.consume(inbox.put, no_ack=True)
    (delivered,) = await take(inbox, 1)
    assert (delivered.body, delivered.routing_key, delivered.exchange) == (
        b"bound",
        key,
        "amq.direct",
    )
    await shortcut.cancel(tag)

    # queue.unbind with queue "": the binding is gone, so the publish is not routed.
    await shortcut.unbind("amq.direct", key)
    await direct.publish(Message(b"unbound"), key)
    await publish(ch, declared.name, b"1", b"2")
    assert await ready_count(ch, declared.name) == 2

    # queue.delete with queue "" deletes it and reports the ready messages it had.
    ok = await ch.queue_delete("")
    assert ok.message_count == 2
    with pytest.raises(ChannelNotFoundEntity) as err:
        await ch.declare_queue(declared.name, passive=True)
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{declared.name}' in vhost '/'")


async def test_last_declared_queue_is_the_latest_declare_even_passive(ch):
    first = await ch.declare_queue("", exclusive=True)
    second = await ch.declare_queue(unique("q"), exclusive=True)
    shortcut = await ch.get_queue("", ensure=False)
    direct = await ch.get_exchange("amq.direct", ensure=False)

    key = unique("rk")
    await shortcut.bind("amq.direct", key)  # the named queue, declared last
    await direct.publish(Message(b"to-second"), key)
    assert (await ready_count(ch, second.name), await ready_count(ch, first.name)) == (1, 0)
    # ready_count made a passive declare of `first` last: the shortcut now means `first`.
    other_key = unique("rk")
    await shortcut.bind("amq.direct", other_key)
    await direct.publish(Message(b"to-first"), other_key)
    assert [m.body for m in await drain(first)] == [b"to-first"]


@pytest.mark.parametrize("operation", ["bind", "unbind", "consume", "delete"])
async def test_empty_queue_name_without_an_earlier_declare(conn, operation):
    fresh = await conn.channel()
    shortcut = await fresh.get_queue("", ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        if operation == "bind":
            await shortcut.bind("amq.direct", "k")
        elif operation == "unbind":
            await shortcut.unbind("amq.direct", "k")
        elif operation == "consume":
            await shortcut.consume(_ignore)
        else:
            await fresh.queue_delete("")
    assert aio_reply(err.value) == (404, "NOT_FOUND - no previously declared queue")
    assert not conn.is_closed


# ---------------------------------------------------------------------------------------------
# basic.qos global=true
#
# In 3.13 (and 3.10) global=true is a per-channel limit shared by all consumers on the
# channel, enforced alongside the per-consumer (global=false) limit (rabbit_channel.erl
# handle_method(#'basic.qos'{global = true}), docs/consumer-prefetch.md). 4.3 ignores it.


async def consume_two_queues(conn, ch, cleanup, count, *qos):
    """Two queues of ``count`` messages each (a0.., b0..), both consumed on one new channel
    set up with ``qos`` (``(prefetch_count, global_)`` pairs); (queues, inbox)."""
    queues = [await declare_queue(ch, cleanup) for _ in range(2)]
    for prefix, queue in zip((b"a", b"b"), queues, strict=True):
        await publish(ch, queue.name, *(prefix + str(n).encode() for n in range(count)))
    consumer = await conn.channel()
    for prefetch_count, global_ in qos:
        await consumer.set_qos(prefetch_count=prefetch_count, global_=global_)
    inbox: asyncio.Queue = asyncio.Queue()
    for queue in queues:
        handle = await consumer.get_queue(queue.name, ensure=False)
        await handle.consume(inbox.put)
    return queues, inbox


async def test_global_qos_limits_all_consumers_of_a_channel_together(conn, ch, cleanup):
    (q1, q2), inbox = await consume_two_queues(conn, ch, cleanup, 4, (2, True))
    first = await take(inbox, 2)
    await asyncio.sleep(0.3)
    # Two unacked deliveries in total across both consumers, not two each.
    assert inbox.empty()
    # The unacked ones stay unready; together the queues still hold the other six.
    assert await ready_count(ch, q1.name) + await ready_count(ch, q2.name) == 6

    # Acking one frees exactly one slot for the channel.
    await first[0].ack()
    (third,) = await take(inbox, 1)
    await asyncio.sleep(0.3)
    assert inbox.empty()
    assert third.body not in {m.body for m in first}


async def test_global_and_per_consumer_qos_both_apply(conn, ch, cleanup):
    # 1 per consumer, 3 per channel.
    _queues, inbox = await consume_two_queues(conn, ch, cleanup, 3, (1, False), (3, True))
    got = await take(inbox, 2)
    await asyncio.sleep(0.3)
    # The channel would allow 3, but each consumer may only hold 1.
    assert inbox.empty()
    assert sorted(m.body for m in got) == [b"a0", b"b0"]


# ---------------------------------------------------------------------------------------------
# transactions
#
# docs/semantics.md, rabbit_channel.erl (tx state): acks, rejects and nacks on a
# transactional channel are held until tx.commit; tx.rollback discards them, so the
# deliveries stay unacked. Mandatory publishes are routed at commit and their basic.return
# is sent before tx.commit-ok.


@pytest.mark.parametrize("method", ["reject", "nack"])
async def test_tx_defers_requeue_until_commit(conn, ch, cleanup, method):
    queue = await declare_queue(ch, cleanup)
    await publish(ch, queue.name, b"m")

    tx = await conn.channel(publisher_confirms=False)
    await (await tx.get_underlay_channel()).tx_select()
    got = await (await tx.get_queue(queue.name, ensure=False)).get()
    await (got.reject(requeue=True) if method == "reject" else got.nack(requeue=True))

    await asyncio.sleep(0.3)
    assert await ready_count(ch, queue.name) == 0  # not requeued yet

    await (await tx.get_underlay_channel()).tx_commit()
    await wait_ready(ch, queue.name, 1)
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)


@pytest.mark.parametrize("method", ["reject", "nack"])
async def test_tx_rollback_undoes_reject_and_nack(conn, ch, cleanup, method):
    queue = await declare_queue(ch, cleanup)
    await publish(ch, queue.name, b"m")

    tx = await conn.channel(publisher_confirms=False)
    underlay = await tx.get_underlay_channel()
    await underlay.tx_select()
    got = await (await tx.get_queue(queue.name, ensure=False)).get()
    await (got.reject(requeue=True) if method == "reject" else got.nack(requeue=True))
    await underlay.tx_rollback()

    await asyncio.sleep(0.3)
    # Neither requeued nor settled: the delivery is still unacked on the tx channel ...
    assert await ready_count(ch, queue.name) == 0
    assert not tx.is_closed
    # ... and closing that channel requeues it.
    await tx.close()
    await wait_ready(ch, queue.name, 1)
    again = await queue.get(no_ack=True)
    assert (again.body, again.redelivered) == (b"m", True)


async def test_tx_basic_return_arrives_before_commit_ok(amqp_url):
    # aiormq only reports basic.return on confirm channels, and tx excludes confirms, so this
    # uses pika's asyncio adapter, whose callbacks run in frame order.
    loop = asyncio.get_running_loop()
    events: list[Any] = []
    done: asyncio.Future = loop.create_future()
    closed: asyncio.Future = loop.create_future()
    key = unique("unroutable")

    def fail(reason: Any) -> None:
        if not done.done():
            done.set_exception(AssertionError(f"closed early: {reason!r}"))

    def on_return(_channel, method, _properties, body) -> None:
        events.append(
            ("return", method.reply_code, method.reply_text, method.exchange, method.routing_key)
        )
        events.append(("body", body))

    def on_channel(channel) -> None:
        channel.add_on_close_callback(lambda _ch, reason: fail(reason))
        channel.add_on_return_callback(on_return)

        def selected(_frame) -> None:
            channel.basic_publish("amq.direct", key, b"unroutable", mandatory=True)
            # A round trip after the publish: nothing is routed (or returned) before commit.
            channel.basic_qos(prefetch_count=0, callback=lambda _f: events.append("qos-ok"))
            channel.tx_commit(callback=committed)

        def committed(_frame) -> None:
            events.append("commit-ok")
            done.set_result(None)

        channel.tx_select(callback=selected)

    def on_closed(_connection, reason) -> None:
        fail(reason)
        if not closed.done():
            closed.set_result(None)

    parameters = pika.URLParameters(amqp_url)
    connection = AsyncioConnection(
        parameters,
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda _c, error: fail(error),
        on_close_callback=on_closed,
        custom_ioloop=loop,
    )
    try:
        await asyncio.wait_for(done, 5)
    finally:
        if not connection.is_closed and not connection.is_closing:
            connection.close()
        await asyncio.wait_for(closed, 5)

    assert events == [
        "qos-ok",
        ("return", 312, "NO_ROUTE", "amq.direct", key),
        ("body", b"unroutable"),
        "commit-ok",
    ]


# ---------------------------------------------------------------------------------------------
# dead-lettering and x-death
#
# rabbit_dead_letter.erl (3.10) / mc:record_death (3.13): one x-death entry per
# {queue, reason}; a repeat increments its count and moves it to the front. An x-death
# header the publisher sent is read the same way (3.13 and earlier; 4.0 stopped that).
# routing-keys holds the routing key and the CC keys, never BCC.


async def test_publisher_supplied_x_death_is_continued(ch, cleanup):
    dlq = await declare_queue(ch, cleanup, "dlq")
    queue = await declare_queue(
        ch,
        cleanup,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq.name},
    )
    # What an application republishes after taking a dead-lettered message from a DLQ.
    earlier = datetime(2024, 1, 1, tzinfo=UTC)
    other = datetime(2024, 2, 1, tzinfo=UTC)
    previous = [
        {
            "count": 2,
            "reason": "expired",
            "queue": "elsewhere",
            "time": other,
            "exchange": "",
            "routing-keys": ["elsewhere"],
        },
        {
            "count": 3,
            "reason": "rejected",
            "queue": queue.name,
            "time": earlier,
            "exchange": "",
            "routing-keys": [queue.name],
        },
    ]
    first_death = {
        "x-first-death-queue": queue.name,
        "x-first-death-reason": "rejected",
        "x-first-death-exchange": "",
    }
    await publish(ch, queue.name, b"again", headers={"x-death": previous, **first_death})

    got = await queue.get()
    await got.reject(requeue=False)
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)

    assert dead.body == b"again"
    headers = without_last_death(dict(dead.headers), (queue.name, "rejected", ""))
    # The (queue, rejected) entry is incremented (3 -> 4) and moved to the front; its time
    # stays the time of the first such death. No second (queue, rejected) entry appears.
    assert headers == {
        "x-death": [
            {
                "count": 4,
                "reason": "rejected",
                "queue": queue.name,
                "time": earlier,
                "exchange": "",
                "routing-keys": [queue.name],
            },
            previous[0],
        ],
        **first_death,
    }


async def test_x_death_routing_keys_include_cc_but_not_bcc(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    dlq = await declare_queue(ch, cleanup, "dlq")
    queue = await declare_queue(
        ch,
        cleanup,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq.name},
    )
    await queue.bind(exchange, "main")
    await queue.bind(exchange, "cc1")  # the queue is reached by two keys: one copy
    await exchange.publish(Message(b"cc", headers={"CC": ["cc1", "cc2"], "BCC": ["bcc1"]}), "main")

    got = await queue.get()
    assert dict(got.headers) == {"CC": ["cc1", "cc2"]}  # BCC is removed when routing
    await got.reject(requeue=False)
    await wait_ready(ch, dlq.name, 1)
    dead = await dlq.get(no_ack=True)
    assert await ready_count(ch, queue.name) == 0

    headers = without_last_death(dict(dead.headers), (queue.name, "rejected", exchange.name))
    (entry,) = headers.pop("x-death")
    assert_recent(entry.pop("time"))
    assert entry == {
        "count": 1,
        "reason": "rejected",
        "queue": queue.name,
        "exchange": exchange.name,
        # The routing key, then every CC key (cc2 routed nowhere, still listed); no BCC.
        "routing-keys": ["main", "cc1", "cc2"],
    }
    # With x-dead-letter-routing-key set, the copy loses its CC header.
    assert headers == {
        "x-first-death-queue": queue.name,
        "x-first-death-reason": "rejected",
        "x-first-death-exchange": exchange.name,
    }


async def test_dead_letter_without_routing_key_uses_cc_keys(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    dlx = await declare_exchange(ch, cleanup, ExchangeType.DIRECT, "dlx")
    by_main = await declare_queue(ch, cleanup, "dl-main")
    by_cc = await declare_queue(ch, cleanup, "dl-cc")
    await by_main.bind(dlx, "main")
    await by_cc.bind(dlx, "cc2")
    queue = await declare_queue(ch, cleanup, arguments={"x-dead-letter-exchange": dlx.name})
    await queue.bind(exchange, "main")
    await exchange.publish(Message(b"cc", headers={"CC": ["cc2"]}), "main")

    got = await queue.get()
    await got.reject(requeue=False)
    await wait_ready(ch, by_cc.name, 1)
    # The copy is routed by its original keys, the routing key and its CC keys.
    for target in (by_main, by_cc):
        (dead,) = await drain(target)
        assert dead.body == b"cc"
        assert dead.headers["CC"] == ["cc2"]
        assert dead.headers["x-death"][0]["routing-keys"] == ["main", "cc2"]


# ---------------------------------------------------------------------------------------------
# headers exchange
#
# rabbit_exchange_type_headers.erl: x-match all (default) / any skip binding arguments whose
# key starts with "x-"; all-with-x / any-with-x (RabbitMQ 3.10 already has them) skip only
# x-match. A void binding value means "present". Values compare with Erlang ==, so integer 1
# and float 1.0 are equal. The routing key is ignored.


async def headers_routes(
    ch, cleanup, bindings: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
) -> dict[str, list[int]]:
    """Bind one queue per entry of ``bindings``, publish ``messages`` (by index) and return
    which message indexes each queue received."""
    exchange = await declare_exchange(ch, cleanup, ExchangeType.HEADERS)
    queues = {}
    for name, arguments in bindings.items():
        queues[name] = await ch.declare_queue(unique("hq"), exclusive=True)
        await queues[name].bind(exchange, "ignored", arguments=arguments)
    for index, headers in enumerate(messages):
        await exchange.publish(Message(str(index).encode(), headers=headers), unique("rk"))
    return {name: [int(m.body) for m in await drain(queue)] for name, queue in queues.items()}


async def test_headers_all_with_x_and_any_with_x(ch, cleanup):
    messages = [
        {"a": 1},  # 0
        {"a": 1, "x-tag": "t"},  # 1
        {"x-tag": "t"},  # 2
        {"x-tag": "other", "a": 2},  # 3
    ]
    routes = await headers_routes(
        ch,
        cleanup,
        {
            "all-with-x": {"x-match": "all-with-x", "x-tag": "t", "a": 1},
            "any-with-x": {"x-match": "any-with-x", "x-tag": "t", "a": 1},
            "all": {"x-match": "all", "x-tag": "t", "a": 1},
            "any": {"x-match": "any", "x-tag": "t", "a": 1},
        },
        messages,
    )
    assert routes == {
        "all-with-x": [1],
        "any-with-x": [0, 1, 2],
        # Plain all/any skip the x-tag binding argument.
        "all": [0, 1],
        "any": [0, 1],
    }


async def test_headers_plain_all_and_any_ignore_x_arguments(ch, cleanup):
    messages = [{}, {"x-tag": "t"}, {"a": 1}]
    routes = await headers_routes(
        ch,
        cleanup,
        {
            # Only x- arguments: nothing to check, so all matches everything ...
            "all": {"x-match": "all", "x-tag": "t"},
            # ... and any matches nothing, even a message carrying x-tag: t.
            "any": {"x-match": "any", "x-tag": "t"},
            "any-with-x": {"x-match": "any-with-x", "x-tag": "t"},
        },
        messages,
    )
    assert routes == {"all": [0, 1, 2], "any": [], "any-with-x": [1]}


async def test_headers_void_binding_value_means_present(ch, cleanup):
    messages = [{}, {"v": None}, {"v": "anything"}, {"v": 0}, {"w": 1}]
    routes = await headers_routes(
        ch,
        cleanup,
        {
            "all": {"x-match": "all", "v": None},
            "any": {"x-match": "any", "v": None, "z": None},
        },
        messages,
    )
    assert routes == {"all": [1, 2, 3], "any": [1, 2, 3]}


async def test_headers_values_compare_with_erlang_equality(ch, cleanup):
    messages = [
        {"n": 1},  # 0
        {"n": 1.0},  # 1
        {"n": "1"},  # 2
        {"n": True},  # 3
        {"n": 2**40},  # 4: a 64-bit long on the wire
        {"n": 2},  # 5
    ]
    routes = await headers_routes(
        ch,
        cleanup,
        {
            "int": {"n": 1},
            "float": {"n": 1.0},
            "string": {"n": "1"},
            "bool": {"n": True},
            "long": {"n": 2**40},
        },
        messages,
    )
    assert routes == {
        # 1 == 1.0 in Erlang: the integer and the float match each other.
        "int": [0, 1],
        "float": [0, 1],
        # A string or a boolean is never equal to a number.
        "string": [2],
        "bool": [3],
        "long": [4],
    }


async def test_headers_empty_binding_table(ch, cleanup):
    messages = [{}, {"a": 1}, {"x-anything": "y"}]
    routes = await headers_routes(
        ch,
        cleanup,
        {
            "all": {"x-match": "all"},
            "any": {"x-match": "any"},
            "default": {},  # x-match defaults to all
        },
        messages,
    )
    assert routes == {"all": [0, 1, 2], "any": [], "default": [0, 1, 2]}


# ---------------------------------------------------------------------------------------------
# topic exchange edge cases
#
# rabbit_db_topic_exchange.erl: a routing key splits on every ".", "" is zero words and
# empty words are real words; "*" is exactly one word (possibly empty), "#" zero or more;
# wildcards are only whole words (routing_SUITE:topic1/1).

TOPIC_KEYS = ["", ".", "a.", "a*", "ab", "a", "a.b", ".a"]


async def topic_routes(exchange, queues: dict[str, Any]) -> dict[str, list[str]]:
    """Publish one message per routing key of TOPIC_KEYS; the keys each queue received."""
    for key in TOPIC_KEYS:
        await exchange.publish(Message(key.encode()), key)
    return {
        binding: [m.routing_key for m in await drain(queue)] for binding, queue in queues.items()
    }


async def test_topic_edge_cases(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    bindings = ["a*", "*", "#", "*.*", "a.*", "a", "a.#", ""]
    queues = {}
    for binding in bindings:
        queues[binding] = await ch.declare_queue(unique("tq"), exclusive=True)
        await queues[binding].bind(exchange, binding)

    assert await topic_routes(exchange, queues) == {
        # "a*" is a literal word: only the routing key "a*" itself.
        "a*": ["a*"],
        # "*" is exactly one word: not "" (zero words), not "." (two empty words).
        "*": ["a*", "ab", "a"],
        # "#" matches everything, the empty routing key included.
        "#": TOPIC_KEYS,
        # "." is two empty words, "a." is "a" and an empty word.
        "*.*": [".", "a.", "a.b", ".a"],
        "a.*": ["a.", "a.b"],
        "a": ["a"],
        "a.#": ["a.", "a", "a.b"],
        "": [""],
    }


async def test_topic_routing_follows_unbind(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    queue = await ch.declare_queue(unique("tq"), exclusive=True)
    await queue.bind(exchange, "#")
    await queue.bind(exchange, "a.*")
    assert await topic_routes(exchange, {"q": queue}) == {"q": TOPIC_KEYS}  # one copy each

    await queue.unbind(exchange, "#")
    assert await topic_routes(exchange, {"q": queue}) == {"q": ["a.", "a.b"]}

    await queue.bind(exchange, "a*")
    await queue.unbind(exchange, "a.*")
    assert await topic_routes(exchange, {"q": queue}) == {"q": ["a*"]}

    await queue.unbind(exchange, "a*")
    assert await topic_routes(exchange, {"q": queue}) == {"q": []}
