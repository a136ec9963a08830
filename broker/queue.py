"""Queues and consumers: ready messages, round-robin dispatch, prefetch accounting.

A queue holds ready messages in a deque of ``(message, redelivered)`` pairs. Messages
that are delivered but not yet acknowledged live in the delivering channel (see
:mod:`broker.channel`), which hands them back through :meth:`Queue.requeue`.

Dispatch is synchronous: :meth:`Queue.publish` delivers straight to a consumer that
has capacity when nothing is waiting, and :meth:`Queue.drain` runs whenever capacity
may have appeared (an ack, a new consumer, a resumed socket).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.message import Message

if TYPE_CHECKING:
    from broker.channel import Channel
    from broker.connection import Connection
    from broker.vhost import VHost


class Consumer:
    """A ``basic.consume`` subscription of one channel on one queue."""

    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "queue",
        "tag",
        "tag_bytes",
        "unacked",
    )

    def __init__(
        self,
        channel: Channel,
        queue: Queue,
        tag: str,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        # Pre-encoded short string for Basic.Deliver (the hot path).
        raw = tag.encode("utf-8")
        self.tag_bytes = bytes((len(raw),)) + raw
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments

    def has_capacity(self) -> bool:
        """Whether one more message may be delivered to this consumer now."""
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        channel = self.channel
        # Channel.can_deliver inlined: this runs once per delivery.
        return (
            channel.conn.writable
            and channel.open
            and (not channel.global_prefetch or len(channel.unacked) < channel.global_prefetch)
        )


class Queue:
    """A queue in a vhost."""

    __slots__ = (
        "_rr",
        "arguments",
        "auto_delete",
        "consumers",
        "deleted",
        "durable",
        "exclusive_consumer",
        "had_consumers",
        "max_length",
        "messages",
        "name",
        "overflow",
        "owner",
        "vhost",
    )

    def __init__(
        self,
        vhost: VHost,
        name: str,
        durable: bool,
        owner: Connection | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.owner = owner  # the exclusive owner's connection, or None
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.messages: deque[tuple[Message, bool]] = deque()
        self.consumers: list[Consumer] = []
        self.exclusive_consumer = False
        self.had_consumers = False
        self.deleted = False
        self._rr = 0
        # x-max-length over ready messages; x-overflow drop-head (default) or
        # reject-publish (docs/maxlength). The full feature set is issue 4's.
        limit = arguments.get("x-max-length")
        self.max_length = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        overflow = arguments.get("x-overflow", "drop-head")
        self.overflow = overflow.decode() if isinstance(overflow, bytes) else str(overflow)

    # -- messages ---------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Enqueue ``message``, delivering it at once when a consumer can take it.
        Returns False when the queue refuses it (``x-overflow: reject-publish``)."""
        if not self.messages and self.consumers:
            consumer = self._next_consumer()
            if consumer is not None:
                consumer.channel.deliver(consumer, message, False)
                return True
        if self.max_length is not None and len(self.messages) >= self.max_length:
            if self.overflow != "drop-head":
                return False
            while self.messages and len(self.messages) >= self.max_length:
                self.messages.popleft()
            if self.max_length == 0:
                return True
        self.messages.append((message, False))
        return True

    def drain(self) -> None:
        """Deliver ready messages while some consumer has capacity."""
        messages = self.messages
        while messages and self.consumers:
            consumer = self._next_consumer()
            if consumer is None:
                return
            message, redelivered = messages.popleft()
            consumer.channel.deliver(consumer, message, redelivered)

    def _next_consumer(self) -> Consumer | None:
        """Round-robin: the next consumer after the last one served that has capacity."""
        consumers = self.consumers
        count = len(consumers)
        if count == 1:
            only = consumers[0]
            return only if only.has_capacity() else None
        start = self._rr
        for step in range(count):
            index = (start + step) % count
            consumer = consumers[index]
            if consumer.has_capacity():
                self._rr = index + 1
                return consumer
        return None

    def get(self) -> tuple[Message, bool] | None:
        """Take the head message for ``basic.get``."""
        return self.messages.popleft() if self.messages else None

    def requeue(self, messages: Iterable[Message]) -> None:
        """Put messages back at the head, keeping their order, marked redelivered."""
        if self.deleted:
            return
        self.messages.extendleft((m, True) for m in reversed(list(messages)))
        self.drain()

    def purge(self) -> int:
        """Drop every ready message; return how many there were."""
        count = len(self.messages)
        self.messages.clear()
        return count

    @property
    def message_count(self) -> int:
        """Ready messages (as in ``queue.declare-ok``)."""
        return len(self.messages)

    # -- consumers --------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach ``consumer`` and start delivering to it."""
        self.consumers.append(consumer)
        self.had_consumers = True
        if consumer.exclusive:
            self.exclusive_consumer = True
        self.drain()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer``; an auto-delete queue goes with its last consumer."""
        self.detach(consumer)
        self.maybe_auto_delete()

    def detach(self, consumer: Consumer) -> None:
        """Stop delivering to ``consumer`` (no auto-delete check)."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if consumer.exclusive:
            self.exclusive_consumer = False

    def maybe_auto_delete(self) -> None:
        """Delete an auto-delete queue whose last consumer has gone."""
        if self.auto_delete and self.had_consumers and not self.consumers and not self.deleted:
            self.vhost.delete_queue(self)
