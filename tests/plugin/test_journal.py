"""The traffic journal (broker/inspect/journal.py) with real clients over real sockets:
publishes routed, returned and dropped, deliveries, acks, nacks and rejects, requeues,
dead-lettering by rejection, TTL and max-length, confirms, order, recording off, timeouts.

The plugin's fixtures (see conftest.py): ``leveret`` is the test vhost's inspector and
``leveret_broker`` the in-process broker. No test sleeps: waits are the journal's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import pika
import pytest

from leveret.inspect import BrokerThread, Inspector, call_on_loop
from leveret.inspect.journal import (
    Journal,
    JournalUnavailableError,
    Record,
    Recorder,
    VHostNotFoundError,
)
from leveret.node.firehose import FirehoseTap
from leveret.node.vhost import VHost

pytest_plugins = ["pytester"]


def vhost_of(broker: BrokerThread, name: str) -> VHost:
    return call_on_loop(broker.loop, lambda: broker.server.state.vhosts[name], 5.0)


def dead_letter_exchange(channel: Any, kind: str, queue: str, key: str = "") -> None:
    """Exchange ``dlx`` of type ``kind``, with ``queue`` bound to it by ``key``."""
    channel.exchange_declare("dlx", kind)
    channel.queue_declare(queue)
    channel.queue_bind(queue, "dlx", key)


def test_routed_publish_delivery_and_ack_in_order(pika_connection: Any, leveret: Inspector) -> None:
    journal = leveret.journal
    channel = pika_connection.channel()
    channel.queue_declare("orders")
    channel.basic_publish(
        "",
        "orders",
        b"order 1",
        pika.BasicProperties(content_type="text/plain", headers={"x-shop": "a"}),
    )
    [published] = journal.wait_for("published")
    assert (published.exchange, published.routing_key, published.queues) == (
        "",
        "orders",
        ("orders",),
    )
    assert published.body == b"order 1"
    assert published.properties == {"content_type": "text/plain", "headers": {"x-shop": "a"}}
    assert published.channel == 1 and published.connection

    method, _props, _body = channel.basic_get("orders")
    channel.basic_ack(method.delivery_tag)
    journal.wait_for("acked", queue="orders")
    assert [r.kind for r in journal] == ["published", "delivered", "acked"]
    assert [r.message for r in journal] == [1, 1, 1]
    [delivered] = journal.delivered(queue="orders")
    assert delivered.delivery_tag == method.delivery_tag and not delivered.redelivered
    assert journal.routed_to("orders") == [published]
    assert journal.published(exchange="", routing_key="orders", body="order 1") == [published]
    assert journal.published(routing_key="other") == []
    assert journal.unroutable() == []
    times = [r.time for r in journal]
    assert times == sorted(times)
    assert [r.seq for r in journal] == [1, 2, 3]


def test_fanout_unroutable_returned_and_dropped(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.exchange_declare("events", "fanout")
    channel.queue_declare("audit")
    channel.queue_declare("billing")
    channel.queue_bind("audit", "events")
    channel.queue_bind("billing", "events")
    channel.exchange_declare("nowhere", "direct")
    journal = leveret.journal
    channel.basic_publish("events", "", b"fanned")
    channel.basic_publish("nowhere", "lost", b"returned", mandatory=True)
    channel.basic_publish("nowhere", "lost", b"dropped")
    pika_connection.process_data_events(time_limit=0)  # takes the basic.return
    journal.wait_for("published", count=3)
    [fanned] = journal.published(exchange="events")
    assert sorted(fanned.queues) == ["audit", "billing"]
    assert journal.routed_to("audit") == journal.routed_to("billing") == [fanned]
    [returned, dropped] = journal.unroutable()
    assert (returned.body, returned.returned) == (b"returned", True)
    assert (dropped.body, dropped.returned) == (b"dropped", False)
    assert journal.unroutable(returned=False) == [dropped]
    [back] = journal.returned()
    assert (back.message, back.exchange, back.routing_key) == (returned.message, "nowhere", "lost")
    assert journal.records("returned")[0].seq == returned.seq + 1


def test_nack_and_reject_with_and_without_requeue(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("work")
    journal = leveret.journal
    for n in range(3):
        channel.basic_publish("", "work", str(n).encode())
    first, _p, _b = channel.basic_get("work")
    channel.basic_nack(first.delivery_tag, requeue=True)
    again, _p, body = channel.basic_get("work")
    assert again.redelivered and body == b"0"
    channel.basic_reject(again.delivery_tag, requeue=False)
    second, _p, _b = channel.basic_get("work")
    channel.basic_nack(second.delivery_tag, requeue=False)
    third, _p, _b = channel.basic_get("work")
    channel.basic_reject(third.delivery_tag, requeue=True)
    journal.wait_for("requeued", count=2)
    assert [r.kind for r in journal.records() if r.kind != "published"] == [
        "delivered",
        "requeued",
        "delivered",
        "rejected",
        "dead_lettered",
        "delivered",
        "rejected",
        "dead_lettered",
        "delivered",
        "requeued",
    ]
    assert [r.message for r in journal.rejected(queue="work")] == [1, 2]
    assert [r.message for r in journal.requeued()] == [1, 3]
    assert [r.redelivered for r in journal.delivered()] == [False, True, False, False]
    # Without a dead-letter exchange a rejected message is dropped, reason "rejected".
    dropped = journal.dead_lettered(reason="rejected")
    assert [(r.message, r.dead_letter_exchange, r.queues) for r in dropped] == [
        (1, None, ()),
        (2, None, ()),
    ]


def test_dead_lettering_by_rejection_reaches_the_dlq(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    dead_letter_exchange(channel, "fanout", "dead")
    channel.queue_declare("jobs", arguments={"x-dead-letter-exchange": "dlx"})
    journal = leveret.journal
    channel.basic_publish("", "jobs", b"bad job")
    method, _p, _b = channel.basic_get("jobs")
    channel.basic_reject(method.delivery_tag, requeue=False)
    [dead] = journal.wait_for("dead_lettered", reason="rejected", queue="jobs")
    assert (dead.dead_letter_exchange, dead.queues, dead.message) == ("dlx", ("dead",), 1)
    # The dead letter is the same message to the journal: its delivery from the DLQ too.
    _m, props, body = channel.basic_get("dead", auto_ack=True)
    assert body == b"bad job" and props.headers["x-death"][0]["reason"] == "rejected"
    [delivered] = journal.wait_for("delivered", queue="dead")
    assert delivered.message == 1 and delivered.exchange == "dlx"


def test_dead_lettering_by_ttl_and_expiry_without_dlx(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    dead_letter_exchange(channel, "direct", "expired", "late")
    channel.queue_declare(
        "short",
        arguments={
            "x-message-ttl": 50,
            "x-dead-letter-exchange": "dlx",
            "x-dead-letter-routing-key": "late",
        },
    )
    channel.queue_declare("gone", arguments={"x-message-ttl": 50})
    journal = leveret.journal
    channel.basic_publish("", "short", b"slow")
    channel.basic_publish("", "gone", b"forgotten")
    [dead] = journal.wait_for("dead_lettered", queue="short")
    assert (dead.reason, dead.dead_letter_exchange, dead.queues) == ("expired", "dlx", ("expired",))
    [gone] = journal.wait_for("dead_lettered", queue="gone")
    assert (gone.reason, gone.dead_letter_exchange, gone.queues) == ("expired", None, ())
    # Two queues' expiry timers are independent (uvloop fires them in either order): the
    # journal lists both, in the order they happened.
    assert journal.expired() == sorted([dead, gone], key=lambda r: r.seq)
    [published] = journal.published(routing_key="short")
    assert dead.time >= published.time


def test_maxlen_drop_head_dead_letters(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("dlq")
    channel.queue_declare(
        "bounded",
        arguments={
            "x-max-length": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        },
    )
    journal = leveret.journal
    channel.basic_publish("", "bounded", b"old")
    channel.basic_publish("", "bounded", b"new")
    [dead] = journal.wait_for("dead_lettered", reason="maxlen")
    assert (dead.queue, dead.queues, dead.message) == ("bounded", ("dlq",), 1)
    assert [r.kind for r in journal] == ["published", "published", "dead_lettered"]


def test_confirms_are_recorded(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("confirmed")
    journal = leveret.journal
    channel.basic_publish("", "confirmed", b"one")
    channel.basic_publish("", "confirmed", b"two")
    confirms = journal.wait_for("confirmed", where=lambda r: r.delivery_tag == 2)
    assert all(r.ack for r in confirms) and confirms[-1].channel == 1
    assert journal.confirmed(ack=False) == []
    kinds = [r.kind for r in journal]
    assert kinds.index("confirmed") > kinds.index("published")


async def test_aio_pika_consumer_acks_and_fanout(leveret: Inspector, amqp_url: str) -> None:
    journal = leveret.journal
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange("news", aio_pika.ExchangeType.FANOUT)
        queue_a = await channel.declare_queue("a")
        queue_b = await channel.declare_queue("b")
        await queue_a.bind(exchange)
        await queue_b.bind(exchange)
        await exchange.publish(aio_pika.Message(b"hello", message_id="m-1"), routing_key="")
        async with queue_a.iterator() as messages:
            async for message in messages:
                await message.ack()
                break
        [acked] = await journal.wait_for_async("acked", queue="a")
        [published] = journal.published(exchange="news")
        assert published.properties["message_id"] == "m-1"
        assert sorted(published.queues) == ["a", "b"]
        assert acked.message == published.message
        assert journal.acked(queue="b") == []
        delivered = await journal.wait_for_async("delivered", queue="a")
        assert delivered[0].seq < acked.seq


async def test_wait_on_the_brokers_own_loop(
    leveret: Inspector, leveret_broker: BrokerThread, pika_connection: Any
) -> None:
    journal = leveret.journal
    channel = pika_connection.channel()
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"x")

    async def on_broker_loop() -> list[Record]:
        return await journal.wait_for_async("published", routing_key="q")

    future = asyncio.run_coroutine_threadsafe(on_broker_loop(), leveret_broker.loop)
    [record] = await asyncio.wrap_future(future)
    assert record.queues == ("q",)


def test_failed_wait_prints_the_journal(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("orders")
    journal = leveret.journal
    channel.basic_publish("", "orders", b"never acked")
    journal.wait_for("published")
    with pytest.raises(TimeoutError) as info:
        journal.wait_for("acked", queue="orders", timeout=0.2)
    text = str(info.value)
    assert (
        "timed out after 0.2 s waiting for 1 journal record (kind='acked', queue='orders')" in text
    )
    assert "0 matched" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert lines[header].split() == [
        "#",
        "+s",
        "kind",
        "msg",
        "ch",
        "exchange",
        "routing",
        "key",
        "queue",
        "detail",
    ]
    assert lines[header + 1].split()[:4] == ["1", "0.000", "published", "1"]
    assert "-> orders" in lines[header + 1] and "b'never acked'" in lines[header + 1]
    assert str(journal) == journal.table()
    assert "published" in journal.table()
    assert repr(journal.published()[0]) == "<1 published m1 ''/'orders' -> orders ch=1>"


def test_recording_is_off_until_the_journal_is_used(
    pika_connection: Any, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    vhost = vhost_of(leveret_broker, leveret.vhost)
    channel = pika_connection.channel()
    channel.queue_declare("quiet")
    channel.basic_publish("", "quiet", b"unrecorded")
    leveret.wait_for_messages("quiet", 1)
    assert vhost.subscribers == () and vhost.events is None
    journal = leveret.journal
    assert vhost.events is not None and journal.recording
    assert journal.records() == []  # nothing from before its first use
    assert leveret.journal is journal
    channel.basic_publish("", "quiet", b"recorded")
    journal.wait_for("published")
    journal.stop()
    assert vhost.events is None and not journal.recording
    channel.basic_publish("", "quiet", b"after stop")
    leveret.wait_for_messages("quiet", 3)
    assert [r.body for r in journal] == [b"recorded"]


def test_the_fixture_stops_recording(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        import pika
        from leveret.inspect import call_on_loop

        VHOSTS = []

        def test_uses_the_journal(leveret, leveret_broker, pika_connection):
            leveret.journal
            vhost = call_on_loop(
                leveret_broker.loop, lambda: leveret_broker.server.state.vhosts[leveret.vhost], 5
            )
            VHOSTS.append(vhost)
            assert vhost.events is not None

        def test_after(leveret):
            assert VHOSTS[0].events is None
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_bad_input_is_one_clear_error(leveret: Inspector) -> None:
    journal = leveret.journal
    with pytest.raises(TypeError, match=r"unknown journal record field.*colour"):
        journal.published(colour="red")
    with pytest.raises(ValueError, match="unknown journal record kind 'sent'"):
        journal.records("sent")
    with pytest.raises(TypeError, match="unknown journal record field"):
        journal.wait_for("acked", colour="red", timeout=0.1)
    with pytest.raises(VHostNotFoundError, match="no vhost 'no-such-vhost'"):
        _ = leveret.for_vhost("no-such-vhost").journal


def test_external_broker_has_no_journal() -> None:
    inspector = Inspector.unavailable("no management API at http://127.0.0.1:1")
    with pytest.raises(JournalUnavailableError, match="no traffic journal: no management API"):
        _ = inspector.journal
    with pytest.raises(JournalUnavailableError):
        Journal(inspector)


def test_deleting_the_vhost_stops_recording(leveret_broker: BrokerThread) -> None:
    leveret_broker.add_vhost("journal-deleted")
    inspector = Inspector(leveret_broker, vhost="journal-deleted")
    vhost = vhost_of(leveret_broker, "journal-deleted")
    journal = inspector.journal
    connection = pika.BlockingConnection(
        pika.URLParameters(leveret_broker.vhost_url("journal-deleted"))
    )
    connection.channel().basic_publish("", "nowhere", b"before")
    journal.wait_for("published")
    assert journal.recording and vhost.events is not None
    leveret_broker.delete_vhost("journal-deleted")
    assert not journal.recording and vhost.events is None
    assert [r.body for r in journal] == [b"before"]  # still readable


def test_the_journal_beside_the_firehose(
    pika_connection: Any, leveret: Inspector, leveret_broker: BrokerThread
) -> None:
    vhost = vhost_of(leveret_broker, leveret.vhost)
    channel = pika_connection.channel()
    channel.queue_declare("traced")
    channel.queue_declare("orders")
    channel.queue_bind("traced", "amq.rabbitmq.trace", "publish.#")

    def firehose_on() -> None:
        vhost.firehose = True

    call_on_loop(leveret_broker.loop, firehose_on, 5.0)
    journal = leveret.journal
    # The firehose publishes as it handles an event: it is called last, so the journal
    # records a publish before the firehose's copy of it.
    assert [type(s) for s in vhost.subscribers] == [Recorder, FirehoseTap]
    channel.basic_publish("", "orders", b"both see it")
    # The firehose's copy is a publish into the vhost as well, so the journal has both.
    records = journal.wait_for("published", count=2)
    assert [(r.exchange, r.routing_key, r.queues) for r in records] == [
        ("", "orders", ("orders",)),
        ("amq.rabbitmq.trace", "publish.", ("traced",)),
    ]
    leveret.wait_for_messages("traced", 1)
    journal.stop()
    assert vhost.subscribers != () and vhost.firehose
