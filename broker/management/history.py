"""Rate history: what the sampler saw over the last ten minutes, served as RabbitMQ serves
it when a request asks for a range (``?msg_rates_age=60&msg_rates_incr=5`` for message
counters, ``?lengths_age=60&lengths_incr=5`` for queue lengths), so a page shows the last
minutes at once instead of only what its own tab has polled.

RabbitMQ keeps its samples in exometer slides and formats a range in
deps/rabbitmq_management/src/rabbit_mgmt_stats.erl (format_range/6): each ``*_details``
gets ``samples`` (``{"sample": value, "timestamp": ms}``, newest first), and with more than
one sample ``avg_rate`` ((newest - oldest) per second) and ``avg`` (the mean sample). Its
default retention for per-object statistics is 605 s at 5 s
(rabbitmq_management_agent's ``sample_retention_policies``, ``basic``).

Cheap with thousands of queues: a series stores a value tuple only when it differs from
the last one stored, so an idle queue costs one entry whatever its age, and a sample of
3,000 queues is a tuple comparison each. A range is read back as a step function: the
value at a point in time is the last one stored at or before it.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leveret.management.errors import bad_request

RETENTION_MS = 605_000
# At most this many points in one range (bounds the work of one request: 605 s at 1 s).
MAX_POINTS = 606


def now_ms() -> int:
    """Wall-clock milliseconds, RabbitMQ's sample timestamps."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Range:
    """A requested range: ``age`` and ``incr`` in milliseconds."""

    age_ms: int
    incr_ms: int


def _param(query: Mapping[str, str], name: str) -> int:
    raw = query.get(name)
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        value = 0
    if value <= 0:
        raise bad_request(f"{name} must be a positive integer")
    return value


def requested_range(query: Mapping[str, str], prefix: str) -> Range | None:
    """The ``{prefix}_age`` / ``{prefix}_incr`` range of a query (seconds), if asked for.
    RabbitMQ asks for both together (rabbit_mgmt_util:range/1); one without the other, or
    a value that is not a positive integer, is 400."""
    if f"{prefix}_age" not in query and f"{prefix}_incr" not in query:
        return None
    age, incr = _param(query, f"{prefix}_age"), _param(query, f"{prefix}_incr")
    return Range(age * 1000, incr * 1000)


def ranges(query: Mapping[str, str]) -> tuple[Range | None, Range | None]:
    """(message rates range, lengths range) of a request's query string."""
    return requested_range(query, "msg_rates"), requested_range(query, "lengths")


class Series:
    """One object's samples: ``times`` (ms) and ``values`` (tuples), changes only."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: deque[int] = deque()
        self.values: deque[tuple[int, ...]] = deque()

    def record(self, at_ms: int, values: tuple[int, ...]) -> None:
        """Store ``values`` if they differ from the last stored; drop what is older than
        the retention (keeping the entry the oldest point still steps from)."""
        if self.values and self.values[-1] == values:
            return
        self.times.append(at_ms)
        self.values.append(values)
        horizon = at_ms - RETENTION_MS
        while len(self.times) > 1 and self.times[1] <= horizon:
            self.times.popleft()
            self.values.popleft()

    def points(self, rng: Range, now_ms: int) -> list[tuple[int, tuple[int, ...]]]:
        """(timestamp, values) newest first, every ``incr`` back over ``age``, aligned
        on multiples of ``incr`` as RabbitMQ's slides are; none before the first sample."""
        if not self.times:
            return []
        last = now_ms - now_ms % rng.incr_ms
        count = min(rng.age_ms // rng.incr_ms + 1, MAX_POINTS)
        first_known = self.times[0]
        found: list[tuple[int, tuple[int, ...]]] = []
        times = list(self.times)  # bisect needs a sequence with O(1) indexing
        for i in range(count):
            at = last - i * rng.incr_ms
            if at < first_known or at < now_ms - RETENTION_MS:
                break
            index = bisect.bisect_right(times, at) - 1
            found.append((at, self.values[index]))
        return found


class History:
    """The series of every sampled object, keyed as the sampler keys them."""

    def __init__(self) -> None:
        self.series: dict[Hashable, Series] = {}

    def record(self, key: Hashable, at_ms: int, values: tuple[int, ...]) -> None:
        """Add one sample of ``key``."""
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = Series()
        series.record(at_ms, values)

    def forget(self, key: Hashable) -> None:
        """Drop the series of a deleted object."""
        self.series.pop(key, None)

    def points(self, key: Hashable, rng: Range, now_ms: int) -> list[tuple[int, tuple[int, ...]]]:
        """The points of ``key`` over ``rng`` (empty when it has none)."""
        series = self.series.get(key)
        return series.points(rng, now_ms) if series is not None else []


def details(
    rate: float, points: Sequence[tuple[int, tuple[int, ...]]], index: int
) -> dict[str, Any]:
    """A ``*_details`` object with ``samples`` (rabbit_mgmt_stats:format_rate/6 and
    average/3: ``avg_rate`` and ``avg`` only with more than one sample)."""
    samples = [{"sample": values[index], "timestamp": at} for at, values in points]
    found: dict[str, Any] = {"rate": rate, "samples": samples}
    if len(samples) > 1:
        newest, oldest = samples[0], samples[-1]
        elapsed = newest["timestamp"] - oldest["timestamp"]
        found["avg_rate"] = (newest["sample"] - oldest["sample"]) * 1000 / elapsed
        found["avg"] = sum(s["sample"] for s in samples) / len(samples)
    return found


def with_samples(
    target: dict[str, Any],
    names: Sequence[str],
    points: Sequence[tuple[int, tuple[int, ...]]],
    indices: Mapping[str, int],
) -> None:
    """Replace ``target``'s ``{name}_details`` of ``names`` by ones with samples, the
    value of ``name`` being ``values[indices[name]]`` of each point."""
    for name in names:
        key = f"{name}_details"
        if key in target and name in indices:
            rate = target[key].get("rate", 0.0)
            target[key] = details(rate, points, indices[name])
