"""The message store's bookkeeping of one segment pair (``msgs.N`` and its marks file
``acks.N``: what is written, pending and live), and chunked writes of a backlog; the
store (:mod:`leveret.storage.messages`) owns every instance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from leveret.storage.segments import HEADER_LEN, SEGMENT_VERSION

# Bytes per write() call when a sync has more than this to write (a backlog kept for a
# retry after a full disk): a retry that fails does not first join all of it.
WRITE_CHUNK = 8 * 1024 * 1024


def write_chunked(
    fd: int, parts: list[bytes], size: int, write_all: Callable[[int, bytes], None]
) -> None:
    """Write ``parts`` (``size`` bytes in all) in order with ``write_all`` (the store's
    seam, which tests replace to fill the disk), at most about :data:`WRITE_CHUNK` bytes per
    call: one call when they fit (the usual sync)."""
    if size <= WRITE_CHUNK:
        write_all(fd, b"".join(parts))
        return
    start = 0
    while start < len(parts):
        end, size = start, 0
        while end < len(parts) and (size == 0 or size + len(parts[end]) <= WRITE_CHUNK):
            size += len(parts[end])
            end += 1
        write_all(fd, b"".join(parts[start:end]))
        start = end


class SegmentState:
    """Bookkeeping for one ``msgs.N`` / ``acks.N`` pair."""

    __slots__ = (
        "fd",
        "live",
        "marks",
        "marks_fd",
        "marks_size",
        "marks_unsynced",
        "number",
        "on_disk",
        "pending",
        "records",
        "size",
        "version",
        "written",
    )

    def __init__(self, number: int, *, on_disk: bool = False) -> None:
        self.number = number
        self.version = SEGMENT_VERSION  # of msgs.N's format (1: read only, never appended to)
        self.records = 0  # message records, written or pending
        self.live = 0  # of which not acked
        self.size = HEADER_LEN  # bytes, written or pending
        self.written = 0  # bytes in msgs.N: where a failed write is cut back to
        self.on_disk = on_disk  # the file exists with its header
        self.pending: list[bytes] = []  # records appended, not yet written
        self.marks = bytearray()  # marks not yet written
        self.fd = -1  # msgs.N, open while it has writes to come
        self.marks_fd = -1
        self.marks_size = 0  # bytes in acks.N while marks_fd is open
        self.marks_unsynced = False  # marks written since the last fsync of acks.N

    @property
    def idle(self) -> bool:
        """No write to msgs.N pending or in progress (it may be rewritten or deleted)."""
        return not self.pending and self.fd < 0


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What one :meth:`MessageStore.compact` call did."""

    deleted: int  # segments deleted
    rewritten: int  # segments rewritten
    reclaimed: int  # bytes freed


@dataclass(frozen=True, slots=True)
class StoreStats:
    """A snapshot of the store's size."""

    segments: int
    bytes: int
    records: int  # message records in the segments
    live: int  # unacked messages
