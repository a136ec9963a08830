"""Ready messages of a priority queue (``x-max-priority``): one FIFO per priority.

It offers the part of ``collections.deque`` that :class:`leveret.queue.Queue` uses, so a
queue without priorities keeps a plain deque. The highest priority leaves first; order
within a priority is kept, also for requeued messages (:meth:`requeue`). A priority above
the maximum counts as the maximum (docs/priority.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.queue import Entry


def insert_by_seq(entries: deque[Entry], entry: Entry) -> None:
    """Put a requeued ``entry`` back where its sequence number belongs (almost always
    at the head: what is still queued arrived later)."""
    seq = entry[3]
    if not entries or entries[0][3] > seq:
        entries.appendleft(entry)
        return
    index = 1
    while index < len(entries) and entries[index][3] < seq:
        index += 1
    entries.insert(index, entry)


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

    def requeue(self, entry: Entry) -> None:
        """Put a requeued ``entry`` back in its original place within its priority."""
        insert_by_seq(self._level(entry), entry)
        self._len += 1

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
