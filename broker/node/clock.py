"""The one door time enters a vhost by: real by default, manual in a test.

Every timer a vhost runs (message TTL and per-message ``expiration``, ``x-expires``,
``x-delayed-message`` releases, consumer timeouts, stream ``max-age``) asks its
:class:`Clock` for "now" and schedules through it; the node never reads the wall clock or
calls ``loop.call_later`` itself (h11 takes time as an input for the same reason).

A clock keeps two readings in step: :meth:`Clock.time`, monotonic seconds for timers and
the expiry of ready messages, and :meth:`Clock.wall`, seconds since the epoch for what is
stored or shown (``x-death`` times, delayed due times, stream timestamps).

On the real clock both follow the machine's, shifted by whatever a manual stretch added.
:meth:`Clock.freeze` stops time: timers wait in the clock's own heap and the event loop
runs none of them. :meth:`Clock.advance` moves time forward and fires every timer that
comes due on the way, in order of due time, each at its own instant, including those the
fired ones arm (a message TTL that dead-letters into a queue whose messages then expire
too: the whole chain in one advance); it returns when what they did has settled on the
loop. :meth:`Clock.resume` lets time run again from where it stands (it does not jump
back), the waiting timers handed back to the event loop.

The mode is not stored: after a restart every vhost runs on the real clock.

What belongs to a connection or to the whole node rather than to a vhost keeps the event
loop's real time: heartbeats, handshake and close timeouts, the memory and disk monitors,
the store's retry after a failed write, and the management statistics (rates and consumer
utilisation are measurements of the machine, not of the messages' time).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Turns of the event loop an advance gives what a fired timer scheduled (deliveries
# written, releases routed) before it moves on or returns.
_SETTLE_TURNS = 3
# Timers one advance may fire before it gives up: a timer that re-arms itself at the
# same instant forever must not hang the broker.
MAX_FIRED = 1_000_000


class Timer:
    """A callback due at a clock time; :meth:`cancel` stops it (idempotent)."""

    __slots__ = ("_clock", "_handle", "callback", "cancelled", "seq", "when")

    def __init__(self, clock: Clock, when: float, seq: int, callback: Callable[[], None]) -> None:
        self._clock = clock
        self.when = when
        self.seq = seq
        self.callback = callback
        self.cancelled = False
        self._handle: asyncio.TimerHandle | None = None

    def __lt__(self, other: Timer) -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        """Stop the timer: its callback will not run."""
        if self.cancelled:
            return
        self.cancelled = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._clock._live.discard(self)

    def _fire(self) -> None:
        self._handle = None
        if self.cancelled:
            return
        self.cancelled = True  # fired: a later cancel() is a no-op
        self._clock._live.discard(self)
        self.callback()


class Clock:
    """Time for one vhost: :meth:`time`, :meth:`wall` and timers, real or manual."""

    #: Monotonic seconds now (on the real clock the machine's, plus the skew).
    time: Callable[[], float]

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.time = time.monotonic
        self.manual = False
        # Seconds the clock runs ahead of the machine's (what manual stretches added).
        self._skew = 0.0
        # Manual mode: the clock's time, and wall minus monotonic when it was frozen.
        self._now = 0.0
        self._wall_offset = 0.0
        self._seq = itertools.count()
        # Timers not yet fired nor cancelled: on the event loop (real) or in the heap
        # (manual); moved between the two when the mode changes.
        self._live: set[Timer] = set()
        self._heap: list[Timer] = []
        self._advancing = False
        # Called with the clock after it moved (consumer timeouts look at channels then).
        self._moved: list[Callable[[Clock], None]] = []

    def __repr__(self) -> str:
        mode = "manual" if self.manual else "real"
        return f"<Clock {self.name!r} {mode} at {self.wall():.3f}>"

    # -- readings ---------------------------------------------------------------------

    def wall(self) -> float:
        """Seconds since the epoch, on this clock."""
        if self.manual:
            return self._now + self._wall_offset
        return time.time() + self._skew

    def wall_ms(self) -> int:
        """:meth:`wall` in whole milliseconds (what is stored and put in headers)."""
        return int(self.wall() * 1000)

    def _skewed(self) -> float:
        return time.monotonic() + self._skew

    def _manual_now(self) -> float:
        return self._now

    # -- timers -----------------------------------------------------------------------

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` once the clock's :meth:`time` reaches ``when``."""
        timer = Timer(self, when, next(self._seq), callback)
        self._live.add(timer)
        if self.manual:
            heapq.heappush(self._heap, timer)
        else:
            self._hand_to_loop(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` ``delay`` seconds from now, on this clock."""
        return self.call_at(self.time() + delay, callback)

    def _hand_to_loop(self, timer: Timer) -> None:
        loop = asyncio.get_running_loop()
        # call_later, not call_at: the loop's time scale (uvloop's is its own) is not ours.
        timer._handle = loop.call_later(max(0.0, timer.when - self.time()), timer._fire)

    def on_moved(self, callback: Callable[[Clock], None]) -> None:
        """Call ``callback(clock)`` before an advance and after each step of it."""
        self._moved.append(callback)

    # -- modes ------------------------------------------------------------------------

    def freeze(self) -> None:
        """Stop time where it stands (manual mode); timers wait for :meth:`advance`."""
        if self.manual:
            return
        now = self.time()
        self._wall_offset = time.time() + self._skew - now
        self._now = now
        self.manual = True
        self.time = self._manual_now
        for timer in self._live:
            if timer._handle is not None:
                timer._handle.cancel()
                timer._handle = None
            heapq.heappush(self._heap, timer)

    def resume(self) -> None:
        """Let time run again from where it stands; waiting timers go back to the loop
        (those already due fire at once)."""
        if not self.manual:
            return
        self._skew = self._now - time.monotonic()
        self.manual = False
        self.time = self._skewed if self._skew else time.monotonic
        heap, self._heap = self._heap, []
        for timer in heap:
            if not timer.cancelled:
                self._hand_to_loop(timer)

    def continue_from(self, old: Clock) -> None:
        """Take up ``old``'s time: its mode and where it stands (this vhost before the
        node restarted, :mod:`leveret.faults`), before any timer is set on this clock."""
        self._skew = old._skew_now()
        if old.manual:
            self.manual = True
            self._now = old._now
            self._wall_offset = old._wall_offset
            self.time = self._manual_now
        elif self._skew:
            self.time = self._skewed

    def set_mode(self, mode: object) -> None:
        """``"manual"`` (:meth:`freeze`) or ``"real"`` (:meth:`resume`); ValueError for
        anything else (:func:`checked_mode`)."""
        if checked_mode(mode) == "manual":
            self.freeze()
        else:
            self.resume()

    async def advance(self, seconds: float) -> int:
        """Move time ``seconds`` forward (freezing the clock first if it runs), firing
        every timer due on the way in order, each at its due time; returns once their
        effects have settled, with the number of timers fired."""
        seconds = checked_seconds(seconds)
        if self._advancing:
            raise RuntimeError(f"the clock of vhost '{self.name}' is advancing already")
        self.freeze()
        self._advancing = True
        try:
            self._notify()
            target = self._now + seconds
            fired = 0
            heap = self._heap
            while fired < MAX_FIRED:
                while heap and heap[0].cancelled:
                    heapq.heappop(heap)
                if not heap or heap[0].when > target:
                    break
                timer = heapq.heappop(heap)
                self._now = max(self._now, timer.when)
                try:
                    timer._fire()
                except Exception:  # one failing timer must not stop the others
                    log.exception("a timer of vhost %r failed", self.name)
                fired += 1
                self._notify()
                await settle()
            else:
                log.warning(
                    "vhost %r: an advance stopped after %d timers; those still due fire on "
                    "the next advance",
                    self.name,
                    MAX_FIRED,
                )
            self._now = max(self._now, target)
            self._notify()
            await settle()
            return fired
        finally:
            self._advancing = False

    def _notify(self) -> None:
        for callback in self._moved:
            try:
                callback(self)
            except Exception:
                log.exception("a clock observer of vhost %r failed", self.name)

    def close(self) -> None:
        """Cancel every timer (the vhost is gone or the broker stops)."""
        for timer in list(self._live):
            timer.cancel()
        self._heap.clear()

    @property
    def pending(self) -> int:
        """Timers waiting to fire."""
        return len(self._live)

    def describe(self) -> dict[str, object]:
        """The clock as the management API shows it."""
        return {
            "mode": "manual" if self.manual else "real",
            "now": round(self.wall(), 3),
            "skew": round(self._skew_now(), 3),
            "pending_timers": self.pending,
        }

    def _skew_now(self) -> float:
        if self.manual:
            return self._now - time.monotonic()
        return self._skew


def checked_seconds(seconds: object) -> float:
    """``seconds`` as a finite non-negative float, or ValueError saying what is wrong."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"seconds must be a number, not {seconds!r}")
    value = float(seconds)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"seconds must be a finite number >= 0, not {seconds!r}")
    return value


def checked_mode(mode: object) -> str:
    """``mode`` if it is ``"manual"`` or ``"real"``, else ValueError saying what is wrong."""
    if mode not in ("manual", "real"):
        raise ValueError(f'mode must be "manual" or "real", not {mode!r}')
    return str(mode)


async def settle() -> None:
    """Give the event loop a few turns, so what callbacks scheduled has run."""
    for _ in range(_SETTLE_TURNS):
        await asyncio.sleep(0)
