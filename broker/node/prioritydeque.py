"""Ready messages of a priority queue (``x-max-priority``): one FIFO per priority.

It offers the part of ``collections.deque`` that :class:`leveret.node.queue.Queue` uses, so a
queue without priorities keeps a plain deque. The highest priority leaves first; order
within a priority is kept, also for requeued messages (:meth:`requeue`). A priority above
the maximum counts as the maximum (docs/priority.md).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from leveret.node.message import Message

# A queue's ready entry, defined here, below the queue, which uses it everywhere:
# (message, redelivered, expires, seq): ``seq`` numbers messages in arrival order so a
# requeued message goes back to its original place, as in RabbitMQ's classic queues.
# ``redelivered`` is a bool, except in a quorum queue: there it counts the deliveries
# returned so far (0 = never delivered), which is also truthy once redelivered.
Entry = tuple[Message, int, float, int]


def _seq(entry: Entry) -> int:
    return entry[3]


def merge_by_seq(entries: deque[Entry], returned: list[Entry]) -> None:
    """Put ``returned`` entries (sorted by sequence number) back where their numbers belong.

    ``entries`` is in sequence order, so only the queued entries older than the newest
    returned one move: they are taken off the head and merged with ``returned`` in one pass,
    O(k + m) for k of them and m returned (k is almost always 0: what is still queued
    arrived later). Inserting one by one cost O(m^2): 40k unacked messages requeued by a
    closing channel held the event loop for minutes.
    """
    if not returned:
        return
    newest = returned[-1][3]
    older: list[Entry] = []
    while entries and entries[0][3] < newest:
        older.append(entries.popleft())
    merged = list(heapq.merge(returned, older, key=_seq)) if older else returned
    entries.extendleft(reversed(merged))


class PriorityDeque:
    """Entries bucketed by their message's priority, highest first."""

    __slots__ = ("_len", "_levels", "_max")

    def __init__(self, max_priority: int) -> None:
        self._max = max_priority
        self._levels: list[deque[Entry]] = [deque() for _ in range(max_priority + 1)]
        self._len = 0

    def _level(self, entry: Entry) -> deque[Entry]:
        return self._levels[min(entry[0].priority, self._max)]

    def append(self, entry: Entry) -> None:
        """Add ``entry`` behind the others of its priority."""
        self._level(entry).append(entry)
        self._len += 1

    def requeue(self, returned: list[Entry]) -> None:
        """Put requeued entries (sorted by sequence number) back in their original places
        within their priorities."""
        by_level: dict[int, list[Entry]] = {}
        for entry in returned:
            by_level.setdefault(min(entry[0].priority, self._max), []).append(entry)
        for level, entries in by_level.items():
            merge_by_seq(self._levels[level], entries)
        self._len += len(returned)

    def _first(self) -> deque[Entry]:
        for level in reversed(self._levels):
            if level:
                return level
        raise IndexError("pop from an empty PriorityDeque")

    def popleft(self) -> Entry:
        """Take the oldest entry of the highest priority."""
        entry = self._first().popleft()
        self._len -= 1
        return entry

    def __getitem__(self, index: int) -> Entry:
        if index != 0:
            raise IndexError("only the head can be peeked")
        return self._first()[0]

    def clear(self) -> None:
        """Drop every entry."""
        for level in self._levels:
            level.clear()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Entry]:
        for level in reversed(self._levels):
            yield from level
