"""Compaction of the message store: fully acked segments deleted, mostly acked ones
rewritten with their live records, and the marks files fsynced (the order and why: the
module doc of :mod:`leveret.storage.messages`). Functions of the store, which binds them as
its methods (``MessageStore.compact``...): they run in the background compactor's thread
and take the store's locks as its own methods do.

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
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from leveret.storage.bookkeeping import CompactResult, SegmentState
from leveret.storage.files import fsync_dir
from leveret.storage.segments import (
    SEGMENT_VERSION,
    iter_records,
    layout_of,
    marks_path,
    replace_segment,
    segment_path,
    upgrade_record,
)

if TYPE_CHECKING:
    from leveret.storage.messages import MessageStore

_LIVENESS_SLICE = 4096  # records checked per lock hold while rewriting


def needs_compaction(self: MessageStore) -> bool:
    """Whether :meth:`compact` has anything to delete or rewrite."""
    with self._lock:
        self._emptied = 0  # looked at: the hint starts again (MessageStore.emptied)
        return any(self._reclaimable(s) for s in self._segments.values())


def reclaimable(self: MessageStore, segment: SegmentState) -> bool:
    if segment.records and not segment.live:
        return True  # dead: deleted, head or not, written or not (see the module doc)
    return (
        segment is not self._head
        and segment.idle
        and segment.live < segment.records * self.rewrite_ratio
    )


def compact(self: MessageStore) -> CompactResult:
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


def fsync_marks(self: MessageStore) -> None:
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


def rewrite(self: MessageStore, segment: SegmentState) -> int:
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
