"""A channel's consumers: basic.consume (and direct reply-to's), basic.cancel, qos, recover.

A consume checks the queue's arguments and its type's rules before the consumer exists
(:meth:`leveret.queue.Queue.check_consume`), and a reply-to consumer is a pseudo-queue's
(docs/direct-reply-to.md). These run when consumers come and go, not per delivery:
:meth:`Channel.deliver` and the acks stay in :mod:`leveret.channel`, and these are functions
that take the channel, bound as its handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands

from leveret import codec
from leveret.arguments import consume_error, queue_type
from leveret.consumer import Consumer
from leveret.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AMQPChannelError,
    AMQPConnectionError,
)
from leveret.queue import Queue
from leveret.session.publish import REPLY_TO
from leveret.session.topology import lookup_queue
from leveret.vhost import generated_name

if TYPE_CHECKING:
    from leveret.channel import Channel

B = commands.Basic


def cancel_by_server(channel: Channel, consumer: Consumer) -> None:
    """The queue went away: forget the consumer and tell the client if it can hear
    it (capability ``consumer_cancel_notify``, docs/consumer-cancel.md)."""
    if channel.consumers.get(consumer.tag) is consumer:
        del channel.consumers[consumer.tag]
        if channel.conn.client_capability("consumer_cancel_notify"):
            channel.conn.write(
                codec.simple_method(channel.id, B.Cancel, ("shortstr", consumer.tag), ("bit", True))
            )


def basic_consume(channel: Channel, m: commands.Basic.Consume) -> None:
    """basic.consume: read permission, the arguments and the queue type's checks, then
    the consumer subscribes."""
    if m.consumer_tag and m.consumer_tag in channel.consumers:
        raise AMQPConnectionError(NOT_ALLOWED, f"attempt to reuse consumer tag '{m.consumer_tag}'")
    if m.queue == REPLY_TO:
        consume_replies(channel, m)
        return
    queue_name = channel._queue_name(m.queue)
    channel.actor.permit("read", "queue", queue_name)
    queue = lookup_queue(channel.vhost, queue_name, channel.conn)
    invalid = consume_error(queue_type(queue.arguments), m.arguments or {})
    if invalid is not None:
        key, why = invalid
        raise AMQPChannelError(
            PRECONDITION_FAILED,
            f"invalid arg '{key}' for {channel.vhost.rs('queue', queue.name)}{why}",
        )
    queue.check_consume(
        m.no_ack, channel.prefetch_count, channel.global_prefetch, m.arguments or {}
    )
    if queue.exclusive_consumer or (m.exclusive and queue.consumers):
        raise AMQPChannelError(
            ACCESS_REFUSED, f"{channel.vhost.rs('queue', queue.name)} in exclusive use"
        )
    tag = m.consumer_tag or generated_name("amq.ctag")
    consumer = Consumer(
        channel,
        queue,
        tag,
        m.no_ack,
        m.exclusive,
        channel.prefetch_count,
        dict(m.arguments or {}),
        codec.shortstr(tag),
    )
    channel.consumers[tag] = consumer
    if not m.nowait:
        channel.conn.write(codec.simple_method(channel.id, B.ConsumeOk, ("shortstr", tag)))
    queue.subscribe(consumer)


def consume_replies(channel: Channel, m: commands.Basic.Consume) -> None:
    """basic.consume on ``amq.rabbitmq.reply-to`` (docs/direct-reply-to.md)."""
    if not m.no_ack:
        raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer cannot acknowledge")
    if channel.reply_consumer is not None:
        raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer already set")
    tag = m.consumer_tag or generated_name("amq.ctag")
    # A queue object that is never registered in the vhost: it only carries the
    # consumer; replies are delivered to the consumer directly.
    pseudo = Queue(channel.vhost, REPLY_TO, False, None, False, {})
    consumer = Consumer(channel, pseudo, tag, True, False, 0, {}, codec.shortstr(tag))
    channel.consumers[tag] = consumer
    channel.reply_consumer = consumer
    channel.reply_key = generated_name("amq.gen")[len("amq.gen-") :]
    channel.vhost.reply_consumers[channel.reply_key] = consumer
    if not m.nowait:
        channel.conn.write(codec.simple_method(channel.id, B.ConsumeOk, ("shortstr", tag)))


def drop_reply_consumer(channel: Channel) -> None:
    """Forget the channel's direct reply-to consumer, if it has one."""
    if channel.reply_consumer is not None:
        channel.vhost.reply_consumers.pop(channel.reply_key, None)
        channel.reply_consumer = None


def basic_cancel(channel: Channel, m: commands.Basic.Cancel) -> None:
    """basic.cancel: the consumer goes (an auto-delete queue with its last one)."""
    consumer = channel.consumers.pop(m.consumer_tag or "", None)
    if consumer is not None and consumer is channel.reply_consumer:
        drop_reply_consumer(channel)
    if not m.nowait:
        channel.conn.write(
            codec.simple_method(channel.id, B.CancelOk, ("shortstr", m.consumer_tag))
        )
    if consumer is not None:
        consumer.queue.remove_consumer(consumer)


def basic_qos(channel: Channel, m: commands.Basic.Qos) -> None:
    """basic.qos: prefetch counts (a prefetch size is not implemented, as in RabbitMQ)."""
    if m.prefetch_size != 0:
        raise AMQPConnectionError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
    channel.qos(m.prefetch_count, m.global_)
    if m.global_:
        for consumer in channel.consumers.values():
            consumer.queue.drain()
    channel.send(B.QosOk())


def basic_recover(
    channel: Channel, m: commands.Basic.Recover | commands.Basic.RecoverAsync
) -> None:
    """basic.recover(-async): every unacked delivery back to its queue (requeue only)."""
    if not m.requeue:
        raise AMQPConnectionError(NOT_IMPLEMENTED, "requeue=false")
    channel.requeue_all()
    if isinstance(m, B.Recover):
        channel.send(B.RecoverOk())
