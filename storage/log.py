"""The definitions log: durable topology as an append-only file of events.

Theory of operation
-------------------
Every change to durable topology is one ``(vhost, event)`` record appended to a single file
(``DATA/definitions.log``) and fsynced before :meth:`DefinitionLog.append` returns, so the
broker may send its ``*-Ok`` right after. Start-up replays the records through the same
``Projection.apply`` that live commands use. Deletes are records too, so dead records pile up;
compaction rewrites the file with only the live definitions (:mod:`leveret.storage.live`).

File layout (integers big-endian)::

    offset 0   header   8s magic b"LVRTDLOG" | u32 format version (1)           12 bytes
    offset 12  record   u32 length | u32 crc32(payload) | payload                8 + length
               record   ...

The payload is opaque here; :mod:`leveret.storage.records` owns it. All this module relies on is
its first two bytes: a nonzero version byte, then :data:`~leveret.storage.records.PAYLOAD_MARK`
(what resynchronisation looks for). ``length`` is at most :data:`MAX_RECORD`, never 0. The
format (version 1) is unchanged by resynchronisation: it reads every log written so far.

Opening (:meth:`DefinitionLog.open`):

* no file: one is created atomically (header only);
* an empty file or a partial header (a crash while creating it): recreated, with a warning;
* another magic, or a format version above :data:`FORMAT_VERSION`, or a record whose payload
  version is newer than :data:`leveret.storage.records.RECORD_VERSION`: :class:`LogFormatError` and
  the file is left untouched. A downgrade must stop the broker, not lose definitions;
* the records are scanned from the header on. A record that is incomplete (a torn write), has
  an impossible length, or fails its CRC is a bad record, and scanning looks for the next
  sound record after it (:func:`resync`): the first offset past the bad record's start where
  a frame with a plausible length holds a payload that passes its CRC and has
  :data:`leveret.storage.records.PAYLOAD_MARK` as its second byte (every payload starts with
  its version byte and a JSON array; JSON escapes control characters, so this pair marks
  where payloads start, and a CRC32 match of a random frame is a 1 in 2**32 chance). This
  works whatever field of the bad record is damaged, its length included;
* a bad record with no sound record after it is a *tail*, and the file is truncated there. A
  torn tail is the normal result of a crash during an append and only gets a warning; any
  other bad tail is logged as an error and first copied to ``definitions.log.corrupt-OFFSET``
  (as is a torn tail larger than 64 KiB). Both are what a crash leaves and need nothing from
  the operator;
* a bad record with sound records after it is *corruption in the middle of the log*: cutting
  there would silently drop every definition after it, and skipping it may replay a history
  with a hole in it (a lost delete resurrects an entity, a lost declare drops one).
  :meth:`DefinitionLog.open` raises :class:`~leveret.storage.errors.CorruptLogError` (one line:
  file, offset, remedy) and leaves the file untouched, unless ``force_recovery`` is true (the
  broker's ``--force-recovery``). Then each damaged stretch (from the bad record to the next
  sound one) is copied to ``definitions.log.corrupt-OFFSET``, logged as an error, and the log
  is rewritten atomically with every sound record in its order: one flipped bit costs the one
  record it hit. The broker keeps the persistent messages of a queue whose declaration was
  lost aside rather than deleting them (see ``broker/persistence.py``);
* a record with a good CRC that does not decode is skipped with an error (its framing is
  intact, so the records after it are still sound).

Compaction (:meth:`DefinitionLog.compact`) writes the header and the live records to
``definitions.log.compact``, fsyncs it, renames it over the log and fsyncs the directory.
Whenever the process dies, the path names either the complete old log or the complete new
one; a leftover temp file is deleted by the next open.

What goes in is the caller's responsibility: only durable exchanges and queues, and bindings
between durable entities. Exclusive queues and non-durable declares are refused by
:meth:`~DefinitionLog.append` with ``ValueError``.

A :class:`DefinitionLog` is not thread-safe: use it from one thread (or behind one lock).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from leveret.exchanges.model import Event, ExchangeDeclared, QueueDeclared
from leveret.storage.errors import (
    CorruptLogError,
    CorruptRecordError,
    LogFormatError,
    StoreClosedError,
)
from leveret.storage.files import (
    create_atomically,
    datasync,
    fsync_dir,
    gc_paused,
    truncate_tail,
    write_all,
)
from leveret.storage.live import LiveState
from leveret.storage.records import PAYLOAD_MARK, decode, decode_many, encode

log = logging.getLogger("leveret.storage")

MAGIC = b"LVRTDLOG"
FORMAT_VERSION = 1
HEADER = struct.Struct(">8sI")
HEADER_LEN = 12
FRAME = struct.Struct(">II")
FRAME_LEN = 8
assert HEADER.size == HEADER_LEN
assert FRAME.size == FRAME_LEN
assert len(MAGIC) == 8

# A topology event is well under a kilobyte; a length field above this is corruption.
MAX_RECORD = 1 << 24
DEFAULT_COMPACT_MIN_DEAD = 1000
COMPACT_SUFFIX = ".compact"

Record = tuple[str, Event]
StepHook = Callable[[str], None]
#: Points of :meth:`DefinitionLog.compact` at which ``on_step`` is called, in order.
COMPACT_STEPS = ("temp-partial", "temp-written", "temp-synced", "renamed", "dir-synced")


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes in the middle of a log that are not a sound record, with sound records after."""

    offset: int  # where the bad record starts
    end: int  # where the next sound record starts
    reason: str


