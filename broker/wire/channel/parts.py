"""What the wire channel and its counters share: the record of an unacked delivery and the
states of a published message's content assembly. Plain types: nothing here runs code on a
message's path."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from leveret.node.queue import Consumer, Entry, Queue

if TYPE_CHECKING:
    pass

# An unacked delivery: its queue, the queue entry, the consumer (None for basic.get).
Record = tuple[Queue, Entry, Consumer | None]


class Content(Enum):
    """Where a channel is in assembling a published message's content."""

    IDLE = 0
    AWAIT_HEADER = 1
    AWAIT_BODY = 2
