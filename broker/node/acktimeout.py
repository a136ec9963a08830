"""The delivery acknowledgement timeout (RabbitMQ's ``consumer_timeout``).

A channel whose oldest unacknowledged delivery (consumed or got) has been waiting longer
than its timeout is closed with 406 and its deliveries go back to their queues
(rabbit_channel: evaluate_consumer_timeout/1). The timeout is the queue's when it has one
(``x-consumer-timeout`` argument, ``consumer-timeout`` policy key, the lower of the two:
RabbitMQ 3.12+, rabbit_channel:get_queue_consumer_timeout/2), else the broker's
(``--consumer-timeout``, 30 min; 0 turns it off). As in RabbitMQ only the channel's oldest
delivery is looked at, with the timeout of the queue it came from, and a queue whose
timeout is not an integer (``x-consumer-timeout: "1h"``) has none, whatever the broker's.

RabbitMQ looks once a minute; Leveret every twentieth of the shortest timeout in use
(between 0.1 s and a minute), so a channel closes at most 5 % late, and a short timeout set
for a test takes effect promptly. A channel's times are its vhost's clock's
(:mod:`leveret.node.clock`), and a vhost's channels are looked at again whenever its manual
clock is advanced, so a test sees a timeout the instant its clock passes it.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from leveret.node.clock import Clock
    from leveret.node.peers import ConnectionPeer
    from leveret.node.queue import Queue


# The check period bounds, in seconds: RabbitMQ's channel_tick_interval is a minute.
_MIN_PERIOD = 0.1
_MAX_PERIOD = 60.0
# Snapshots a DeliveryClock keeps at most: a minute of them at the shortest period.
_MAX_SNAPSHOTS = 600


def timeout_text(channel: int, timeout: int) -> str:
    """The 406 reply text (rabbit_channel:handle_consumer_timed_out/3)."""
    return (
        f"delivery acknowledgement on channel {channel} timed out. "
        f"Timeout value used: {timeout} ms. This timeout value can be configured, "
        "see consumers doc guide to learn more"
    )


Q = TypeVar("Q")  # a queue, as the channel's records name it


class DeliveryClock:
    """When a channel's deliveries went out, give or take one check period.

    Delivery times are not recorded per delivery (that would cost the hot path) but as
    snapshots taken by the periodic check: ``(t, n)`` says every delivery tag below ``n``
    had gone out by time ``t``.
    """

    __slots__ = ("_snapshots",)

    def __init__(self) -> None:
        self._snapshots: deque[tuple[float, int]] = deque()

    def clear(self) -> None:
        """Forget everything (nothing is unacknowledged)."""
        self._snapshots.clear()

    def sent_by(self, now: float, next_tag: int, oldest: int) -> float:
        """A time by which the delivery tagged ``oldest`` (the channel's oldest
        unacknowledged one, below ``next_tag``) had gone out: never earlier than it did."""
        snapshots = self._snapshots
        if not snapshots or snapshots[-1][1] != next_tag:
            snapshots.append((now, next_tag))
            if len(snapshots) > _MAX_SNAPSHOTS:
                # Thin out (every other one, the oldest and newest kept): a delivery then
                # looks younger than it is, so it times out late, never early.
                kept = list(snapshots)
                snapshots = self._snapshots = deque(kept[:1] + kept[1:-1:2] + kept[-1:])
        # Snapshots from before the oldest delivery tell nothing about what is unacked.
        while len(snapshots) > 1 and snapshots[1][1] <= oldest:
            snapshots.popleft()
        return snapshots[0][0] if snapshots[0][1] > oldest else snapshots[1][0]

    def overdue(
        self,
        now: float,
        next_tag: int,
        oldest: tuple[int, tuple[Q, Any, Any]] | None,
        timeout_ms: Callable[[Q], float],
    ) -> int | None:
        """The timeout (ms) a channel's ``oldest`` unacknowledged delivery (its tag and
        record: the queue first; None when there is none) has outlived, or None;
        ``timeout_ms`` gives a queue's timeout, ``math.inf``: none."""
        if oldest is None:
            self.clear()
            return None
        sent = self.sent_by(now, next_tag, oldest[0])
        timeout = timeout_ms(oldest[1][0])
        if timeout == math.inf or now - sent < timeout / 1000:
            return None
        return int(timeout)


class AckTimeouts:
    """The periodic check of one server's channels, and the queues with their own
    timeout (which may make it run more often than the broker's timeout needs)."""

    def __init__(self, default_ms: int, connections: Iterable[ConnectionPeer]) -> None:
        self.default_ms = default_ms
        self._connections = connections
        # Queues with a timeout of their own (a finite one sets the check period), held
        # until they are deleted (a compiled Queue takes no weak references).
        self._queues: set[Queue] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._period = math.inf
        self._running = False

    def start(self) -> None:
        """Begin checking, if any timeout applies."""
        self._running = True
        self._schedule()

    def stop(self) -> None:
        """Stop checking."""
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def watch(self, queue: Queue) -> None:
        """``queue`` has a timeout of its own (or a new one): check soon enough for it."""
        self._queues.add(queue)
        if self._running and _period(queue.consumer_timeout) < self._period:
            self._schedule()

    def timeout_ms(self, queue: Queue) -> float:
        """The timeout (ms) for a delivery from ``queue``; ``math.inf``: none."""
        own = queue.consumer_timeout
        if own is not None:
            return own
        return self.default_ms if self.default_ms > 0 else math.inf

    def _schedule(self) -> None:
        self._queues = {q for q in self._queues if not q.deleted}
        shortest = min(
            (q.consumer_timeout for q in self._queues if q.consumer_timeout is not None),
            default=math.inf,
        )
        if self.default_ms > 0:
            shortest = min(shortest, self.default_ms)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._period = _period(shortest)
        if self._period < math.inf:
            self._timer = asyncio.get_running_loop().call_later(self._period, self._check)

    def _check(self) -> None:
        self._timer = None
        self.check()
        if self._running:
            self._schedule()

    def check(self, clock: Clock | None = None) -> None:
        """Close every channel whose oldest delivery outlived its timeout: of every
        connection, or (a vhost's clock was advanced) of those on ``clock`` only."""
        for connection in list(self._connections):
            if not connection.channels:
                continue  # no channel yet: the vhost may not be open either
            own = connection.vhost.clock
            if clock is not None and own is not clock:
                continue
            now = own.time()
            for channel in list(connection.channels.values()):
                overdue = channel.overdue_ack(now, self.timeout_ms)
                if overdue is not None:
                    connection.fail_channel(channel, timeout_text(channel.id, overdue))


def _period(timeout_ms: float | None) -> float:
    # A twentieth of the timeout, so a channel closes at most 5 % late.
    if timeout_ms is None or timeout_ms == math.inf:
        return math.inf
    return min(_MAX_PERIOD, max(_MIN_PERIOD, timeout_ms / 1000 / 20))
