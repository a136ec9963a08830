"""Transactions and publisher confirms without a socket (leveret.session.tx): a channel is
one or the other, commit and rollback of held publishes and acks, and the confirms'
``multiple`` runs between nacks; texts as RabbitMQ 3.10.8 sends them."""

from __future__ import annotations

import pytest

from leveret.node.auth import AccessControl
from leveret.node.vhost import VHost
from leveret.session import tx
from leveret.session.ledger import Ledger, StandaloneLedger

from .helpers import Collector, declare, message, publish, publisher, refusal


@pytest.fixture
def access() -> AccessControl:
    return AccessControl.with_users({"guest": "guest"}, ("/",))


async def test_a_channel_is_transactional_or_confirms(vhost: VHost) -> None:
    assert refusal(lambda: tx.confirm_select(True)) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    )
    assert refusal(lambda: tx.tx_select(True, None)) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
    )
    ledger: Ledger[str] = StandaloneLedger()
    for action in (lambda: tx.tx_commit(ledger, None), lambda: tx.tx_rollback(ledger, None)):
        assert refusal(action) == (406, "PRECONDITION_FAILED - channel is not transactional")
    held: list[tx.Action] = [lambda: None]
    assert tx.tx_select(False, held) is held  # a second select keeps the transaction


async def test_tx_commit_and_rollback_of_publishes_and_acks(
    access: AccessControl, vhost: VHost
) -> None:
    queue = declare(vhost, "q")
    p = publisher(access, vhost)
    collector = Collector()
    collector.consume(queue)
    publish(p, "", "q", b"delivered")
    held = tx.tx_select(False, None)

    def publish_later(body: bytes) -> None:
        stats = p.check_exchange("", "q")
        checked = p.check_message(message("", "q", body), None)
        held.append(lambda: p.route(checked, False, None, stats))

    def ack_later(tag: int) -> None:
        taken = collector.take(tag, False)
        collector.stage(taken)
        held.append(lambda: [queue.ack(e[0], c) for _t, (_q, e, c) in taken])

    publish_later(b"rolled back")
    ack_later(1)
    assert (queue.message_count, list(collector.unacked)) == (0, [])
    tx.tx_rollback(collector, held)
    held.clear()  # the held publishes are dropped
    assert (queue.message_count, list(collector.unacked), queue.acked_total) == (0, [1], 0)
    publish_later(b"committed")
    ack_later(1)
    actions = tx.tx_commit(collector, held)
    held = []
    assert tx.run(actions) == 0  # a transient message: nothing to wait for
    assert (queue.acked_total, list(collector.unacked), collector.tx_acks) == (1, [2], [])
    assert [body for _, body, _ in collector.delivered] == [b"delivered", b"committed"]


def test_confirms_ack_in_multiple_runs_between_nacks() -> None:
    # Nothing to confirm, one publish, then a run of three: multiple only for a run.
    assert tx.confirms_due(0, 0, []) == ([], 0, 0)
    assert tx.confirms_due(0, 1, []) == ([(1, False, True)], 1, 1)
    assert tx.confirms_due(1, 4, []) == ([(4, True, True)], 4, 3)
    # Publishes 5..10 with 7 and 8 refused by a queue: ack 5-6, nack 7, nack 8, ack 9-10.
    nacks = [7, 8, 12]
    assert tx.confirms_due(4, 10, nacks) == (
        [(6, True, True), (7, False, False), (8, False, False), (10, True, True)],
        10,
        4,
    )
    assert nacks == [12]  # not covered yet: 11 and 12 await their fsync or routing
    assert tx.confirms_due(10, 12, nacks) == ([(11, False, True), (12, False, False)], 12, 1)
