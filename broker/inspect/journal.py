"""The traffic journal of a vhost: what happened to its messages, in order, for assertions.

``inspector.journal`` (the ``leveret`` fixture's ``leveret.journal``) starts recording the
vhost's events (:mod:`leveret.events`) the first time it is read, and records every publish
(exchange, routing key, properties, body, the queues it reached or none: unroutable, then
returned to a mandatory publisher or dropped), delivery, ack, nack or reject, requeue,
dead-lettering (with its reason: ``expired``, ``rejected``, ``maxlen``,
``delivery_limit``), return and publisher confirm, each stamped with the vhost's clock
(``vhost.clock.wall()``). Nothing is recorded, and nothing costs, before that: a vhost
without subscribers pays one check per event point. The pytest fixture stops recording at
teardown, and a deleted vhost records nothing more.

Queries return plain lists of frozen :class:`Record` s (pytest's assertion rewriting shows
them), filtered by keyword arguments named as :class:`Record`'s fields::

    assert leveret.journal.routed_to("orders", routing_key="order.created")
    assert not leveret.journal.unroutable()
    [dead] = leveret.journal.wait_for("dead_lettered", reason="expired")
    print(leveret.journal)  # the whole journal as a table

Waits (:meth:`Journal.wait_for`, :meth:`Journal.wait_for_async`) run on the broker's loop
and wake when a record arrives, with the inspector's timeout; a timeout raises
:class:`TimeoutError` with the journal's table. Only an in-process broker has a journal:
against an external one every use raises :class:`JournalUnavailableError` (the pytest
plugin skips the test with its one-line reason).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.events import Subscriber
from leveret.inspect.backends import LocalBackend, ManagementBackend, Unavailable
from leveret.inspect.loops import call_on_loop, call_on_loop_async, running_loop
from leveret.inspect.stats import InspectionUnavailableError

if TYPE_CHECKING:
    from leveret.firehose import Origin
    from leveret.inspect import Inspector
    from leveret.message import Message
    from leveret.vhost import VHost

__all__ = [
    "KINDS",
    "Journal",
    "JournalUnavailableError",
    "Record",
    "Recorder",
    "VHostNotFoundError",
]

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


class JournalUnavailableError(InspectionUnavailableError):
    """The broker has no journal to read (an external broker)."""


class VHostNotFoundError(LookupError):
    """The journal's vhost does not exist."""


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


_FIELDS = frozenset(f.name for f in dataclasses.fields(Record))


def _check_filters(kind: str | None, filters: dict[str, Any]) -> None:
    unknown = sorted(set(filters) - _FIELDS)
    if unknown:
        raise TypeError(
            f"unknown journal record field(s) {', '.join(unknown)}; "
            f"records have: {', '.join(f.name for f in dataclasses.fields(Record))}"
        )
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown journal record kind {kind!r}; kinds: {', '.join(KINDS)}")


