"""A queue's clocks: message TTL (expiry at the head) and ``x-expires`` (the unused queue goes).

RabbitMQ expires messages only when they reach the head of the queue, with one timer for
the head so an idle queue still expires them; a queue with ``x-expires`` is deleted once
unused (no consumers, no declare or get) for that long. Both run only where a TTL or expiry
applies (``expiring``, ``expires``), never on the plain path. Functions over
:class:`leveret.queue.Queue`, which binds them as its methods, kept apart so the queue
module holds dispatch and the delivery verbs; they see it as an :class:`ExpiringQueue`,
which lists what they use, so this module does not import
:mod:`leveret.queue`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from leveret.clock import Clock, Timer
    from leveret.message import Message
    from leveret.prioritydeque import Entry, PriorityDeque

_Q_contra = TypeVar("_Q_contra", contravariant=True)


class ExpiringHome(Protocol[_Q_contra]):
    """A queue's vhost as its expiry sees it: it deletes the unused queue."""

    def delete_queue(self, queue: _Q_contra) -> int:
        """Remove ``queue``."""


class ExpiringQueue(Protocol):
    """A queue as its clocks see it (:class:`leveret.queue.Queue` implements it; the
    functions below are its methods)."""

    clock: Clock
    _ttl_timer: Timer | None
    _expiry_timer: Timer | None
    _last_used: float

    @property
    def vhost(self) -> ExpiringHome[Self]:
        """Its vhost."""

    @property
    def messages(self) -> deque[Entry] | PriorityDeque:
        """The ready entries, oldest first."""

    @property
    def deleted(self) -> bool:
        """Whether it was deleted."""

    @property
    def expires(self) -> int | None:
        """``x-expires`` in ms (None: never)."""

    @property
    def consumers(self) -> Sized:
        """Its consumers (in use while there are any)."""

    def _pop(self) -> Entry:
        """Take the head entry off the ready messages."""

    def _drop(self, message: Message, reason: str) -> None:
        """A message leaves for good (dead-lettered for ``reason``)."""

    def _expire_head(self, now: float | None = None) -> None:
        """:func:`expire_head`."""

    def _schedule_ttl(self) -> None:
        """:func:`schedule_ttl`."""

    def _on_ttl_timer(self) -> None:
        """:func:`on_ttl_timer`."""

    def _on_expiry_timer(self) -> None:
        """:func:`on_expiry_timer`."""

    def drain(self) -> None:
        """Deliver what consumers can take."""


def expire_head(queue: ExpiringQueue, now: float | None = None) -> None:
    """Drop (or dead-letter) expired messages at the head: RabbitMQ expires messages
    only when they reach the head of the queue."""
    messages = queue.messages
    if not messages:
        return
    if now is None:
        now = queue.clock.time()
    while messages and messages[0][2] and messages[0][2] <= now:
        queue._drop(queue._pop()[0], "expired")


def schedule_ttl(queue: ExpiringQueue) -> None:
    """Arm the timer for the head's expiry (one at a time), so an idle queue still expires
    its messages."""
    if queue._ttl_timer is not None or not queue.messages or queue.deleted:
        return
    head_expires = queue.messages[0][2]
    if not head_expires:
        return
    queue._ttl_timer = queue.clock.call_at(head_expires, queue._on_ttl_timer)


def on_ttl_timer(queue: ExpiringQueue) -> None:
    """The head's expiry is due: expire, deliver what is left, arm the next."""
    queue._ttl_timer = None
    if queue.deleted:
        return
    queue._expire_head()
    queue.drain()
    queue._schedule_ttl()


def touch(queue: ExpiringQueue) -> None:
    """The queue was used (declare, get, consume): restart its ``x-expires`` clock."""
    if queue.expires is None or queue.deleted:
        return
    clock = queue.clock
    queue._last_used = clock.time()
    if queue._expiry_timer is None:
        queue._expiry_timer = clock.call_later(queue.expires / 1000, queue._on_expiry_timer)


def on_expiry_timer(queue: ExpiringQueue) -> None:
    """``x-expires`` is due: delete the queue if it stayed unused that long, else wait on."""
    queue._expiry_timer = None
    if queue.deleted or queue.expires is None:
        return
    if queue.consumers:
        return  # in use; the last consumer to leave restarts the clock
    clock = queue.clock
    remaining = queue._last_used + queue.expires / 1000 - clock.time()
    if remaining > 0:
        queue._expiry_timer = clock.call_later(remaining, queue._on_expiry_timer)
        return
    queue.vhost.delete_queue(queue)
