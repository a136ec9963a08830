"""The delivery-tag ledger of one channel (sans-IO: no asyncio, no pamqp).

Delivery tags are per channel, start at 1 and never repeat; unacknowledged deliveries are
kept in tag order, so a ``multiple`` ack, nack or reject covers every tag up to its own
(0: all of them) and requeues keep message order (AMQP 0-9-1 basic.ack; rabbit_channel's
``unacked_message_q``). A tag that is not unacked is 406 ``unknown delivery tag N``
(rabbit_channel:collect_acks/4), also for a ``multiple`` one, whatever lies below it.

Prefetch (basic.qos): ``prefetch_count`` is the limit given to consumers created from now
on (``global=false``), ``global_prefetch`` a limit on the whole channel's unacked
deliveries (``global=true``, as RabbitMQ 3.13 reads it); 0 is no limit. A consumer's own
count and limit live on the consumer (leveret.queue.Consumer, whose capacity check inlines
:func:`has_room` and :meth:`Ledger.channel_has_room`, once per delivery).

In a transaction, acks are taken out of the ledger at once (a later ack of the same tag is
unknown, as in RabbitMQ) but only staged: commit settles them, rollback puts them back.

The ledger knows nothing of queues and messages: a record is whatever the channel keeps
for a delivery. The wire channel inherits it, so the hot path reads ``unacked`` and
``next_tag`` as plain attributes (no indirection per message). It is a mypyc trait: the
compiled build (setup.py) compiles the channel as a native class, which may have one
concrete base (the session's Publisher) and traits beside it. :class:`StandaloneLedger` is
a ledger on its own.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr, trait

from leveret.node.errors import PRECONDITION_FAILED, AMQPChannelError

R = TypeVar("R")


def has_room(unacked: int, limit: int) -> bool:
    """Whether one more delivery fits under a prefetch ``limit`` (0: no limit)."""
    return not limit or unacked < limit


def unknown_tag(tag: int) -> AMQPChannelError:
    """406 for an ack, nack or reject of a tag that is not unacked."""
    return AMQPChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")


@trait
@mypyc_attr(allow_interpreted_subclasses=True)
class Ledger(Generic[R]):
    """Unacked deliveries of a channel, by tag, with its prefetch limits."""

    unacked: OrderedDict[int, R]
    next_tag: int
    prefetch_count: int
    global_prefetch: int
    tx_acks: list[tuple[int, R]]

    def open_ledger(self) -> None:
        """Start empty: the first tag is 1, no prefetch limit (as a channel opens)."""
        self.unacked = OrderedDict()
        self.next_tag = 1
        self.prefetch_count = 0  # for consumers created after basic.qos(global=false)
        self.global_prefetch = 0  # basic.qos(global=true): a limit for the channel
        self.tx_acks = []  # taken in the open transaction

    def record(self, delivery: R | None) -> int:
        """A new delivery tag; ``delivery`` (None: a no-ack one) is unacked under it.
        (The channel's deliver inlines this: once per delivery.)"""
        tag = self.next_tag
        self.next_tag = tag + 1
        if delivery is not None:
            self.unacked[tag] = delivery
        return tag

    def qos(self, prefetch_count: int, global_: bool) -> None:
        """basic.qos: the channel's limit (``global_``) or the one for new consumers."""
        if global_:
            self.global_prefetch = prefetch_count
        else:
            self.prefetch_count = prefetch_count

    def channel_has_room(self) -> bool:
        """Whether the channel's own limit (``global`` qos) allows one more delivery."""
        return has_room(len(self.unacked), self.global_prefetch)

    def covered(self, tag: int, multiple: bool) -> list[R]:
        """The unacked deliveries an ack/nack/reject of ``tag`` would cover, left in place
        (so a refusal can be checked before anything is settled)."""
        if multiple:
            return [r for t, r in self.unacked.items() if not tag or t <= tag]
        record = self.unacked.get(tag)
        return [record] if record is not None else []

    def take(self, tag: int, multiple: bool) -> list[tuple[int, R]]:
        """Remove and return, in tag order, the unacked deliveries an ack, nack or reject
        covers; 406 ``unknown delivery tag`` when ``tag`` is not unacked."""
        unacked = self.unacked
        if multiple:
            if tag != 0 and tag not in unacked:
                raise unknown_tag(tag)
            taken = []
            while unacked:
                first = next(iter(unacked))
                if tag and first > tag:
                    break
                taken.append((first, unacked.pop(first)))
            return taken
        record = unacked.pop(tag, None)
        if record is None:
            raise unknown_tag(tag)
        return [(tag, record)]

    def take_all(self) -> list[tuple[int, R]]:
        """Remove and return every unacked delivery in tag order (recover, close)."""
        taken = list(self.unacked.items())
        self.unacked.clear()
        return taken

    def oldest(self) -> tuple[int, R] | None:
        """The oldest unacked delivery (the consumer timeout looks only at it)."""
        for tag, record in self.unacked.items():
            return tag, record
        return None

    # -- transactions -----------------------------------------------------------------

    def stage(self, taken: list[tuple[int, R]]) -> None:
        """Keep acks taken in a transaction until it commits or rolls back."""
        self.tx_acks.extend(taken)

    def commit(self) -> None:
        """tx.commit: the staged acks are final (the channel applies them)."""
        self.tx_acks = []

    def rollback(self) -> None:
        """tx.rollback (or the channel closing): the staged acks are undone, their
        deliveries unacked again in tag order."""
        if not self.tx_acks:
            return
        restored = sorted([*self.tx_acks, *self.unacked.items()], key=lambda item: item[0])
        self.unacked.clear()
        self.unacked.update(restored)
        self.tx_acks = []


@mypyc_attr(allow_interpreted_subclasses=True)
class StandaloneLedger(Ledger[R]):
    """A ledger on its own, not mixed into a channel (the session tests' subscriber)."""

    def __init__(self) -> None:
        self.open_ledger()
