"""Disk flow control: RabbitMQ's free disk space alarm.

RabbitMQ (rabbit_disk_monitor, docs/disk-alarms.md) reads the free space of the file system
holding its data directory (``df -kP``: the space available to unprivileged users) and
raises the disk alarm while it is below ``disk_free_limit`` (50 MB by default, an absolute
size with the memory watermark's units, or ``disk_free_limit.relative``: a multiple of the
total memory, ``1.0`` or ``2.0`` say). Like the memory alarm, the disk alarm blocks every
connection that publishes: ``connection.blocked`` with reason ``low on disk`` (``low on
memory & disk`` when both are set, as rabbit_reader's ``blocked_by_message/1`` joins them),
and the broker stops reading from it; ``connection.unblocked`` once no alarm is left
(broker/connection.py). Consumers keep draining, which is what frees the disk.

Leveret reads ``os.statvfs`` of the data directory (``f_bavail * f_frsize``, what ``df``
shows as available) in a worker thread, as often as RabbitMQ would if the disk filled at
250 MB/s (``2 * |free - limit| / 250 MB/s``, at least every 100 ms) but at least once a
second where RabbitMQ waits up to 10 s, and once, inline, at start-up before the listener
opens. Without a data directory nothing is written, and nothing is monitored (no alarm),
but the node still reports the free space of its working directory's file system, read
when asked, since RabbitMQ, whose data directory always exists, always reports one
(:meth:`DiskMonitor.reported_free`). The probe is
a parameter (:attr:`leveret.config.Config.disk_free_probe`), so a test can make the disk
look full and then fine again.

The alarm keeps the disk from filling up; what happens if it fills anyway (a quota, a file
size limit, a burst faster than the checks) is in broker/persistence.py: the publishes that
cannot be written are nacked, and the store recovers by itself when space returns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from leveret.config import DISK_FREE_LIMIT
from leveret.node.memory import CGROUP_ROOT, Watermark, total_memory

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)

# rabbit_disk_monitor: the check interval is what the margin lasts at ?FAST_RATE (250 MB/s),
# twice over, between ?DEFAULT_MIN_DISK_CHECK_INTERVAL (100 ms) and a maximum (RabbitMQ's
# 10 s; Leveret's 1 s).
FAST_RATE = 250_000_000
MIN_INTERVAL = 0.1
MAX_INTERVAL = 1.0

# A size is digits with an optional unit (parsed by the memory watermark's parser); anything
# else is read as a multiple of the memory.
_SIZE = re.compile(r"[0-9]+[A-Za-z]*")
# A limit of 0, which RabbitMQ takes (the alarm can then never be set: free < 0 never holds)
# and the memory watermark's parser refuses.
_ZERO = re.compile(r"0+")
_EXPECTED = (
    "expected a size in bytes, optionally with a unit (e.g. 50000000, 50MB, 1GiB), or a "
    "multiple of the memory with a decimal point (e.g. 1.0, 2.0)"
)


@dataclass(frozen=True, slots=True)
class DiskFreeLimit:
    """RabbitMQ's ``disk_free_limit``: ``absolute`` (bytes) or ``relative`` (a multiple of
    the total memory, above 0), exactly one of them."""

    absolute: int | None = None
    relative: float | None = None

    @classmethod
    def parse(cls, value: object) -> DiskFreeLimit:
        """A limit from a setting: an integer, or a string of digits with an optional unit,
        is a size (the units of the memory watermark's absolute form: ``50MB``, ``1GiB``);
        a float, or a decimal string (``1.0``, ``2.5``), a multiple of the memory. Raises
        :class:`ValueError` saying what is expected."""
        if isinstance(value, DiskFreeLimit):
            return value
        if isinstance(value, bool):
            raise ValueError(_EXPECTED)
        if isinstance(value, float):
            return cls._relative(value)
        if isinstance(value, str) and not _SIZE.fullmatch(value.strip()):
            try:
                relative = float(value)
            except ValueError:
                raise ValueError(_EXPECTED) from None
            return cls._relative(relative)
        if not isinstance(value, int | str):
            raise ValueError(_EXPECTED)
        if _ZERO.fullmatch(str(value).strip()):
            return cls(absolute=0)
        try:
            size = Watermark.parse(value).absolute
        except ValueError as exc:
            if str(exc).startswith("unknown unit"):
                raise
            raise ValueError(_EXPECTED) from None
        assert size is not None  # an int or digits: always absolute
        return cls(absolute=size)

    @classmethod
    def _relative(cls, multiple: float) -> DiskFreeLimit:
        if not (math.isfinite(multiple) and multiple > 0):
            raise ValueError("a multiple of the memory must be a number above 0")
        return cls(relative=multiple)

    def limit(self, cgroup_root: Path = CGROUP_ROOT) -> int:
        """The limit in bytes: ``absolute``, or ``relative`` times the total memory (RAM, or
        the cgroup limit in a container); the default 50 MB when the memory is unknown."""
        if self.relative is None:
            return DISK_FREE_LIMIT if self.absolute is None else self.absolute
        total = total_memory(cgroup_root)
        return round(self.relative * total) if total > 0 else DISK_FREE_LIMIT

    def __str__(self) -> str:
        if self.relative is not None:
            return str(self.relative)
        return str(DISK_FREE_LIMIT if self.absolute is None else self.absolute)


def free_bytes(directory: Path) -> int:
    """Bytes available to unprivileged users on the file system holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


class DiskMonitor:
    """Reads the free space with ``probe`` and calls ``on_alarm(True/False)`` when it goes
    below ``limit`` (the alarm is set) or back to it or above (cleared). ``probe`` None:
    nothing is monitored and the alarm is never set."""

    def __init__(
        self,
        limit: int,
        probe: Callable[[], int] | None,
        on_alarm: Callable[[bool], None] | None = None,
        where: str = "",
    ) -> None:
        self.limit = limit
        self.probe = probe
        self.on_alarm = on_alarm
        self.where = where
        self.alarm = False
        # Set by an injected fault (broker/faults.py): the alarm stays on, whatever the
        # readings, until the fault is cleared.
        self.injected = False
        self.free: int | None = None  # the last reading
        self._task: asyncio.Task[None] | None = None
        self._probe_failed = False

    def start(self) -> None:
        """Read the free space now, then keep reading it in the background."""
        if self.probe is None or self._task is not None:
            return
        try:
            free = self.probe()
        except OSError as exc:
            self._unreadable(exc)
        else:
            self.update(free)
        self._task = asyncio.get_running_loop().create_task(self._run(self.probe))

    def stop(self) -> None:
        """Stop reading (the alarm stays as it is)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def reported_free(self) -> int | None:
        """Free bytes as the node reports them (``disk_free`` of /api/nodes, Prometheus):
        the last reading; when nothing is monitored (no data directory), the working
        directory's file system read now. None when it cannot be read."""
        if self.probe is not None:
            return self.free
        try:
            return free_bytes(Path("."))
        except OSError:
            return None

    def interval(self) -> float:
        """Seconds until the next reading: how long the margin to the limit would last,
        twice over, at 250 MB/s, between :data:`MIN_INTERVAL` and :data:`MAX_INTERVAL`."""
        if self.free is None:
            return MAX_INTERVAL
        ideal = 2 * abs(self.free - self.limit) / FAST_RATE
        return min(MAX_INTERVAL, max(MIN_INTERVAL, ideal))

    async def _run(self, probe: Callable[[], int]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval())
            try:
                # A worker thread: statvfs is cheap, but may hang on a network file system.
                free = await loop.run_in_executor(None, probe)
            except OSError as exc:  # the directory vanished, say: keep trying
                self._unreadable(exc)
            else:
                self.update(free)

    def _unreadable(self, exc: OSError) -> None:
        if not self._probe_failed:
            self._probe_failed = True
            log.warning("cannot read the free disk space%s: %s", self.where, exc)

    def update(self, free: int) -> None:
        """A reading: set or clear the alarm when ``free`` crossed the limit."""
        self._probe_failed = False
        self.free = free
        self._apply()

    def set_limit(self, limit: int) -> None:
        """A new free space limit at runtime (rabbitmqctl set_disk_free_limit): the last
        reading is judged against it at once, as rabbit_disk_monitor:set_disk_free_limit/1
        does, and the next reading comes as soon as the new margin asks."""
        self.limit = limit
        self._apply()

    def inject(self, on: bool) -> None:
        """Set the alarm as an injected fault (on), or stop injecting it (off): then the
        last reading decides again."""
        self.injected = on
        self._apply()

    def _apply(self) -> None:
        """Set or clear the alarm from the last reading and the injected fault."""
        free = self.free
        alarm = self.injected or (free is not None and free < self.limit)
        if alarm == self.alarm:
            return
        self.alarm = alarm
        log.warning(
            "disk alarm %s: free disk space is %s%s: %s bytes free, limit %d%s",
            "set" if alarm else "cleared",
            "insufficient" if alarm else "sufficient",
            self.where,
            "unknown" if free is None else free,
            self.limit,
            " (injected)" if self.injected else "",
        )
        if self.on_alarm is not None:
            self.on_alarm(alarm)


def disk_monitor(config: Config, on_alarm: Callable[[bool], None]) -> DiskMonitor:
    """The disk monitor ``config`` asks for: its probe, else statvfs of its data directory
    (none: not monitored); ``on_alarm`` blocks or unblocks the connections (the shared
    state's, broker/state.py)."""
    probe = config.disk_free_probe
    directory = config.data_dir
    if probe is None and directory is not None:
        probe = lambda: free_bytes(directory)  # noqa: E731
    where = f" on the file system of {directory}" if directory is not None else ""
    return DiskMonitor(config.disk_free_limit, probe, on_alarm, where)
