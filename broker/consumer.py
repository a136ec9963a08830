"""A consumer (one ``basic.consume`` subscription) and what it needs of its channel.

The queue dispatches to consumers; a consumer holds a :class:`Subscriber` (the channel's
flow state, prefetch, ``deliver`` and ``cancel_by_server``), never the channel class, so the
node floor does not import the wire. Its capacity check is read once a delivery, so it is
written inline over plain attributes. Kept apart from :mod:`leveret.queue`, which holds the
ready messages and the verbs that count deliveries.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from leveret.queue import Entry, Queue


def int_arg(arguments: dict[str, Any], key: str) -> int | None:
    """An integer argument (not a bool), or None when unset or of another type."""
    value = arguments.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Writable(Protocol):
    """The connection of a subscriber's channel, as the queue sees it: whether its
    socket takes more now (the wire's Connection implements it)."""

    @property
    def writable(self) -> bool:
        """False while the socket's buffer is full: deliveries wait in the queue."""


class Subscriber(Protocol):
    """What a queue needs of the channel a consumer belongs to (the wire channel
    implements it). Attributes, not methods, where the queue reads them once a delivery:
    the consumer's capacity check costs no call."""

    @property
    def id(self) -> int:
        """The channel number."""

    @property
    def open(self) -> bool:
        """Whether it may still take deliveries."""

    @property
    def global_prefetch(self) -> int:
        """basic.qos(global=true): a limit on its unacked deliveries (0: none)."""

    @property
    def unacked(self) -> Sized:
        """Its unacknowledged deliveries (the channel's ledger)."""

    @property
    def conn(self) -> Writable:
        """The connection (``writable``: its socket takes more now)."""

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        """Send ``entry`` to ``consumer`` (already counted by the queue)."""

    def cancel_by_server(self, consumer: Consumer) -> None:
        """The queue went away: forget ``consumer`` and tell the client if it can hear."""


class Consumer:
    """A ``basic.consume`` subscription of one channel on one queue."""

    __slots__ = (
        "arguments",
        "channel",
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
        channel: Subscriber,
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
