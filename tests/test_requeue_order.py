"""Requeued messages go back to their original places (rabbit_variable_queue keeps a
message's position on requeue), whichever part of a queue is still queued, in one merge."""

from __future__ import annotations

import math
from collections import deque

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from leveret.node.fieldtable import marshal_content_header
from leveret.node.message import Message
from leveret.node.prioritydeque import Entry, PriorityDeque, merge_by_seq


def entry(seq: int, priority: int = 0) -> Entry:
    """A queue entry as the queue makes them (a compiled build checks their types)."""
    header = marshal_content_header(1, commands.Basic.Properties(priority=priority))
    return (Message("", "q", header, b"x"), False, math.inf, seq)


@given(st.sets(st.integers(0, 200)), st.data())
def test_merge_puts_every_returned_entry_back_in_sequence_order(
    seqs: set[int], data: st.DataObject
) -> None:
    returned = sorted(data.draw(st.sets(st.sampled_from(sorted(seqs)))) if seqs else set())
    queued = deque(entry(s) for s in sorted(seqs - set(returned)))
    merge_by_seq(queued, [entry(s) for s in returned])
    assert [e[3] for e in queued] == sorted(seqs)


def test_a_priority_queue_keeps_order_within_each_priority() -> None:
    queue = PriorityDeque(2)
    for seq, priority in [(1, 0), (4, 2), (6, 0), (7, 2)]:
        queue.append(entry(seq, priority))
    queue.requeue([entry(0, 0), entry(2, 2), entry(5, 0), entry(9, 1)])
    taken = [queue.popleft()[3] for _ in range(len(queue))]
    assert taken == [2, 4, 7, 9, 0, 1, 5, 6]