@dataclass(slots=True)
class Scan:
    """The framed records of a log file, its damaged stretches, and where and why its tail
    stopped being readable."""

    payloads: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, payload)
    end: int = HEADER_LEN  # end of the last sound record
    error: str | None = None  # why the bytes from ``end`` on are not used (None: no tail)
    torn: bool = False
    damage: list[Damage] = field(default_factory=list)


def check_header(path: Path, data: bytes) -> int:
    """The format version in ``data``'s header, or 0 for a header cut short by a crash."""
    if len(data) < HEADER_LEN:
        if data[: len(MAGIC)] == MAGIC[: len(data)]:
            return 0
        raise LogFormatError(f"{path} is not a Leveret definitions log")
    magic, version = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise LogFormatError(f"{path} is not a Leveret definitions log (magic {magic!r})")
    if version > FORMAT_VERSION:
        raise LogFormatError(
            f"{path} was written by a newer Leveret (log format {version}; this version "
            f"reads up to {FORMAT_VERSION}); refusing to start rather than lose definitions"
        )
    if version < 1:
        raise LogFormatError(f"{path}: invalid log format version {version}")
    return int(version)


def scan_frames(data: bytes) -> Scan:
    """Frame ``data`` into record payloads, verifying each CRC and resynchronising after a
    bad record (see the module doc)."""
    scan = Scan()
    size = len(data)
    offset = HEADER_LEN
    unpack = FRAME.unpack_from
    payloads = scan.payloads
    while offset < size:
        error = None
        torn = False
        if size - offset < FRAME_LEN:
            error, torn = "incomplete record header", True
        else:
            length, crc = unpack(data, offset)
            stop = offset + FRAME_LEN + length
            if length == 0 or length > MAX_RECORD:
                error = f"impossible record length {length}"
            elif stop > size:
                error, torn = f"record of {length} bytes runs past the end of the file", True
            else:
                payload = data[offset + FRAME_LEN : stop]
                if zlib.crc32(payload) == crc:
                    payloads.append((offset, payload))
                    offset = stop
                    continue
                error = "CRC mismatch"
        resume = resync(data, offset)
        if resume is not None:
            scan.damage.append(Damage(offset, resume, error))
            offset = resume
            continue
        # A tail of zeros is what a crash leaves when the size was updated before the data.
        scan.end, scan.error = offset, error
        scan.torn = torn or not data[offset:].strip(b"\0")
        break
    else:
        scan.end = offset
    return scan


