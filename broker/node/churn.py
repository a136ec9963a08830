"""Node-wide counters that no single object can keep: connection, channel and queue churn,
login attempts, and the message counters of queues that have been deleted.

One :class:`NodeCounters` per server (``Server.churn``); the connections, channels and
vhosts add to it where the event happens, with one line each, and the Prometheus
collectors (leveret.management.metrics) and the management API read it. What counts, as
observed on RabbitMQ 3.10.8 (rabbit_core_metrics and rabbit_global_counters, scraped from
rabbitmq_prometheus's ``connection_churn_metrics`` around each step):

- a connection is *opened* when connection.open succeeds, and *closed* whenever an
  accepted socket ends, whatever stage it reached (a refused login, a bad vhost, a client
  that sent only the protocol header each count one close and no open);
- a channel is opened by channel.open-ok and closed once, by either side or with its
  connection;
- queue.declare counts as *declared* unless passive (a redeclare of an existing queue
  counts), and as *created* when it made the queue; a deletion counts when a queue goes
  (queue.delete, an exclusive queue with its connection, auto-delete, expiry);
- a login attempt succeeds or fails at connection.start-ok (a refused vhost is a
  successful login).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.node.peers import ChannelPeer
    from leveret.node.queue import Queue


# The per-queue counters kept for deleted queues, so that node-wide totals never go down.
RETIRED = (
    "published_total",
    "delivered_total",
    "deliver_no_ack_total",
    "get_total",
    "get_no_ack_total",
    "get_empty_total",
    "redeliver_total",
    "acked_total",
)


def queue_type(queue: Queue) -> str:
    """The queue type's module name, as rabbit_global_counters labels it."""
    if queue.stream:
        return "rabbit_stream_queue"
    return "rabbit_quorum_queue" if queue.quorum else "rabbit_classic_queue"


class NodeCounters:
    """Churn and login counters of one node, plus the counters of its deleted queues and
    closed channels."""

    __slots__ = (
        "auth_failed",
        "auth_succeeded",
        "channels_closed",
        "channels_opened",
        "connections_closed",
        "connections_opened",
        "dead_lettered",
        "queues_created",
        "queues_declared",
        "queues_deleted",
        "received_confirm",
        "retired",
        "started",
    )

    def __init__(self) -> None:
        self.started = time.time()  # the node's uptime counts from here
        self.connections_opened = 0
        self.connections_closed = 0
        self.channels_opened = 0
        self.channels_closed = 0
        self.queues_declared = 0
        self.queues_created = 0
        self.queues_deleted = 0
        self.auth_succeeded = 0
        self.auth_failed = 0
        # Publishes in confirm mode on channels that have closed.
        self.received_confirm = 0
        # Per queue type, the counters of the queues deleted.
        self.retired: dict[str, dict[str, int]] = {}
        # Messages dead-lettered, by (queue type, reason, dead-letter strategy).
        self.dead_lettered: dict[tuple[str, str, str], int] = {}

    def login(self, succeeded: bool) -> None:
        """One login attempt at connection.start-ok."""
        if succeeded:
            self.auth_succeeded += 1
        else:
            self.auth_failed += 1

    def channel_closed(self, channel: ChannelPeer) -> None:
        """``channel`` is closing (counted once: its ``open`` flag is still set the first
        time)."""
        if channel.open:
            self.channels_closed += 1
            self.received_confirm += channel.publish_seq

    def dead_letter(self, queue: Queue, reason: str) -> None:
        """A message of ``queue`` is dead-lettered for ``reason`` (rejected, expired,
        maxlen, delivery_limit), counted as rabbit_global_counters counts it whether or not
        the queue has somewhere to send it: ``at_most_once`` when its dead-letter exchange
        exists, else ``disabled`` (observed on 3.10.8, a missing exchange included)."""
        dlx = queue.dlx
        exists = dlx is not None and dlx in queue.vhost.projection.exchanges
        key = (queue_type(queue), reason, "at_most_once" if exists else "disabled")
        self.dead_lettered[key] = self.dead_lettered.get(key, 0) + 1

    def queue_declared(self, created: bool) -> None:
        """A queue.declare that was not passive (``created``: it made the queue)."""
        self.queues_declared += 1
        if created:
            self.queues_created += 1

    def queue_deleted(self, queue: Queue) -> None:
        """``queue`` is gone: count it, and keep its message counters in the totals."""
        self.queues_deleted += 1
        retired = self.retired.setdefault(queue_type(queue), dict.fromkeys(RETIRED, 0))
        for name in RETIRED:
            retired[name] += getattr(queue, name)

    def totals(self, queues: Iterable[Queue]) -> dict[str, dict[str, int]]:
        """Per queue type, each of :data:`RETIRED` over the node's whole life: the deleted
        queues' counters and those of the ``queues`` that exist."""
        totals = {kind: dict(counts) for kind, counts in self.retired.items()}
        for queue in queues:
            kind = queue_type(queue)
            sums = totals.get(kind)
            if sums is None:
                sums = totals[kind] = dict.fromkeys(RETIRED, 0)
            for name in RETIRED:
                sums[name] += getattr(queue, name)
        return totals


class SocketCounters:
    """Bytes and reads, bytes and writes of one connection's socket (what RabbitMQ reads
    with inet:getstat: recv_oct, recv_cnt, send_oct, send_cnt)."""

    __slots__ = ("opened_at", "recv_cnt", "recv_oct", "send_cnt", "send_oct")

    def __init__(self) -> None:
        self.opened_at = time.time()  # when the connection was accepted
        self.recv_oct = 0
        self.recv_cnt = 0
        self.send_oct = 0
        self.send_cnt = 0

    def received(self, size: int) -> None:
        """One read of ``size`` bytes."""
        self.recv_oct += size
        self.recv_cnt += 1

    def sent(self, parts: list[bytes | memoryview]) -> None:
        """One write of ``parts``."""
        self.send_oct += sum(map(len, parts))
        self.send_cnt += 1
