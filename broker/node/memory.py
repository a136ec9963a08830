"""Memory flow control: the memory high watermark, and what counts against it.

RabbitMQ raises a memory alarm above ``vm_memory_high_watermark`` (a fraction of the
memory available, 0.4 in 3.13, or an absolute size) and then blocks publishing connections
until usage falls below it again (docs/memory.md, docs/connection-blocked.md). The memory
available is the host's RAM, or the cgroup memory limit in a container, as RabbitMQ reads
it.

What counts (:class:`MemoryMonitor`): every message the broker holds, at what it really
costs the process, kept up to date by its holders as they take and release it:

* a message in a queue (ready): ``len(header) + body size + MESSAGE_OVERHEAD`` (the raw
  content header, the body, and the objects that hold them: the ``Message``, its queue
  entry, the bytes objects' own headers), taken on enqueue, released when the message leaves
  the queue (delivered without ack, expired, dropped, purged, queue deleted) or becomes an
  unacknowledged delivery;
* an unacknowledged delivery (consumed or got with acks): the same plus
  ``UNACKED_OVERHEAD`` (the channel's record of it), released on ack, reject/nack (a
  requeued message counts as ready again) and when its channel closes; a stream's messages
  stay in its log (counted there), so its deliveries count ``UNACKED_OVERHEAD`` only;
* messages published in a transaction and not yet committed, and the body frames of a
  message still being assembled (a multi-frame body), until it is complete.

A message routed to several queues is counted once per queue (conservative: the queues
share its body). The overheads were measured, not guessed: ``bench/backlog.py`` and the
same with a consumer that never acks, on CPython 3.11 (x86-64, uvloop), give the growth of
the process's RSS per message: 373 bytes for a ready 100-byte message with pika's 26-byte
content header (which the codec shares between messages), 2461 with a distinct 2061-byte
header, 1315 for a 1000-byte body, 10332 for a 10000-byte one; 591 for the 100-byte message
unacknowledged. That is 247-305 bytes over body and header for a ready message (Message
112, entry tuple 80, sequence number 32, deque slot 8, the bytes objects' own headers and
allocator rounding) and 218 more once unacknowledged (record tuple 64, delivery tag 32, the
ordered dict's entry): MESSAGE_OVERHEAD and UNACKED_OVERHEAD round these up. Against the RSS
of a broker holding 20,000-200,000 such messages the count comes out between 15 % over
(small messages with a shared header) and 2-4 % under (10-14 KiB headers or bodies, where
malloc's fragmentation adds a few per cent; the RSS check below covers that).

The process's resident memory (RSS, as RabbitMQ's ``rss`` strategy reads it) is a safety
net for what the accounting misses (the interpreter itself, caches, allocator
fragmentation, write buffers, messages held elsewhere such as a delayed exchange's): while
messages hold over an eighth of the mark it is read every 1/32 of the mark they add and
every second, and an RSS over the mark sets the alarm too, which makes the watermark bound
the whole process as RabbitMQ's does. Python rarely returns freed memory to the OS, so RSS
alone might never fall back below the mark after the queues drain: the alarm clears once
the accounted bytes are back under the mark and either the RSS, read after glibc's
``malloc_trim`` has returned what it can, is under it as well (checked again every second
while it is not), or messages have drained to a sixteenth of the mark (their memory is then
free for new messages, which reuse it without growing the process). That check runs when
the event loop next comes round, after what was released is freed, so the trim gives it
back: once a consumer had acked 15,000 messages of 14 KiB, the RSS went from 259 MiB back
to 48 (idle: 41). When the process is over the mark before holding any message (a watermark
under the broker's own footprint, about 40 MB idle, or a broker started inside a bigger
program such as a test run), RSS says nothing about messages and the accounting alone
decides; so it does without /proc (not Linux).

All the bookkeeping on the publish and delivery paths is an addition and one comparison
with a threshold (``used > high`` going up, ``used <= low`` going down); the thresholds are
recomputed, RSS read and the alarm changed only when one is crossed (and by the timers
above, which run only while messages hold over an eighth of the mark or the alarm is on).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.node.message import Message

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
    "expected a fraction of memory (0 <= x <= 1, e.g. 0.4) or a size in bytes, "
    "optionally with a unit (e.g. 1073741824, 2GiB, 512MB)"
)


@dataclass(frozen=True, slots=True)
class Watermark:
    """RabbitMQ's ``vm_memory_high_watermark``: ``relative`` (a fraction of the memory
    available, 0 <= x <= 1) or ``absolute`` (bytes), exactly one of them. A fraction of 0
    raises the alarm at once and keeps it, blocking every publisher, as RabbitMQ's does
    (docs/memory.md, "Disabling All Publishing")."""

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
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError("a fraction of memory must be at least 0 and at most 1")
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


# What a message held in a queue costs the process beyond its body and content header
# bytes, and what an unacknowledged delivery costs on top of that (measured: see above).
MESSAGE_OVERHEAD = 320
UNACKED_OVERHEAD = 224
DELIVERY_OVERHEAD = MESSAGE_OVERHEAD + UNACKED_OVERHEAD

# The RSS checks: from RSS_FROM of the mark held by messages, every RSS_STEP of it; the
# alarm they set clears, whatever the RSS, once messages are down to CLEAR_AT of the mark.
# malloc_trim runs at most once per RECHECK_S seconds (it walks the heap), and a check that
# left the alarm on is done again after as long.
RSS_FROM = 1 / 8
CLEAR_AT = 1 / 16
RSS_STEP = 1 / 32
RECHECK_S = 1.0
# uvloop runs its timers on a millisecond clock: the recheck may come a little before
# time.monotonic() says RECHECK_S have passed, and must still be allowed to trim.
TIMER_SLACK_S = 0.002
# ``high`` while the alarm is on (no check going up) and ``low`` when no check is due going
# down: beyond any count of bytes.
_NEVER = 1 << 62
_OFF = -(1 << 62)

try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
    _PAGE_SIZE = 4096


def message_bytes(message: Message) -> int:
    """What ``message`` costs while a queue holds it (``len(header) + body size +
    MESSAGE_OVERHEAD``); an unacknowledged delivery of it costs UNACKED_OVERHEAD more."""
    return len(message.header) + message.body_size + MESSAGE_OVERHEAD


def resident_bytes() -> int | None:
    """This process's resident set size in bytes (Linux ``/proc/self/statm``), or None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * _PAGE_SIZE


