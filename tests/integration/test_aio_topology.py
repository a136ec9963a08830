"""Topology scenarios through aio-pika: exchanges, queues, bindings and routing.

Every expectation (reply codes and texts included) was checked against a real RabbitMQ;
run with ``-m rabbitmq`` to check again. Texts follow peers.md section 2.
"""

from __future__ import annotations

import asyncio
import re

import aio_pika
import pytest
from aio_pika import ExchangeType, Message
from aio_pika.patterns import RPC
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)
from pamqp.commands import Basic

from .helpers import aio_reply, declare_exchange, declare_queue, unique, wait_until

# ---------------------------------------------------------------------------------------------
# fixtures


async def drain(queue) -> list:
    """All messages currently ready in ``queue`` (basic.get, no_ack)."""
    messages = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        messages.append(message)
    return messages


async def _ignore(message) -> None:
    """A consumer callback that does nothing."""


def returned(result) -> bool:
    """True when a mandatory publish on a confirm channel came back as basic.return."""
    return isinstance(getattr(result, "delivery", None), Basic.Return)


# ---------------------------------------------------------------------------------------------
# exchange.declare


async def test_exchange_passive_declare_existing_and_missing(conn, ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    ok = await ch.declare_exchange(exchange.name, passive=True)
    assert ok.name == exchange.name

    missing = unique("missing-x")
    with pytest.raises(ChannelNotFoundEntity) as err:
        await ch.declare_exchange(missing, passive=True)
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")
    assert ch.is_closed
    # The error closed the channel only, not the connection.
    assert not conn.is_closed
    other = await conn.channel()
    await other.declare_exchange(exchange.name, passive=True)


async def test_exchange_declare_flags_and_idempotent_redeclare(ch, cleanup):
    for kwargs in ({"durable": True}, {"auto_delete": True}, {"internal": True}, {}):
        exchange = await declare_exchange(ch, cleanup, ExchangeType.FANOUT, **kwargs)
        # Re-declaring with the same properties is fine.
        await ch.declare_exchange(exchange.name, ExchangeType.FANOUT, **kwargs)


async def test_exchange_inequivalent_type(conn, ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange(exchange.name, ExchangeType.FANOUT)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange.name}' in "
        "vhost '/': received 'fanout' but current is 'direct'",
    )


async def test_exchange_inequivalent_durable(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange(exchange.name, ExchangeType.DIRECT, durable=True)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{exchange.name}' in "
        "vhost '/': received 'true' but current is 'false'",
    )


async def test_exchange_reserved_amq_prefix(ch):
    name = unique("amq.leveret")
    with pytest.raises(ChannelAccessRefused) as err:
        await ch.declare_exchange(name, ExchangeType.DIRECT)
    assert aio_reply(err.value) == (
        403,
        f"ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'",
    )


async def test_redeclare_amq_topic_is_fine_but_must_be_equivalent(conn, ch):
    await ch.declare_exchange("amq.topic", ExchangeType.TOPIC, durable=True)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_exchange("amq.topic", ExchangeType.TOPIC, durable=False)
    assert aio_reply(err.value) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.topic' in "
        "vhost '/': received 'false' but current is 'true'",
    )


@pytest.mark.parametrize(
    ("name", "type_"),
    [
        ("amq.direct", ExchangeType.DIRECT),
        ("amq.fanout", ExchangeType.FANOUT),
        ("amq.topic", ExchangeType.TOPIC),
        ("amq.headers", ExchangeType.HEADERS),
        ("amq.match", ExchangeType.HEADERS),
    ],
)
async def test_predeclared_exchanges_exist(ch, name, type_):
    await ch.declare_exchange(name, passive=True)
    await ch.declare_exchange(name, type_, durable=True)


async def test_delete_amq_exchange_refused(conn, ch):
    with pytest.raises(ChannelAccessRefused) as err:
        await ch.exchange_delete("amq.direct")
    assert aio_reply(err.value) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    other = await conn.channel()
    await other.declare_exchange("amq.direct", passive=True)


