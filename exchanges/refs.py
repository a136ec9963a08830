"""Reference-counted name sets, the building block of the direct and fanout indexes."""

from __future__ import annotations

from typing import Any

from leveret.exchanges.model import EMPTY


class RefSet:
    """Names with a reference count each, plus a frozenset of the names for routing.

    The frozenset is rebuilt lazily (on the next read after a membership change), so binding
    10k queues to one fanout exchange stays linear, and routing returns a shared set without
    allocating.
    """

    __slots__ = ("_counts", "frozen")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.frozen: frozenset[str] | None = EMPTY

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, name: str) -> None:
        """Add one reference to ``name``."""
        count = self._counts.get(name, 0)
        self._counts[name] = count + 1
        if count == 0:
            self.frozen = None

    def discard(self, name: str) -> None:
        """Drop one reference to ``name`` (no-op when there is none)."""
        count = self._counts.get(name)
        if count is None:
            return
        if count > 1:
            self._counts[name] = count - 1
        else:
            del self._counts[name]
            self.frozen = None

    def names(self) -> frozenset[str]:
        """The referenced names (shared, do not mutate)."""
        frozen = self.frozen
        if frozen is None:
            frozen = self.frozen = frozenset(self._counts) if self._counts else EMPTY
        return frozen

    def dump(self) -> Any:
        return frozenset(self._counts.items())
