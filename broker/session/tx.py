"""Transactions and publisher confirms as rabbit_channel decides them (tx.select/commit/
rollback, confirm.select and the confirms' acks and nacks), from plain values.

A channel is transactional or in confirm mode, never both (406 either way). In a
transaction, publishes and acks are held as actions (the acks' deliveries leave the
ledger at once, staged: :meth:`leveret.session.ledger.Ledger.stage`); commit runs them in
order, rollback drops the publishes and gives the acks back. Confirms are numbered per
channel from 1 and acked in ``multiple`` runs between the (rare) nacks of publishes a
queue refused, as RabbitMQ groups them; a persistent publish not yet on disk holds back
every later confirm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from leveret.node.errors import PRECONDITION_FAILED, AMQPChannelError

# A held publish or ack: run at commit. A publish returns (rejected, group-commit
# generation that makes it durable).
Action = Callable[[], object]
# A confirm: (delivery tag, multiple, ack: False for a nack).
Confirm = tuple[int, bool, bool]


def confirm_select(transactional: bool) -> None:
    """confirm.select: not on a transactional channel (rabbit_channel)."""
    if transactional:
        raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode")


def tx_select(confirm: bool, tx: list[Action] | None) -> list[Action]:
    """tx.select: not in confirm mode; the transaction's held actions (a second select
    keeps the open transaction)."""
    if confirm:
        raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
    return [] if tx is None else tx


class Staged(Protocol):
    """A delivery-tag ledger as a transaction ends it
    (:class:`leveret.session.ledger.Ledger` implements it): its staged acks become final
    or are undone."""

    def commit(self) -> None:
        """:meth:`leveret.session.ledger.Ledger.commit`."""

    def rollback(self) -> None:
        """:meth:`leveret.session.ledger.Ledger.rollback`."""


def _transactional(tx: list[Action] | None) -> list[Action]:
    if tx is None:
        raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional")
    return tx


def tx_commit(ledger: Staged, tx: list[Action] | None) -> list[Action]:
    """tx.commit: 406 outside a transaction; the staged acks are final. Returns the held
    actions, for the caller to :func:`run` once it has let go of what it held for them."""
    actions = _transactional(tx)
    ledger.commit()
    return actions


def run(actions: list[Action]) -> int:
    """Run committed actions in order; the group-commit generation the commit-ok waits
    for (0: nothing to wait for)."""
    generation = 0
    for action in actions:
        result = action()
        if isinstance(result, tuple):
            generation = max(generation, result[1])
    return generation


def tx_rollback(ledger: Staged, tx: list[Action] | None) -> None:
    """tx.rollback: 406 outside a transaction; the held publishes are dropped (by the
    caller) and the staged acks undone, their deliveries unacked again in tag order."""
    _transactional(tx)
    ledger.rollback()


def confirms_due(
    confirmed_upto: int, upto: int, nacks: list[int]
) -> tuple[list[Confirm], int, int]:
    """The confirms to send for publishes ``confirmed_upto + 1 .. upto``: ``multiple``
    acks for the runs between the sequence numbers in ``nacks`` (in order; those covered
    are taken off it), each of which is nacked alone. Returns the confirms, the new
    ``confirmed_upto`` and how many publishes were acked (the broker's confirmed count)."""
    confirms: list[Confirm] = []
    acked = 0
    start = confirmed_upto
    while nacks and nacks[0] <= upto:
        nack = nacks.pop(0)
        if nack - 1 > start:
            confirms.append((nack - 1, nack - 1 - start > 1, True))
            acked += nack - 1 - start
        confirms.append((nack, False, False))
        start = nack
    if upto > start:
        confirms.append((upto, upto - start > 1, True))
        acked += upto - start
    return confirms, max(upto, start), acked