def resync(data: bytes, bad: int) -> int | None:
    """The offset of the first sound record after the bad record at ``bad``, or None.

    A candidate is a frame whose payload's second byte is :data:`PAYLOAD_MARK` (so the search
    runs in C, from mark to mark), with a plausible length, a nonzero version byte and a
    matching CRC. Only called after a bad record: the cost is nothing on a sound log.
    """
    size = len(data)
    view = memoryview(data)
    unpack = FRAME.unpack_from
    crc32 = zlib.crc32
    # A frame starting at ``bad + 1`` or later has its mark at ``start + FRAME_LEN + 1``.
    mark = data.find(PAYLOAD_MARK, bad + FRAME_LEN + 2)
    while mark >= 0:
        start = mark - FRAME_LEN - 1
        length, crc = unpack(data, start)
        stop = start + FRAME_LEN + length
        if (
            1 < length <= MAX_RECORD
            and stop <= size
            and data[start + FRAME_LEN]
            and crc32(view[start + FRAME_LEN : stop]) == crc
        ):
            return start
        mark = data.find(PAYLOAD_MARK, mark + 1)
    return None


def refusal(path: Path, scan: Scan) -> str:
    """The one-line error for a log with corruption in the middle (see the module doc)."""
    first = scan.damage[0]
    intact = sum(1 for offset, _ in scan.payloads if offset >= first.end)
    records = f"{intact} intact record{'s' * (intact != 1)}"
    more = len(scan.damage) - 1
    if more:
        records += f" (and {more} more damaged place{'s' * (more > 1)})"
    return (
        f"{path}: corrupt record at offset {first.offset} ({first.reason}), followed by "
        f"{records}; refusing to start rather than lose the definitions after it: restore "
        f"the file from a backup, or start with --force-recovery to skip the damaged bytes "
        f"(saving them to {path.name}.corrupt-{first.offset}) and replay the rest"
    )


def skip_damage(path: Path, data: bytes, scan: Scan) -> int:
    """Forced recovery: keep each damaged stretch aside, then rewrite the log atomically with
    every sound record of ``scan``, in order. Returns the new file's size."""
    for damage in scan.damage:
        aside = path.with_name(f"{path.name}.corrupt-{damage.offset}")
        create_atomically(aside, data[damage.offset : damage.end])  # durable before the rewrite
        log.error(
            "%s: corrupt record at offset %d (%s): %d bytes skipped up to the next sound "
            "record at offset %d (forced recovery); saved to %s",
            path,
            damage.offset,
            damage.reason,
            damage.end - damage.offset,
            damage.end,
            aside,
        )
    frames = [data[offset : offset + FRAME_LEN + len(payload)] for offset, payload in scan.payloads]
    repaired = data[:HEADER_LEN] + b"".join(frames)
    create_atomically(path, repaired)
    return len(repaired)


def _frame(payload: bytes) -> bytes:
    return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _check_persistable(event: Event) -> None:
    if isinstance(event, QueueDeclared) and (event.queue.exclusive or not event.queue.durable):
        raise ValueError(f"only durable, non-exclusive queues are logged: {event.queue!r}")
    if isinstance(event, ExchangeDeclared) and not event.exchange.durable:
        raise ValueError(f"only durable exchanges are logged: {event.exchange!r}")


