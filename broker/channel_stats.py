"""A channel's message counters (RabbitMQ's per-channel ``message_stats``) and basic.get
on the wire, which counts its own.

RabbitMQ's channel keeps fine-grained stats per channel, exchange and queue
(rabbit_channel.erl: ``incr_stats`` on publish, confirm, return_unroutable,
drop_unroutable, deliver, deliver_no_ack, get, get_no_ack, get_empty, redeliver, ack) and
the management plugin sums them into a channel's ``message_stats`` with ``deliver_get``
(rabbit_mgmt_format / rabbit_mgmt_db's channel stats). Leveret keeps what it can count for
nothing or for one integer increment on the path a message takes:

- the publishes: a channel's :class:`leveret.session.publish.Publisher` counts into the
  channel's own :class:`~leveret.session.publish.PublishCounters`, exactly the increments
  it made into the node's before (the node's totals now sum the channels');
- deliveries: the delivery-tag ledger numbers every delivery and get (``next_tag``) and
  holds each one that awaits an ack until it is acked (counted), nacked, rejected or
  recovered (counted, off the hot path) or staged in a transaction; so ack-mode deliveries
  are those, no-ack ones the rest, and a delivery costs no increment at all. Gets (off the
  hot path) and redeliveries (behind the check the path already made) are counted;
- acks: one increment per acknowledged delivery.

The channel inherits :class:`DeliveryCounters` and calls :func:`basic_get_on_wire`, which
sees it as :class:`Getting` (what it uses), so this module does not import
:mod:`leveret.channel`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret import codec, firehose
from leveret.memory import DELIVERY_OVERHEAD, UNACKED_OVERHEAD
from leveret.session.get import basic_get, delivery_header

if TYPE_CHECKING:
    from leveret.auth import AccessControl
    from leveret.channel_parts import Record, Wire
    from leveret.memory import MemoryMonitor
    from leveret.message import Message
    from leveret.queue import Queue
    from leveret.session.publish import Counters
    from leveret.vhost import VHost

B = commands.Basic

# The per-channel ``message_stats`` keys, in the order a channel's history records them
# (leveret.management.stats samples channels): rabbit_mgmt_format's channel stats.
CHANNEL_COUNTERS = (
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver_get",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
)


def record_bytes(queue: Queue, message: Message) -> int:
    """What an unacknowledged delivery of ``message`` from ``queue`` holds (leveret.memory):
    the message and the record, or only the record for a stream (its log holds the
    message)."""
    if queue.stream:
        return UNACKED_OVERHEAD
    return len(message.header) + message.body_size + DELIVERY_OVERHEAD


class DeliveryCounters:
    """The delivery side of a channel's counters (the publish side is ``counters``)."""

    counters: Counters
    next_tag: int
    tx_publishes: int

    # The ledger's (leveret.session.ledger.Ledger), whatever its records are.
    unacked: OrderedDict[int, Any]
    tx_acks: list[tuple[int, Any]]

    def __init__(self) -> None:
        self.acked = 0
        self.returned = 0  # unacked deliveries nacked, rejected or recovered
        self.redelivered = 0
        self.gets = 0  # basic.get with acks
        self.gets_no_ack = 0
        self.gets_empty = 0

    def message_counts(self) -> tuple[int, ...]:
        """The values of :data:`CHANNEL_COUNTERS`, in order."""
        publish = self.counters
        taken = self.next_tag - 1  # every delivery and get had a tag
        # Every ack-mode delivery or get went into the ledger and is still there (unacked,
        # or staged in a transaction) or left it acked or given back.
        with_ack = self.acked + self.returned + len(self.unacked) + len(self.tx_acks)
        no_ack = taken - with_ack - self.gets_no_ack
        return (
            publish.received,
            publish.confirmed,
            publish.unroutable_returned,
            publish.unroutable_dropped,
            taken,
            with_ack - self.gets,
            no_ack,
            self.gets,
            self.gets_no_ack,
            self.gets_empty,
            self.redelivered,
            self.acked,
        )

    def has_published(self) -> bool:
        """Whether the channel is a publisher: RabbitMQ counts a channel in
        ``rabbitmq_global_publishers`` from its first basic.publish until it closes
        (rabbit_channel's ``publishing_mode``, fixed in rabbitmq-server pull request 6244).
        Read at scrape time from the publish counter (0 -> 1), so the publish path keeps
        no flag; publishes held in an open transaction count too."""
        return self.counters.received > 0 or self.tx_publishes > 0


class Getting(Protocol):
    """A channel as basic.get on the wire sees it (:class:`leveret.channel.Channel`
    implements it): who asks, its ledger, its get counters and its connection."""

    gets: int
    gets_no_ack: int
    gets_empty: int
    redelivered: int

    @property
    def id(self) -> int:
        """The channel number."""

    @property
    def access(self) -> AccessControl:
        """Users, permissions and their checks."""

    @property
    def user(self) -> str:
        """Its connection's user."""

    @property
    def vhost(self) -> VHost:
        """Its connection's vhost."""

    @property
    def conn(self) -> Wire:
        """Its connection."""

    @property
    def memory(self) -> MemoryMonitor:
        """The memory watermark (an unacked get counts against it)."""

    def send(self, method: Any) -> None:
        """Send a pamqp method on this channel."""

    def record(self, delivery: Record | None) -> int:
        """A delivery tag, and the unacked delivery in the ledger (None: no ack)."""

    def _queue_name(self, name: str) -> str:
        """A queue name with the channel's last-queue shortcut expanded."""


def basic_get_on_wire(channel: Getting, m: commands.Basic.Get) -> None:
    """basic.get on a channel: take the head message (leveret.session.get), count it as
    the channel's get, get_no_ack or get_empty, and send get-ok or get-empty."""
    queue, entry = basic_get(
        channel.access,
        channel.user,
        channel.vhost,
        channel._queue_name(m.queue),
        m.no_ack,
        channel.conn,
    )
    if entry is None:
        channel.gets_empty += 1
        channel.send(B.GetEmpty())
        return
    message = entry[0]
    content_header, redelivered = delivery_header(queue, entry)
    if redelivered:
        channel.redelivered += 1
    tag = channel.record(None if m.no_ack else (queue, entry, None))
    if m.no_ack:
        channel.gets_no_ack += 1
    else:
        channel.gets += 1
        channel.memory.add(record_bytes(queue, message))
    channel.conn.write(
        codec.get_ok_method(
            channel.id,
            tag,
            redelivered,
            message.exchange,
            message.routing_key,
            queue.message_count,
        )
        + codec.content_frames(channel.id, content_header, message.body, channel.conn.frame_max)
    )
    if channel.vhost.firehose:
        firehose.delivered(message, queue.name, bool(redelivered), channel)
