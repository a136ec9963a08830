"""Session semantics without a socket or a server: a vhost and its queues in process, the
session's publish checks (leveret.session.publish), basic.get (leveret.session.get), and
deliveries through an in-process subscriber that keeps its own delivery-tag ledger, as the
wire channel does (leveret.queue.Subscriber). An event loop runs (queues keep timers), no
socket is opened."""

from __future__ import annotations

import pytest

from leveret.node.auth import AccessControl, Permission, TopicPermission
from leveret.node.vhost import VHost
from leveret.session.get import basic_get
from leveret.session.publish import CHECKS
from leveret.session.topology import exchange_declared, queue_declared
from leveret.wire import channel as wire_channel

from .helpers import MAX_SIZE, Collector, declare, message, publish, publisher, refusal


@pytest.fixture
def access() -> AccessControl:
    access = AccessControl.with_users({"guest": "guest", "app": "secret"}, ("/",))
    access.set_permissions("app", "/", Permission(configure=".*", write="^open", read=".*"))
    return access


def test_the_fast_path_has_a_guard_for_every_check_in_order() -> None:
    assert tuple(wire_channel.FAST_PATH_GUARDS) == CHECKS


async def test_publish_checks_come_in_rabbitmq_order(access: AccessControl, vhost: VHost) -> None:
    exchange_declared(vhost, "open.internal", "topic", False, False, False, True, {})
    exchange_declared(vhost, "open.topic", "topic", False, False, False, False, {})
    access.set_topic_permission("app", "/", "open.topic", TopicPermission(write="^ok", read=""))
    p = publisher(access, vhost, "app")
    big = b"x" * (MAX_SIZE + 1)
    # Too large, not permitted and missing: the size is checked first.
    assert refusal(lambda: publish(p, "closed", "k", big)) == (
        406,
        f"PRECONDITION_FAILED - message size {MAX_SIZE + 1} is larger than configured max "
        f"size {MAX_SIZE}",
    )
    # Not permitted and missing: the permission before the lookup.
    assert refusal(lambda: publish(p, "closed", "k")) == (
        403,
        "ACCESS_REFUSED - write access to exchange 'closed' in vhost '/' refused for user 'app'",
    )
    # Missing, with a user_id that is not the user's: the lookup first.
    assert refusal(lambda: publish(p, "open.nowhere", "k", user_id="bob")) == (
        404,
        "NOT_FOUND - no exchange 'open.nowhere' in vhost '/'",
    )
    # Internal, and a routing key the topic permission refuses: internal first.
    assert refusal(lambda: publish(p, "open.internal", "bad")) == (
        403,
        "ACCESS_REFUSED - cannot publish to internal exchange 'open.internal' in vhost '/'",
    )
    # The topic permission, before the properties.
    assert refusal(lambda: publish(p, "open.topic", "bad", user_id="bob")) == (
        403,
        "ACCESS_REFUSED - write access to topic 'bad' in exchange 'open.topic' in vhost '/' "
        "refused for user 'app'",
    )
    # user_id before expiration, expiration before reply_to.
    assert refusal(lambda: publish(p, "open.topic", "ok", user_id="bob", expiration="x")) == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'app'",
    )
    assert refusal(
        lambda: publish(p, "open.topic", "ok", expiration="-1", reply_to="amq.rabbitmq.reply-to")
    ) == (406, "PRECONDITION_FAILED - invalid expiration '-1': {value_negative,-1}")
    assert refusal(lambda: publish(p, "open.topic", "ok", reply_to="amq.rabbitmq.reply-to")) == (
        406,
        "PRECONDITION_FAILED - fast reply consumer does not exist",
    )


async def test_publishes_are_counted_once(access: AccessControl, vhost: VHost) -> None:
    declare(vhost, "q")
    p = publisher(access, vhost)
    assert publish(p, "", "q")[:2] == (True, False)
    assert publish(p, "", "nowhere")[:2] == (False, False)
    p.route(message("", "nowhere"), False, None, p.check_exchange("", "nowhere"))
    counters = p.counters
    assert (
        counters.received,
        counters.routed,
        counters.unroutable_returned,
        counters.unroutable_dropped,
    ) == (3, 1, 1, 1)
    assert vhost.queues["q"].message_count == 1


async def test_expiration_becomes_the_message_ttl(access: AccessControl, vhost: VHost) -> None:
    p = publisher(access, vhost)
    checked = p.check_message(message("", "q", expiration="60000"), None)
    assert checked.ttl == 60000
    replied = p.check_message(message("", "q", reply_to="amq.rabbitmq.reply-to"), "abc")
    assert replied.properties.reply_to == "amq.rabbitmq.reply-to.abc"