def _matches(record: Record, kind: str | None, filters: dict[str, Any]) -> bool:
    if kind is not None and record.kind != kind:
        return False
    for name, wanted in filters.items():
        value = getattr(record, name)
        if name == "body" and isinstance(wanted, str):
            wanted = wanted.encode()
        elif name == "queues" and not isinstance(wanted, tuple):
            wanted = tuple(wanted)
        if value != wanted:
            return False
    return True


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

    def __init__(self, vhost: VHost) -> None:
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
    def _who(origin: Origin | None) -> dict[str, Any]:
        if origin is None:
            return {}
        return {"connection": origin.conn.name, "channel": origin.id}

    # -- events (leveret.events.Subscriber) ---------------------------------------------

    def published(self, message: Message, queues: Collection[str], origin: Origin | None) -> None:
        """A publish, with the queues it reached."""
        self._add(
            "published",
            message,
            queues=tuple(queues),
            properties=_properties(message),
            body=bytes(message.body),
            **self._who(origin),
        )

    def returned(self, message: Message, origin: Origin) -> None:
        """basic.return: also marks its publish ``returned`` (unroutable, not dropped)."""
        number = self._number(message)
        for index in range(len(self.records) - 1, -1, -1):
            record = self.records[index]
            if record.kind == "published" and record.message == number:
                self.records[index] = dataclasses.replace(record, returned=True)
                break
        self._add("returned", message, **self._who(origin))

    def delivered(
        self, message: Message, queue: str, redelivered: bool, origin: Origin, tag: int
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

    def confirmed(self, origin: Origin, tag: int, multiple: bool, ack: bool) -> None:
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


def _of_kind(kind: str, doc: str) -> Callable[..., list[Record]]:
    """A :class:`Journal` query: the records of ``kind`` that match its filters."""

    def query(self: Journal, **filters: Any) -> list[Record]:
        return self.records(kind, **filters)

    query.__name__ = query.__qualname__ = kind
    query.__doc__ = doc
    return query


class Journal:
    """The traffic journal of an inspector's vhost (in-process broker only).

    Every query takes keyword filters named as :class:`Record`'s fields (all optional; an
    unknown one is a :class:`TypeError`) and returns the matching records, oldest first.
    """

    def __init__(self, inspector: Inspector) -> None:
        backend = inspector._backend
        self.vhost = inspector.vhost
        self._inspector = inspector
        if isinstance(backend, Unavailable):
            raise JournalUnavailableError(f"no traffic journal: {backend.reason}")
        if isinstance(backend, ManagementBackend) or not isinstance(backend, LocalBackend):
            raise JournalUnavailableError(
                "the traffic journal records inside an in-process Leveret broker; "
                f"this inspector reads {backend.describe()}"
            )
        self._backend = backend
        self._recorder = call_on_loop(backend.loop, self._start, 10.0)

    @classmethod
    def of(cls, inspector: Inspector) -> Journal:
        """The inspector's journal, created (and recording started) on first use."""
        journal: Journal | None = inspector.__dict__.get("_journal")
        if journal is None:
            journal = inspector.__dict__["_journal"] = cls(inspector)
        return journal

    @staticmethod
    def stop_for(inspector: Inspector) -> None:
        """Stop the inspector's journal if it has one (the pytest fixture's teardown)."""
        journal: Journal | None = inspector.__dict__.get("_journal")
        if journal is not None:
            journal.stop()

    def _start(self) -> Recorder:
        vhost = self._backend.server.vhosts.get(self.vhost)
        if vhost is None:
            raise VHostNotFoundError(f"no vhost '{self.vhost}': no traffic journal for it")
        recorder = Recorder(vhost)
        recorder.start()
        return recorder

    def stop(self) -> None:
        """Stop recording (the records stay readable); a deleted vhost records nothing."""
        loop = self._backend.loop
        if loop.is_running():
            call_on_loop(loop, self._recorder.stop, 10.0)

    @property
    def timeout(self) -> float:
        """The default timeout of waits: the inspector's."""
        return self._inspector.timeout

    @property
    def recording(self) -> bool:
        """Whether the journal still records its vhost's events."""
        return call_on_loop(self._backend.loop, lambda: self._recorder.recording, 10.0)

    def __repr__(self) -> str:
        return f"<Journal vhost={self.vhost!r} records={len(self.records())}>"

    def __str__(self) -> str:
        return self.table()

    def __len__(self) -> int:
        return len(self.records())

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def table(self) -> str:
        """The whole journal as a readable table (what a failed wait prints)."""
        return f"traffic journal of vhost '{self.vhost}':\n{table(self.records())}"

    # -- queries ----------------------------------------------------------------------

    def _snapshot(self) -> list[Record]:
        return call_on_loop(self._backend.loop, lambda: list(self._recorder.records), 10.0)

    def records(self, kind: str | None = None, **filters: Any) -> list[Record]:
        """Every record (of ``kind``, if given) whose fields equal ``filters``."""
        _check_filters(kind, filters)
        return [r for r in self._snapshot() if _matches(r, kind, filters)]

    def published(self, **filters: Any) -> list[Record]:
        """Publishes (``exchange=``, ``routing_key=``, ``body=``, ``returned=``, ...)."""
        return self.records("published", **filters)

    def routed_to(self, queue: str, **filters: Any) -> list[Record]:
        """Publishes that reached ``queue`` (among others)."""
        return [r for r in self.records("published", **filters) if queue in r.queues]

    def unroutable(self, **filters: Any) -> list[Record]:
        """Publishes that reached no queue: ``returned=True`` those returned to a mandatory
        publisher, ``returned=False`` those dropped."""
        return [r for r in self.records("published", **filters) if not r.queues]

    returned = _of_kind("returned", "basic.return records.")
    delivered = _of_kind(
        "delivered", 'Deliveries (consumers and basic.get), e.g. ``queue="orders"``.'
    )
    acked = _of_kind("acked", "Acks.")
    rejected = _of_kind("rejected", "Nacks and rejects without requeue.")
    requeued = _of_kind("requeued", "Deliveries put back in their queue.")
    dead_lettered = _of_kind(
        "dead_lettered", 'Dead-letterings, e.g. ``reason="expired"``, ``queue="work"``.'
    )

    def expired(self, **filters: Any) -> list[Record]:
        """Messages that expired (dead-lettered or dropped, reason ``expired``)."""
        return self.records("dead_lettered", reason="expired", **filters)

    confirmed = _of_kind("confirmed", "Publisher confirms (``ack=True``, ``ack=False`` for nacks).")

    # -- waits --------------------------------------------------------------------------

    def wait_for(
        self,
        kind: str | None = None,
        count: int = 1,
        timeout: float | None = None,
        *,
        where: Callable[[Record], bool] | None = None,
        **filters: Any,
    ) -> list[Record]:
        """Wait until at least ``count`` records (of ``kind``, matching ``filters`` and
        ``where``) are in the journal; return them all. :class:`TimeoutError` with the
        journal's table after ``timeout`` (the inspector's by default)."""
        _check_filters(kind, filters)
        if running_loop() is self._backend.loop:
            raise RuntimeError(
                "a blocking wait on the broker's own event loop would deadlock it: "
                "await wait_for_async instead"
            )
        seconds = self.timeout if timeout is None else timeout
        coro = self._wait_here(kind, count, seconds, where, filters)
        future = asyncio.run_coroutine_threadsafe(coro, self._backend.loop)
        try:
            return future.result(seconds + 10.0)
        except TimeoutError as exc:
            future.cancel()
            # Raised again here, so the traceback shows the test, not the broker's loop.
            raise TimeoutError(str(exc)) from None

    async def wait_for_async(
        self,
        kind: str | None = None,
        count: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        where: Callable[[Record], bool] | None = None,
        **filters: Any,
    ) -> list[Record]:
        """:meth:`wait_for`, awaitable from any loop, the broker's own included."""
        _check_filters(kind, filters)
        seconds = self.timeout if timeout is None else timeout
        coro = self._wait_here(kind, count, seconds, where, filters)
        loop = self._backend.loop
        if running_loop() is loop:
            return await coro
        try:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
        except TimeoutError as exc:
            raise TimeoutError(str(exc)) from None

    async def _wait_here(
        self,
        kind: str | None,
        count: int,
        timeout: float,  # noqa: ASYNC109 - a plain deadline
        where: Callable[[Record], bool] | None,
        filters: dict[str, Any],
    ) -> list[Record]:
        # On the broker's loop: each check sees the records as they are, and a new record
        # wakes the wait (no polling).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        recorder = self._recorder
        while True:
            found = [
                r
                for r in recorder.records
                if _matches(r, kind, filters) and (where is None or where(r))
            ]
            if len(found) >= count:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                wanted = ", ".join(
                    [f"kind={kind!r}"] * (kind is not None)
                    + [f"{k}={v!r}" for k, v in filters.items()]
                    + ["where=..."] * (where is not None)
                )
                raise TimeoutError(
                    f"timed out after {timeout:g} s waiting for {count} journal record"
                    f"{'s' if count != 1 else ''} ({wanted or 'any'}) in vhost "
                    f"'{self.vhost}'; {len(found)} matched. Traffic journal:\n"
                    f"{table(recorder.records)}"
                )
            await recorder.changed(remaining)

    async def records_async(self, kind: str | None = None, **filters: Any) -> list[Record]:
        """:meth:`records`, awaitable (without blocking the caller's loop)."""
        _check_filters(kind, filters)
        snapshot = await call_on_loop_async(
            self._backend.loop, lambda: list(self._recorder.records)
        )
        return [r for r in snapshot if _matches(r, kind, filters)]
