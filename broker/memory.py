"""Memory flow control: a high watermark on the bytes of messages the broker holds.

RabbitMQ raises a memory alarm above ``vm_memory_high_watermark`` (a fraction of RAM,
0.4 in 3.13) and then blocks publishing connections until usage falls below it again
(docs/memory.md, docs/connection-blocked.md). Leveret measures what it can account for
exactly and cheaply: the body bytes of ready messages in all queues, kept up to date by
the queues themselves. Python's allocator rarely returns memory to the OS, so process
RSS would never fall back below the mark; message bytes do.
"""

from __future__ import annotations

import os
from collections.abc import Callable

# RabbitMQ 3.13's default vm_memory_high_watermark.relative.
DEFAULT_FRACTION = 0.4


def total_memory() -> int:
    """Physical memory in bytes (0 when it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def default_watermark() -> int:
    """40 % of RAM, as RabbitMQ's default."""
    return int(total_memory() * DEFAULT_FRACTION) or 1 << 31


class MemoryMonitor:
    """Counts message bytes and calls ``on_alarm(True/False)`` when crossing the mark."""

    __slots__ = ("alarm", "limit", "on_alarm", "used")

    def __init__(self, limit: int, on_alarm: Callable[[bool], None] | None = None) -> None:
        self.limit = limit
        self.used = 0
        self.alarm = False
        self.on_alarm = on_alarm

    def add(self, size: int) -> None:
        """``size`` more bytes are held."""
        self.used += size
        if self.used > self.limit and not self.alarm:
            self._set(True)

    def remove(self, size: int) -> None:
        """``size`` bytes were released."""
        self.used -= size
        if self.alarm and self.used <= self.limit:
            self._set(False)

    def _set(self, alarm: bool) -> None:
        self.alarm = alarm
        if self.on_alarm is not None:
            self.on_alarm(alarm)