DEFAULT_EXCHANGE_TEXT = "ACCESS_REFUSED - operation not permitted on the default exchange"


@pytest.mark.parametrize("operation", ["declare", "passive", "delete", "bind", "unbind"])
async def test_default_exchange_operations_refused(ch, cleanup, operation):
    if operation in ("bind", "unbind"):
        queue = await declare_queue(ch, cleanup)
    with pytest.raises(ChannelAccessRefused) as err:
        if operation == "declare":
            await ch.declare_exchange("", ExchangeType.DIRECT)
        elif operation == "passive":
            await ch.declare_exchange("", passive=True)
        elif operation == "delete":
            await ch.exchange_delete("")
        elif operation == "bind":
            await queue.bind("", queue.name)
        else:
            await queue.unbind("", queue.name)
    assert aio_reply(err.value) == (403, DEFAULT_EXCHANGE_TEXT)


async def test_amq_default_is_not_a_real_exchange(ch):
    # "amq.default" is only the management UI's name for "".
    with pytest.raises(ChannelNotFoundEntity) as err:
        await ch.declare_exchange("amq.default", passive=True)
    assert aio_reply(err.value) == (404, "NOT_FOUND - no exchange 'amq.default' in vhost '/'")


@pytest.mark.parametrize(("value", "shown"), [("foo", '<<"foo">>'), ("", "<<>>")])
async def test_headers_binding_with_invalid_x_match(ch, cleanup, value, shown):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.HEADERS)
    queue = await declare_queue(ch, cleanup)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await queue.bind(exchange, "", arguments={"x-match": value, "a": 1})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - Invalid x-match field value {shown}; expected all, any, "
        "all-with-x, or any-with-x",
    )


async def test_exchange_delete_if_unused(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    queue = await declare_queue(ch, cleanup)
    await queue.bind(exchange, "k")
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.exchange_delete(exchange.name, if_unused=True)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - exchange '{exchange.name}' in vhost '/' in use",
    )


async def test_exchange_delete_if_unused_succeeds_without_bindings(ch):
    name = unique("x")
    await ch.declare_exchange(name, ExchangeType.DIRECT)
    await ch.exchange_delete(name, if_unused=True)
    with pytest.raises(ChannelNotFoundEntity):
        await ch.declare_exchange(name, passive=True)


async def test_exchange_delete_missing_is_ok(ch):
    await ch.exchange_delete(unique("never-declared"))
    await ch.exchange_delete(unique("never-declared"), if_unused=True)
    assert not ch.is_closed


async def test_auto_delete_exchange_goes_with_its_last_binding(conn, ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT, auto_delete=True)
    queue = await declare_queue(ch, cleanup)
    await queue.bind(exchange, "a")
    await queue.bind(exchange, "b")
    await queue.unbind(exchange, "a")
    await ch.declare_exchange(exchange.name, passive=True)  # one binding left
    await queue.unbind(exchange, "b")
    with pytest.raises(ChannelNotFoundEntity):
        await ch.declare_exchange(exchange.name, passive=True)