class DefinitionLog:
    """An open definitions log (see the module doc). Create with :meth:`open`."""

    def __init__(self, path: Path, fd: int, size: int, records: list[Record], framed: int) -> None:
        self.path = path
        self.compact_min_dead = DEFAULT_COMPACT_MIN_DEAD
        self._fd = fd
        self._size = size  # bytes known to be on disk; a failed append truncates back to it
        self._records = framed  # framed records in the file, decodable or not
        self._live = LiveState()
        for vhost, event in records:
            self._live.apply(vhost, event)
        self._replay: list[Record] | None = records
        self._failed: str | None = None
        #: Damaged stretches skipped by a forced recovery when the log was opened.
        self.damage: list[Damage] = []

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        compact_min_dead: int = DEFAULT_COMPACT_MIN_DEAD,
        force_recovery: bool = False,
    ) -> DefinitionLog:
        """Open (or create) the log at ``path``, repairing a torn or corrupt tail.

        Raises :class:`LogFormatError` for a file it must not touch, and
        :class:`CorruptLogError` for a damaged record with sound records after it unless
        ``force_recovery`` is true, in which case the damaged bytes are skipped (saved aside)
        and listed in :attr:`damage` (see the module doc).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for leftover in (COMPACT_SUFFIX, ".tmp"):
            stale = path.with_name(path.name + leftover)
            if stale.exists():
                log.warning("%s: removing %s left by an interrupted write", path, stale.name)
                stale.unlink()
        if not path.exists():
            create_atomically(path, HEADER.pack(MAGIC, FORMAT_VERSION))
        data = path.read_bytes()
        if check_header(path, data) == 0:
            log.warning("%s: empty or partial header (crash while creating it); recreated", path)
            create_atomically(path, HEADER.pack(MAGIC, FORMAT_VERSION))
            data = path.read_bytes()
        scan = scan_frames(data)
        with gc_paused():
            # Decode everything before repairing anything: a newer record version must raise
            # while the file is still exactly as the newer broker left it.
            records = decode_all(path, scan.payloads)
            if scan.damage and not force_recovery:
                raise CorruptLogError(refusal(path, scan))  # the file is left as it is
            if scan.error is not None:
                truncate_tail(path, scan.end, data[scan.end :], scan.error, torn=scan.torn)
            size = skip_damage(path, data, scan) if scan.damage else scan.end
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self = cls(path, fd, size, records, len(scan.payloads))
        self.compact_min_dead = compact_min_dead
        self.damage = scan.damage
        return self

    # -- reading ---------------------------------------------------------------------------

    def replay(self) -> list[Record]:
        """Every record in the log, in order: feed each event to ``Projection.apply``.

        The first call returns what :meth:`open` already decoded; later calls read the file.
        """
        records, self._replay = self._replay, None
        if records is None:
            self._check_open()
            data = self.path.read_bytes()
            records = decode_all(self.path, scan_frames(data).payloads)
        return records

    def live_events(self) -> list[Record]:
        """The shortest record list equivalent to the log (what :meth:`compact` writes)."""
        return self._live.events()

    @property
    def record_count(self) -> int:
        """Records in the file."""
        return self._records

    @property
    def live_count(self) -> int:
        """Records the log would keep if compacted now."""
        return self._live.count()

    @property
    def dead_count(self) -> int:
        """Records compaction would drop."""
        return self._records - self._live.count()

    @property
    def size(self) -> int:
        """Bytes in the file."""
        return self._size

    # -- writing ---------------------------------------------------------------------------

    def append(self, vhost: str, event: Event) -> None:
        """Append one record and fsync it. When this returns, the change is durable."""
        self.append_many(((vhost, event),))

    def append_many(self, records: Iterable[Record]) -> None:
        """Append several records with one write and one fsync (all encoded first, so an
        unencodable value raises ``TypeError`` before anything is written)."""
        batch = list(records)
        for _, event in batch:
            _check_persistable(event)
        data = b"".join(_frame(encode(vhost, event)) for vhost, event in batch)
        if not data:
            return
        self._write(data)
        self._records += len(batch)
        for vhost, event in batch:
            self._live.apply(vhost, event)
        self._replay = None

    def _check_open(self) -> None:
        if self._failed is not None:
            raise StoreClosedError(f"{self.path}: {self._failed}")

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            self._check_open()  # closed
        if self._failed is not None:
            self._rewrite_after_failure()
        try:
            write_all(self._fd, data)
        except OSError:
            # Cut a partial record off now: left in place, it would make the next open
            # truncate every record appended after it.
            try:
                os.ftruncate(self._fd, self._size)
            except OSError as exc:
                self._failed = f"could not undo a failed append: {exc}"
            raise
        try:
            datasync(self._fd)
        except OSError as exc:
            self._failed = f"fsync failed: {exc}"
            raise
        self._size += len(data)

    def _rewrite_after_failure(self) -> None:
        """After a failed fsync (or a partial record that could not be cut off) what the
        file holds is unknown: the kernel may have dropped the unwritten pages, so a later
        fsync can succeed without them. Writing the live records anew (a compaction: temp
        file, fsync, rename) makes it known again, so a full disk that gets room again needs
        no restart. Raises :class:`StoreClosedError` while that fails too."""
        failed, self._failed = self._failed, None
        try:
            self.compact()
        except OSError as exc:
            self._failed = self._failed or failed
            raise StoreClosedError(f"{self.path}: {failed}; rewriting it failed: {exc}") from exc
        log.warning(
            "%s: rewritten after a failed write (%s); writes succeed again", self.path, failed
        )

    # -- compaction ------------------------------------------------------------------------

    def needs_compaction(self) -> bool:
        """Whether dead records outnumber live ones and exceed ``compact_min_dead``."""
        dead = self.dead_count
        return dead > self.live_count and dead > self.compact_min_dead

    def compact(
        self, live: Iterable[Record] | None = None, *, on_step: StepHook | None = None
    ) -> None:
        """Rewrite the log with only live records (crash-safe; see the module doc).

        ``live`` defaults to the log's own view (:meth:`live_events`); a caller may pass its
        own (say, from the projection), which is reduced the same way, so exclusive queues
        never reach the new file. ``on_step(name)`` is called at each of
        :data:`COMPACT_STEPS`, for crash tests.
        """
        self._check_open()
        state = LiveState()
        for vhost, event in self.live_events() if live is None else live:
            state.apply(vhost, event)
        records = state.events()
        frames = [_frame(encode(vhost, event)) for vhost, event in records]
        step = on_step or (lambda _: None)
        tmp = self.path.with_name(self.path.name + COMPACT_SUFFIX)
        half = len(frames) // 2
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, HEADER.pack(MAGIC, FORMAT_VERSION) + b"".join(frames[:half]))
            step("temp-partial")
            write_all(fd, b"".join(frames[half:]))
            step("temp-written")
            os.fsync(fd)
            step("temp-synced")
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, self.path)
        # From here on the path names the new file: switch to it before anything can fail.
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = HEADER_LEN + sum(map(len, frames))
        self._records = len(records)
        self._live = state  # also forgets deleted names, which no longer occur in the file
        self._replay = None
        step("renamed")
        try:
            fsync_dir(self.path.parent)
        except OSError as exc:
            self._failed = f"fsync of the directory failed after compaction: {exc}"
            raise
        step("dir-synced")
        log.info("%s: compacted to %d records", self.path, len(records))

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file. Appends were already durable; nothing is lost by not calling it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._failed = self._failed or "closed"

    def __enter__(self) -> DefinitionLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def decode_all(path: Path, payloads: list[tuple[int, bytes]]) -> list[Record]:
    """Decode payloads, skipping (with an error logged) those that do not decode."""
    fast = decode_many([payload for _, payload in payloads])
    if fast is not None:
        return fast
    records: list[Record] = []
    append = records.append
    for offset, payload in payloads:
        try:
            append(decode(payload))
        except CorruptRecordError as exc:
            log.error("%s: record at offset %d skipped: %s", path, offset, exc)
    return records