_malloc_trim: Callable[[int], object] | None = None
_trim_loaded = False


def malloc_trim() -> None:
    """Give the C heap's free pages back to the OS (glibc ``malloc_trim(0)``; nothing
    elsewhere). Python's own arenas go back by themselves once empty; the objects over 512
    bytes (message bodies and headers) come from malloc, which keeps what is freed."""
    global _malloc_trim, _trim_loaded
    if not _trim_loaded:
        _trim_loaded = True
        try:
            import ctypes

            function = ctypes.CDLL(None).malloc_trim
            function.argtypes = [ctypes.c_size_t]
            function.restype = ctypes.c_int
            _malloc_trim = function
        except (OSError, AttributeError, ImportError):  # musl, macOS, no ctypes
            _malloc_trim = None
    if _malloc_trim is not None:
        _malloc_trim(0)


class MemoryMonitor:
    """Counts the bytes of messages held (see the module docstring) and calls
    ``on_alarm(True/False)`` when the alarm is set or cleared.

    Holders add and subtract on ``used`` directly on their hot paths and then compare it
    with ``high`` (calling :meth:`rise` above it) or ``low`` (calling :meth:`fall` at or
    below it); :meth:`add` and :meth:`remove` do both. ``sample_rss`` reads the process's
    RSS (None: the accounting alone decides), ``trim`` returns free heap memory to the OS
    before an RSS sample that could clear the alarm.
    """

    __slots__ = (
        "_clear_at",
        "_reader",
        "_rss_from",
        "_sample",
        "_step",
        "_timer",
        "_trim",
        "_trimmed_at",
        "alarm",
        "high",
        "injected",
        "limit",
        "low",
        "on_alarm",
        "rss",
        "used",
    )

    def __init__(
        self,
        limit: int,
        on_alarm: Callable[[bool], None] | None = None,
        sample_rss: Callable[[], int | None] | None = resident_bytes,
        trim: Callable[[], None] | None = malloc_trim,
    ) -> None:
        self.limit = limit
        self.used = 0
        self.alarm = False
        # Set by an injected fault (broker/faults.py): the alarm stays on, whatever the
        # checks find, until the fault is cleared.
        self.injected = False
        self.on_alarm = on_alarm
        # The last RSS sample (bytes): the process's footprint before any message first.
        self._reader = sample_rss  # kept for set_limit, which may turn RSS checks back on
        self.rss = sample_rss() if sample_rss is not None else None
        if self.rss is None or self.rss >= limit:
            # Over the mark already (a watermark under the broker's own footprint, or a
            # broker inside a bigger program): RSS tells nothing about messages.
            sample_rss = None
        self._sample = sample_rss
        self._trim = trim
        self._trimmed_at = -math.inf
        # The next check not driven by a crossing: the RSS watch (no alarm) or another
        # try at clearing (alarm on).
        self._timer: asyncio.Handle | None = None
        self._step = max(int(limit * RSS_STEP), 1)
        self._rss_from = int(limit * RSS_FROM)
        self._clear_at = int(limit * CLEAR_AT)
        self.high = limit
        self.low = _OFF
        self._arm()

    def set_limit(self, limit: int) -> None:
        """A new watermark at runtime (rabbitmqctl set_vm_memory_high_watermark). As
        vm_memory_monitor does, the process is judged against it at once: the alarm is set
        when the messages or the process's RSS are over it (a mark under the broker's own
        footprint, as ``0.0001`` is, blocks publishers: then RSS says nothing about
        messages, and the alarm holds until the mark is raised or messages drain to
        CLEAR_AT of it), and cleared as :meth:`_check` clears it when back under."""
        self.limit = limit
        self._step = max(int(limit * RSS_STEP), 1)
        self._rss_from = int(limit * RSS_FROM)
        self._clear_at = int(limit * CLEAR_AT)
        reader = self._reader
        rss = reader() if reader is not None else None
        if rss is not None:
            self.rss = rss
        self._sample = reader if rss is not None and rss < limit else None
        if self.alarm:
            self._check()
        elif self.used > limit or (rss is not None and rss > limit):
            self._set(True)
        self._arm()

    def add(self, size: int) -> None:
        """``size`` more bytes are held."""
        self.used += size
        if self.used > self.high:
            self.rise()

    def remove(self, size: int) -> None:
        """``size`` bytes were released."""
        self.used -= size
        if self.used <= self.low:
            self.fall()

    def rise(self) -> None:
        """``used`` went over ``high``: over the mark, or at an RSS check on the way up."""
        if not self.alarm and (self.used > self.limit or self._rss_over(trim=False)):
            self._set(True)
        self._arm()

    def fall(self) -> None:
        """``used`` fell to ``low``: a chance to clear the alarm (or, without one, to
        move the RSS checks back down)."""
        if self.alarm:
            # Checked once the caller has let go of what it released (so that a trim
            # gives that memory back before RSS is read), and sooner than a recheck that
            # was due later.
            self._cancel_timer()
            self._schedule(self._on_check, 0.0)
        self._arm()

    def _schedule(self, callback: Callable[[], None], delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (unit tests): at once, never again later
            if not delay:
                callback()
            return
        self._timer = loop.call_later(delay, callback) if delay else loop.call_soon(callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_check(self) -> None:
        self._timer = None
        self._check()

    def inject(self, on: bool) -> None:
        """Set the alarm as an injected fault (on), or stop injecting it (off): then the
        alarm clears as a real one does, at once if usage is under the mark."""
        self.injected = on
        if on:
            if not self.alarm:
                self._set(True)
            self._arm()
        else:
            self._check()

    def _check(self) -> None:
        """Clear the alarm if usage is back under the mark: the messages' and, when it
        can be read, the process's (after a trim); else look again in RECHECK_S."""
        if not self.alarm or self.injected:
            return
        used = self.used
        if used <= self.limit:
            over = self._rss_over(trim=True)
            if not over or used <= self._clear_at:
                self._set(False)
            else:
                self._schedule(self._on_check, RECHECK_S)
        self._arm()

    def _on_watch(self) -> None:
        """Every RECHECK_S while messages hold more than RSS_FROM of the mark and the
        alarm is off: RSS can grow with nothing crossing a step (write buffers, caches)."""
        self._timer = None
        if not self.alarm and self.used > self._rss_from and self._rss_over(trim=False):
            self._set(True)
        self._arm()

    def _rss_over(self, trim: bool) -> bool:
        """Whether the process's RSS is over the mark (False when it cannot be read)."""
        sample = self._sample
        if sample is None:
            return False
        if trim and self._trim is not None:
            now = time.monotonic()
            if now - self._trimmed_at >= RECHECK_S - TIMER_SLACK_S:
                self._trimmed_at = now
                self._trim()
        rss = self.rss = sample()
        if rss is None:
            self._sample = None  # unreadable here: the accounting alone decides
            return False
        return rss > self.limit

    def _arm(self) -> None:
        """Place ``high`` and ``low``: where the next check is, up and down."""
        used, limit, step = self.used, self.limit, self._step
        if self.alarm:
            self.high = _NEVER
            # Clearing is tried at the mark, then every step down to CLEAR_AT of it.
            self.low = limit if used > limit else max(used - step, self._clear_at)
        elif self._sample is None:
            self.high, self.low = limit, _OFF
        elif used <= self._rss_from:
            self.high, self.low = self._rss_from, _OFF
        else:
            # The checks move back down only a step below where they start, so usage going
            # to and fro across it does not read RSS each time.
            self.high, self.low = min(limit, used + step), self._rss_from - step
            if self._timer is None:
                self._schedule(self._on_watch, RECHECK_S)

    def _set(self, alarm: bool) -> None:
        self._cancel_timer()  # a watch, or a try at clearing: the other state's
        self.alarm = alarm
        if self.on_alarm is not None:
            self.on_alarm(alarm)
