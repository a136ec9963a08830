"""A channel's transactions and the confirms that wait for the disk, as frames.

confirm.select and tx.select/commit/rollback (a channel is one or the other: the rules and
the confirms' arithmetic are the session's, :mod:`leveret.session.tx`), and the fsync
waits under both: a persistent publish is confirmed, and a commit answered, only once the
group commit that holds it is synced (``persistence.subscribe``). :meth:`Channel._confirm`,
run per publish in confirm mode, stays in :mod:`leveret.channel`; these run per select,
commit or fsync, or once per read (``flush_confirms``), and are functions that take the
channel, bound as its methods. They see it as :class:`Transacted`, which lists what they
use, so this module does not import :mod:`leveret.channel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret.channel_stats import count_confirms
from leveret.session import tx

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from leveret.events import Client
    from leveret.session.publish import ExchangeStats, SessionCounters
    from leveret.vhost import VHost


class Transacted(Protocol):
    """A channel as its transactions and confirms see it (:class:`leveret.channel.Channel`
    implements it; the functions below are its methods): its modes, the held publishes,
    the confirms and commits that wait for an fsync, and its ledger's staged acks."""

    tx: list[Callable[[], object]] | None
    confirm: bool
    tx_publishes: int
    confirmed_upto: int
    confirm_runs: list[tuple[int, ExchangeStats]]

    @property
    def open(self) -> bool:
        """Whether it is still open (a closed one confirms nothing)."""

    @property
    def vhost(self) -> VHost:
        """Its connection's vhost (its store's fsyncs, its events)."""

    @property
    def id(self) -> int:
        """The channel number (events name the channel a confirm went out on)."""

    @property
    def conn(self) -> Client:
        """Its connection."""

    @property
    def counters(self) -> SessionCounters:
        """Its publish counters (confirms)."""

    @property
    def publish_seq(self) -> int:
        """The sequence number of its last publish in confirm mode."""

    @property
    def nacks(self) -> list[int]:
        """Sequence numbers to nack at the next flush."""

    @property
    def waiting(self) -> deque[tuple[int, int]]:
        """(seq, generation): persistent publishes whose confirm waits for an fsync."""

    @property
    def pending_commits(self) -> deque[int]:
        """tx.commit-oks waiting for an fsync, by generation, in order."""

    def send(self, method: Any) -> None:
        """Send a pamqp method on this channel."""

    def commit(self) -> None:
        """The ledger's staged acks are final."""

    def rollback(self) -> None:
        """The ledger's staged acks are undone."""

    def flush_confirms(self) -> None:
        """:func:`flush_confirms`."""

    def _on_synced(self, generation: int) -> None:
        """:func:`on_synced`."""

    def _release_held(self) -> None:
        """Stop counting the uncommitted messages against the memory watermark."""


B = commands.Basic


def confirm_select(channel: Transacted, m: commands.Confirm.Select) -> None:
    """confirm.select: publisher confirms from here (:func:`leveret.session.tx.confirm_select`)."""
    tx.confirm_select(channel.tx is not None)
    channel.confirm = True
    if not m.nowait:
        channel.send(commands.Confirm.SelectOk())


def tx_select(channel: Transacted, _m: commands.Tx.Select) -> None:
    """tx.select: publishes and acks are held until tx.commit (not in confirm mode)."""
    channel.tx = tx.tx_select(channel.confirm, channel.tx)
    channel.send(commands.Tx.SelectOk())


def tx_commit(channel: Transacted, _m: commands.Tx.Commit) -> None:
    """tx.commit: run the held publishes and acks; commit-ok once their messages are on
    disk."""
    actions = tx.tx_commit(channel, channel.tx)
    channel.tx = []
    channel.tx_publishes = 0
    # The committed messages count in their queues from here.
    channel._release_held()
    generation = tx.run(actions)
    persistence = channel.vhost.persistence
    if channel.pending_commits or (persistence is not None and generation > persistence.synced):
        # Committed persistent messages must be on disk before commit-ok.
        if persistence is not None and not channel.waiting and not channel.pending_commits:
            persistence.subscribe(channel._on_synced)
        channel.pending_commits.append(generation)
        return
    channel.send(commands.Tx.CommitOk())


def tx_rollback(channel: Transacted, _m: commands.Tx.Rollback) -> None:
    """tx.rollback: drop the held publishes; the acks are undone, deliveries unacked again."""
    tx.tx_rollback(channel, channel.tx)
    channel.tx = []
    channel.tx_publishes = 0
    channel._release_held()
    channel.send(commands.Tx.RollbackOk())


def wait_for_sync(channel: Transacted, seq: int, generation: int) -> None:
    """Publish ``seq`` is confirmed only after ``generation``'s fsync."""
    persistence = channel.vhost.persistence
    assert persistence is not None
    if generation <= persistence.synced:
        return
    if not channel.waiting and not channel.pending_commits:
        persistence.subscribe(channel._on_synced)
    channel.waiting.append((seq, generation))


def on_synced(channel: Transacted, generation: int) -> None:
    """An fsync finished: confirm what it covered, send due ``tx.commit-ok``s."""
    waiting = channel.waiting
    while waiting and waiting[0][1] <= generation:
        waiting.popleft()
    channel.flush_confirms()
    while channel.pending_commits and channel.pending_commits[0] <= generation:
        channel.pending_commits.popleft()
        channel.send(commands.Tx.CommitOk())
    if not waiting and not channel.pending_commits and channel.vhost.persistence is not None:
        channel.vhost.persistence.unsubscribe(channel._on_synced)


def flush_confirms(channel: Transacted) -> None:
    """Confirm every publish so far (:func:`leveret.session.tx.confirms_due`)."""
    if not channel.open:
        return
    # Persistent publishes not yet on disk hold back every later confirm.
    upto = channel.waiting[0][0] - 1 if channel.waiting else channel.publish_seq
    start = channel.confirmed_upto
    confirms, channel.confirmed_upto, acked = tx.confirms_due(start, upto, channel.nacks)
    events = channel.vhost.events
    for tag, multiple, ack in confirms:
        channel.send(B.Ack(tag, multiple) if ack else B.Nack(tag, False, False))
        if events is not None:
            events.confirmed(channel, tag, multiple, ack)
    channel.counters.confirmed += acked
    if confirms:
        count_confirms(channel.confirm_runs, start, confirms)  # per exchange
