"""The trace recorder's publish path: one row per published message, in typed columns.

:meth:`Recorder.record` runs on the event loop for every message published while the trace
is on, so it does as little as it can: it reads the clock, interns what the row says besides
its time and size (vhost, exchange, routing key, content header and the queues reached) to a
small integer with one dict lookup, and appends three numbers to ``array.array`` columns.
Those go to the writer thread in :class:`Batch` es of up to ``batch_rows`` rows, or every
``flush_interval`` seconds, and Arrow reads them in place through the buffer protocol
(:mod:`leveret.trace.writer`), so no Python object is made per message on either side.

A *combo* is the interned part of a row: the key (vhost, exchange, routing key, the headers
table as raw bytes), the delivery mode and the queues reached. The dict from what the
publish path has at hand (the content header's bytes, shared between the messages that
repeat them, and the routed name set, whose hash Python caches) to a combo index misses
when the content header differs (a ``message_id`` per message): then the headers table and
delivery mode are read from it and a second dict, by the combo's own fields, finds the index.
Both are bounded: the first is emptied when full (past half full, it takes only the headers
of new combos), and when the combos reach ``max_combos`` (keys that never repeat) the batch
is handed off and a new combo list begins.

Only the recording thread touches the open batch: a batch is handed off by :meth:`record`
itself (full, or older than ``flush_interval``), by :meth:`hand_off` (flush and close are
called from the recording thread), or, when publishing has stopped, by the event loop at the
writer's request (:meth:`stale`). When ``buffer_limit`` rows are waiting for the writer,
rows are dropped and counted (:attr:`dropped`): publishing never waits for the trace.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections import deque
from collections.abc import Collection

from leveret.message import headers_and_mode

# vhost, exchange, routing key, headers table (raw, length prefix included) or None,
# delivery mode or None, the names of the queues reached.
Combo = tuple[str, str, str, bytes | None, int | None, Collection[str]]
# What the publish path has at hand: vhost, exchange, routing key, raw content header, queues.
_Lookup = tuple[str, str, str, bytes, Collection[str]]


class Batch:
    """Rows handed from the publish path to the writer: publish times (seconds, float64),
    combo indexes (int32) and body sizes (int64), and the combo list the indexes refer to."""

    __slots__ = ("combo", "combos", "size", "ts")

    def __init__(self, ts: array[float], combo: array[int], size: array[int], combos: list[Combo]):
        self.ts = ts
        self.combo = combo
        self.size = size
        self.combos = combos

    def __len__(self) -> int:
        return len(self.ts)


class Recorder:
    """The publish path's side of the trace: rows in typed columns, handed off in batches
    to :attr:`ready` for a writer (:class:`leveret.trace.writer.TraceWriter`)."""

    def __init__(
        self,
        buffer_limit: int = 1_000_000,
        flush_interval: float = 0.2,
        batch_rows: int = 8_192,
        max_combos: int = 65_536,
        cache_size: int = 16_384,
    ) -> None:
        self.buffer_limit = buffer_limit
        self.flush_interval = flush_interval
        self.batch_rows = max(1, batch_rows)
        self.max_combos = max(1, max_combos)
        self.cache_size = max(1, cache_size)
        self.dropped = 0
        self.ready: deque[Batch] = deque()
        # Rows handed to the writer (counted by the recording thread) and rows the writer is
        # done with (counted by the writer thread): their difference is what waits.
        self.handed = 0
        self.taken = 0
        self._combos: list[Combo] = []
        self._by_header: dict[_Lookup, int] = {}
        self._by_fields: dict[Combo, int] = {}
        self._ts: array[float] = array("d")
        self._combo: array[int] = array("i")
        self._size: array[int] = array("q")
        self._room = 0
        self._deadline = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.hand_off()

    def record(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        header: bytes,
        body_size: int,
        queues: Collection[str],
    ) -> None:
        """Record one published message: ``header`` is its raw content header payload,
        ``queues`` the names of the queues it reached (a frozenset is cheapest). Called on
        the publish path: no I/O, no decoding unless the content header is new."""
        now = time.time()
        if len(self._ts) >= self._room or now >= self._deadline:
            self.hand_off(now)
            if self._room <= 0:
                self.dropped += 1
                return
        lookup = (vhost, exchange, routing_key, header, queues)
        try:
            combo = self._by_header.get(lookup)
        except TypeError:  # a set or a list of names: as a frozenset, hashable
            lookup = (vhost, exchange, routing_key, header, frozenset(queues))
            combo = self._by_header.get(lookup)
        if combo is None:
            combo = self._intern(lookup)
        self._ts.append(now)
        self._combo.append(combo)
        self._size.append(body_size)

    def _intern(self, lookup: _Lookup) -> int:
        vhost, exchange, routing_key, header, queues = lookup
        table, mode = headers_and_mode(header)
        fields = (vhost, exchange, routing_key, table, mode, queues)
        combo = self._by_fields.get(fields)
        if combo is None:
            if len(self._combos) >= self.max_combos:
                # The rows recorded so far refer to the full list: they go first.
                self.hand_off()
                self._combos = []
                self._by_fields.clear()
                self._by_header.clear()
            combo = self._by_fields[fields] = len(self._combos)
            self._combos.append(fields)
        elif len(self._by_header) >= self.cache_size // 2:
            # Another content header for a known combo: a message_id or a timestamp per
            # message, most likely, which would only churn the cache. The first ones are
            # kept (body sizes that vary under the same properties), the rest looked up.
            return combo
        if len(self._by_header) >= self.cache_size:
            self._by_header.clear()
        self._by_header[lookup] = combo
        return combo

    def hand_off(self, now: float | None = None) -> None:
        """Give the rows recorded so far to the writer (:attr:`ready`) and start a new batch.
        Called from the recording thread only."""
        if self._ts:
            self.ready.append(Batch(self._ts, self._combo, self._size, self._combos))
            self.handed += len(self._ts)
            self._ts, self._combo, self._size = array("d"), array("i"), array("q")
        self._room = min(self.batch_rows, self.buffer_limit - (self.handed - self.taken))
        self._deadline = (time.time() if now is None else now) + self.flush_interval
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:  # recording from a thread without a loop (tools, tests)
                pass

    def stale(self) -> None:
        """Called from another thread: if the open batch is older than ``flush_interval``
        (publishing has stopped), have the recording thread's event loop hand it off. Without
        a loop it waits for the next :meth:`record`, :meth:`hand_off` or close."""
        loop = self._loop
        if self._ts and time.time() >= self._deadline and loop is not None:
            try:
                loop.call_soon_threadsafe(self._hand_off_stale)
            except RuntimeError:  # the loop is closed: close() hands off what is left
                pass

    def _hand_off_stale(self) -> None:
        if self._ts and time.time() >= self._deadline:
            self.hand_off()
