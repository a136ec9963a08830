"""The trace recorder's publish path: one row per published message, one list append each.

:meth:`Recorder.record` runs on the event loop for every message published while the trace
is on, so it does as little as it can: one dict lookup interns what the row says besides its
time (vhost, exchange, routing key, content header, the queues reached) to a *row value*,
a small integer that packs the body size and a combo index (``size << COMBO_BITS | combo``,
so a value is one shared int object, appended to a list without allocating), and the clock
is read once per event-loop turn, not per message (see *Time* below). Rows go to the writer
thread in :class:`Batch` es of about ``batch_rows`` rows, or every ``flush_interval``
seconds, and Arrow turns them into columns in C (:mod:`leveret.trace.writer`).

A *combo* is the interned part of a row: the key (vhost, exchange, routing key, the headers
table as raw bytes), the delivery mode and the queues reached. The dict from what the
publish path has at hand (the content header's bytes, shared between the messages that
repeat them, and the routed name set, whose hash Python caches) to a row value misses when
the content header differs (a ``message_id`` per message): then the headers table and
delivery mode are read from it and a second dict, by the combo's own fields, finds the
combo, packed with the message's body size. A content header holds the body size (octets 4
to 12), which is the body's length for every message the broker routes (a channel assembles
exactly the announced size; the management API, dead-lettering, delayed releases and the
firehose marshal or copy the header with its body), so a row value found by the header's
bytes carries the right size; a header found to say otherwise when it is interned is
recorded with the body's own size and not cached. Both dicts are bounded:
the first is emptied when full (past half full, it takes only the headers of new combos),
and when the combos reach ``max_combos`` (keys that never repeat) the batch is handed off
and a new combo list begins.

*Time.* A row's time is the wall clock read by the first :meth:`record` of an event-loop
turn, for every message routed in that turn (a turn handles what the sockets gave it since
the previous one: under load a few hundred messages and a few milliseconds; the broker
cannot tell when within that read each message arrived anyway). That first call marks the
batch (:attr:`Batch.marks`, the row where a time starts, and :attr:`Batch.stamps`, the time
in microseconds) and schedules a callback that makes the next turn read the clock again.
Without a running loop (tools, tests) every call reads the clock.

Only the recording thread touches the open batch: a batch is handed off at the start of a
turn (full, or older than ``flush_interval``), by :meth:`hand_off` (flush and close are
called from the recording thread), or, when publishing has stopped, by the event loop at the
writer's request (:meth:`stale`). When ``buffer_limit`` rows are waiting for the writer,
rows are dropped and counted (:attr:`dropped`): publishing never waits for the trace. The
limits are checked once per turn, so a batch (and the rows waiting) may exceed them by one
turn's rows.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections import deque
from collections.abc import Collection
from typing import TYPE_CHECKING

from leveret.node.events import Subscriber
from leveret.node.message import headers_and_mode

if TYPE_CHECKING:
    from leveret.node.message import Message

# vhost, exchange, routing key, headers table (raw, length prefix included) or None,
# delivery mode or None, the names of the queues reached.
Combo = tuple[str, str, str, bytes | None, int | None, Collection[str]]
# What the publish path has at hand: vhost, exchange, routing key, raw content header, queues.
_Lookup = tuple[str, str, str, bytes, Collection[str]]

# A row value: the body size above COMBO_BITS bits of combo index. Sizes are at most 512 MiB
# (2**29, RabbitMQ's hard limit), so a value fits an int64 with room to spare.
COMBO_BITS = 24
COMBO_MASK = (1 << COMBO_BITS) - 1


class Batch:
    """Rows handed from the publish path to the writer: their values (``size << COMBO_BITS
    | combo``), the combo list the indexes refer to, and their times as runs: ``stamps[i]``
    (µs since the epoch) is the time of rows ``marks[i]`` up to ``marks[i + 1]`` (the last
    run up to the end; ``marks`` starts at 0 and increases strictly)."""

    __slots__ = ("combos", "marks", "rows", "stamps")

    def __init__(self, rows: list[int], marks: array[int], stamps: array[int], combos: list[Combo]):
        self.rows = rows
        self.marks = marks
        self.stamps = stamps
        self.combos = combos

    def __len__(self) -> int:
        return len(self.rows)


class Recorder:
    """The publish path's side of the trace: rows as interned values, handed off in batches
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
        # Indexes above COMBO_BITS bits would run into the size.
        self.max_combos = min(max(1, max_combos), COMBO_MASK + 1)
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
        self._rows: list[int] = []
        self._marks: array[int] = array("q")
        self._stamps: array[int] = array("q")
        # True when the next record must read the clock: a new turn, a new batch, no loop,
        # or dropping. Set by _new_turn (scheduled once per turn), hand_off and stale.
        self._fresh = True
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
        the publish path: no I/O, no decoding unless the content header is new, and the
        clock read by the turn's first call only."""
        if self._fresh and self._stamp():
            self.dropped += 1
            return
        try:
            # get, not [] and KeyError: a message_id per message misses every time.
            row = self._by_header.get((vhost, exchange, routing_key, header, queues))
        except TypeError:  # a set or a list of names: as a frozenset, hashable
            queues = frozenset(queues)
            row = self._by_header.get((vhost, exchange, routing_key, header, queues))
        if row is None:
            row = self._intern(vhost, exchange, routing_key, header, body_size, queues)
        self._rows.append(row)

    def _stamp(self) -> bool:
        """The turn's first record: hand the batch off if it is full or old, note the time
        from this row on, and have the next turn read the clock again. True when the row
        is to be dropped (the writer is ``buffer_limit`` rows behind)."""
        now = time.time()
        rows = len(self._rows)
        if rows >= self._room or now >= self._deadline:
            self.hand_off(now)
            if self._room <= 0:
                return True  # still fresh: the next record checks again
            rows = 0
        stamp = int(now * 1_000_000)
        if self._marks and self._marks[-1] == rows:  # no row since the last mark
            self._stamps[-1] = stamp
        else:
            self._marks.append(rows)
            self._stamps.append(stamp)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # recording from a thread without a loop (tools, tests)
            return False
        loop.call_soon(self._new_turn)
        self._fresh = False
        return False

    def _new_turn(self) -> None:
        self._fresh = True

    def _intern(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        header: bytes,
        body_size: int,
        queues: Collection[str],
    ) -> int:
        table, mode = headers_and_mode(header)
        fields = (vhost, exchange, routing_key, table, mode, queues)
        combo = self._by_fields.get(fields)
        cache = True
        if combo is None:
            if len(self._combos) >= self.max_combos:
                # The rows recorded so far refer to the full list: they go first. The new
                # batch's rows start at the time of this turn (record has stamped it).
                stamp = self._stamps[-1]
                self.hand_off()
                self._marks.append(0)
                self._stamps.append(stamp)
                self._combos = []
                self._by_fields.clear()
                self._by_header.clear()
            combo = self._by_fields[fields] = len(self._combos)
            self._combos.append(fields)
        elif len(self._by_header) >= self.cache_size // 2:
            # Another content header for a known combo: a message_id or a timestamp per
            # message, most likely, which would only churn the cache. The first ones are
            # kept (body sizes that vary under the same properties), the rest looked up.
            cache = False
        row = body_size << COMBO_BITS | combo
        if cache and int.from_bytes(header[4:12], "big") == body_size:
            if len(self._by_header) >= self.cache_size:
                self._by_header.clear()
            self._by_header[vhost, exchange, routing_key, header, queues] = row
        return row

    def hand_off(self, now: float | None = None) -> None:
        """Give the rows recorded so far to the writer (:attr:`ready`) and start a new batch
        (whose first record reads the clock). Called from the recording thread only."""
        if self._marks and self._marks[-1] == len(self._rows):
            del self._marks[-1], self._stamps[-1]  # a time no row has taken yet
        if self._rows:
            batch = Batch(self._rows, self._marks, self._stamps, self._combos)
            self.ready.append(batch)
            self.handed += len(self._rows)
            self._rows, self._marks, self._stamps = [], array("q"), array("q")
        self._fresh = True
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
        if self._rows and time.time() >= self._deadline and loop is not None:
            try:
                loop.call_soon_threadsafe(self._hand_off_stale)
            except RuntimeError:  # the loop is closed: close() hands off what is left
                # Nor will it run _new_turn: the next record (on another loop, or none)
                # must read the clock itself.
                self._fresh = True

    def _hand_off_stale(self) -> None:
        if self._rows and time.time() >= self._deadline:
            self.hand_off()


class TraceTap(Subscriber):
    """The traffic trace as a subscriber of one vhost's events (:mod:`leveret.node.events`):
    each publish a row of ``recorder``."""

    def __init__(self, vhost: str, recorder: Recorder) -> None:
        self.vhost = vhost
        self.recorder = recorder

    def published(self, message: Message, queues: Collection[str], origin: object) -> None:
        """Record the publish (clients', the management API's and firehose copies alike)."""
        self.recorder.record(
            self.vhost,
            message.exchange,
            message.routing_key,
            message.header,
            message.body_size,
            queues,
        )
