"""The traffic journal of a vhost: what happened to its messages, in order, for assertions.

``inspector.journal`` (the ``leveret`` fixture's ``leveret.journal``) starts recording the
vhost's events (:mod:`leveret.node.events`) the first time it is read, and records every publish
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
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from leveret.inspect.backends import LocalBackend, ManagementBackend, Unavailable
from leveret.inspect.loops import call_on_loop, call_on_loop_async, running_loop
from leveret.inspect.stats import LeveretOnlyError
from leveret.node.journal import KINDS, Record, Recorder, table

if TYPE_CHECKING:
    from leveret.inspect import Inspector

__all__ = [
    "KINDS",
    "Journal",
    "JournalUnavailableError",
    "Record",
    "Recorder",
    "VHostNotFoundError",
    "table",
]


class JournalUnavailableError(LeveretOnlyError):
    """The broker has no journal to read (an external broker); the pytest plugin skips
    the test with its text."""


class VHostNotFoundError(LookupError):
    """The journal's vhost does not exist."""


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

    def _start(self) -> Recorder:
        vhost = self._backend.server.state.vhosts.get(self.vhost)
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
        # wakes the wait (no polling). The deadline is on the monotonic clock, as the
        # inspector's other waits (backends.py): uvloop's loop.time() steps in milliseconds.
        deadline = time.monotonic() + timeout
        recorder = self._recorder
        while True:
            found = [
                r
                for r in recorder.records
                if _matches(r, kind, filters) and (where is None or where(r))
            ]
            if len(found) >= count:
                return found
            remaining = deadline - time.monotonic()
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
