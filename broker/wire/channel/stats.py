"""A channel's message counters (RabbitMQ's per-channel ``message_stats``, and the rows
per channel and exchange or queue that rabbitmq_prometheus serves) and basic.get on the
wire, which counts its own.

RabbitMQ's channel keeps fine-grained stats per exchange and per queue
(rabbit_channel.erl: ``incr_stats`` of ``exchange_stats`` on publish, confirm,
return_unroutable, drop_unroutable; of ``queue_stats`` on deliver, deliver_no_ack, get,
get_no_ack, get_empty, redeliver, ack), written to rabbit_core_metrics'
``channel_exchange_metrics`` and ``channel_queue_metrics`` (one row per channel and
exchange or queue: rabbitmq_prometheus's per-object ``rabbitmq_channel_*_total``); the
management plugin sums them into a channel's ``message_stats`` with ``deliver_get``
(rabbit_mgmt_format / rabbit_mgmt_db's channel stats). Leveret keeps the channel's totals
for nothing or for one integer increment on the path a message takes, and the rows for at
most one more:

- the publishes: a channel's :class:`leveret.session.publish.Publisher` counts into its
  entry for the exchange (:class:`~leveret.session.publish.ExchangeStats`), which the
  publish looks up anyway (the permission cache): one increment a publish, and one more
  for an unroutable one. The channel's totals are the sums of its entries
  (:class:`~leveret.session.publish.SessionCounters`), folded into the node's when it
  closes. Confirms are counted per flush, not per publish; a run of publishes into one
  exchange is noted when the exchange changes (``confirm_runs``, an identity test per
  publish in confirm mode), and :func:`count_confirms` counts each confirm into its run's
  exchange;
- deliveries: the delivery-tag ledger numbers every delivery and get (``next_tag``) and
  holds each one that awaits an ack until it is acked (counted), nacked, rejected or
  recovered (counted, off the hot path) or staged in a transaction; so ack-mode deliveries
  are those, no-ack ones the rest, and a delivery costs no increment at all. Per queue
  the same arithmetic runs over the channel's :class:`~leveret.node.queue.QueueCounts` of the
  queue (its consumers share it) and the ledger's records of the queue; a no-ack delivery
  is counted by its consumer (``Consumer.delivered_no_ack``), the increment its queue
  made before (the queue sums its consumers'). Gets (off the hot path) and redeliveries
  (behind the check the path already made) are counted, per queue too;
- acks: one increment per acknowledged delivery, into the queue's counts. The channel's
  delivery-side totals are the sums of its rows per queue (:meth:`DeliveryCounters.totals`)
  and of ``gone``, which keeps the counts of the rows erased with their queue.

So the channel's totals are the sums of its rows, but for the rows that go, while the
channel's ``message_stats`` keep what they counted. RabbitMQ marks the rows of a deleted
queue (rabbit_core_metrics:queue_deleted/1; the channel's erase_queue_stats/1 on the
queue's ``eol``) and of a closed channel (rabbit_channel:terminate/2, ``delete_stats``:
channel_queue_down/1, channel_exchange_down/1), and the management agent's collector
deletes marked rows on its next pass (``collect_statistics_interval``, 5 s: 2.5 to 8.5 s
observed on 3.10.8); a deleted exchange's row stays until rabbit_core_metrics_gc's next
pass (``gc_exchanges``, every 120 s by default). Leveret drops them at once. Direct
reply-to's deliveries have no queue, so no row.

The channel inherits :class:`DeliveryCounters` and calls :func:`basic_get_on_wire`, which
sees it as :class:`Getting` (what it uses), so this module does not import
:mod:`leveret.wire.channel`.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING

from mypy_extensions import trait
from pamqp import commands

from leveret.node.memory import DELIVERY_OVERHEAD, UNACKED_OVERHEAD
from leveret.node.queue import QueueCounts
from leveret.node.queue.peers import QUEUE_COUNT_NAMES
from leveret.session.ledger import Ledger
from leveret.session.publish import ExchangeStats
from leveret.wire.channel.parts import Record

if TYPE_CHECKING:
    from leveret.node.message import Message
    from leveret.node.queue import Consumer, Queue
    from leveret.session.publish import SessionCounters
    from leveret.session.tx import Confirm

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
# A row per channel and exchange, per channel and queue: the counters of rabbit_core_metrics'
# channel_exchange_metrics and channel_queue_metrics, in their order (the positions
# rabbitmq_prometheus reads, prometheus_rabbitmq_core_metrics_collector.erl).
EXCHANGE_COUNTERS = ("publish", "confirm", "return_unroutable", "drop_unroutable")
QUEUE_COUNTERS = ("get", "get_no_ack", "deliver", "deliver_no_ack", "redeliver", "ack", "get_empty")


def record_bytes(queue: Queue, message: Message) -> int:
    """What an unacknowledged delivery of ``message`` from ``queue`` holds (leveret.node.memory):
    the message and the record, or only the record for a stream (its log holds the
    message)."""
    if queue.stream:
        return UNACKED_OVERHEAD
    return len(message.header) + message.body_size + DELIVERY_OVERHEAD


@trait
class DeliveryCounters(Ledger[Record]):
    """The delivery side of a channel's counters (the publish side is ``counters``, and
    ``exchange_stats`` per exchange), and its rows per exchange and per queue, over the
    channel's ledger. A mypyc trait, as the ledger is (leveret.session.ledger)."""

    counters: SessionCounters
    exchange_stats: dict[str, ExchangeStats]
    consumers: dict[str, Consumer]
    tx_publishes: int
    queue_counts: dict[Queue, QueueCounts]
    gone: QueueCounts
    confirm_runs: list[tuple[int, ExchangeStats]]
    confirm_into: ExchangeStats

    def open_counters(self) -> None:
        """Start with nothing counted (as the channel opens)."""
        # Per queue the channel consumed from or got from (its consumers share the entry);
        # the channel's totals are their sums and ``gone``'s, the rows of queues that went.
        self.queue_counts = {}
        self.gone = QueueCounts()
        # (first sequence number, exchange): the runs of publishes in confirm mode not yet
        # confirmed in full, the last one open; a placeholder that covers none first.
        self.confirm_runs = [(1, ExchangeStats())]
        self.confirm_into = self.confirm_runs[0][1]  # the last run's (count_confirms keeps it)

    def counts_of(self, queue: Queue) -> QueueCounts:
        """The channel's counts of ``queue`` (made on its first consume or get)."""
        counts = self.queue_counts.get(queue)
        if counts is None:
            counts = self.queue_counts[queue] = QueueCounts()
        return counts

    def exchange_rows(self, exchanges: Container[str]) -> list[tuple[str, tuple[int, ...]]]:
        """Per exchange published to that is among ``exchanges`` (those that exist: RabbitMQ's
        metrics GC drops the others' rows, rabbit_core_metrics_gc:gc_exchanges/0), its
        name and counts in :data:`EXCHANGE_COUNTERS` order. An entry made by a publish
        refused before it was routed is no row (RabbitMQ's appears with a count)."""
        return [
            (name, (s.published, s.confirmed, s.unroutable_returned, s.unroutable_dropped))
            for name, s in self.exchange_stats.items()
            if s.published and name in exchanges
        ]

    def erase_row(self, queue: Queue) -> None:
        """``queue`` went: its row goes, as RabbitMQ's does (see the module's docstring),
        and its counts stay in the channel's totals (``gone``), which also takes the acks
        still to come for its deliveries (their consumers count into it from now on)."""
        counts = self.queue_counts.pop(queue, None)
        if counts is None:
            return
        gone = self.gone
        for name in QUEUE_COUNT_NAMES:
            setattr(gone, name, getattr(gone, name) + getattr(counts, name))
        held = [record for record in self.unacked.values()]
        held += [record for _tag, record in self.tx_acks]
        for _queue, _entry, consumer in held:
            if consumer is not None and consumer.counts is counts:
                consumer.counts = gone
        for consumer in self.consumers.values():
            if consumer.counts is counts:
                consumer.counts = gone

    def queue_exchange_rows(
        self, exchanges: Container[str], queues: Container[str]
    ) -> list[tuple[str, str, int]]:
        """Per exchange published to and queue its publishes reached, both among those that
        exist: (exchange, queue, publishes), rabbit_core_metrics'
        ``channel_queue_exchange_metrics`` row (its ``publish`` count)."""
        return [
            (name, queue, count)
            for name, s in self.exchange_stats.items()
            if name in exchanges
            for queue, count in s.per_queue().items()
            if queue in queues
        ]

    def queue_rows(self) -> list[tuple[str, tuple[int, ...]]]:
        """Per queue consumed from or got from, its name and counts in
        :data:`QUEUE_COUNTERS` order. The rows of deleted queues are erased here, as
        RabbitMQ's go when their queue does (see the module's docstring)."""
        rows = self.queue_counts
        for gone in [queue for queue in rows if queue.deleted]:
            self.erase_row(gone)
        # What the counts leave out: the ledger's records still out (unacked, or staged in
        # a transaction), and the no-ack deliveries of the consumers still there.
        held = dict.fromkeys(rows, 0)
        for queue, _entry, _consumer in self.unacked.values():
            if queue in held:
                held[queue] += 1
        for _tag, (queue, _entry, _consumer) in self.tx_acks:
            if queue in held:
                held[queue] += 1
        no_ack = dict.fromkeys(rows, 0)
        for consumer in self.consumers.values():
            if consumer.queue in no_ack:
                no_ack[consumer.queue] += consumer.delivered_no_ack
        found: list[tuple[str, tuple[int, ...]]] = []
        for queue, c in rows.items():
            with_ack = c.acked + c.returned + held[queue]  # as message_counts' with_ack
            deliver_no_ack = c.no_ack_gone + no_ack[queue]
            counts = (
                c.get_ack,
                c.get_no_ack,
                with_ack - c.get_ack,
                deliver_no_ack,
                c.redelivered,
                c.acked,
                c.get_empty,
            )
            found.append((queue.name, counts))
        return found

    def cancelled(self, consumer: Consumer) -> None:
        """``consumer`` left the channel (basic.cancel): its queue's row keeps its no-ack
        deliveries (its acks, and redeliveries, went into the row already)."""
        consumer.counts.no_ack_gone += consumer.delivered_no_ack

    def totals(self) -> QueueCounts:
        """The channel's counts: the sums of its rows and of the rows that went."""
        total = QueueCounts()
        for counts in (self.gone, *self.queue_counts.values()):
            for name in QUEUE_COUNT_NAMES:
                setattr(total, name, getattr(total, name) + getattr(counts, name))
        return total

    def message_counts(self) -> tuple[int, ...]:
        """The values of :data:`CHANNEL_COUNTERS`, in order."""
        publish = self.counters
        t = self.totals()
        taken = self.next_tag - 1  # every delivery and get had a tag
        # Every ack-mode delivery or get went into the ledger and is still there (unacked,
        # or staged in a transaction) or left it acked or given back.
        with_ack = t.acked + t.returned + len(self.unacked) + len(self.tx_acks)
        no_ack = taken - with_ack - t.get_no_ack
        return (
            publish.received,
            publish.confirmed,
            publish.unroutable_returned,
            publish.unroutable_dropped,
            taken,
            with_ack - t.get_ack,
            no_ack,
            t.get_ack,
            t.get_no_ack,
            t.get_empty,
            t.redelivered,
            t.acked,
        )

    def has_published(self) -> bool:
        """Whether the channel is a publisher: RabbitMQ counts a channel in
        ``rabbitmq_global_publishers`` from its first basic.publish until it closes
        (rabbit_channel's ``publishing_mode``, fixed in rabbitmq-server pull request 6244).
        Read at scrape time from the publish counter (0 -> 1), so the publish path keeps
        no flag; publishes held in an open transaction count too."""
        return self.counters.received > 0 or self.tx_publishes > 0


def count_confirms(
    runs: list[tuple[int, ExchangeStats]], start: int, confirms: list[Confirm]
) -> None:
    """Count the acks among ``confirms`` (of the publishes after ``start``, as
    :func:`leveret.session.tx.confirms_due` made them) into the exchanges their publishes
    went to, as rabbit_channel counts a confirm into its exchange (send_confirms_and_nacks,
    ``incr_stats`` of ``exchange_stats``, confirm); nacks count nothing. ``runs``: (first
    sequence number, exchange) of each run of publishes into one exchange, the last one
    open; those confirmed in full are dropped."""
    for tag, _multiple, ack in confirms:
        if ack:  # publishes start + 1 .. tag
            for index, (first, stats) in enumerate(runs):
                last = runs[index + 1][0] - 1 if index + 1 < len(runs) else tag
                covered = min(last, tag) - max(first, start + 1) + 1
                if covered > 0:
                    stats.confirmed += covered
                if last >= tag:
                    break
        start = tag
    done = 0
    while done + 1 < len(runs) and runs[done + 1][0] <= start + 1:
        done += 1
    del runs[:done]
