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

The payload is opaque here; :mod:`leveret.storage.records` owns it (it starts with its own version
byte). ``length`` is at most :data:`MAX_RECORD`, never 0.

Opening (:meth:`DefinitionLog.open`):

* no file: one is created atomically (header only);
* an empty file or a partial header (a crash while creating it): recreated, with a warning;
* another magic, or a format version above :data:`FORMAT_VERSION`, or a record whose payload
  version is newer than :data:`leveret.storage.records.RECORD_VERSION`: :class:`LogFormatError` and
  the file is left untouched. A downgrade must stop the broker, not lose definitions;
* the records are scanned from the header on. Scanning stops at the first record that is
  incomplete (a torn write), has an impossible length, or fails its CRC, and the file is
  truncated there. A torn tail is the normal result of a crash during an append and only gets
  a warning. A bad record with more data behind it is corruption: logged as an error, and the
  whole tail is first copied to ``definitions.log.corrupt-OFFSET``. The records behind it are
  not replayed: with no resync markers, nothing after a bad length field can be trusted, and
  replaying a suffix with a hole in it could resurrect deleted entities;
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
from leveret.storage.errors import CorruptRecordError, LogFormatError, StoreClosedError
from leveret.storage.files import (
    create_atomically,
    datasync,
    fsync_dir,
    gc_paused,
    truncate_tail,
    write_all,
)
from leveret.storage.live import LiveState
from leveret.storage.records import decode, decode_many, encode

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


@dataclass(slots=True)
class Scan:
    """The framed records of a log file, and where and why scanning stopped early."""

    payloads: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, payload)
    end: int = HEADER_LEN
    error: str | None = None
    torn: bool = False


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
    """Frame ``data`` into record payloads, verifying each CRC (see the module doc)."""
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
        # A tail of zeros is what a crash leaves when the size was updated before the data.
        scan.end, scan.error = offset, error
        scan.torn = torn or not data[offset:].strip(b"\0")
        break
    else:
        scan.end = offset
    return scan


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

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, compact_min_dead: int = DEFAULT_COMPACT_MIN_DEAD
    ) -> DefinitionLog:
        """Open (or create) the log at ``path``, repairing a torn or corrupt tail.

        Raises :class:`LogFormatError` for a file it must not touch (see the module doc).
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
            if scan.error is not None:
                truncate_tail(path, scan.end, data[scan.end :], scan.error, torn=scan.torn)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self = cls(path, fd, scan.end, records, len(scan.payloads))
        self.compact_min_dead = compact_min_dead
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
        self._check_open()
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
            self._failed = f"fsync failed, refusing further writes: {exc}"
            raise
        self._size += len(data)

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
