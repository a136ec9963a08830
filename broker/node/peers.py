"""What the node needs of the wire: a channel and a connection, as the node sees them.

The node never imports the wire, not even for a type name; where it holds or calls a
channel or a connection (a consumer's channel, an exclusive queue's owner, the
connections of the shared state, the consumer timeout check, the counters of a closed
channel, the publishes waiting for a sync, who an event names), it names one of these two
protocols. The wire's ``Channel`` and ``Connection`` implement them; nothing else does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sized
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from leveret.node.prioritydeque import Entry
    from leveret.node.queue import Consumer, Queue
    from leveret.node.vhost import VHost


class ConnectionPeer(Protocol):
    """A client connection, as the node sees it."""

    @property
    def vhost(self) -> VHost:
        """The vhost it opened (set before any channel exists)."""

    @property
    def name(self) -> str:
        """RabbitMQ's connection name."""

    @property
    def user(self) -> str:
        """The user it logged in as."""

    @property
    def writable(self) -> bool:
        """False while the socket's buffer is full: deliveries wait in the queue."""

    @property
    def exclusive_queues(self) -> set[Queue]:
        """The exclusive queues it declared (they go with it)."""

    @property
    def channels(self) -> Mapping[int, ChannelPeer]:
        """The open channels, by number."""

    def fail_channel(self, channel: ChannelPeer, explanation: str) -> None:
        """Close ``channel`` with 406 PRECONDITION_FAILED and ``explanation``."""

    def memory_alarm(self, alarm: bool) -> None:
        """The memory alarm is set (True) or cleared."""

    def disk_alarm(self, alarm: bool) -> None:
        """The disk alarm is set (True) or cleared."""

    def force_close(self, explanation: str) -> None:
        """Close with 320 CONNECTION_FORCED and ``explanation``."""


# Runtime-checkable for the store, which finds the channels among the listeners of a
# failed sync (node/persistence.py).
@runtime_checkable
class ChannelPeer(Protocol):
    """A client channel, as the node sees it: a consumer's channel, what an event names,
    what the timeout check, the counters and the store read of it."""

    @property
    def id(self) -> int:
        """The channel number."""

    @property
    def open(self) -> bool:
        """Whether it may still take deliveries (false from its close on)."""

    @property
    def vhost(self) -> VHost:
        """Its connection's vhost."""

    @property
    def conn(self) -> ConnectionPeer:
        """Its connection."""

    @property
    def global_prefetch(self) -> int:
        """basic.qos(global=true): a limit on its unacked deliveries (0: none)."""

    @property
    def unacked(self) -> Sized:
        """Its unacknowledged deliveries (the channel's ledger)."""

    @property
    def publish_seq(self) -> int:
        """Publishes numbered for confirms so far."""

    @property
    def waiting(self) -> deque[tuple[int, int]]:
        """Publishes waiting for a sync, as ``(sequence number, generation)``, in order."""

    @property
    def nacks(self) -> list[int]:
        """Sequence numbers to nack at the next flush of its confirms."""

    @property
    def pending_commits(self) -> deque[int]:
        """Generations its tx.commit-oks wait for, in order."""

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        """Send ``entry`` to ``consumer`` (already counted by the queue)."""

    def cancel_by_server(self, consumer: Consumer) -> None:
        """The queue went away: forget ``consumer`` and tell the client if it can hear."""

    def cancel_live(self, consumer: Consumer) -> None:
        """Cancel ``consumer`` from the server side, its queue staying (an injected
        fault): forget it, tell the client if it can hear, and detach it from the queue."""

    def overdue_ack(self, now: float, timeout_ms: Callable[[Queue], float]) -> int | None:
        """The timeout (ms) its oldest unacknowledged delivery has outlived, or None."""
