"""What an inspection reads and waits for: :class:`QueueStats`, its errors, and the
timing constants of waits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

#: Seconds a wait gives up after when the caller passes no timeout.
DEFAULT_TIMEOUT = 5.0
#: How often a wait re-checks its condition on the broker's loop (seconds): a check is a
#: dict lookup and a few attribute reads, so this costs the broker nothing measurable.
LOCAL_CHECK_INTERVAL = 0.002
#: How often a wait re-reads the management HTTP API of an external broker (seconds).
HTTP_CHECK_INTERVAL = 0.05

Condition = Callable[["QueueStats | None"], bool]


class InspectionUnavailableError(RuntimeError):
    """The broker cannot be inspected (an external broker without a management API)."""


class LeveretOnlyError(InspectionUnavailableError):
    """What only Leveret can do (the virtual clock, the journal, injected faults) was asked
    of another broker; the pytest plugin skips the test with this text."""


class QueueNotFoundError(LookupError):
    """The queue does not exist in the inspected vhost."""


class VHostNotFoundError(LookupError):
    """The inspected vhost does not exist."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One consistent snapshot of a queue's counters (field names as RabbitMQ's API)."""

    vhost: str
    name: str
    messages_ready: int
    messages_unacknowledged: int
    consumers: int
    published: int
    delivered: int
    acked: int

    @property
    def messages(self) -> int:
        """The queue depth: ready + unacknowledged messages."""
        return self.messages_ready + self.messages_unacknowledged

    def describe(self) -> str:
        """``ready=1 unacked=0 consumers=0 published=1 delivered=0 acked=0``."""
        return (
            f"ready={self.messages_ready} unacked={self.messages_unacknowledged} "
            f"consumers={self.consumers} published={self.published} "
            f"delivered={self.delivered} acked={self.acked}"
        )


def timeout_message(
    vhost: str, queue: str, what: str, timeout: float, last: QueueStats | None, names: list[str]
) -> str:
    text = f"timed out after {timeout:g} s waiting for queue '{queue}' in vhost '{vhost}' {what}"
    if last is not None:
        return f"{text}; last seen: {last.describe()}"
    shown = ", ".join(f"'{n}'" for n in names[:20]) or "none"
    return f"{text}; the queue does not exist (queues in the vhost: {shown})"
