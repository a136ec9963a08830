"""What a queue names of its neighbours in the wire: an exclusive queue's
owner (:class:`ConnectionPeer`), its consumers (:class:`Consumer`) and their channels
(:class:`ChannelPeer`, whose connection is :class:`ConnectionPeer`), and what a channel counts of
its deliveries from one queue (:class:`QueueCounts`).

The queue's child module: these name :class:`~leveret.node.queue.Queue` for types only, and the
queue re-exports them, so callers import them from :mod:`leveret.node.queue`. The wire's
connection and channel implement the protocols; the node never names the wire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.node.arguments import int_arg

if TYPE_CHECKING:
    from leveret.node.peers import ChannelPeer
    from leveret.node.queue import Queue


# QueueCounts' fields (a compiled class has no __slots__ to read them from).
QUEUE_COUNT_NAMES = (
    "acked",
    "get_ack",
    "get_empty",
    "get_no_ack",
    "no_ack_gone",
    "redelivered",
    "returned",
)


class QueueCounts:
    """What a channel counted of one queue: rabbit_channel's ``queue_stats`` fine stats, the
    row of rabbit_core_metrics' ``channel_queue_metrics`` that rabbitmq_prometheus serves
    per channel and queue (leveret.wire.channel.stats derives the deliveries from these)."""

    __slots__ = QUEUE_COUNT_NAMES

    def __init__(self) -> None:
        self.get_ack = 0  # basic.get with acks
        self.get_no_ack = 0
        self.get_empty = 0
        self.redelivered = 0  # deliveries and gets of redelivered messages
        self.acked = 0  # deliveries and gets acknowledged
        self.returned = 0  # of those with acks, nacked, rejected or recovered
        self.no_ack_gone = 0  # no-ack deliveries to the channel's cancelled consumers


class Consumer:
    """A ``basic.consume`` subscription of one channel on one queue. Its channel's counts
    of the queue (``counts``: the channel's own for a wire channel's consumer) take its
    acks and redeliveries; its no-ack deliveries it counts itself (``delivered_no_ack``,
    written by the queue, which sums its consumers' for its own ``deliver_no_ack_total``),
    so that a delivery costs no increment more than it did."""

    __slots__ = (
        "arguments",
        "channel",
        "counts",
        "delivered_no_ack",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tag_bytes",
        "unacked",
    )

    def __init__(
        self,
        channel: ChannelPeer,
        queue: Queue,
        tag: str,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
        tag_bytes: bytes = b"",
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        # The tag as the wire encodes it, once, for Basic.Deliver (the hot path): given by
        # the wire channel, so the queue needs no codec.
        self.tag_bytes = tag_bytes
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0  # written by the queue's verbs only
        self.delivered_no_ack = 0  # written by the queue's verbs only
        self.counts = QueueCounts()
        self.arguments = arguments
        self.priority = int_arg(arguments, "x-priority") or 0

    def has_capacity(self) -> bool:
        """Whether one more message may be delivered to this consumer now."""
        # leveret.session.ledger's has_room (the consumer's prefetch, then the channel's:
        # Ledger.channel_has_room), inlined with the channel's flow state: once a delivery.
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        channel = self.channel
        return (
            channel.conn.writable
            and channel.open
            and (not channel.global_prefetch or len(channel.unacked) < channel.global_prefetch)
        )
