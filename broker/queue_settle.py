"""A queue's settling verbs: an unacknowledged delivery is acked (gone), rejected without
requeue (dead-lettered, reason ``rejected``, and gone) or requeued (ready again), each
told to the vhost's events (:mod:`leveret.events`).

Functions over :class:`leveret.queue.Queue`, which binds them as its methods (the module
docstring there: only these verbs, ``get`` and ``deliver`` write the delivery counters),
kept apart so the queue module holds dispatch; they see it as a :class:`SettlingQueue`,
which lists what they use, so this module does not import :mod:`leveret.queue`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from leveret.deadletter import DeadLettering, dead_letter

if TYPE_CHECKING:
    from leveret.message import Message
    from leveret.prioritydeque import Entry


class Holder(Protocol):
    """The consumer a delivery went to (its own unacked count)."""

    unacked: int


class SettlingQueue(DeadLettering, Protocol):
    """A queue as its settling verbs see it (:class:`leveret.queue.Queue` implements it)."""

    unacked: int
    acked_total: int

    @property
    def deleted(self) -> bool:
        """Whether it was deleted (a rejected delivery of a deleted queue is not
        dead-lettered)."""

    def forget(self, message: Message) -> None:
        """Drop a stored message from the message store."""

    def _put_back(self, entries: list[Entry]) -> None:
        """Put entries back in their places, ready again."""


def ack(queue: SettlingQueue, message: Message, consumer: Holder | None) -> None:
    """An unacked delivery (``consumer`` None: a get) was acknowledged: it is gone."""
    queue.unacked -= 1
    queue.acked_total += 1
    if consumer is not None:
        consumer.unacked -= 1
    if message.store_ids is not None:
        queue.forget(message)
    events = queue.vhost.events
    if events is not None:
        events.acked(message, queue.name)


def reject(queue: SettlingQueue, message: Message, consumer: Holder | None) -> None:
    """An unacked delivery was rejected without requeue: dead-lettered (reason
    ``rejected``) where the queue has a dead-letter exchange, and gone."""
    queue.unacked -= 1
    if consumer is not None:
        consumer.unacked -= 1
    events = queue.vhost.events
    if events is not None:
        events.rejected(message, queue.name)
    if not queue.deleted:  # counted without a DLX too (broker/churn.py)
        dead_letter(queue, message, "rejected")
    if message.store_ids is not None:
        queue.forget(message)


def requeue(queue: SettlingQueue, returned: Iterable[tuple[Entry, Holder | None]]) -> None:
    """Unacked deliveries come back (nack or reject with requeue, recover, a closed
    channel, a management get that requeues): no longer unacked, and ready again."""
    entries = []
    events = queue.vhost.events
    for entry, consumer in returned:
        queue.unacked -= 1
        if consumer is not None:
            consumer.unacked -= 1
        entries.append(entry)
        if events is not None:
            events.requeued(entry[0], queue.name)
    queue._put_back(entries)
