"""The message store: persistent messages of durable queues, in append-only segments.

Theory of operation
-------------------
The file format is in :mod:`leveret.storage.segments`. The store keeps in memory only what it needs
to account for liveness: for each queue, ``msg_id -> body size << SIZE_SHIFT | segment
number << 1 | delivered bit`` of its unacked messages (and their count and body bytes, what
``rabbitmq_queue_messages_persistent`` and ``..._persistent_bytes`` report), and per
segment the counts of records and live messages. The messages themselves live in the
broker's queues; the store hands them back once, at start-up (:meth:`MessageStore.recover`).
What it does with its files is counted in :attr:`MessageStore.io`
(:mod:`leveret.storage.iostats`).

Durability contract:

* :meth:`~MessageStore.append` returns an id at once and writes nothing: the record waits in
  memory. :meth:`~MessageStore.sync` writes everything appended so far and fsyncs it (group
  commit), then returns the highest id it covers. A publisher confirm for a message may go
  out once a ``sync()`` that returned an id >= the message's id has returned.
* :meth:`~MessageStore.ack`, :meth:`~MessageStore.delivered` and
  :meth:`~MessageStore.drop_queue` add marks that the next ``sync()`` writes but does not
  fsync (they are fsynced by :meth:`~MessageStore.compact` and
  :meth:`~MessageStore.close`). A kill -9 loses none of them (they are in the page cache); a
  power cut may lose recent ones, which means redeliveries, never losses.
* A message acked before it was synced is still written (and its ack with it), unless
  its whole segment is dead by then and deleted (see Reclaiming).

Reclaiming (:meth:`~MessageStore.compact`, meant for a worker thread every few seconds,
and sooner when :attr:`~MessageStore.emptied` says there is much to free): a segment whose
messages are all acked is deleted (``msgs.N``, then the directory is fsynced, then
``acks.N``: a crash in between leaves an orphan mark file, which the next open deletes),
the one being appended to included: it is rolled over first (why not truncated, and why
records of it never written may be dropped: below). At most
one segment whose live messages are fewer than ``rewrite_ratio`` of its records is
rewritten per call: its live records are copied to ``msgs.N.tmp``, fsynced and renamed
over ``msgs.N``. Its mark file stays as it is (marks of messages no longer in the segment
are ignored), so acks arriving during the rewrite are never lost. Rewriting is bounded to
one segment, and holds the lock only in short slices, so
publishers never wait for it.

A segment with no live record is deleted whether or not it is the head (the one being
appended to). The head is first *rolled over*: a new, empty head takes the next number (its
file is created by the next write, as at any rotation), and the old one is deleted like any
other dead segment. Rolling over rather than truncating the head in place keeps the
crash-safety argument the one it was: files are only ever appended to, cut back to what
they held before a failed write, or deleted whole (segment, directory fsync, marks).
Truncating would leave ``acks.N`` naming ids that ``msgs.N`` no longer holds while new
records reuse the file, and ids could then be handed out again after a restart (the next
id is read back from the files): a stale ack mark would hide a confirmed message. With a
roll over, a new number starts empty and ids only grow while any file of the store exists.

A dead segment may still hold records that were never written (acked before the sync that
would have written them, or kept for a retry because the disk was full): they are dropped
with it. No confirm ever covered them (a confirm waits for the sync that writes its
record), and their messages are gone from every queue, so nothing needs them; this is what
lets consumers free a truly full disk, where those records could never be written.

Messages of a queue the caller does not know at start-up need not be dropped: left alone
they stay live (their segments are kept and rewritten like any other), and
:meth:`~MessageStore.reload` reads them back from the segments when their queue is back (the
broker's rule is in ``broker/persistence.py``). Recovery reads segments of format version 1
and 2 (:mod:`leveret.storage.segments`); appends only go to version 2 segments.

Threads: every method may be called from any thread. ``append``, ``ack``, ``delivered`` and
``drop_queue`` take one short lock and do no I/O: call them from the event loop. ``sync`` and
``compact`` do the I/O and belong in worker threads; concurrent ``sync`` calls serialize
(each still covers everything appended before it started).

Failed writes. A ``sync()`` whose write or fsync fails for want of room (ENOSPC, EDQUOT,
EFBIG: :data:`~storage.files.OUT_OF_SPACE`, a full disk, a quota, a file size limit) raises
the ``OSError`` and leaves the store usable: each file is cut back to what it held before
(``ftruncate`` to the size it had, so no partial record stays in it), and what was not
written (records, marks) goes back in front of the pending ones, to be written by the next
``sync()``, which therefore covers everything that failed. The caller must treat every id
the failed ``sync()`` would have covered as not durable (the broker nacks them) until a
later ``sync()`` returns. This is safe because such an error damages nothing already on
disk: what was fsynced before stays as it was, the bytes past the old size are cut off
(after a crash before the cut reached the disk, recovery cuts them as a torn tail, or keeps
sound records there, which were never confirmed), and the retry writes the same records
again from memory rather than trusting the page cache. Records kept for a retry are held
in memory until it succeeds (as many as the broker's queues hold: the memory alarm bounds
them); a retry writes at most :data:`WRITE_CHUNK` bytes per ``write`` call, so a retry that
fails at once costs little however much is waiting. Any other error (EIO above all, or a
cut that fails) means data may be damaged or the page cache may not match the disk (a
failed fsync may have dropped dirty pages that a retry would then report as written): the
store refuses every later call with :class:`~storage.errors.StoreClosedError`
(:attr:`MessageStore.failed` says why).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from leveret.storage.bookkeeping import CompactResult, SegmentState, StoreStats, write_chunked
from leveret.storage.errors import StoreClosedError
from leveret.storage.files import datasync, fsync_dir, gc_paused, out_of_space, write_all
from leveret.storage.iostats import IoStats
from leveret.storage.segments import (
    ACKED,
    DELIVERED,
    MARKS_HEADER,
    NUMBER_MASK,
    SEGMENT_HEADER,
    SEGMENT_MAGIC,
    SEGMENT_VERSION,
    SIZE_SHIFT,
    QueueKey,
    StoredMessage,
    check_headers,
    iter_numbers,
    iter_records,
    layout_of,
    load_segment,
    mark_record,
    marks_path,
    message_record,
    queue_prefix,
    read_header,
    read_marks,
    read_message,
    replace_segment,
    segment_path,
    upgrade_record,
)

log = logging.getLogger("leveret.storage")

DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
DEFAULT_REWRITE_RATIO = 0.5


_LIVENESS_SLICE = 4096  # records checked per lock hold while rewriting


class MessageStore:
    """Persistent messages of durable queues (see the module doc). Create with :meth:`open`."""

    def __init__(self, directory: Path, segment_size: int, rewrite_ratio: float) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.rewrite_ratio = rewrite_ratio
        self._lock = threading.Lock()  # in-memory state; held briefly, never across I/O
        self._io_lock = threading.Lock()  # file writes; taken before _lock, never after
        self._compact_lock = threading.Lock()
        self._segments: dict[int, SegmentState] = {}  # by number, ascending
        self._head = SegmentState(1)
        self._live: dict[QueueKey, dict[int, int]] = {}
        self._prefixes: dict[QueueKey, tuple[int, int, bytes]] = {}
        self._recovered: dict[QueueKey, list[StoredMessage]] | None = {}
        self._next_id = 1
        self._failed: str | None = None
        self._dir_unsynced = False  # a new segment's name is not durable yet (a failed fsync)
        self._bytes: dict[QueueKey, int] = {}  # body bytes of each queue's live messages
        # Per queue, messages written for it and read back for it (rabbitmq_queue_disk_*).
        self._disk_writes: dict[QueueKey, int] = {}
        self._disk_reads: dict[QueueKey, int] = {}
        self._emptied = 0  # see emptied
        self.io = IoStats()

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        rewrite_ratio: float = DEFAULT_REWRITE_RATIO,
    ) -> MessageStore:
        """Open (or create) the store in ``directory`` and recover its messages, repairing
        torn tails. Raises :class:`~storage.errors.LogFormatError` before repairing
        anything if a file is not ours or is from a newer format version."""
        self = cls(Path(directory), segment_size, rewrite_ratio)
        self.directory.mkdir(parents=True, exist_ok=True)
        numbers = sorted(iter_numbers(self.directory, "msgs."))
        started = time.perf_counter()
        reads, size = check_headers(self.directory)  # refuse a newer format before repairing
        self.io.read(size, started, count=reads)
        for stale in self.directory.glob("msgs.*.tmp"):
            log.warning("%s: removing %s left by an interrupted rewrite", directory, stale.name)
            stale.unlink()
        for number in set(iter_numbers(self.directory, "acks.")) - set(numbers):
            marks_path(self.directory, number).unlink()  # its segment's deletion was cut short
        with gc_paused():
            for number in numbers:
                self._load(number)
        for queue, ids in self._live.items():
            self._bytes[queue] = sum(tag >> SIZE_SHIFT for tag in ids.values())
            self._disk_reads[queue] = len(ids)
        last = self._segments[max(self._segments)] if self._segments else None
        if last is not None and last.size < segment_size and last.version == SEGMENT_VERSION:
            self._head = last
        else:
            self._head = SegmentState(numbers[-1] + 1 if numbers else 1)
            self._segments[self._head.number] = self._head
        return self

    def _load(self, number: int) -> None:
        path = segment_path(self.directory, number)
        data = self._read(path)
        if not read_header(path, data, SEGMENT_MAGIC):
            log.warning("%s: partial header (crash while creating it); removed", path)
            path.unlink()
            marks_path(self.directory, number).unlink(missing_ok=True)
            return
        started = time.perf_counter()
        acked, delivered, top, size = read_marks(marks_path(self.directory, number))
        if size:
            self.io.read(size, started, index=True)
        assert self._recovered is not None
        loaded = load_segment(path, data, number, acked, delivered, self._recovered, self._live)
        self.io.msg_reads += loaded.live
        segment = self._segments[number] = SegmentState(number, on_disk=True)
        segment.records, segment.live, segment.size = loaded.records, loaded.live, loaded.end
        segment.written = loaded.end
        segment.version = layout_of(data).version
        self._next_id = max(self._next_id, loaded.top + 1, top + 1)

    def recover(self) -> dict[QueueKey, list[StoredMessage]]:
        """The unacked messages found by :meth:`open`, per queue in publish order, each with
        ``redelivered`` set if it had been delivered. Call once; it hands the memory over.

        A queue that no longer exists may be given to :meth:`drop_queue`; or its messages
        may be left in the store (they stay live: their segments are kept) and read back
        later with :meth:`reload`, which is what the broker does (``broker/persistence.py``).
        """
        recovered, self._recovered = self._recovered, None
        if recovered is None:
            raise RuntimeError("MessageStore.recover() may only be called once")
        return recovered

    # -- the event loop's calls (no I/O) ---------------------------------------------------

    def append(
        self,
        queue: QueueKey,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        *,
        expires: int = 0,
    ) -> int:
        """Store a message for ``queue`` (``(vhost, name)``) and return its id.

        ``header`` is the content header frame payload, kept as is. Nothing is durable until
        the next :meth:`sync` returns. ``expires`` (ms since the epoch, 0 for never) is
        stored for the broker and otherwise ignored.
        """
        prefix = self._prefixes.get(queue)
        if prefix is None:
            prefix = self._prefixes[queue] = queue_prefix(queue)
        exchange_raw, key_raw = exchange.encode(), routing_key.encode()
        with self._lock:
            if self._failed is not None:
                raise StoreClosedError(f"{self.directory}: {self._failed}")
            msg_id = self._next_id
            record = message_record(msg_id, expires, prefix, exchange_raw, key_raw, header, body)
            self._next_id = msg_id + 1
            segment = self._head
            if segment.records and segment.size + len(record) > self.segment_size:
                segment = SegmentState(segment.number + 1)  # rotate
                self._head = self._segments[segment.number] = segment
            segment.pending.append(record)
            segment.size += len(record)
            segment.records += 1
            segment.live += 1
            ids = self._live.get(queue)
            if ids is None:
                ids = self._live[queue] = {}
            ids[msg_id] = len(body) << SIZE_SHIFT | segment.number << 1
            self._bytes[queue] = self._bytes.get(queue, 0) + len(body)
            self._disk_writes[queue] = self._disk_writes.get(queue, 0) + 1
        return msg_id

    def ack(self, queue: QueueKey, msg_id: int) -> bool:
        """Forget a message (acked, expired, dead-lettered...). False if it was not live."""
        with self._lock:
            ids = self._live.get(queue)
            tag = ids.pop(msg_id, None) if ids is not None else None
            if tag is None:
                return False
            self._bytes[queue] -= tag >> SIZE_SHIFT
            segment = self._segments[tag >> 1 & NUMBER_MASK]
            segment.live -= 1
            segment.marks += mark_record(ACKED, msg_id)
            if not segment.live:
                self._emptied += segment.size
        return True

    def delivered(self, queue: QueueKey, msg_id: int) -> None:
        """Note that a message went to a consumer, so that after a restart it comes back
        with ``redelivered`` set. Only the first call per message writes anything."""
        with self._lock:
            ids = self._live.get(queue)
            tag = None if ids is None else ids.get(msg_id)
            if ids is None or tag is None or tag & 1:
                return
            ids[msg_id] = tag | 1
            self._segments[tag >> 1 & NUMBER_MASK].marks += mark_record(DELIVERED, msg_id)

    def drop_queue(self, queue: QueueKey) -> int:
        """Ack every message of ``queue`` (deleted or purged); returns how many.

        Like acks, the marks are durable after the next :meth:`sync`: call it before replying
        ``Purge-Ok`` / ``Delete-Ok`` if a queue of the same name may be declared again soon.
        """
        with self._lock:
            ids = self._live.pop(queue, None) or {}
            self._prefixes.pop(queue, None)
            for figures in (self._bytes, self._disk_writes, self._disk_reads):
                figures.pop(queue, None)  # a queue declared again later starts from 0
            segments = self._segments
            for msg_id, tag in ids.items():
                segment = segments[tag >> 1 & NUMBER_MASK]
                segment.live -= 1
                segment.marks += mark_record(ACKED, msg_id)
                if not segment.live:
                    self._emptied += segment.size
        return len(ids)

    # -- I/O: worker threads ----------------------------------------------------------------

    def sync(self) -> int:
        """Write and fsync every message appended so far (and write pending marks).

        Returns the highest message id now durable: every ``append`` that returned an id up
        to it, and before this call started, is on disk. Raises the ``OSError`` of a failed
        write or fsync: out of room, the store stays usable and the next call writes what
        failed (see the module doc); anything else, the store refuses further use.
        """
        with self._io_lock:
            with self._lock:
                self._check_usable()
                watermark = self._next_id - 1
                work = [
                    (s, s.pending, s.marks, s.size - s.written)
                    for s in self._segments.values()
                    if s.pending or s.marks
                ]
                for segment, _, _, _ in work:
                    segment.pending, segment.marks = [], bytearray()
                head = self._head
                segments = list(self._segments.values())
            try:
                self._write(work)
                for segment in segments:
                    if segment.fd >= 0 and segment is not head and not segment.pending:
                        os.close(segment.fd)  # rotated away from: no more writes to come
                        segment.fd = -1
            except OSError as exc:
                if self._failed is None and not out_of_space(exc):
                    self._failed = f"sync failed, refusing further use: {exc}"
                raise
        return watermark

    def _write(self, work: list[tuple[SegmentState, list[bytes], bytearray, int]]) -> None:
        if self._dir_unsynced:
            try:
                fsync_dir(self.directory)
            except BaseException:
                self._put_back(work, False)
                raise
            self._dir_unsynced = False
        created = False
        for index, (segment, records, marks, size) in enumerate(work):
            records_done = False
            try:
                if records:
                    created = self._write_records(segment, records, size) or created
                records_done = True
                if marks:
                    self._write_marks(segment, marks)
            except BaseException:  # nothing taken from pending is ever dropped
                self._put_back(work[index:], records_done)
                raise
        if created:
            try:
                fsync_dir(self.directory)  # a new segment's name must survive too
            except OSError:
                self._dir_unsynced = True  # the records are written: only this is retried
                raise

    def _write_records(self, segment: SegmentState, records: list[bytes], size: int) -> bool:
        """Append ``records`` (``size`` bytes, with the header of a new file) to msgs.N and
        fdatasync it; on failure cut the file back. Returns whether the file is new."""
        if segment.fd < 0:
            path = segment_path(self.directory, segment.number)
            segment.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        new = not segment.on_disk
        parts = [SEGMENT_HEADER, *records] if new else records
        try:
            write_chunked(segment.fd, parts, size, self._counted_write)
            started = time.perf_counter()
            datasync(segment.fd)
            self.io.synced(started)
        except BaseException:
            self._cut(segment.fd, segment.written, segment_path(self.directory, segment.number))
            raise
        segment.written += size
        segment.on_disk = True
        self.io.msg_writes += len(records)
        return new

    def _counted_write(self, fd: int, data: bytes | bytearray, index: bool = False) -> None:
        """``write_all`` (the seam tests replace), counted in :attr:`io`."""
        started = time.perf_counter()
        write_all(fd, data)
        self.io.wrote(len(data), started, index=index)

    def _read(self, path: Path) -> bytes:
        """A whole segment file, its read counted in :attr:`io`."""
        started = time.perf_counter()
        data = path.read_bytes()
        self.io.read(len(data), started)
        return data

    def _write_marks(self, segment: SegmentState, marks: bytearray) -> None:
        """Append ``marks`` to acks.N (not fsynced); on failure cut the file back."""
        if segment.marks_fd < 0:
            path = marks_path(self.directory, segment.number)
            segment.marks_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            segment.marks_size = os.fstat(segment.marks_fd).st_size
            if segment.marks_size:
                self.io.reopen_ops += 1  # closed by compact() or a restart, opened again
        data = marks if segment.marks_size else MARKS_HEADER + marks
        try:
            self._counted_write(segment.marks_fd, data, index=True)
        except BaseException:
            path = marks_path(self.directory, segment.number)
            self._cut(segment.marks_fd, segment.marks_size, path)
            raise
        segment.marks_size += len(data)
        segment.marks_unsynced = True

    def _cut(self, fd: int, size: int, path: Path) -> None:
        """After a failed write: cut the file back to ``size`` bytes, so that no partial
        record stays in it (a retry appends after it). If even that fails, stop."""
        try:
            os.ftruncate(fd, size)
        except OSError as exc:
            self._failed = (
                f"could not cut {path.name} back to {size} bytes after a failed write, "
                f"refusing further use: {exc}"
            )

    def _put_back(
        self, work: list[tuple[SegmentState, list[bytes], bytearray, int]], first_written: bool
    ) -> None:
        """A sync failed at ``work[0]`` (its records written already if ``first_written``):
        what was not written goes back in front of what was appended meanwhile."""
        with self._lock:
            for index, (segment, records, marks, _) in enumerate(work):
                if records and not (index == 0 and first_written):
                    segment.pending[:0] = records
                if marks:
                    segment.marks[:0] = marks

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise StoreClosedError(f"{self.directory}: {self._failed}")

    @property
    def emptied(self) -> int:
        """Bytes of the segments whose last live message went (acked, dropped) since
        :meth:`needs_compaction` or :meth:`compact` last ran: about what compacting would
        free now. A hint for when to (read without the lock; a segment that fills and
        empties again counts twice)."""
        return self._emptied

    @property
    def failed(self) -> str | None:
        """Why the store refuses further use (closed, or a write error that may have damaged
        data), or None while it is usable, including after a failed sync it can retry."""
        return self._failed

    # -- compaction (the order and why: the module doc) ---------------------------------

    def needs_compaction(self) -> bool:
        """Whether :meth:`compact` has anything to delete or rewrite."""
        with self._lock:
            self._emptied = 0  # looked at: the hint starts again (MessageStore.emptied)
            return any(self._reclaimable(s) for s in self._segments.values())

    def _reclaimable(self, segment: SegmentState) -> bool:
        if segment.records and not segment.live:
            return True  # dead: deleted, head or not, written or not (see the module doc)
        return (
            segment is not self._head
            and segment.idle
            and segment.live < segment.records * self.rewrite_ratio
        )

    def compact(self) -> CompactResult:
        """Delete fully acked segments, rewrite at most one mostly acked one, and fsync the
        marks written since the last call (see the module doc)."""
        with self._compact_lock:
            with self._io_lock, self._lock:  # no sync is writing meanwhile
                self._check_usable()
                self._emptied = 0
                dead = [s for s in self._segments.values() if s.records and not s.live]
                if self._head in dead:  # roll over (see the module doc)
                    self._head = SegmentState(self._head.number + 1)
                    self._segments[self._head.number] = self._head
                for segment in dead:
                    del self._segments[segment.number]
                    for fd in (segment.fd, segment.marks_fd):
                        if fd >= 0:
                            os.close(fd)
                    segment.fd = segment.marks_fd = -1
                    segment.pending, segment.marks = [], bytearray()  # needed by no one
                reclaimed = sum(s.written for s in dead)
            for segment in dead:
                segment_path(self.directory, segment.number).unlink(missing_ok=True)
            if dead:
                fsync_dir(self.directory)  # segments gone before their marks (module doc)
                for segment in dead:
                    marks_path(self.directory, segment.number).unlink(missing_ok=True)
            self._fsync_marks()
            with self._lock:
                partly = [s for s in self._segments.values() if self._reclaimable(s)]
                victim = min(partly, key=lambda s: s.live / s.records, default=None)
            if victim is not None:
                reclaimed += self._rewrite(victim)
            return CompactResult(len(dead), int(victim is not None), reclaimed)

    def _fsync_marks(self) -> None:
        with self._io_lock:
            with self._lock:
                segments = list(self._segments.values())
            for segment in segments:
                if segment.marks_unsynced:
                    started = time.perf_counter()
                    os.fsync(segment.marks_fd)
                    self.io.synced(started)
                    segment.marks_unsynced = False
                if segment.marks_fd >= 0 and segment is not self._head:
                    os.close(segment.marks_fd)  # reopened on the next mark, if any
                    segment.marks_fd = -1

    def _rewrite(self, segment: SegmentState) -> int:
        """Copy the live records of an idle segment to a new file (of the current format
        version) and swap it in."""
        path = segment_path(self.directory, segment.number)
        data = self._read(path)  # idle: nothing writes to this file any more
        version = layout_of(data).version
        records = list(iter_records(data))
        keep: list[memoryview | bytes] = []
        view = memoryview(data)
        for start in range(0, len(records), _LIVENESS_SLICE):
            with self._lock:  # short holds: the event loop keeps appending meanwhile
                for queue, msg_id, begin, end in records[start : start + _LIVENESS_SLICE]:
                    ids = self._live.get(queue)
                    if ids is not None and msg_id in ids:
                        keep.append(upgrade_record(view[begin:end], version))
        size = replace_segment(path, keep)
        with self._lock:
            # Records acked meanwhile were copied too; their marks are still in acks.N.
            segment.records, old_size, segment.size = len(keep), segment.size, size
            segment.written = size
            segment.version = SEGMENT_VERSION
        return old_size - size

    # -- messages kept in the store without a queue -----------------------------------------

    def reload(self, queue: QueueKey) -> list[StoredMessage]:
        """The live messages of ``queue`` read back from the segment files, in order, with
        ``redelivered`` as :meth:`recover` gives it (for messages that were left in the store
        at start-up because their queue was unknown, once the queue is back).

        Reads whole segments (sync I/O, but only those holding such messages) and repairs
        nothing; the messages stay live, as after :meth:`recover`.
        """
        with self._lock:
            self._check_usable()
            ids = dict(self._live.get(queue) or {})
            numbers = sorted({tag >> 1 & NUMBER_MASK for tag in ids.values()})
        found: list[StoredMessage] = []
        for number in numbers:
            # Orphaned messages are in segments written before this run (never pending ones);
            # a rewrite meanwhile swaps in a file that still holds them (they are live).
            data = self._read(segment_path(self.directory, number))
            for key, msg_id, start, _ in iter_records(data):
                tag = ids.get(msg_id) if key == queue else None
                if tag is not None:
                    found.append(read_message(data, start, bool(tag & 1)))
        self.io.msg_reads += len(found)
        with self._lock:
            self._disk_reads[queue] = self._disk_reads.get(queue, 0) + len(found)
        if len(found) != len(ids):
            log.error(
                "%s: %d of the %d messages of queue %r could not be read back",
                self.directory,
                len(ids) - len(found),
                len(ids),
                queue,
            )
        return found

    # -- inspection and lifecycle -----------------------------------------------------------

    def held(self, queue: QueueKey) -> tuple[int, int]:
        """``(messages, body bytes)`` the store holds for ``queue`` (not acked): a durable
        queue's persistent messages, ready or unacknowledged. No lock: two dict reads."""
        ids = self._live.get(queue)
        return (len(ids), self._bytes.get(queue, 0)) if ids else (0, 0)

    def disk_counts(self, queue: QueueKey) -> tuple[int, int]:
        """``(reads, writes)``: messages of ``queue`` read back from the segments (at
        start-up, or when the queue came back) and written for it, since it was declared."""
        return self._disk_reads.get(queue, 0), self._disk_writes.get(queue, 0)

    def stats(self) -> StoreStats:
        """Segments, bytes, records and live messages, counted now."""
        with self._lock:
            segments = list(self._segments.values())
            return StoreStats(
                segments=len(segments),
                bytes=sum(s.size for s in segments),
                records=sum(s.records for s in segments),
                live=sum(s.live for s in segments),
            )

    def close(self) -> None:
        """Sync everything, fsync the marks and close the files. Later calls raise."""
        try:
            if self._failed is None:
                self.sync()
                self._fsync_marks()
        finally:
            with self._io_lock, self._lock:
                for segment in self._segments.values():
                    for fd in (segment.fd, segment.marks_fd):
                        if fd >= 0:
                            os.close(fd)
                    segment.fd = segment.marks_fd = -1
                self._failed = self._failed or "closed"

    def abandon(self) -> None:
        """Close the files as a ``kill -9`` would leave them: nothing appended since the
        last :meth:`sync` is written, no mark is fsynced (what earlier syncs wrote is in the
        page cache, as after a kill). A sync or compaction running in another thread is
        waited for (a kill just after it). Later calls raise."""
        with self._compact_lock, self._io_lock, self._lock:
            for segment in self._segments.values():
                for fd in (segment.fd, segment.marks_fd):
                    if fd >= 0:
                        os.close(fd)
                segment.fd = segment.marks_fd = -1
                segment.pending, segment.marks = [], bytearray()
            self._failed = self._failed or "abandoned (an injected kill)"

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
