"""basic.consume, basic.qos and basic.recover as rabbit_channel decides them, from plain
values (the wire channel turns the frames into these calls and writes the -Oks).

A consume is checked whole before its consumer exists, in rabbit_channel's order
(handle_method/3 for ``basic.consume``, then rabbit_amqqueue:basic_consume/12): the tag is
not in use on the channel (a connection error), read permission on the queue, the queue
(404, 405 when exclusive to another connection), the consumer arguments for the queue's
type, the queue type's own rules (a stream wants a prefetch and acks; a quorum queue
refuses a global qos: :meth:`leveret.node.queue.Queue.check_consume`), then exclusive use
(rabbit_queue_consumers). Direct reply-to's pseudo-queue has rules of its own
(docs/direct-reply-to.md).

basic.qos sets the ledger's limits (:class:`leveret.session.ledger.Ledger`);
basic.recover gives every unacked delivery back. RabbitMQ implements neither a prefetch
size nor a recover without requeue: both are 540 NOT_IMPLEMENTED, a connection error.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from leveret.node.arguments import consume_error, queue_type
from leveret.node.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AMQPChannelError,
    AMQPConnectionError,
)
from leveret.node.vhost import generated_name
from leveret.session.topology import lookup_queue

if TYPE_CHECKING:
    from leveret.node.queue import Consumer, Queue
    from leveret.session.topology import Actor

R = TypeVar("R")


class Limited(Protocol):
    """A delivery-tag ledger as basic.qos sets its limits
    (:class:`leveret.session.ledger.Ledger` implements it)."""

    def qos(self, prefetch_count: int, global_: bool) -> None:
        """:meth:`leveret.session.ledger.Ledger.qos`."""


class Taken(Protocol[R]):
    """A delivery-tag ledger as basic.recover empties it
    (:class:`leveret.session.ledger.Ledger` implements it)."""

    def take_all(self) -> list[tuple[int, R]]:
        """:meth:`leveret.session.ledger.Ledger.take_all`."""


def check_tag(tag: str, in_use: Container[str]) -> None:
    """A consumer tag already used on the channel is 530, a connection error
    (rabbit_channel:handle_method/3, ``basic.consume``)."""
    if tag and tag in in_use:
        raise AMQPConnectionError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")


def new_tag(tag: str) -> str:
    """The consumer's tag: the client's, or a generated ``amq.ctag-...`` for an empty one
    (rabbit_guid:binary/2)."""
    return tag or generated_name("amq.ctag")


def consumable_queue(
    actor: Actor,
    name: str,
    no_ack: bool,
    exclusive: bool,
    prefetch_count: int,
    global_prefetch: int,
    arguments: Mapping[str, Any],
) -> Queue:
    """The queue a basic.consume for ``actor`` may subscribe to, checked in RabbitMQ's
    order (see the module's docstring): ``prefetch_count`` is the consumer's limit (the
    channel's basic.qos), ``global_prefetch`` the channel's."""
    actor.permit("read", "queue", name)
    vhost = actor.vhost
    queue = lookup_queue(vhost, name, actor.owner)
    invalid = consume_error(queue_type(queue.arguments), arguments)
    if invalid is not None:
        key, why = invalid
        raise AMQPChannelError(
            PRECONDITION_FAILED, f"invalid arg '{key}' for {vhost.rs('queue', queue.name)}{why}"
        )
    queue.check_consume(no_ack, prefetch_count, global_prefetch, arguments)
    if queue.exclusive_consumer or (exclusive and queue.consumers):
        raise AMQPChannelError(ACCESS_REFUSED, f"{vhost.rs('queue', queue.name)} in exclusive use")
    return queue


def check_reply_consume(no_ack: bool, has_reply_consumer: bool) -> None:
    """basic.consume on ``amq.rabbitmq.reply-to``: no-ack only, one per channel
    (rabbit_channel's direct reply-to clauses)."""
    if not no_ack:
        raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer cannot acknowledge")
    if has_reply_consumer:
        raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer already set")


def qos(
    ledger: Limited,
    consumers: Iterable[Consumer],
    prefetch_size: int,
    prefetch_count: int,
    global_: bool,
) -> None:
    """basic.qos: a prefetch size is 540 (not implemented, as in RabbitMQ); the count
    limits the channel (``global_``) or the consumers created from now on. A channel
    whose limit was raised may take more at once: its consumers' queues are drained."""
    if prefetch_size != 0:
        raise AMQPConnectionError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({prefetch_size})")
    ledger.qos(prefetch_count, global_)
    if global_:
        for consumer in consumers:
            consumer.queue.drain()


def recover(ledger: Taken[R], requeue: bool) -> list[tuple[int, R]]:
    """basic.recover(-async): every unacked delivery, taken from the ledger in tag order
    for the caller to requeue (redelivered); without ``requeue`` 540, as RabbitMQ."""
    if not requeue:
        raise AMQPConnectionError(NOT_IMPLEMENTED, "requeue=false")
    return ledger.take_all()
