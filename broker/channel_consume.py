"""A channel's consumers, as frames: basic.consume (and direct reply-to's), basic.cancel,
qos, recover.

The checks and the limits are the session's (:mod:`leveret.session.consume`); what stays
here is the wire's: the consumer and its encoded tag, the -Oks (consume-ok before the
first delivery), a reply-to consumer's pseudo-queue (docs/direct-reply-to.md) and the
server's basic.cancel. These run when consumers come and go, not per delivery:
:meth:`Channel.deliver` and the acks stay in :mod:`leveret.channel`, and these are functions
that take the channel, bound as its handlers. They see it as :class:`Consuming`, which
lists what they use, so this module does not import :mod:`leveret.channel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret import codec
from leveret.queue import Consumer, Queue, QueueCounts, Subscriber
from leveret.session import consume
from leveret.session.publish import REPLY_TO
from leveret.vhost import generated_name

if TYPE_CHECKING:
    from leveret.channel_parts import Record, Wire
    from leveret.session.topology import Actor
    from leveret.vhost import VHost


class Consuming(Subscriber, Protocol):
    """A channel as its consumer commands see it (:class:`leveret.channel.Channel`
    implements it; the functions below are its handlers): the queue's
    :class:`~leveret.queue.Subscriber` (its consumers hold it), its consumers and
    prefetch, direct reply-to's consumer, and its ledger's limits and unacked deliveries."""

    reply_consumer: Consumer | None
    reply_key: str

    @property
    def conn(self) -> Wire:
        """Its connection."""

    @property
    def actor(self) -> Actor:
        """Who runs its commands (the session's)."""

    @property
    def vhost(self) -> VHost:
        """Its connection's vhost."""

    @property
    def consumers(self) -> dict[str, Consumer]:
        """Its consumers, by tag."""

    @property
    def prefetch_count(self) -> int:
        """basic.qos(global=false): the prefetch of consumers created from now on."""

    def send(self, method: Any) -> None:
        """Send a pamqp method on this channel."""

    def _queue_name(self, name: str) -> str:
        """A queue name with the channel's last-queue shortcut expanded."""

    def qos(self, prefetch_count: int, global_: bool) -> None:
        """The ledger's limits (leveret.session.ledger.Ledger.qos)."""

    def take_all(self) -> list[tuple[int, Record]]:
        """Every unacked delivery, taken from the ledger in tag order."""

    def _apply_settle(self, taken: list[tuple[int, Record]], requeue: bool | None) -> None:
        """Ack (None), requeue (True) or reject (False) deliveries taken from the ledger."""

    def erase_row(self, queue: Queue) -> None:
        """``queue`` went: its row goes (leveret.channel_stats.DeliveryCounters.erase_row)."""

    def counts_of(self, queue: Queue) -> QueueCounts:
        """Its counts of ``queue`` (leveret.channel_stats.DeliveryCounters.counts_of)."""

    def cancelled(self, consumer: Consumer) -> None:
        """``consumer`` left it: its counts stay in the queue's row."""


B = commands.Basic


def cancel_by_server(channel: Consuming, consumer: Consumer) -> None:
    """The queue went away: forget the consumer and tell the client if it can hear
    it (capability ``consumer_cancel_notify``, docs/consumer-cancel.md)."""
    if channel.consumers.get(consumer.tag) is consumer:
        del channel.consumers[consumer.tag]
        # The queue's row goes with it, as RabbitMQ's does (rabbit_channel's
        # erase_queue_stats/1 on the queue's eol; leveret.channel_stats's docstring).
        channel.erase_row(consumer.queue)
        notify_cancel(channel, consumer)


def cancel_live(channel: Consuming, consumer: Consumer) -> None:
    """Cancel ``consumer`` from the server side while its queue stays (an injected fault,
    broker/faults.py): as a client's basic.cancel for the queue (it leaves, an auto-delete
    queue goes with its last consumer, its counts stay in the queue's row, its unacked
    deliveries stay on the channel), and basic.cancel to the client as on a queue's
    deletion."""
    if channel.consumers.get(consumer.tag) is consumer:
        del channel.consumers[consumer.tag]
        notify_cancel(channel, consumer)
        consumer.queue.remove_consumer(consumer)
        channel.cancelled(consumer)


def notify_cancel(channel: Consuming, consumer: Consumer) -> None:
    """basic.cancel to a client that can hear it (capability ``consumer_cancel_notify``,
    docs/consumer-cancel.md); rabbit_channel sends it with nowait set."""
    if channel.conn.client_capability("consumer_cancel_notify"):
        channel.conn.write(
            codec.simple_method(channel.id, B.Cancel, ("shortstr", consumer.tag), ("bit", True))
        )


def basic_consume(channel: Consuming, m: commands.Basic.Consume) -> None:
    """basic.consume: the session's checks (:mod:`leveret.session.consume`), then the
    consumer exists, consume-ok goes out and only then does it subscribe (its first
    deliveries follow the -Ok)."""
    consume.check_tag(m.consumer_tag, channel.consumers)
    if m.queue == REPLY_TO:
        consume_replies(channel, m)
        return
    arguments = m.arguments or {}
    queue = consume.consumable_queue(
        channel.actor,
        channel._queue_name(m.queue),
        m.no_ack,
        m.exclusive,
        channel.prefetch_count,
        channel.global_prefetch,
        arguments,
    )
    tag = consume.new_tag(m.consumer_tag)
    consumer = Consumer(
        channel,
        queue,
        tag,
        m.no_ack,
        m.exclusive,
        channel.prefetch_count,
        dict(arguments),
        codec.shortstr(tag),
    )
    consumer.counts = channel.counts_of(queue)  # its acks and redeliveries: the channel's
    channel.consumers[tag] = consumer
    if not m.nowait:
        channel.conn.write(codec.simple_method(channel.id, B.ConsumeOk, ("shortstr", tag)))
    queue.subscribe(consumer)


def consume_replies(channel: Consuming, m: commands.Basic.Consume) -> None:
    """basic.consume on ``amq.rabbitmq.reply-to`` (docs/direct-reply-to.md)."""
    consume.check_reply_consume(m.no_ack, channel.reply_consumer is not None)
    tag = consume.new_tag(m.consumer_tag)
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


def drop_reply_consumer(channel: Consuming) -> None:
    """Forget the channel's direct reply-to consumer, if it has one."""
    if channel.reply_consumer is not None:
        channel.vhost.reply_consumers.pop(channel.reply_key, None)
        channel.reply_consumer = None


def basic_cancel(channel: Consuming, m: commands.Basic.Cancel) -> None:
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
        channel.cancelled(consumer)


def basic_qos(channel: Consuming, m: commands.Basic.Qos) -> None:
    """basic.qos (:func:`leveret.session.consume.qos`)."""
    consume.qos(channel, channel.consumers.values(), m.prefetch_size, m.prefetch_count, m.global_)
    channel.send(B.QosOk())


def basic_recover(
    channel: Consuming, m: commands.Basic.Recover | commands.Basic.RecoverAsync
) -> None:
    """basic.recover(-async): every unacked delivery back to its queue, redelivered."""
    channel._apply_settle(consume.recover(channel, m.requeue), True)
    if isinstance(m, B.Recover):
        channel.send(B.RecoverOk())