async def test_publish_to_missing_exchange(ch):
    name = unique("missing-x")
    exchange = await ch.get_exchange(name, ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await exchange.publish(Message(b"x"), "k")
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


async def test_publish_to_internal_exchange_refused(ch, cleanup):
    internal = await declare_exchange(ch, cleanup, ExchangeType.FANOUT, internal=True)
    # aio-pika refuses internal exchanges client side; go around it with a plain handle.
    handle = await ch.get_exchange(internal.name, ensure=False)
    with pytest.raises(ChannelAccessRefused) as err:
        await handle.publish(Message(b"x"), "k")
    assert aio_reply(err.value) == (
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange '{internal.name}' in vhost '/'",
    )


# ---------------------------------------------------------------------------------------------
# routing


async def test_direct_routing(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    qa = await declare_queue(ch, cleanup)
    qb = await declare_queue(ch, cleanup)
    await qa.bind(exchange, "a")
    await qb.bind(exchange, "b")
    await qb.bind(exchange, "shared")
    await qa.bind(exchange, "shared")
    for key in ("a", "b", "shared", "A", "a.b"):
        await exchange.publish(Message(key.encode()), key, mandatory=False)
    assert [m.body for m in await drain(qa)] == [b"a", b"shared"]
    assert [m.body for m in await drain(qb)] == [b"b", b"shared"]


async def test_fanout_routing_ignores_routing_key(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.FANOUT)
    queues = [await declare_queue(ch, cleanup) for _ in range(3)]
    await queues[0].bind(exchange, "")
    await queues[1].bind(exchange, "whatever")
    await queues[2].bind(exchange, "x")
    await exchange.publish(Message(b"one"), "unrelated")
    for queue in queues:
        assert [m.body for m in await drain(queue)] == [b"one"]


async def test_default_exchange_routes_by_queue_name(ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    result = await ch.default_exchange.publish(Message(b"hi"), queue.name)
    assert isinstance(result, Basic.Ack)
    assert [m.body for m in await drain(queue)] == [b"hi"]
    assert returned(await ch.default_exchange.publish(Message(b"x"), unique("no-such-queue")))


# The golden table of peers.md section 2.7 (RabbitMQ routing_SUITE:topic1), first part.
TOPIC_BINDINGS = {
    "t1": "a.b.c",
    "t2": "a.*.c",
    "t3": "a.#.b",
    "t4": "a.b.b.c",
    "t5": "#",
    "t6": "#.#",
    "t7": "#.b",
    "t8": "*.*",
    "t9": "a.*",
    "t10": "*.b.c",
    "t11": "a.#",
    "t12": "a.#.#",
    "t13": "b.b.c",
    "t14": "a.b.b",
    "t15": "a.b",
    "t16": "b.c",
    "t17": "",
    "t18": "*.*.*",
    "t19": "vodka.martini",
    "t20": "a.b.c",
    "t21": "*.#",
    "t22": "#.*.#",
    "t23": "*.#.#",
    "t25": "*",
    "t26": "#.b.#",
    "t27": "args-test",
}
TOPIC_EXPECTED = {
    "a.b.c": "t1 t2 t5 t6 t10 t11 t12 t18 t20 t21 t22 t23 t26",
    "a.b": "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t23 t26",
    "a.b.b": "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t23 t26",
    "": "t5 t6 t17",
    "b.c.c": "t5 t6 t18 t21 t22 t23 t26",
    "a.a.a.a.a": "t5 t6 t11 t12 t21 t22 t23",
    "vodka.gin": "t5 t6 t8 t21 t22 t23",
    "vodka.martini": "t5 t6 t8 t19 t21 t22 t23",
    "b.b.c": "t5 t6 t10 t13 t18 t21 t22 t23 t26",
    "nothing.here.at.all": "t5 t6 t21 t22 t23",
    "oneword": "t5 t6 t21 t22 t23 t25",
    "args-test": "t5 t6 t21 t22 t23 t25 t27",
}


async def test_topic_routing_golden_table(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    queues = {}
    for tag, binding_key in TOPIC_BINDINGS.items():
        queues[tag] = await declare_queue(ch, cleanup, prefix=tag)
        await queues[tag].bind(exchange, binding_key)
    # t27 is bound twice with different arguments; it must still get one copy per message.
    await queues["t27"].bind(exchange, "args-test", arguments={"foo": "bar"})

    for routing_key in TOPIC_EXPECTED:
        await exchange.publish(Message(routing_key.encode()), routing_key, mandatory=False)

    got: dict[str, list[str]] = {}
    for tag, queue in queues.items():
        for message in await drain(queue):
            got.setdefault(message.body.decode(), []).append(tag)
    for routing_key, expected in TOPIC_EXPECTED.items():
        assert sorted(got.get(routing_key, [])) == sorted(expected.split()), routing_key


async def test_topic_empty_words_and_isolation(ch, cleanup):
    x1 = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    x2 = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    star = await declare_queue(ch, cleanup)
    middle = await declare_queue(ch, cleanup)
    empty_on_x2 = await declare_queue(ch, cleanup)
    await star.bind(x1, "*.*")
    await middle.bind(x1, "a.*.b")
    await empty_on_x2.bind(x2, "")
    for key in (".", "a..b", "", "a.b"):
        await x1.publish(Message(key.encode()), key, mandatory=False)
    assert [m.body for m in await drain(star)] == [b".", b"a.b"]
    assert [m.body for m in await drain(middle)] == [b"a..b"]
    assert await drain(empty_on_x2) == []  # exchanges are isolated


async def test_headers_routing_all_and_any(ch, cleanup):
    exchange = await declare_exchange(ch, cleanup, ExchangeType.HEADERS)
    q_all = await declare_queue(ch, cleanup)
    q_any = await declare_queue(ch, cleanup)
    q_default = await declare_queue(ch, cleanup)
    await q_all.bind(exchange, "", arguments={"x-match": "all", "a": 1, "b": "x"})
    await q_any.bind(exchange, "", arguments={"x-match": "any", "a": 1, "b": "x"})
    await q_default.bind(exchange, "", arguments={"a": 1})  # x-match defaults to all

    cases = {
        "both": {"a": 1, "b": "x"},
        "a-only": {"a": 1},
        "b-only": {"b": "x"},
        "wrong": {"a": 2, "b": "y"},
        "extra": {"a": 1, "b": "x", "c": True},
        "none": {},
    }
    for name, headers in cases.items():
        # The routing key plays no part in headers routing.
        await exchange.publish(Message(name.encode(), headers=headers), "ignored", mandatory=False)

    assert [m.body for m in await drain(q_all)] == [b"both", b"extra"]
    assert [m.body for m in await drain(q_any)] == [b"both", b"a-only", b"b-only", b"extra"]
    assert [m.body for m in await drain(q_default)] == [b"both", b"a-only", b"extra"]


async def test_exchange_to_exchange_binding(ch, cleanup):
    source = await declare_exchange(ch, cleanup, ExchangeType.TOPIC)
    destination = await declare_exchange(ch, cleanup, ExchangeType.DIRECT)
    queue = await declare_queue(ch, cleanup)
    await queue.bind(destination, "orders.new")
    await destination.bind(source, "orders.*")

    await source.publish(Message(b"e2e"), "orders.new")
    await source.publish(Message(b"filtered-by-destination"), "orders.old", mandatory=False)
    assert [m.body for m in await drain(queue)] == [b"e2e"]

    await destination.unbind(source, "orders.*")
    assert returned(await source.publish(Message(b"after-unbind"), "orders.new"))
    assert await drain(queue) == []


async def test_exchange_binding_cycle_delivers_once(ch, cleanup):
    x1 = await declare_exchange(ch, cleanup, ExchangeType.FANOUT)
    x2 = await declare_exchange(ch, cleanup, ExchangeType.FANOUT)
    queue = await declare_queue(ch, cleanup)
    await x2.bind(x1, "")
    await x1.bind(x2, "")
    await queue.bind(x1, "")
    await queue.bind(x2, "")
    await x1.publish(Message(b"once"), "k")
    assert [m.body for m in await drain(queue)] == [b"once"]


async def test_alternate_exchange(ch, cleanup):
    alternate = await declare_exchange(ch, cleanup, ExchangeType.FANOUT, prefix="ae")
    exchange = await declare_exchange(
        ch, cleanup, ExchangeType.DIRECT, arguments={"alternate-exchange": alternate.name}
    )
    routed = await declare_queue(ch, cleanup)
    unrouted = await declare_queue(ch, cleanup)
    await routed.bind(exchange, "known")
    await unrouted.bind(alternate, "")

    assert isinstance(await exchange.publish(Message(b"1"), "known"), Basic.Ack)
    # Routed through the alternate exchange counts as routed: no basic.return.
    assert isinstance(await exchange.publish(Message(b"2"), "unknown"), Basic.Ack)
    assert [m.body for m in await drain(routed)] == [b"1"]
    unrouted_messages = await drain(unrouted)
    assert [m.body for m in unrouted_messages] == [b"2"]
    assert unrouted_messages[0].exchange == exchange.name
    assert unrouted_messages[0].routing_key == "unknown"


async def test_missing_alternate_exchange_means_unroutable(ch, cleanup):
    exchange = await declare_exchange(
        ch, cleanup, ExchangeType.DIRECT, arguments={"alternate-exchange": unique("no-ae")}
    )
    assert returned(await exchange.publish(Message(b"x"), "unknown"))


# ---------------------------------------------------------------------------------------------
# queue.declare


async def test_queue_passive_declare_missing(ch):
    name = unique("missing-q")
    with pytest.raises(ChannelNotFoundEntity) as err:
        await ch.declare_queue(name, passive=True)
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


async def test_server_named_queue(ch):
    queue = await ch.declare_queue("", exclusive=True)
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", queue.name), queue.name
    other = await ch.declare_queue("", exclusive=True)
    assert other.name != queue.name
    await ch.declare_queue(queue.name, passive=True)
    # A non-passive declare of an amq.* queue name is refused even when the queue exists.
    with pytest.raises(ChannelAccessRefused) as err:
        await ch.declare_queue(queue.name, exclusive=True)
    assert aio_reply(err.value) == (
        403,
        f"ACCESS_REFUSED - queue name '{queue.name}' contains reserved prefix 'amq.*'",
    )


async def test_empty_queue_name_means_last_declared_queue(conn, ch):
    fresh = await conn.channel()
    handle = await fresh.get_queue("", ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await handle.get(fail=False)
    assert aio_reply(err.value) == (404, "NOT_FOUND - no previously declared queue")

    queue = await ch.declare_queue("", exclusive=True)
    await ch.default_exchange.publish(Message(b"via-shortcut"), queue.name)
    shortcut = await ch.get_queue("", ensure=False)
    got = await shortcut.get(no_ack=True)
    assert (got.body, got.routing_key) == (b"via-shortcut", queue.name)
    assert (await shortcut.purge()).message_count == 0


async def test_queue_declare_ok_counts(conn, ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    assert (queue.declaration_result.message_count, queue.declaration_result.consumer_count) == (
        0,
        0,
    )
    for i in range(3):
        await ch.default_exchange.publish(Message(str(i).encode()), queue.name)
    ok = await ch.declare_queue(queue.name, passive=True)
    assert (ok.declaration_result.message_count, ok.declaration_result.consumer_count) == (3, 0)

    consumer_channel = await conn.channel()
    await consumer_channel.set_qos(prefetch_count=1)
    consumer_queue = await consumer_channel.get_queue(queue.name, ensure=False)
    delivered = asyncio.Queue()
    await consumer_queue.consume(delivered.put)
    await asyncio.wait_for(delivered.get(), 5)

    async def counts_are_2_and_1() -> bool:
        ok = await ch.declare_queue(queue.name, passive=True)
        return (ok.declaration_result.message_count, ok.declaration_result.consumer_count) == (
            2,
            1,
        )

    # message_count counts ready messages only; the unacked one is not among them.
    await wait_until(counts_are_2_and_1)
    # A non-passive re-declare reports the same counts.
    again = await ch.declare_queue(queue.name)
    assert again.declaration_result.message_count == 2
    assert again.declaration_result.consumer_count == 1


async def test_queue_reserved_amq_prefix(ch):
    name = unique("amq.leveret")
    with pytest.raises(ChannelAccessRefused) as err:
        await ch.declare_queue(name)
    assert aio_reply(err.value) == (
        403,
        f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'",
    )


@pytest.mark.parametrize("flag", ["durable", "auto_delete"])
async def test_queue_inequivalent_flag(ch, cleanup, flag):
    queue = await declare_queue(ch, cleanup)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.declare_queue(queue.name, **{flag: True})
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{flag}' for queue '{queue.name}' in "
        "vhost '/': received 'true' but current is 'false'",
    )


async def test_exclusive_queue_locked_for_other_connections(amqp_url, ch):
    queue = await ch.declare_queue(unique("excl"), exclusive=True)
    text = (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue.name}' in "
        "vhost '/'. It could be originally declared on another connection or the exclusive "
        "property value does not match that of the original declaration."
    )
    other = await aio_pika.connect(amqp_url)
    try:
        for operation in ("passive", "declare", "consume"):
            channel = await other.channel()
            with pytest.raises(ChannelLockedResource) as err:
                if operation == "passive":
                    await channel.declare_queue(queue.name, passive=True)
                elif operation == "declare":
                    await channel.declare_queue(queue.name, exclusive=True)
                else:
                    handle = await channel.get_queue(queue.name, ensure=False)
                    await handle.consume(_ignore)
            assert aio_reply(err.value) == (405, text), operation
    finally:
        await other.close()


async def test_exclusive_queue_deleted_with_its_connection(amqp_url, conn):
    owner = await aio_pika.connect(amqp_url)
    owner_channel = await owner.channel()
    queue = await owner_channel.declare_queue(unique("excl"), exclusive=True)
    with pytest.raises(ChannelLockedResource):  # it exists, and is not ours
        await (await conn.channel()).declare_queue(queue.name, passive=True)
    await owner.close()

    async def gone() -> bool:
        channel = await conn.channel()
        try:
            await channel.declare_queue(queue.name, passive=True)
        except ChannelNotFoundEntity:
            return True
        except ChannelLockedResource:
            return False
        await channel.close()
        return False

    await wait_until(gone)


# ---------------------------------------------------------------------------------------------
# bindings, purge, delete


async def test_queue_bind_and_unbind(ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    await queue.bind("amq.direct", queue.name)
    amq_direct = await ch.get_exchange("amq.direct")
    assert isinstance(await amq_direct.publish(Message(b"bound"), queue.name), Basic.Ack)
    assert [m.body for m in await drain(queue)] == [b"bound"]

    await queue.unbind("amq.direct", queue.name)
    result = await amq_direct.publish(Message(b"unbound"), queue.name)
    assert returned(result)
    assert result.delivery.reply_code == 312
    assert result.delivery.reply_text == "NO_ROUTE"
    assert await drain(queue) == []
    # Unbinding a binding that does not exist is not an error.
    await queue.unbind("amq.direct", queue.name)


async def test_unbind_from_or_to_something_missing_is_unbind_ok(conn, cleanup):
    # Unlike bind (404 below), unbind of a missing exchange or queue succeeds, as unbind of
    # a missing binding does (observed on RabbitMQ 3.10.8).
    ch = await conn.channel()
    queue = await declare_queue(ch, cleanup)
    exchange = await ch.declare_exchange(unique("x"), ExchangeType.DIRECT, auto_delete=True)
    await queue.unbind(unique("missing-x"), "k")
    missing = await ch.get_queue(unique("missing-q"), ensure=False)
    await missing.unbind(exchange, "k")
    await exchange.unbind(unique("missing-x"), "k")
    await (await ch.get_exchange(unique("missing-x"), ensure=False)).unbind(exchange, "k")
    assert not ch.is_closed
    await exchange.delete()


async def test_aio_pika_rpc_pattern(conn):
    # aio_pika.patterns.RPC: a server-named auto-delete reply queue bound to an auto-delete
    # headers exchange; close() unbinds after the queue is already gone.
    ch = await conn.channel()
    rpc = await RPC.create(ch)

    async def multiply(*, x: int, y: int) -> int:
        return x * y

    async def fail() -> None:
        raise ValueError("bad input")

    await rpc.register(unique("rpc-mul"), multiply, auto_delete=True)
    name = unique("rpc-fail")
    await rpc.register(name, fail, auto_delete=True)
    procedures = list(rpc.routes)
    assert await rpc.call(procedures[0], kwargs={"x": 6, "y": 7}) == 42
    with pytest.raises(ValueError, match="bad input"):
        await rpc.call(name)
    await rpc.close()
    assert not ch.is_closed


async def test_bind_missing_exchange_or_queue(conn, cleanup):
    ch = await conn.channel()
    queue = await declare_queue(ch, cleanup)
    missing_x = unique("missing-x")
    with pytest.raises(ChannelNotFoundEntity) as err:
        await queue.bind(missing_x, "k")
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no exchange '{missing_x}' in vhost '/'")

    ch = await conn.channel()
    missing_q = unique("missing-q")
    handle = await ch.get_queue(missing_q, ensure=False)
    with pytest.raises(ChannelNotFoundEntity) as err:
        await handle.bind("amq.direct", "k")
    assert aio_reply(err.value) == (404, f"NOT_FOUND - no queue '{missing_q}' in vhost '/'")


async def test_queue_purge_returns_count(ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    for i in range(4):
        await ch.default_exchange.publish(Message(str(i).encode()), queue.name)
    assert (await queue.purge()).message_count == 4
    assert (await queue.purge()).message_count == 0
    assert await queue.get(fail=False) is None


async def test_queue_delete_returns_message_count(ch):
    queue = await ch.declare_queue(unique("q"))
    for i in range(3):
        await ch.default_exchange.publish(Message(str(i).encode()), queue.name)
    ok = await ch.queue_delete(queue.name)
    assert ok.message_count == 3
    with pytest.raises(ChannelNotFoundEntity):
        await ch.declare_queue(queue.name, passive=True)


async def test_queue_delete_missing_is_ok(ch):
    ok = await ch.queue_delete(unique("never-declared"))
    assert ok.message_count == 0
    ok = await ch.queue_delete(unique("never-declared"), if_unused=True, if_empty=True)
    assert ok.message_count == 0


async def test_queue_delete_if_empty(ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    await ch.default_exchange.publish(Message(b"x"), queue.name)
    with pytest.raises(ChannelPreconditionFailed) as err:
        await ch.queue_delete(queue.name, if_empty=True)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - queue '{queue.name}' in vhost '/' not empty",
    )


async def test_queue_delete_if_unused(conn, ch, cleanup):
    queue = await declare_queue(ch, cleanup)
    await queue.consume(_ignore, no_ack=True)
    other = await conn.channel()
    with pytest.raises(ChannelPreconditionFailed) as err:
        await other.queue_delete(queue.name, if_unused=True)
    assert aio_reply(err.value) == (
        406,
        f"PRECONDITION_FAILED - queue '{queue.name}' in vhost '/' in use",
    )


async def test_auto_delete_queue_goes_when_last_consumer_cancels(conn, ch, cleanup):
    queue = await declare_queue(ch, cleanup, auto_delete=True)
    first = await queue.consume(_ignore, no_ack=True)
    second = await queue.consume(_ignore, no_ack=True)
    await queue.cancel(first)
    probe = await conn.channel()
    ok = await probe.declare_queue(queue.name, passive=True)
    assert ok.declaration_result.consumer_count == 1
    await queue.cancel(second)

    async def gone() -> bool:
        channel = await conn.channel()
        try:
            await channel.declare_queue(queue.name, passive=True)
        except ChannelNotFoundEntity:
            return True
        await channel.close()
        return False

    await wait_until(gone)


# ---------------------------------------------------------------------------------------------
# Leveret-only


async def test_unknown_exchange_type_is_channel_406(leveret):
    # Leveret-only: the DESIGN.md profile takes the 4.x behaviour (406, channel). RabbitMQ 3.13
    # (and older) closes the whole connection with 503 COMMAND_INVALID instead
    # (peers.md 2.13), so this scenario is not run against a 3.x RabbitMQ.
    connection = await aio_pika.connect(leveret.url)
    try:
        channel = await connection.channel()
        name = unique("x")
        with pytest.raises(ChannelPreconditionFailed) as err:
            await channel.declare_exchange(name, "x-foo")
        assert aio_reply(err.value) == (406, "PRECONDITION_FAILED - unknown exchange type 'x-foo'")
        assert not connection.is_closed
        channel = await connection.channel()
        with pytest.raises(ChannelNotFoundEntity):
            await channel.declare_exchange(name, passive=True)
    finally:
        await connection.close()
