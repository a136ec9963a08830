"""Consumers, qos and recover without a socket (leveret.session.consume), through the
in-process subscriber of :mod:`tests.session.helpers`; texts as RabbitMQ 3.10.8 sends
them."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.node.auth import AccessControl, Permission
from leveret.node.vhost import VHost
from leveret.session import consume
from leveret.session.get import basic_get
from leveret.session.topology import Actor, queue_declared

from .helpers import Collector, declare, publish, publisher, refusal


@pytest.fixture
def access() -> AccessControl:
    access = AccessControl.with_users({"guest": "guest", "app": "secret"}, ("/",))
    access.set_permissions("app", "/", Permission(configure=".*", write=".*", read="^app"))
    return access


def consumable(actor: Actor, name: str, **options: Any) -> Any:
    return consume.consumable_queue(
        actor,
        name,
        options.get("no_ack", False),
        options.get("exclusive", False),
        options.get("prefetch", 0),
        options.get("global_prefetch", 0),
        options.get("arguments", {}),
    )


async def test_consume_checks_in_rabbitmq_order(access: AccessControl, vhost: VHost) -> None:
    app, guest = Actor(access, "app", vhost), Actor(access, "guest", vhost)
    assert refusal(lambda: consume.check_tag("c1", {"c1": None})) == (
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'c1'",
    )
    consume.check_tag("", {"": None})  # an empty tag asks for a generated one
    assert consume.new_tag("").startswith("amq.ctag-")
    assert refusal(lambda: consumable(app, "nope")) == (
        403,
        "ACCESS_REFUSED - read access to queue 'nope' in vhost '/' refused for user 'app'",
    )
    assert refusal(lambda: consumable(guest, "nope")) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )
    declare(vhost, "q")
    assert refusal(lambda: consumable(guest, "q", arguments={"x-priority": "high"}))[0] == 406


async def test_exclusive_consumers_conflict(access: AccessControl, vhost: VHost) -> None:
    guest = Actor(access, "guest", vhost)
    first, second = declare(vhost, "q1"), declare(vhost, "q2")
    collector = Collector()
    collector.consume(consumable(guest, "q1"), "c1")
    in_use = "ACCESS_REFUSED - queue '{}' in vhost '/' in exclusive use"
    assert refusal(lambda: consumable(guest, "q1", exclusive=True)) == (403, in_use.format("q1"))
    consumer = collector.consume(consumable(guest, "q2", exclusive=True), "c2")
    consumer.exclusive = True
    second.exclusive_consumer = True
    assert refusal(lambda: consumable(guest, "q2")) == (403, in_use.format("q2"))
    assert first.consumers and second.consumers


async def test_streams_refuse_gets_and_consumers_without_prefetch(
    access: AccessControl, vhost: VHost
) -> None:
    guest = Actor(access, "guest", vhost)
    queue_declared(vhost, "s", False, True, False, False, {"x-queue-type": "stream"}, None)
    where = "queue 's' in vhost '/'"
    assert refusal(lambda: consumable(guest, "s")) == (
        406,
        f"PRECONDITION_FAILED - consumer prefetch count is not set for '{where}'",
    )
    assert refusal(lambda: consumable(guest, "s", prefetch=10, no_ack=True)) == (
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues {where}",
    )
    assert refusal(lambda: basic_get(access, "guest", vhost, "s", False, None)) == (
        540,
        f"NOT_IMPLEMENTED - basic.get not supported by stream queues {where}",
    )
    assert consumable(guest, "s", prefetch=10).name == "s"


async def test_reply_consumers_take_no_acks_and_are_one_per_channel() -> None:
    assert refusal(lambda: consume.check_reply_consume(False, False)) == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )
    assert refusal(lambda: consume.check_reply_consume(True, True)) == (
        406,
        "PRECONDITION_FAILED - reply consumer already set",
    )
    consume.check_reply_consume(True, False)


async def test_qos_global_limits_the_channel(access: AccessControl, vhost: VHost) -> None:
    first, second = declare(vhost, "q1"), declare(vhost, "q2")
    p = publisher(access, vhost)
    collector = Collector()
    consumers = [collector.consume(first, "c1"), collector.consume(second, "c2")]
    consume.qos(collector, consumers, 0, 2, True)
    for n in range(3):
        publish(p, "", "q1", b"%d" % n)
        publish(p, "", "q2", b"%d" % n)
    assert len(collector.delivered) == 2
    consume.qos(collector, consumers, 0, 3, True)  # raised: the queues are drained
    assert len(collector.delivered) == 3
    consume.qos(collector, consumers, 0, 5, False)  # for consumers created from now on
    assert (collector.global_prefetch, collector.prefetch_count) == (3, 5)
    assert refusal(lambda: consume.qos(collector, consumers, 10, 0, False)) == (
        540,
        "NOT_IMPLEMENTED - prefetch_size!=0 (10)",
    )


async def test_recover_requeues_every_unacked_delivery(access: AccessControl, vhost: VHost) -> None:
    queue = declare(vhost, "q")
    p = publisher(access, vhost)
    collector = Collector(prefetch=2)
    collector.consume(queue)
    for body in (b"a", b"b", b"c"):
        publish(p, "", "q", body)
    assert refusal(lambda: consume.recover(collector, False)) == (
        540,
        "NOT_IMPLEMENTED - requeue=false",
    )
    taken = consume.recover(collector, True)
    assert [tag for tag, _ in taken] == [1, 2] and not collector.unacked
    queue.requeue([(entry, consumer) for _tag, (_queue, entry, consumer) in taken])
    queue.drain()
    # Back in their places, redelivered under new tags, before the one never delivered.
    assert collector.delivered[2:] == [(3, b"a", True), (4, b"b", True)]
