"""The trace writer: a thread that turns the recorder's batches into rolling segments.

Each batch (:class:`leveret.trace.recorder.Batch`) becomes Arrow columns without Python work
per row: its list of row values is read into an int64 array in one C loop (the only step
per row that holds the interpreter lock, a few nanoseconds a row), the combo indexes and
body sizes are unpacked from it, the combos mapped to key ids, queue set ids and delivery
modes with ``take``, and the runs of times expanded to one per row, all in Arrow's C++ code,
which runs outside the interpreter lock, as do Parquet encoding and compression. Python work
is per batch and per distinct combo, so the writer thread hardly competes with the event
loop for the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from collections.abc import Collection
from pathlib import Path
from typing import Any

from leveret.trace.recorder import COMBO_BITS, COMBO_MASK, Batch, Combo, Recorder
from leveret.trace.schema import Entry, arrow, headers_json, key_entry, queues_entry, schemas
from leveret.trace.segment import Segment, segment_path

log = logging.getLogger("leveret.trace")


class _Resolved:
    """What the writer knows of one combo list: each combo's dictionary entries (key, queue
    set), and as Arrow arrays indexed by combo, their ids and delivery modes."""

    def __init__(self, combos: list[Combo]) -> None:
        pa, _, _ = arrow()
        self.combos = combos
        self.entries: list[tuple[Entry, Entry]] = []
        # Combos are many when keys never repeat, their queue sets few: each entry made once.
        self._queue_sets: dict[Collection[str], Entry] = {}
        self._arrays: tuple[Any, Any, Any] = (
            pa.array([], pa.int64()),
            pa.array([], pa.int64()),
            pa.array([], pa.int16()),
        )

    def arrays(self) -> tuple[Any, Any, Any]:
        """Key ids (int64), queue set ids (int64) and delivery modes (int16) by combo."""
        known = len(self.entries)
        new = self.combos[known:]
        if new:
            # Only the new combos are converted (keys that never repeat bring thousands per
            # batch); the arrays grow by concatenation, in Arrow.
            pa, _, _ = arrow()
            modes: list[int | None] = []
            for vhost, exchange, routing_key, table, mode, queues in new:
                headers = headers_json(table) if table is not None else None
                key = key_entry(vhost, exchange, routing_key, headers)
                queue_set = self._queue_sets.get(queues)
                if queue_set is None:
                    queue_set = self._queue_sets[queues] = queues_entry(queues)
                self.entries.append((key, queue_set))
                modes.append(mode)
            added = self.entries[known:]
            parts = (
                pa.array([key[2] for key, _ in added], pa.int64()),
                pa.array([queue_set[2] for _, queue_set in added], pa.int64()),
                pa.array(modes, pa.int16()),
            )
            self._arrays = (
                pa.concat_arrays([self._arrays[0], parts[0]]),
                pa.concat_arrays([self._arrays[1], parts[1]]),
                pa.concat_arrays([self._arrays[2], parts[2]]),
            )
        return self._arrays


def row_times(batch: Batch) -> Any:
    """A batch's ``ts`` column (timestamp[us, UTC]): its runs of times (:class:`Batch`)
    expanded to one per row, in Arrow."""
    pa, pc, _ = arrow()
    marks, stamps, count = batch.marks, batch.stamps, len(batch)
    if not marks or marks[0] != 0 or len(stamps) != len(marks):
        raise ValueError(f"a batch of {count} rows with runs of times at {marks[:3]}...")
    ends = array("q", marks[1:])
    ends.append(count)
    runs = pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int64()), pa.array(stamps, pa.int64())
    )
    return pc.run_end_decode(runs).view(pa.timestamp("us", tz="UTC"))


class TraceWriter(Recorder):
    """Records publishes (:meth:`record`, on the event loop) and writes them from a thread
    into rolling segments (by age, rows, or dictionary size: ``max_keys`` entries).

    :meth:`record`, :meth:`flush` and :meth:`close` are called from one thread (the event
    loop's)."""

    def __init__(
        self,
        directory: Path,
        max_rows: int = 20_000_000,
        max_seconds: float = 300.0,
        max_keys: int = 100_000,
        buffer_limit: int = 1_000_000,
        flush_interval: float = 0.2,
        row_group_rows: int = 1_000_000,
    ) -> None:
        arrow()  # a missing pyarrow is an error now, not in the thread
        super().__init__(buffer_limit, flush_interval)
        self.directory = directory
        self.max_rows = max(1, max_rows)
        self.max_seconds = max_seconds
        # The dictionary of the open segment lives in memory: traces whose routing keys are
        # all different (ids in the key) would grow it without bound, so a segment also
        # rolls when it holds max_keys keys and queue sets.
        self.max_keys = max(1, max_keys)
        self.row_group_rows = row_group_rows
        self.written = 0
        self.segments = 0  # closed so far
        self._logged_dropped = 0
        self._resolved: _Resolved | None = None
        self._flushes: list[threading.Event] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._segment: Segment | None = None
        self._segment_started = 0.0
        self._sequence = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="leveret-trace", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(self.flush_interval)
                self._wake.clear()
                self.stale()
                self._drain()
                self._roll_if_old()
                if self._flushes:
                    # Their rows were handed off before they asked: drain once more.
                    flushes = self._flushes[:]
                    del self._flushes[: len(flushes)]
                    self._drain()
                    self._close_segment()
                    for done in flushes:
                        done.set()
            self._drain()
        except Exception:  # the broker goes on without its trace
            log.exception("trace: the writer stopped; records from now on are dropped")
            self.buffer_limit = 0
            self.ready.clear()
        finally:
            self._close_segment()
            self._release_flushes()

    def _release_flushes(self) -> None:
        while self._flushes:
            self._flushes.pop().set()

    def _drain(self) -> None:
        ready = self.ready
        while ready:
            batch = ready.popleft()
            self._write(batch)
            self.taken += len(batch)
        if self.dropped != self._logged_dropped:
            log.warning("trace: %d records dropped (the writer fell behind)", self.dropped)
            self._logged_dropped = self.dropped

    def _write(self, batch: Batch) -> None:
        pa, pc, _ = arrow()
        rows_schema, _, _ = schemas()
        if self._resolved is None or self._resolved.combos is not batch.combos:
            self._resolved = _Resolved(batch.combos)
        resolved = self._resolved
        keys, queue_sets, modes = resolved.arrays()
        count = len(batch)
        # One pass over the list in C (the ints are the recorder's shared row values), then
        # columns in Arrow: combo index and size unpacked, times from their runs.
        packed = pa.array(batch.rows, pa.int64())
        combo = pc.bit_wise_and(packed, COMBO_MASK).cast(pa.int32())
        sizes = pc.shift_right(packed, COMBO_BITS)
        columns = [keys.take(combo), queue_sets.take(combo), sizes, modes.take(combo)]
        rows = pa.record_batch([row_times(batch), *columns], schema=rows_schema)
        start = 0
        while start < count:
            segment = self._open_segment()
            end = min(count, start + self.max_rows - segment.rows)
            used = pc.unique(combo.slice(start, end - start)).to_pylist()
            new = {
                (entry[1], entry[2])
                for index in used
                for entry in resolved.entries[index]
                if not segment.knows(entry)
            }
            if segment.lookups + len(new) >= self.max_keys:
                end = start + self._cut(segment, resolved, combo.slice(start, end - start))
                used = pc.unique(combo.slice(start, end - start)).to_pylist()
            segment.use(entry for index in used for entry in resolved.entries[index])
            segment.append(rows.slice(start, end - start))
            self.written += end - start
            start = end
            if segment.rows >= self.max_rows or segment.lookups >= self.max_keys:
                self._close_segment()

    def _cut(self, segment: Segment, resolved: _Resolved, combo: Any) -> int:
        """How many of these rows the segment takes before its dictionary holds max_keys
        entries (row by row: only when the segment is about to roll)."""
        seen: set[tuple[str, int]] = set()
        lookups = segment.lookups
        for taken, index in enumerate(combo.to_pylist(), 1):
            for entry in resolved.entries[index]:
                name = (entry[1], entry[2])
                if name not in seen and not segment.knows(entry):
                    seen.add(name)
                    lookups += 1
            if lookups >= self.max_keys:
                return taken
        return len(combo)

    def _open_segment(self) -> Segment:
        if self._segment is None:
            now = time.time()
            self._sequence += 1
            path = segment_path(self.directory, now, self._sequence)
            self._sequence = int(path.stem.rsplit("-", 1)[1])
            self._segment = Segment(path, self.row_group_rows)
            self._segment_started = time.monotonic()
        return self._segment

    def _roll_if_old(self) -> None:
        if (
            self._segment is not None
            and time.monotonic() - self._segment_started >= self.max_seconds
        ):
            self._close_segment()

    def _close_segment(self) -> None:
        segment, self._segment = self._segment, None
        if segment is not None and segment.close():
            self.segments += 1

    def close(self, timeout: float | None = 10.0) -> None:
        """Write what is recorded, close the open segment and stop the writer thread;
        waits at most ``timeout`` seconds (None: until it is done)."""
        self.hand_off()
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def flush(self, timeout: float = 5.0) -> None:
        """Write everything recorded so far and close the open segment, so that readers see
        it (for tests, tools and shutdown); waits at most ``timeout`` seconds."""
        if not self._thread.is_alive():
            return
        self.hand_off()
        done = threading.Event()
        self._flushes.append(done)
        self._wake.set()
        done.wait(timeout)
