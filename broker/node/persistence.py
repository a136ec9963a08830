"""The broker's side of durability: the definitions log, the message store, group commit.

``storage/`` knows bytes and files; this module decides what is durable and when a client
may be told. Durable topology (durable exchanges and queues, bindings between durable
ends) is appended to the definitions log and fsynced before the ``*-Ok`` goes out;
start-up replays the log through the same :meth:`leveret.node.vhost.VHost.apply` that live
commands use. Persistent messages (delivery mode 2) in durable queues go to the message
store; their publisher confirms wait for the fsync that covers them. One fsync runs at a
time in a worker thread and covers everything appended before it started (group commit):
the more publishers, the more messages per fsync. Messages that ``x-delayed-message``
exchanges keep back have a store of their own (``DATA/delayed``, broker/delayed.py), synced
by the same group commit.

Damaged metadata never destroys stored messages. At start-up, the persistent messages of a
queue that the definitions log does not declare (its declaration was lost to a damaged log
and skipped by ``--force-recovery``, or the log was replaced) are *kept aside*: they stay in
the message store, unacked and never deleted (their segments are kept), and are not
delivered. Every start-up while there are any logs a warning with their count per queue
(:attr:`Persistence.aside`). The rule for getting them back:

* at a start-up where the definitions log declares that queue (the original log put back),
  they are restored into it like any other stored message;
* when a durable queue of that name is declared in that vhost while the broker runs (by a
  client, the management API or a definitions import), they are read back from the store and
  restored into it at once, before the ``Declare-Ok`` (whose message count includes them);
* to discard them, declare the queue (durable) and delete or purge it.

A non-durable or exclusive queue of that name does not take them (it could not keep them
across a restart). Messages of a queue deleted at the moment the broker was killed (the
delete logged, its acks not yet written) are kept aside the same way, rather than guessed to
be garbage. The delayed-message store is keyed by vhost, which the definitions log does not
hold, and keeps its behaviour: records of a vhost that no longer exists are dropped.

A full disk never poisons the store (RabbitMQ's disk alarm, broker/disk.py, should stop
publishers before it comes to that; a quota or a file size limit is not seen by it). When a
sync fails for want of room (ENOSPC, EDQUOT, EFBIG), the store cuts its files back and keeps
what it could not write (storage/messages.py); the publisher confirms that waited for that
sync are sent as ``basic.nack`` (the messages stay in their queues, and are written with
the next sync that succeeds), and the next sync is tried at the next publish, ack or
delivery, and at least every :data:`RETRY_INTERVAL` seconds while something waits, so the
store recovers by itself when space returns. ``tx.commit-ok`` and the management API's
publish wait for that later sync instead (a commit cannot be nacked). Any other error stops
the store for good (it refuses further writes; see storage/messages.py): the waiting
confirms are nacked, and the broker must be restarted once the disk is looked at.
Consumers free the disk by themselves: :meth:`Persistence.reclaim` deletes every segment
whose messages are all acked, the one being appended to included, soon after the ack that
emptied it (storage/messages.py, "Reclaiming"), so a disk alarm clears and a full disk takes writes
again without a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.exchanges.model import (
    DestKind,
    Event,
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared,
    QueueDeleted,
)
from leveret.node.errors import RESOURCE_ERROR, AMQPChannelError
from leveret.node.peers import ChannelPeer
from leveret.storage.errors import AccessFileError, StoreClosedError
from leveret.storage.files import create_atomically, fsync_dir, gc_paused, out_of_space
from leveret.storage.log import DefinitionLog
from leveret.storage.messages import MessageStore
from leveret.storage.segments import QueueKey

if TYPE_CHECKING:
    from leveret.node.vhost import VHost


log = logging.getLogger(__name__)
# Users, permissions and vhosts (RabbitMQ's definitions.json shape), rewritten atomically on
# every change: small, rare, and not worth a log of their own.
USERS_FILE = "users.json"
# Written by a clean stop, removed at start: when it is missing at start the broker was
# killed, and delivered marks written since the last sync may be lost, so every recovered
# message is flagged ``redelivered`` (the flag means "may have been delivered"; a consumer
# that deduplicates relies on it never being false for a message it has seen).
CLEAN_STOP_FILE = "clean-stop"
# Seconds between attempts to write what a failed sync left (a full disk), while nothing
# else triggers a sync.
RETRY_INTERVAL = 1.0
# Reclaiming (Persistence.reclaim): every RECLAIM_INTERVAL seconds, and as soon as acks have
# emptied segments of RECLAIM_SOON bytes or more (a consumer draining a backlog: the space
# comes back without waiting, which is what clears a disk alarm), but never twice within
# RECLAIM_GAP seconds (a consumer keeping up empties the head again and again; each
# reclaim of it rolls it over to a new file).
RECLAIM_INTERVAL = 5.0
RECLAIM_SOON = 4 * 1024 * 1024
RECLAIM_GAP = 1.0


class Persistence:
    """The open log and store of a data directory, plus the group-commit state."""

    def __init__(self, data_dir: Path, *, force_recovery: bool = False) -> None:
        """Open the data directory. ``force_recovery``: start even if the definitions log
        has a damaged record with sound records after it, skipping the damaged bytes (saved
        aside); without it, that raises :class:`leveret.storage.CorruptLogError`."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        started = time.monotonic()
        marker = data_dir / CLEAN_STOP_FILE
        # Removed (durably) before anything is delivered: a kill from now on is unclean.
        self.clean_start = marker.exists()
        if self.clean_start:
            marker.unlink()
            fsync_dir(data_dir)
        # Messages left in the store whose queue is unknown, by queue: see the module doc.
        self.aside: dict[QueueKey, int] = {}
        with gc_paused():
            self.log = DefinitionLog.open(
                data_dir / "definitions.log", force_recovery=force_recovery
            )
            self.store = MessageStore.open(data_dir / "msgs")
            self.delayed = MessageStore.open(data_dir / "delayed")
        log.info("opened %s in %.3fs", data_dir, time.monotonic() - started)
        # Group commit: ``appended`` counts sync generations with unsynced messages;
        # ``synced`` is the last generation known to be on disk.
        self.generation = 0
        self.synced = 0
        self._dirty = False
        self._syncing = False
        self._listeners: set[Callable[[int], None]] = set()
        # Released delayed messages whose records wait for the sync of their generation.
        self._released: list[tuple[int, list[tuple[QueueKey, int]]]] = []
        # A sync failed for want of room and none has succeeded since; the timer that
        # tries again when nothing else does.
        self.failing = False
        self._broken = False  # the store refuses further use (logged once)
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._reclaim_soon: asyncio.Event | None = None  # set: reclaim without waiting

    # -- topology ---------------------------------------------------------------------

    @staticmethod
    def is_durable(vhost: VHost, event: Event) -> bool:
        """Whether ``event`` changes durable topology (and so belongs in the log)."""
        projection = vhost.projection
        if isinstance(event, ExchangeDeclared):
            return event.exchange.durable and event.exchange.name != ""
        if isinstance(event, QueueDeclared):
            return event.queue.durable and not event.queue.exclusive
        if isinstance(event, ExchangeDeleted):
            exchange = projection.exchanges.get(event.name)
            return exchange is not None and exchange.durable
        if isinstance(event, QueueDeleted):
            queue = projection.queues.get(event.name)
            return queue is not None and queue.durable
        # The rest of Event: BindingAdded and BindingRemoved.
        binding = event.binding
        source = projection.exchanges.get(binding.source)
        if source is None or not source.durable:
            return False
        if binding.kind is DestKind.EXCHANGE:
            destination = projection.exchanges.get(binding.destination)
            return destination is not None and destination.durable
        queue = projection.queues.get(binding.destination)
        return queue is not None and queue.durable and not queue.exclusive

    def record(self, vhost: VHost, event: Event) -> None:
        """Append a durable topology change and fsync it (before the client's ``*-Ok``)."""
        if self.is_durable(vhost, event):
            try:
                self.log.append(vhost.name, event)
            except (OSError, StoreClosedError) as exc:
                # A full disk (or a failed fsync): not on disk, so no *-Ok and no change in
                # memory. The channel is told with 506, as for any resource the node lacks
                # (RabbitMQ would crash the channel with 541 when Mnesia cannot write); the
                # connection, its other channels and the next declare go on.
                log.error("%s: cannot write a record: %s", self.log.path, exc)
                raise AMQPChannelError(
                    RESOURCE_ERROR, f"cannot write the definitions log: {exc}"
                ) from None
            if self.log.needs_compaction():
                # Dead records outnumber live ones: rewrite (temp file, fsync, rename). The
                # record is durable already; a compaction that fails is tried again later.
                try:
                    self.log.compact()
                except (OSError, StoreClosedError) as exc:
                    log.warning("%s: compaction failed, kept as it is: %s", self.log.path, exc)
            if self.aside and isinstance(event, QueueDeclared):
                self._take_back(vhost, event.queue.name)

    # -- messages of unknown queues (see the module doc) ------------------------------

    def keep_aside(self, queue: QueueKey, count: int) -> None:
        """Start-up: ``count`` stored messages of ``queue``, which does not exist, stay in
        the store (unacked) until a durable queue of that name is declared."""
        self.aside[queue] = self.aside.get(queue, 0) + count

    def report_aside(self) -> None:
        """Log what start-up kept aside (a warning: nothing is lost, but it is not served)."""
        if not self.aside:
            return
        shown = sorted(self.aside.items())
        listed = ", ".join(
            f"vhost '{vhost}' queue '{name}': {count}" for (vhost, name), count in shown[:20]
        )
        if len(shown) > 20:
            listed += f", and {len(shown) - 20} more queues"
        log.warning(
            "%d persistent messages of %d queue(s) that the definitions log does not declare "
            "are kept aside in %s (not delivered, not deleted): %s. They return to their "
            "queue when a durable queue of that name is declared in that vhost, or at a "
            "start-up where the definitions log declares it (say, the original log put "
            "back); to discard them, declare the queue and delete or purge it",
            sum(self.aside.values()),
            len(self.aside),
            self.store.directory,
            listed,
        )

    def _take_back(self, vhost: VHost, name: str) -> None:
        key = (vhost.name, name)
        queue = vhost.queues.get(name)
        if key not in self.aside or queue is None or not queue.durable:
            return
        del self.aside[key]
        stored = self.store.reload(key)
        queue.restore(stored, all_redelivered=not self.clean_start)
        log.warning(
            "%d persistent messages kept aside since start-up are back in queue '%s' in "
            "vhost '%s' (declared again)",
            len(stored),
            name,
            vhost.name,
        )

    def sync_now(self) -> None:
        """Make the store's pending acks durable before a purge-ok or delete-ok, so a
        re-declared queue of the same name cannot get old messages back after a crash.

        On a full disk the marks stay pending (written by the next sync that succeeds) and
        the purge or delete goes on: a crash before then may bring the messages back."""
        try:
            self.store.sync()
        except OSError as exc:
            if not out_of_space(exc) or self.store.failed is not None:
                raise
            log.warning(
                "%s: the acks of a purged or deleted queue cannot be written now (%s); "
                "they will be when there is room",
                self.store.directory,
                exc.strerror or exc,
            )
            self.marks_changed()

    async def reclaim(self, interval: float = RECLAIM_INTERVAL) -> None:
        """Background task: compact or delete message segments whose messages were acked,
        in a worker thread (bounded work per call), so publishers never wait for it; every
        ``interval`` seconds, or sooner when acks emptied much (:data:`RECLAIM_SOON`)."""
        loop = asyncio.get_running_loop()
        soon = self._reclaim_soon = asyncio.Event()  # of this loop (a restart makes another)
        while True:
            await asyncio.sleep(RECLAIM_GAP)
            try:
                await asyncio.wait_for(soon.wait(), max(0.0, interval - RECLAIM_GAP))
            except TimeoutError:
                pass
            soon.clear()
            for store in (self.store, self.delayed):
                if store.failed is None and store.needs_compaction():
                    try:
                        result = await loop.run_in_executor(None, store.compact)
                    except OSError as exc:
                        # A full disk (a rewrite needs room for its copy): tried again
                        # next time; deleting acked segments is what frees space.
                        log.warning("%s compaction failed: %s", store.directory, exc)
                        continue
                    log.debug("%s compaction: %s", store.directory, result)

    # -- messages and group commit ----------------------------------------------------

    def appended(self) -> int:
        """A message was appended: the generation whose sync will cover it.

        The sync starts on the next loop iteration (or when the one in flight ends), so
        everything appended meanwhile, by any connection, rides on the same fsync.
        """
        if not self._dirty and not self._syncing:
            asyncio.get_running_loop().call_soon(self._start_sync)
        self._dirty = True
        return self.generation + 1

    def marks_changed(self) -> None:
        """An ack or a "delivered" mark was recorded: write it soon (the next sync), so a
        ``kill -9`` neither resurrects acked messages nor forgets ``redelivered``."""
        if not self._dirty and not self._syncing:
            asyncio.get_running_loop().call_soon(self._start_sync)
        self._dirty = True

    def release_delayed(self, records: list[tuple[QueueKey, int]]) -> None:
        """Forget these delayed-message records (``(vhost, exchange)``, id) once the copies
        their release put in durable queues are on disk: after the sync of a generation
        that starts after every append made so far. A crash before then releases them
        again (twice rather than never)."""
        self._released.append((self.appended(), records))

    def _forget_released(self, upto: int) -> None:
        while self._released and self._released[0][0] <= upto:
            for key, msg_id in self._released.pop(0)[1]:
                self.delayed.ack(key, msg_id)
            self._dirty = True  # the marks go out with the next sync

    def subscribe(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(synced_generation)`` after each completed sync."""
        self._listeners.add(listener)

    def unsubscribe(self, listener: Callable[[int], None]) -> None:
        """Stop calling ``listener``."""
        self._listeners.discard(listener)

    def _start_sync(self) -> None:
        if self._syncing or not self._dirty or self._closed:
            return
        self._syncing = True
        self._dirty = False
        self.generation += 1
        generation = self.generation
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, self._sync_stores)
        future.add_done_callback(lambda f: self._synced(generation, f))

    def _sync_stores(self) -> None:
        # The queues' store first: a released delayed message's record is forgotten only
        # by a later sync than the one that wrote its copies (broker/delayed.py).
        self.store.sync()
        self.delayed.sync()

    def _synced(self, generation: int, future: asyncio.Future[None]) -> None:
        self._syncing = False
        error = future.exception()
        if error is not None:
            self._sync_failed(generation, error)
            return
        if self.failing:
            self.failing = False
            log.warning("message store writes succeed again: stored messages are durable")
        self.synced = generation
        self._forget_released(generation)
        # Once per sync, not per ack: the acks it wrote may have emptied segments enough to
        # reclaim now rather than at the next interval.
        soon = self._reclaim_soon
        if soon is not None and self.store.emptied + self.delayed.emptied >= RECLAIM_SOON:
            soon.set()
        for listener in list(self._listeners):
            listener(generation)
        self._start_sync()

    def _sync_failed(self, generation: int, error: BaseException) -> None:
        """The sync of ``generation`` failed: nack the confirms that waited for it, then
        try again (out of room) or stop (anything else; see the module doc)."""
        if self._closed:
            return  # a sync that ended after the stores were closed: nothing waits for it
        broken = self.store.failed or self.delayed.failed
        if broken is not None:
            if not self._broken:
                self._broken = True
                log.error(
                    "message store sync failed: %s; persistent messages can no longer be "
                    "stored (restart the broker once the disk is checked)",
                    broken,
                )
        elif not self.failing:
            log.warning(
                "message store sync failed: %s; publishes waiting for it are nacked, and "
                "writes are tried again until they succeed",
                error,
            )
        self.failing = True
        _nack_waiting(self._listeners, generation)
        if broken is not None:
            return
        if self._dirty:
            self._start_sync()  # published meanwhile: their own attempt, now
        elif self._retry is None:
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(RETRY_INTERVAL, self._try_again)

    def _try_again(self) -> None:
        self._retry = None
        if self.failing and not self._closed:
            self._dirty = True
            self._start_sync()

    def save_access(self, document: dict[str, Any]) -> None:
        """Write users, permissions and vhosts (``DATA/users.json``) all or nothing."""
        data = json.dumps(document, indent=1, sort_keys=True).encode("utf-8")
        create_atomically(self.data_dir / USERS_FILE, data)

    def load_access(self) -> dict[str, Any] | None:
        """The saved user database, or None on a first start."""
        path = self.data_dir / USERS_FILE
        if not path.exists():
            return None
        try:
            document = json.loads(path.read_text("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AccessFileError(
                f"{path}: not a saved user database ({exc}); restore it from a backup, or "
                "remove it to start from the configured users"
            ) from None
        if not isinstance(document, dict):
            raise AccessFileError(f"{path}: not a saved user database (not a JSON object)")
        return document

    def compact(self) -> None:
        """Start-up compaction of the log when dead records pile up."""
        if self.log.needs_compaction():
            self.log.compact()

    def close(self) -> None:
        """Flush and close the log and the store. When something cannot be written (a full
        disk) it is logged, and the next start treats this stop as a crash."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        clean = self.store.failed is None and self.delayed.failed is None
        try:
            self.store.close()  # syncs first
        except OSError as exc:
            clean = False
            log.error("%s: not everything could be written at shutdown: %s", self.data_dir, exc)
        if clean:
            self._forget_released(self.generation + 1)  # everything appended is on disk
        try:
            self.delayed.close()
        except OSError as exc:
            clean = False
            log.error("%s: not everything could be written at shutdown: %s", self.data_dir, exc)
        self.log.close()
        if not clean:
            return
        try:
            # Every mark is on disk: the next start may trust the delivered flags.
            create_atomically(self.data_dir / CLEAN_STOP_FILE, b"")
        except OSError as exc:
            log.warning("%s: could not note the clean stop: %s", self.data_dir, exc)

    def abandon(self) -> None:
        """Stop as ``kill -9`` stops the process (an injected fault, broker/faults.py):
        nothing still in memory is written, no clean-stop marker, so the next start
        recovers as after a crash (every recovered message flagged ``redelivered``)."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self.store.abandon()
        self.delayed.abandon()
        self.log.close()  # its appends are fsynced one by one: nothing to lose


def _nack_waiting(listeners: set[Callable[[int], None]], generation: int) -> None:
    """The sync of ``generation`` failed: every publisher confirm that waits for it becomes
    a ``basic.nack``.

    Channels wait for syncs by subscribing their ``_on_synced`` (broker/channel.py): the
    publishes it covers are in ``channel.waiting`` as ``(sequence number, generation)``;
    moved to ``channel.nacks`` and handed over as if synced, they go out as nacks (and the
    publishes between them as acks) through the channel's own ``flush_confirms``. A channel
    in tx mode (``pending_commits``) and other listeners (the management API's publish) are
    left waiting for a sync that succeeds.
    """
    for listener in list(listeners):
        # A bound method of a channel (its ``_on_synced``), seen through a protocol: the
        # store never names the wire that listens to it.
        channel = getattr(listener, "__self__", None)
        if not isinstance(channel, ChannelPeer) or channel.pending_commits:
            continue
        nacked = set(channel.nacks)  # refused by a queue as well: one nack only
        failed = [s for s, waited in channel.waiting if waited <= generation and s not in nacked]
        if channel.waiting and channel.waiting[0][1] <= generation:  # in generation order
            channel.nacks.extend(failed)
            channel.nacks.sort()
            listener(generation)
