"""The delivery-tag ledger (leveret.session.ledger), without a socket or an event loop:
tags, ``multiple`` acks, unknown tags, recover, transactions and prefetch, as a channel
applies them (AMQP 0-9-1 basic.ack/nack/reject; rabbit_channel:collect_acks/4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.node.errors import PRECONDITION_FAILED, AMQPChannelError
from leveret.session.ledger import Ledger, StandaloneLedger, has_room


def delivered(count: int) -> Ledger[str]:
    ledger: Ledger[str] = StandaloneLedger()
    for n in range(1, count + 1):
        ledger.record(f"m{n}")
    return ledger


def test_tags_start_at_one_and_never_repeat() -> None:
    ledger: Ledger[str] = StandaloneLedger()
    assert [ledger.record("a"), ledger.record(None), ledger.record("c")] == [1, 2, 3]
    ledger.take(1, False)
    assert ledger.record("d") == 4
    assert list(ledger.unacked) == [3, 4]  # the no-ack delivery (2) was never unacked


def test_single_ack_takes_only_its_tag() -> None:
    ledger = delivered(3)
    assert ledger.take(2, False) == [(2, "m2")]
    assert list(ledger.unacked.items()) == [(1, "m1"), (3, "m3")]


def test_multiple_ack_takes_every_tag_up_to_its_own_in_order() -> None:
    ledger = delivered(5)
    ledger.take(2, False)
    assert ledger.take(4, True) == [(1, "m1"), (3, "m3"), (4, "m4")]
    assert list(ledger.unacked) == [5]


def test_multiple_with_tag_zero_takes_everything() -> None:
    ledger = delivered(3)
    assert [tag for tag, _ in ledger.take(0, True)] == [1, 2, 3]
    assert not ledger.unacked


@pytest.mark.parametrize("multiple", [False, True])
def test_unknown_tag_is_406_and_takes_nothing(multiple: bool) -> None:
    ledger = delivered(3)
    ledger.take(2, False)
    with pytest.raises(AMQPChannelError) as raised:
        ledger.take(2, multiple)  # already acked: unknown, even with tag 1 still below it
    assert (raised.value.code, raised.value.text) == (
        PRECONDITION_FAILED,
        "PRECONDITION_FAILED - unknown delivery tag 2",
    )
    assert list(ledger.unacked) == [1, 3]


def test_covered_leaves_the_deliveries_in_place() -> None:
    ledger = delivered(4)
    assert ledger.covered(3, True) == ["m1", "m2", "m3"]
    assert ledger.covered(0, True) == ["m1", "m2", "m3", "m4"]
    assert ledger.covered(2, False) == ["m2"]
    assert ledger.covered(9, False) == []
    assert len(ledger.unacked) == 4


def test_recover_takes_all_in_tag_order_and_tags_go_on() -> None:
    ledger = delivered(3)
    assert ledger.take_all() == [(1, "m1"), (2, "m2"), (3, "m3")]
    assert ledger.oldest() is None
    assert ledger.record("again") == 4


def test_oldest_is_the_lowest_unacked_tag() -> None:
    ledger = delivered(3)
    ledger.take(1, False)
    assert ledger.oldest() == (2, "m2")


def test_tx_rollback_puts_staged_acks_back_in_tag_order() -> None:
    ledger = delivered(5)
    ledger.stage(ledger.take(4, False))
    ledger.stage(ledger.take(2, True))  # 1 and 2
    assert list(ledger.unacked) == [3, 5]
    with pytest.raises(AMQPChannelError):
        ledger.take(4, False)  # taken in the transaction: unknown until rollback
    ledger.rollback()
    assert list(ledger.unacked.items()) == [(n, f"m{n}") for n in range(1, 6)]
    assert ledger.take(4, False) == [(4, "m4")]  # acknowledgeable again


def test_tx_commit_makes_staged_acks_final() -> None:
    ledger = delivered(3)
    ledger.stage(ledger.take(3, True))
    ledger.commit()
    ledger.rollback()  # nothing staged any more
    assert not ledger.unacked


def test_channel_prefetch_counts_every_unacked_delivery() -> None:
    ledger: Ledger[str] = StandaloneLedger()
    ledger.qos(2, global_=True)
    assert ledger.channel_has_room()
    ledger.record("a")
    ledger.record(None)  # no-ack: takes no credit
    ledger.record("b")
    assert not ledger.channel_has_room()
    ledger.take(1, False)
    assert ledger.channel_has_room()


def test_consumer_prefetch_is_for_new_consumers_only() -> None:
    ledger: Ledger[str] = StandaloneLedger()
    ledger.qos(10, global_=False)
    assert (ledger.prefetch_count, ledger.global_prefetch) == (10, 0)
    assert ledger.channel_has_room()
    ledger.qos(0, global_=True)
    assert (ledger.prefetch_count, ledger.global_prefetch) == (10, 0)


@pytest.mark.parametrize(
    ("unacked", "limit", "room"), [(0, 0, True), (99, 0, True), (1, 2, True), (2, 2, False)]
)
def test_has_room_zero_is_no_limit(unacked: int, limit: int, room: bool) -> None:
    assert has_room(unacked, limit) is room


@given(st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=30))
def test_acks_in_any_order_settle_each_delivery_once(acks: list[tuple[int, bool]]) -> None:
    ledger = delivered(12)
    settled: list[int] = []
    for tag, multiple in acks:
        try:
            settled.extend(t for t, _ in ledger.take(tag, multiple))
        except AMQPChannelError:
            pass
    assert len(settled) == len(set(settled))
    assert sorted(settled + list(ledger.unacked)) == list(range(1, 13))
    assert list(ledger.unacked) == sorted(ledger.unacked)
