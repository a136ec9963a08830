"""Memory flow control: a high watermark on the bytes of messages the broker holds.

RabbitMQ raises a memory alarm above ``vm_memory_high_watermark`` (a fraction of the
memory available, 0.4 in 3.13, or an absolute size) and then blocks publishing connections
until usage falls below it again (docs/memory.md, docs/connection-blocked.md). The memory
available is the host's RAM, or the cgroup memory limit in a container, as RabbitMQ reads
it. Leveret measures what it can account for exactly and cheaply: the body bytes of ready
messages in all queues, kept up to date by the queues themselves. Python's allocator
rarely returns memory to the OS, so process RSS would never fall back below the mark;
message bytes do.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# RabbitMQ 3.13's default vm_memory_high_watermark.relative.
DEFAULT_FRACTION = 0.4
# Where a container's memory limit is read, as RabbitMQ does (vm_memory_monitor): cgroup v2
# ``memory.max``, else cgroup v1 ``memory/memory.limit_in_bytes``.
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Above this a cgroup "limit" means none: v1 reports 2^63 minus a page when unlimited.
_NO_LIMIT = 1 << 62

# The information units of vm_memory_high_watermark.absolute: those RabbitMQ 3.13 accepts
# (rabbit_resource_monitor_misc:parse_information_unit/1). Since 3.13 the single letters
# are powers of ten, as in Kubernetes; the "i" forms are powers of two.
_UNITS: dict[str, int] = {
    **dict.fromkeys(("k", "K", "kB", "KB", "kb", "Kb"), 1000),
    **dict.fromkeys(("m", "M", "MB", "mb", "Mb"), 1000**2),
    **dict.fromkeys(("g", "G", "GB", "gb", "Gb"), 1000**3),
    **dict.fromkeys(("TB", "tb", "Tb"), 1000**4),
    **dict.fromkeys(("p", "P", "PB", "pb", "Pb"), 1000**5),
    **dict.fromkeys(("Ki", "ki", "kiB", "KiB", "kib", "KIB"), 1024),
    **dict.fromkeys(("Mi", "MiB", "mib", "MIB"), 1024**2),
    **dict.fromkeys(("Gi", "GiB", "gib", "GIB"), 1024**3),
    **dict.fromkeys(("Ti", "TiB", "tib", "TIB"), 1024**4),
    **dict.fromkeys(("Pi", "PiB", "pib", "PIB"), 1024**5),
}
_ABSOLUTE = re.compile(r"([0-9]+)([A-Za-z]*)")
_UNITS_TEXT = (
    "units are k, kB, M, MB, G, GB, TB, P, PB (powers of 1000) and Ki, KiB, Mi, MiB, Gi, GiB, "
    "Ti, TiB, Pi, PiB (powers of 1024)"
)
_EXPECTED = (
    "expected a fraction of memory (0 < x <= 1, e.g. 0.4) or a size in bytes, "
    "optionally with a unit (e.g. 1073741824, 2GiB, 512MB)"
)


@dataclass(frozen=True, slots=True)
class Watermark:
    """RabbitMQ's ``vm_memory_high_watermark``: ``relative`` (a fraction of the memory
    available, 0 < x <= 1) or ``absolute`` (bytes), exactly one of them."""

    relative: float | None = None
    absolute: int | None = None

    @classmethod
    def parse(cls, value: object) -> Watermark:
        """A watermark from a setting: a float is a fraction, an integer a number of bytes;
        a string is a size with an optional unit (``2GiB``, ``512MB``, ``1073741824``) or
        a decimal fraction (``0.4``). Raises :class:`ValueError` saying what is expected."""
        if isinstance(value, Watermark):
            return value
        if isinstance(value, bool):
            raise ValueError(_EXPECTED)
        if isinstance(value, int):
            return cls._absolute(value)
        if isinstance(value, float):
            return cls._relative(value)
        if not isinstance(value, str):
            raise ValueError(_EXPECTED)
        text = value.strip()
        match = _ABSOLUTE.fullmatch(text)
        if match is not None:
            number, unit = match.groups()
            if unit and unit not in _UNITS:
                raise ValueError(f"unknown unit {unit!r}: {_UNITS_TEXT}")
            return cls._absolute(int(number) * _UNITS.get(unit, 1))
        try:
            fraction = float(text)
        except ValueError:
            raise ValueError(_EXPECTED) from None
        return cls._relative(fraction)

    @classmethod
    def _absolute(cls, size: int) -> Watermark:
        if size <= 0:
            raise ValueError("an absolute watermark must be at least 1 byte")
        return cls(absolute=size)

    @classmethod
    def _relative(cls, fraction: float) -> Watermark:
        if not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise ValueError("a fraction of memory must be above 0 and at most 1")
        return cls(relative=fraction)

    def limit(self, cgroup_root: Path = CGROUP_ROOT) -> int:
        """The watermark in bytes: ``absolute``, or ``relative`` (by default 0.4) times
        :func:`total_memory`; 2 GiB when the memory cannot be read."""
        if self.absolute is not None:
            return self.absolute
        fraction = DEFAULT_FRACTION if self.relative is None else self.relative
        total = total_memory(cgroup_root)
        return max(1, int(total * fraction)) if total > 0 else 1 << 31

    def __str__(self) -> str:
        if self.absolute is not None:
            return str(self.absolute)
        return str(DEFAULT_FRACTION if self.relative is None else self.relative)


def physical_memory() -> int:
    """Physical memory in bytes (0 when it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def cgroup_memory_limit(cgroup_root: Path = CGROUP_ROOT) -> int | None:
    """The memory limit of this container's cgroup (v2 ``memory.max``, else v1
    ``memory/memory.limit_in_bytes``), or None when there is none: no such file, ``max``,
    or a value too large to be a limit."""
    for path in (cgroup_root / "memory.max", cgroup_root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text("ascii").strip()
        except (OSError, ValueError):
            continue
        try:
            limit = int(text)
        except ValueError:  # "max": no limit
            return None
        return limit if 0 < limit < _NO_LIMIT else None
    return None


def total_memory(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The memory the broker may use, in bytes: physical memory, or the cgroup limit when
    one is set below it (in a container), as RabbitMQ computes it; 0 when unknown."""
    physical = physical_memory()
    limit = cgroup_memory_limit(cgroup_root)
    if limit is not None and (physical <= 0 or limit < physical):
        return limit
    return physical


def default_watermark(cgroup_root: Path = CGROUP_ROOT) -> int:
    """40 % of the memory available (the cgroup limit in a container), as RabbitMQ's
    default; 2 GiB when it cannot be read."""
    return Watermark().limit(cgroup_root)


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
