"""The messages a vhost's ``x-delayed-message`` exchanges keep back, and their release.

Routing (:func:`leveret.exchanges.routing.route_kept`) says which exchanges keep a message
(the type's ``keeps`` hook, :mod:`leveret.exchanges.types.delayed`); this module keeps it until
its delay is up, then routes it from that exchange, as the plugin's ``rabbit_delayed_message``
server does (rabbitmq-delayed-message-exchange, 3.10-era):

* the due time is the publish time plus the delay; messages are released in due order,
  those due at the same millisecond in publish order;
* on release, ``x-delay`` becomes the negative delay (a signedint,
  ``swap_delay_header/1``) and the message is routed from the exchange as it is then: its
  bindings, alternate exchange and exchange-to-exchange bindings of that moment. If nothing
  takes it, it is gone (the plugin makes one attempt, and no ``basic.return`` is possible:
  the publisher may be long gone);
* the exchange being deleted does not drop its messages; released, they route nowhere
  unless an exchange of that name exists again.

With a data directory every kept message is stored (the plugin keeps them all in a disc
table, whatever their delivery mode) in a :class:`leveret.storage.messages.MessageStore` of its
own, keyed ``(vhost, exchange)``, with the due time as the record's expiry. The publisher's
confirm waits for its fsync, so a confirmed delayed message survives ``kill -9``. A released
message's record is forgotten only after the fsync that covers its copies in durable
queues, so a crash in between delivers it twice rather than never.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from leveret.exchanges.delayed import DELAY_HEADER, delay_of
from leveret.node.message import Message, with_header

if TYPE_CHECKING:
    from leveret.node.clock import Timer
    from leveret.node.vhost import VHost
    from leveret.storage.segments import StoredMessage


log = logging.getLogger(__name__)

# (due ms since the epoch, publish order, exchange, message, store id or 0)
_Held = tuple[int, int, str, Message, int]


class DelayedMessages:
    """One vhost's kept-back messages, in due order, with one timer for the earliest."""

    def __init__(self, vhost: VHost) -> None:
        self.vhost = vhost
        self._heap: list[_Held] = []
        self._order = itertools.count()
        self._timer: Timer | None = None
        self._timer_due = 0

    def hold(self, message: Message, exchanges: Sequence[str]) -> int:
        """Keep ``message`` back for its delay (its ``x-delay``), once for each exchange in
        ``exchanges``, which kept it.

        Returns the group-commit generation that makes it durable (0 without a data dir):
        a publisher confirm waits for it.
        """
        due = self.vhost.clock.wall_ms() + delay_of(message.headers)
        persistence = self.vhost.persistence
        generation = 0
        for exchange in exchanges:
            store_id = 0
            if persistence is not None:
                store_id = persistence.delayed.append(
                    (self.vhost.name, exchange),
                    message.exchange,
                    message.routing_key,
                    message.header,
                    message.body,
                    expires=due,
                )
                generation = persistence.appended()
            heapq.heappush(self._heap, (due, next(self._order), exchange, message, store_id))
        self._schedule()
        return generation

    def restore(self, exchange: str, stored: list[StoredMessage]) -> None:
        """Messages kept back before a restart (their records' expiry is the due time)."""
        for item in stored:
            message = Message(item.exchange, item.routing_key, item.header, item.body)
            held = (item.expires, next(self._order), exchange, message, item.msg_id)
            heapq.heappush(self._heap, held)
        self._schedule()

    def close(self) -> None:
        """Stop releasing (the broker stops; stored messages wait for the next start)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def drop(self) -> None:
        """Forget every message (the vhost is deleted)."""
        self.close()
        persistence = self.vhost.persistence
        if persistence is not None:
            for exchange in {held[2] for held in self._heap}:
                persistence.delayed.drop_queue((self.vhost.name, exchange))
            persistence.marks_changed()
        self._heap.clear()

    def _schedule(self) -> None:
        """Arm the timer for the earliest message, unless it is armed for that already."""
        if not self._heap:
            return
        due = self._heap[0][0]
        if self._timer is not None:
            if self._timer_due <= due:
                return
            self._timer.cancel()
        clock = self.vhost.clock
        self._timer_due = due
        self._timer = clock.call_later(max(0, due - clock.wall_ms()) / 1000, self._release)

    def _release(self) -> None:
        """Route every message that is due, from the exchange that kept it."""
        self._timer = None
        heap = self._heap
        now = self.vhost.clock.wall_ms()
        released: list[tuple[tuple[str, str], int]] = []
        while heap and heap[0][0] <= now:
            _, _, exchange, message, store_id = heapq.heappop(heap)
            try:
                self.vhost.publish(released_copy(message), source=exchange)
            except Exception:  # one bad message must not stop the releases after it
                log.exception("releasing a delayed message from exchange %r failed", exchange)
            if store_id:
                released.append(((self.vhost.name, exchange), store_id))
        if released and self.vhost.persistence is not None:
            self.vhost.persistence.release_delayed(released)
        self._schedule()


def released_copy(message: Message) -> Message:
    """The message as the plugin routes it when its delay is up: ``x-delay`` holds the
    negative delay, a signedint, so that no delayed exchange keeps it back again."""
    delay = delay_of(message.headers)
    header = with_header(message.header, DELAY_HEADER, -delay, "I")
    return Message(message.exchange, message.routing_key, header, message.body)
