"""broker/consumeruse.py against rabbit_queue_consumers' arithmetic, with a clock the test
moves."""

from __future__ import annotations

import math

import pytest

from leveret.node import consumeruse
from leveret.node.consumeruse import ConsumerUse, use_avg


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(consumeruse.time, "monotonic", fake.monotonic)
    return fake


def test_use_avg_is_rabbit_misc_moving_average() -> None:
    assert use_avg(0.0, 0.0, 0.7) == 0.7  # use_avg(0, 0, Avg) -> Avg
    assert use_avg(0.0, 1.0, 1.0) == pytest.approx(0.5)  # one half-life inactive
    assert use_avg(2.0, 0.0, 0.0) == pytest.approx(0.75)  # two half-lives active
    weight = math.exp(4.0 * math.log(0.5))
    assert use_avg(1.0, 3.0, 0.2) == pytest.approx(0.25 * (1 - weight) + 0.2 * weight)


def test_active_inactive_spells(clock: Clock) -> None:
    use = ConsumerUse()
    assert use.capacity() == 1.0
    clock.now += 1.0
    use.inactive()
    use.inactive()  # no change: the spell began at the first call
    clock.now += 1.0
    # one second active, one inactive, from 1.0
    assert use.capacity() == pytest.approx(use_avg(1.0, 1.0, 1.0))
    use.active()
    settled = use.average
    assert settled == pytest.approx(use_avg(1.0, 1.0, 1.0))
    use.active()  # no change
    clock.now += 2.0
    assert use.capacity() == pytest.approx(use_avg(2.0, 0.0, settled))