async def test_get_counts_and_settles_through_the_queue(
    access: AccessControl, vhost: VHost
) -> None:
    queue = declare(vhost, "q")
    p = publisher(access, vhost)
    for body in (b"a", b"b", b"c"):
        publish(p, "", "q", body)
    get = lambda no_ack: basic_get(access, "guest", vhost, "q", no_ack, None)  # noqa: E731
    _, first = get(False)
    _, second = get(True)
    assert first is not None and second is not None
    assert (first[0].body, second[0].body, queue.unacked, queue.message_count) == (b"a", b"b", 1, 1)
    queue.requeue([(first, None)])  # back in its place, redelivered
    _, again = get(False)
    assert again is not None and (again[0].body, bool(again[1])) == (b"a", True)
    queue.ack(again[0], None)
    _, last = get(False)
    assert last is not None
    queue.reject(last[0], None)
    assert get(False)[1] is None
    assert (
        queue.get_total,
        queue.get_no_ack_total,
        queue.get_empty_total,
        queue.redeliver_total,
        queue.acked_total,
        queue.unacked,
    ) == (3, 1, 1, 1, 1, 0)


async def test_get_refusals(access: AccessControl, vhost: VHost) -> None:
    declare(vhost, "q")
    access.set_permissions("app", "/", Permission(configure=".*", write=".*", read="^other"))
    assert refusal(lambda: basic_get(access, "app", vhost, "q", True, None)) == (
        403,
        "ACCESS_REFUSED - read access to queue 'q' in vhost '/' refused for user 'app'",
    )
    assert refusal(lambda: basic_get(access, "guest", vhost, "nope", True, None)) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )
    queue_declared(vhost, "s", False, True, False, False, {"x-queue-type": "stream"}, None)[0]
    assert refusal(lambda: basic_get(access, "guest", vhost, "s", False, None)) == (
        540,
        "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's' in vhost '/'",
    )


async def test_consumer_prefetch_through_an_in_process_subscriber(
    access: AccessControl, vhost: VHost
) -> None:
    queue = declare(vhost, "q")
    p = publisher(access, vhost)
    collector = Collector(prefetch=2)
    consumer = collector.consume(queue)
    for n in range(5):
        publish(p, "", "q", b"%d" % n)
    assert [body for _, body, _ in collector.delivered] == [b"0", b"1"]
    assert (consumer.unacked, queue.unacked, queue.message_count) == (2, 2, 3)
    collector.ack(1)
    assert [tag for tag, _, _ in collector.delivered] == [1, 2, 3]
    collector.nack(2)  # requeued to its place: the head again, redelivered
    assert collector.delivered[-1] == (4, b"1", True)
    collector.ack(4, multiple=True)  # 3 and 4
    assert [body for _, body, _ in collector.delivered[-2:]] == [b"3", b"4"]
    assert (queue.acked_total, queue.delivered_total, queue.redeliver_total) == (3, 6, 1)
    assert (consumer.unacked, queue.unacked) == (2, 2)


async def test_channel_prefetch_spans_consumers(access: AccessControl, vhost: VHost) -> None:
    first, second = declare(vhost, "q1"), declare(vhost, "q2")
    p = publisher(access, vhost)
    collector = Collector()
    collector.qos(3, global_=True)
    collector.consume(first, "c1")
    collector.consume(second, "c2")
    for n in range(3):
        publish(p, "", "q1", b"%d" % n)
        publish(p, "", "q2", b"%d" % n)
    assert len(collector.delivered) == 3
    assert first.message_count + second.message_count == 3


async def test_deleting_a_queue_cancels_its_consumers(access: AccessControl, vhost: VHost) -> None:
    queue = declare(vhost, "q")
    collector = Collector()
    collector.consume(queue, "ctag")
    vhost.delete_queue(queue)
    assert collector.cancelled == ["ctag"]


async def test_a_stream_refuses_what_rabbitmq_refuses(access: AccessControl, vhost: VHost) -> None:
    stream = queue_declared(
        vhost, "s", False, True, False, False, {"x-queue-type": "stream"}, None
    )[0]
    where = "queue 's' in vhost '/'"
    assert refusal(lambda: stream.check_consume(False, 0, 0, {})) == (
        406,
        f"PRECONDITION_FAILED - consumer prefetch count is not set for '{where}'",
    )
    assert refusal(lambda: stream.check_consume(True, 10, 0, {})) == (
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues {where}",
    )
    assert refusal(lambda: stream.check_consume(False, 10, 0, {"x-stream-offset": 1.5})) == (
        541,
        "INTERNAL_ERROR",
    )
    for check, what in (
        (stream.check_purge, "queue.purge"),
        (stream.check_reject, "basic.nack and basic.reject"),
    ):
        assert refusal(check) == (
            540,
            f"NOT_IMPLEMENTED - {what} not supported by stream queues {where}",
        )
    stream.check_consume(False, 10, 0, {"x-stream-offset": "first"})  # taken


async def test_a_quorum_queue_refuses_global_qos(vhost: VHost) -> None:
    quorum = queue_declared(
        vhost, "qq", False, True, False, False, {"x-queue-type": "quorum"}, None
    )[0]
    quorum.check_consume(False, 0, 0, {})
    assert refusal(lambda: quorum.check_consume(False, 0, 5, {})) == (
        540,
        "NOT_IMPLEMENTED - queue 'qq' in vhost '/' does not support global qos",
    )
    classic = declare(vhost, "c")
    classic.check_consume(True, 0, 5, {})
    classic.check_get()
    classic.check_purge()
    classic.check_reject()
