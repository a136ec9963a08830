"""A durable queue's side of the message store: writing, marking and forgetting its messages.

A persistent message of a durable queue (every message of a durable quorum queue) is appended
to :mod:`leveret.storage.messages` on publish, marked delivered when a consumer takes it,
acked in the store when it leaves the queue for good, and read back at start-up. None of it
runs for a transient message (``message.store_ids`` is None), so the plain path never enters
here. Functions over :class:`leveret.queue.Queue`, which binds them as its methods, kept
apart so the queue module holds dispatch and the delivery verbs; they see it as a
:class:`StoredQueue`, which lists what they use, so this module does not import
:mod:`leveret.queue`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from leveret.message import Message

if TYPE_CHECKING:
    from leveret.clock import Clock
    from leveret.persistence import Persistence
    from leveret.prioritydeque import Entry
    from leveret.storage.messages import MessageStore
    from leveret.storage.segments import StoredMessage


class StoringHome(Protocol):
    """A queue's vhost as its side of the store sees it."""

    @property
    def name(self) -> str:
        """The vhost's name (half of the queue's key in the store)."""

    @property
    def persistence(self) -> Persistence | None:
        """The store's sync and marks (None: nothing is durable)."""


class StoredQueue(Protocol):
    """A durable queue as its side of the store sees it (:class:`leveret.queue.Queue`
    implements it; the functions below are its methods)."""

    expiring: bool
    seq: int

    @property
    def clock(self) -> Clock:
        """Its vhost's clock (stored expiries are its wall times, ready ones its times)."""

    @property
    def vhost(self) -> StoringHome:
        """Its vhost."""

    @property
    def name(self) -> str:
        """Its name."""

    @property
    def store(self) -> MessageStore | None:
        """The message store (None: not durable)."""

    @property
    def deleted(self) -> bool:
        """Whether it was deleted."""

    def _push(self, entry: Entry) -> None:
        """Append a ready entry."""

    def _schedule_ttl(self) -> None:
        """Arm the head's expiry timer."""


def persist(queue: StoredQueue, message: Message, ttl: int | None) -> None:
    """Write a persistent message of this durable queue to the message store."""
    store = queue.store
    assert store is not None
    expires = queue.clock.wall_ms() + ttl if ttl is not None else 0
    msg_id = store.append(
        (queue.vhost.name, queue.name),
        message.exchange,
        message.routing_key,
        message.header,
        message.body,
        expires=expires,
    )
    if message.store_ids is None:
        message.store_ids = {}
    message.store_ids[queue.name] = msg_id
    persistence = queue.vhost.persistence
    assert persistence is not None
    message.sync_gen = persistence.appended()


def forget(queue: StoredQueue, message: Message) -> None:
    """The message left this queue for good: drop it from the store."""
    ids = message.store_ids
    msg_id = ids.pop(queue.name, None) if ids is not None else None
    if msg_id is not None and queue.store is not None and not queue.deleted:
        queue.store.ack((queue.vhost.name, queue.name), msg_id)
        assert queue.vhost.persistence is not None
        queue.vhost.persistence.marks_changed()


def mark_delivered(queue: StoredQueue, message: Message) -> None:
    """A stored message went to a consumer: after a restart it comes back redelivered."""
    ids = message.store_ids
    msg_id = ids.get(queue.name) if ids is not None else None
    if msg_id is not None and queue.store is not None:
        queue.store.delivered((queue.vhost.name, queue.name), msg_id)
        assert queue.vhost.persistence is not None
        queue.vhost.persistence.marks_changed()


def restore(queue: StoredQueue, stored: list[StoredMessage], all_redelivered: bool = False) -> None:
    """Put messages recovered from the store back, in order (start-up).

    ``all_redelivered``: flag every message ``redelivered``, whatever its delivered mark
    says (after a kill, a mark made since the last sync may not be on disk)."""
    clock = queue.clock
    now = clock.wall()
    for item in stored:
        message = Message(item.exchange, item.routing_key, item.header, item.body)
        message.store_ids = {queue.name: item.msg_id}
        expires = 0.0
        if item.expires:
            expires = clock.time() + (item.expires / 1000 - now)
            queue.expiring = True
        queue.seq += 1
        queue._push((message, all_redelivered or item.redelivered, expires, queue.seq))
    if queue.expiring:
        queue._schedule_ttl()
