"""leveret.node.acktimeout.DeliveryClock: when a channel's oldest unacked delivery went out, as
the consumer timeout reads it (never earlier than it did, at most one check late)."""

from __future__ import annotations

from leveret.node.acktimeout import DeliveryClock


def test_a_delivery_is_dated_by_the_first_check_after_it() -> None:
    clock = DeliveryClock()
    # Checks at t=0, 1, 2: tags 1-2 had gone out by t=0, 3-4 by t=1, nothing new by t=2.
    assert clock.sent_by(0.0, 3, 1) == 0.0
    assert clock.sent_by(1.0, 5, 1) == 0.0
    # Tags 1-2 acked: the oldest is 3, which went out after t=0 and by t=1.
    assert clock.sent_by(2.0, 5, 3) == 1.0
    # A delivery later than every snapshot is dated by the snapshot taken now.
    assert clock.sent_by(3.0, 6, 5) == 3.0


def test_forgetting_starts_over() -> None:
    clock = DeliveryClock()
    clock.sent_by(0.0, 2, 1)
    clock.clear()
    assert clock.sent_by(5.0, 3, 2) == 5.0


def test_a_long_stuck_delivery_keeps_the_clock_bounded_and_never_early() -> None:
    clock = DeliveryClock()
    # Tag 1 is never acked while a delivery goes out between every two checks, for
    # far longer than the clock keeps snapshots of.
    for check in range(5000):
        assert clock.sent_by(float(check), check + 2, 1) == 0.0
    assert len(clock._snapshots) <= 600
    # Each later delivery is dated no earlier than the check right after it went out
    # (tag n + 1 went out between checks n - 1 and n).
    for tag in (10, 1000, 4000, 4999):
        probe = DeliveryClock()
        probe._snapshots = clock._snapshots.copy()
        assert probe.sent_by(5000.0, 5001, tag) >= tag - 1
