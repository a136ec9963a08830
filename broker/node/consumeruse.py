"""Consumer capacity: the share of time a queue could deliver to its consumers at once.

As RabbitMQ 3.10.8's rabbit_queue_consumers (deps/rabbit/src/rabbit_queue_consumers.erl:
``use`` is ``{active, Since, Avg}`` or ``{inactive, Since, ActiveTime, Avg}``, and
``capacity/1``, which ``consumer_utilisation`` repeats): a queue's consumer use turns
*inactive* when a message could not go to a consumer at once (there is none, or every one
is at its prefetch limit), and *active* again when a consumer is added or can take a
message again. Capacity is a moving average, with a half-life of one second
(``USE_AVG_HALF_LIFE``), of the share of time spent active (rabbit_misc:moving_average);
a new queue starts active with an average of 1.0. (rabbit_amqqueue_process reports 0 for a
queue without consumers: leveret.management.metrics.consumer_capacity.)

The queue (leveret.queue) owns one :class:`ConsumerUse` and calls :meth:`~ConsumerUse.active`
or :meth:`~ConsumerUse.inactive` where it delivers or cannot; both return at once when
the state does not change.
"""

from __future__ import annotations

import math
import time

HALF_LIFE = 1.0  # seconds (RabbitMQ's USE_AVG_HALF_LIFE, 1,000,000 us)
_LOG_HALF = math.log(0.5)


def use_avg(active: float, inactive: float, average: float) -> float:
    """rabbit_queue_consumers:use_avg/3: the average moved by ``active`` seconds active
    and ``inactive`` seconds inactive."""
    total = active + inactive
    if total <= 0:
        return average
    weight = math.exp(total * _LOG_HALF / HALF_LIFE)
    return active / total * (1 - weight) + average * weight


class ConsumerUse:
    """One queue's consumer use (see the module doc)."""

    __slots__ = ("average", "inactive_since", "since", "was_active")

    def __init__(self) -> None:
        self.since = time.monotonic()  # when the current state began
        self.average = 1.0
        self.inactive_since = 0.0  # 0.0 while active
        self.was_active = 0.0  # active seconds before the current inactive spell

    def active(self) -> None:
        """A consumer can take messages (added, or delivered to)."""
        if self.inactive_since:
            now = time.monotonic()
            self.average = use_avg(self.was_active, now - self.inactive_since, self.average)
            self.inactive_since = 0.0
            self.since = now

    def inactive(self) -> None:
        """A message could not go to a consumer at once."""
        if not self.inactive_since:
            now = time.monotonic()
            self.was_active = now - self.since
            self.inactive_since = now

    def capacity(self) -> float:
        """rabbit_queue_consumers:capacity/1, now."""
        now = time.monotonic()
        if self.inactive_since:
            return use_avg(self.was_active, now - self.inactive_since, self.average)
        return use_avg(now - self.since, 0.0, self.average)
