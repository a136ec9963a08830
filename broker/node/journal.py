"""The traffic journal's recorder: a subscriber of a vhost's events (:mod:`leveret.node.events`)
that keeps each as a frozen :class:`Record`, stamped with the vhost's clock.

The node side of :mod:`leveret.inspect.journal` (the queries and waits a test uses) and of
``/api/leveret/journal/{vhost}`` (:mod:`leveret.management.journal`). A recorder runs on the
broker's loop, as every subscriber: it is read there too.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.node.events import Subscriber

if TYPE_CHECKING:
    from leveret.node.events import EventSource
    from leveret.node.message import Message
    from leveret.node.peers import ChannelPeer

#: The kinds of records, in the order a message usually meets them.
KINDS = (
    "published",
    "returned",
    "delivered",
    "acked",
    "rejected",
    "requeued",
    "dead_lettered",
    "confirmed",
)


@dataclass(frozen=True, slots=True, repr=False)
class Record:
    """One event of the journal. Fields that do not apply to its ``kind`` keep their
    defaults (``queue`` is None for a publish, ``queues`` empty for a delivery, ...).

    - ``seq``: its place in the journal (1, 2, ...); ``time``: the vhost's clock, epoch s;
    - ``kind``: one of :data:`KINDS`: ``published``, ``returned`` (basic.return of an
      unroutable mandatory publish), ``delivered`` (to a consumer or basic.get),
      ``acked``, ``rejected`` (nack or reject without requeue), ``requeued`` (nack or
      reject with requeue, recover, the channel closed), ``dead_lettered``,
      ``confirmed`` (a publisher confirm: ``ack`` True, or a nack);
    - ``message``: the journal's number of the message (its publish's order; a
      dead-letter copy keeps its original's number); 0 for a confirm;
    - ``exchange``, ``routing_key``: as published (a dead letter's: its original's);
    - ``queues``: the queues a publish or a dead letter's copy reached (empty: unroutable,
      or no dead-letter exchange);
    - ``queue``: the queue a delivery, ack, reject, requeue or dead-lettering is from;
    - ``reason``: a dead-lettering's (``expired``, ``rejected``, ``maxlen``,
      ``delivery_limit``); ``dead_letter_exchange``: where its copy went (None: dropped);
    - ``returned``: a publish that was unroutable and returned to its (mandatory)
      publisher; ``redelivered``: a delivery's flag;
    - ``connection``, ``channel``: who published, received or was confirmed (None: the
      management API or the broker); ``delivery_tag``: a delivery's tag, a confirm's
      publish sequence number; ``multiple``, ``ack``: a confirm's;
    - ``properties`` (set properties, by pamqp name) and ``body``: the message's.
    """

    seq: int
    time: float
    kind: str
    message: int = 0
    exchange: str = ""
    routing_key: str = ""
    queues: tuple[str, ...] = ()
    queue: str | None = None
    reason: str | None = None
    dead_letter_exchange: str | None = None
    returned: bool = False
    redelivered: bool = False
    connection: str | None = None
    channel: int | None = None
    delivery_tag: int | None = None
    multiple: bool = False
    ack: bool | None = None
    properties: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    body: bytes = b""

    @property
    def unroutable(self) -> bool:
        """A publish that reached no queue."""
        return self.kind == "published" and not self.queues

    def __repr__(self) -> str:
        parts = [f"<{self.seq} {self.kind}"]
        if self.message:
            parts.append(f"m{self.message}")
        if self.kind in ("published", "returned"):
            parts.append(f"{self.exchange!r}/{self.routing_key!r}")
        if self.queue is not None:
            parts.append(f"queue={self.queue!r}")
        parts.append(self.detail())
        if self.channel is not None:
            parts.append(f"ch={self.channel}")
        return " ".join(p for p in parts if p) + ">"

    def detail(self) -> str:
        """What happened, in short: where a publish or dead letter went, a delivery's tag,
        a confirm's outcome (the table's last column, before the body)."""
        parts = []
        if self.kind == "published":
            parts.append(f"-> {', '.join(self.queues)}" if self.queues else "unroutable")
            if self.returned:
                parts.append("returned")
        elif self.kind == "dead_lettered":
            parts.append(f"reason={self.reason}")
            if self.dead_letter_exchange is None:
                parts.append("dropped")
            else:
                parts.append(f"dlx='{self.dead_letter_exchange}' -> {', '.join(self.queues)}")
        elif self.kind == "confirmed":
            parts.append(f"{'ack' if self.ack else 'nack'} {self.delivery_tag}")
            if self.multiple:
                parts.append("multiple")
        elif self.delivery_tag is not None:
            parts.append(f"tag={self.delivery_tag}")
        if self.redelivered:
            parts.append("redelivered")
        return " ".join(parts)


def _properties(message: Message) -> dict[str, Any]:
    # A copy: the decoded properties are shared by messages with the same header.
    return {
        name: copy.deepcopy(value)
        for name, value in dict(message.properties).items()
        if value is not None and value != ""
    }


class Recorder(Subscriber):
    """The journal's subscriber on the broker's loop: turns events into :class:`Record` s.

    Reads and waits go through :class:`Journal`, which calls it on the broker's loop."""

    # A test's journal goes on recording through an injected restart of the node.
    outlives_restart = True

    def __init__(self, vhost: EventSource) -> None:
        self.vhost = vhost
        self.records: list[Record] = []
        # Message numbers by id(), holding the message so an id is never reused meanwhile.
        self._numbers: dict[int, tuple[Message, int]] = {}
        self._wakeups: list[asyncio.Future[None]] = []

    @property
    def recording(self) -> bool:
        """Whether the vhost still sends it events."""
        return self in self.vhost.subscribers

    def start(self) -> None:
        """Record the vhost's events from now on."""
        self.vhost.subscribe(self)

    def stop(self) -> None:
        """Record nothing more (the records stay readable)."""
        self.vhost.unsubscribe(self)

    def moved(self, source: EventSource) -> None:
        self.vhost = source

    # -- records ----------------------------------------------------------------------

    def _number(self, message: Message) -> int:
        known = self._numbers.get(id(message))
        if known is not None:
            return known[1]
        number = len(self._numbers) + 1
        self._numbers[id(message)] = (message, number)
        return number

    def _add(self, kind: str, message: Message | None, **fields: Any) -> None:
        if message is not None:
            fields["message"] = self._number(message)
            fields.setdefault("exchange", message.exchange)
            fields.setdefault("routing_key", message.routing_key)
        record = Record(len(self.records) + 1, self.vhost.clock.wall(), kind, **fields)
        self.records.append(record)
        self._wake()

    def _wake(self) -> None:
        wakeups, self._wakeups = self._wakeups, []
        for future in wakeups:
            if not future.done():
                future.set_result(None)

    async def changed(self, timeout: float) -> None:  # noqa: ASYNC109 - a plain deadline
        """Wait (on the broker's loop) until a record arrives or ``timeout`` passes."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wakeups.append(future)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass

    @staticmethod
    def _who(origin: ChannelPeer | None) -> dict[str, Any]:
        if origin is None:
            return {}
        return {"connection": origin.conn.name, "channel": origin.id}

    # -- events (leveret.events.Subscriber) ---------------------------------------------

    def published(
        self, message: Message, queues: Collection[str], origin: ChannelPeer | None
    ) -> None:
        """A publish, with the queues it reached."""
        self._add(
            "published",
            message,
            queues=tuple(queues),
            properties=_properties(message),
            body=bytes(message.body),
            **self._who(origin),
        )

    def returned(self, message: Message, origin: ChannelPeer) -> None:
        """basic.return: also marks its publish ``returned`` (unroutable, not dropped)."""
        number = self._number(message)
        for index in range(len(self.records) - 1, -1, -1):
            record = self.records[index]
            if record.kind == "published" and record.message == number:
                self.records[index] = dataclasses.replace(record, returned=True)
                break
        self._add("returned", message, **self._who(origin))

    def delivered(
        self, message: Message, queue: str, redelivered: bool, origin: ChannelPeer, tag: int
    ) -> None:
        """A delivery to a client."""
        self._add(
            "delivered",
            message,
            queue=queue,
            redelivered=redelivered,
            delivery_tag=tag,
            **self._who(origin),
        )

    def acked(self, message: Message, queue: str) -> None:
        """An ack."""
        self._add("acked", message, queue=queue)

    def rejected(self, message: Message, queue: str) -> None:
        """A nack or reject without requeue."""
        self._add("rejected", message, queue=queue)

    def requeued(self, message: Message, queue: str) -> None:
        """A delivery back in its queue."""
        self._add("requeued", message, queue=queue)

    def dead_lettered(
        self,
        message: Message,
        queue: str,
        reason: str,
        copy: Message | None,
        queues: Collection[str],
    ) -> None:
        """A dead-lettering; the copy's deliveries keep the original's number."""
        number = self._number(message)
        if copy is not None:
            self._numbers[id(copy)] = (copy, number)
        self._add(
            "dead_lettered",
            message,
            queue=queue,
            reason=reason,
            dead_letter_exchange=None if copy is None else copy.exchange,
            queues=tuple(queues),
        )

    def confirmed(self, origin: ChannelPeer, tag: int, multiple: bool, ack: bool) -> None:
        """A publisher confirm."""
        self._add(
            "confirmed", None, delivery_tag=tag, multiple=multiple, ack=ack, **self._who(origin)
        )


def table(records: Collection[Record]) -> str:
    """``records`` as a table: one line each, times from the first record's."""
    if not records:
        return "(no records)"
    start = next(iter(records)).time
    header = ("#", "+s", "kind", "msg", "ch", "exchange", "routing key", "queue", "detail")
    rows = [header]
    for r in records:
        detail = [r.detail()]
        if r.kind == "published" and r.body:
            shown = repr(r.body if len(r.body) <= 40 else r.body[:37] + b"...")
            detail.append(f"body={shown}")
        rows.append(
            (
                str(r.seq),
                f"{r.time - start:.3f}",
                r.kind,
                str(r.message) if r.message else "",
                "" if r.channel is None else str(r.channel),
                "" if r.kind == "confirmed" else r.exchange or "(default)",
                r.routing_key,
                r.queue or "",
                " ".join(detail),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join(
        (
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        ).rstrip()
        for row in rows
    )
