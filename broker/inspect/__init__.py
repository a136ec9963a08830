"""Run a broker inside a test process and look at its queues without sleeping.

This module needs nothing but the standard library and Leveret itself (no pytest), so it
serves unittest suites and scripts as well as :mod:`leveret.testing`, the pytest plugin:

- :class:`BrokerThread` runs a :class:`leveret.server.Server` on its own event loop in a
  daemon thread, so blocking clients (pika, kombu, Celery) and asyncio clients (aio-pika,
  on the test's own loop) can both use it;
- :class:`Inspector` reads a vhost's queues (depth, ready, unacked, consumers, counters)
  and waits for a condition with a timeout: ``wait_for_messages``, ``wait_until_acked``,
  ``wait_for_consumers``, ``wait_until`` and their ``*_async`` twins. Against an
  in-process broker it reads the queues on the broker's loop (thread-safe); against an
  external broker it reads RabbitMQ's management HTTP API (:class:`ManagementAPI`).

Example without pytest::

    with BrokerThread() as broker:
        broker.add_vhost("tests")
        inspector = Inspector(broker, vhost="tests")
        ...  # publish to broker.vhost_url("tests") with any client
        inspector.wait_for_messages("orders", 3, timeout=5)

Counters follow RabbitMQ's management API: ``messages`` (the queue depth) is ready +
unacknowledged, as ``rabbitmq_queue_messages`` ("Sum of ready and unacknowledged messages -
total queue depth"); ``published`` counts messages routed to the queue, ``delivered``
deliveries and basic.get results (``deliver_get``), ``acked`` basic.ack'ed deliveries
(automatic-ack deliveries are never "acked").

Rule at the door: the top of the house beside the CLI: it may import anything in
:mod:`leveret` (a :class:`BrokerThread` runs a :class:`leveret.server.Server`); only
:mod:`leveret.testing` and the user's tests import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.inspect.faults import Faults
    from leveret.server import Server

from leveret.inspect.backends import (
    Backend,
    LocalBackend,
    ManagementBackend,
    Unavailable,
)
from leveret.inspect.brokerthread import BrokerThread, amqp_url_with
from leveret.inspect.clock import Clocks, HttpClocks, LocalClocks, NoClocks, VirtualClock
from leveret.inspect.http import ManagementAPI, ManagementError
from leveret.inspect.journal import Journal
from leveret.inspect.loops import call_on_loop
from leveret.inspect.stats import (
    DEFAULT_TIMEOUT,
    Condition,
    InspectionUnavailableError,
    LeveretOnlyError,
    QueueNotFoundError,
    QueueStats,
    VHostNotFoundError,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "BrokerThread",
    "InspectionUnavailableError",
    "Inspector",
    "Journal",
    "LeveretOnlyError",
    "ManagementAPI",
    "ManagementError",
    "QueueNotFoundError",
    "QueueStats",
    "VHostNotFoundError",
    "VirtualClock",
    "amqp_url_with",
    "call_on_loop",
]

# -- the inspector -------------------------------------------------------------------------


def _at_least(field: str, n: int) -> Condition:
    """``field >= n``; for ``n == 0``: the queue exists and ``field == 0``."""

    def check(stats: QueueStats | None) -> bool:
        if stats is None:
            return False
        value: int = getattr(stats, field)
        return value == 0 if n == 0 else value >= n

    return check


class Inspector:
    """Assertions on a vhost's queues without sleeping; thread-safe.

    ``Inspector(broker_thread, vhost=...)`` reads an in-process broker (a
    :class:`BrokerThread`, or a :class:`~broker.server.Server` with its ``loop``);
    ``Inspector(ManagementAPI(...), vhost=...)`` an external one. Every method takes an
    optional ``vhost=`` to look at another vhost than the bound one. Waits return the
    :class:`QueueStats` that satisfied them and raise :class:`TimeoutError` with the last
    state seen; their ``*_async`` variants are awaitable from any event loop, including the
    broker's own.
    """

    _backend: Backend
    vhost: str
    timeout: float
    _clock: VirtualClock | None = None
    _journal: Journal | None = None

    def __init__(
        self,
        source: BrokerThread | ManagementAPI | Server,
        vhost: str = "/",
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        backend: Backend
        if isinstance(source, BrokerThread):
            backend = LocalBackend(source.server, source.loop)
        elif isinstance(source, ManagementAPI):
            backend = ManagementBackend(source)
        else:
            if loop is None:
                raise TypeError("Inspector(server) needs loop=: the loop the server runs on")
            backend = LocalBackend(source, loop)
        self._backend = backend
        self.vhost = vhost
        self.timeout = timeout

    @classmethod
    def unavailable(cls, reason: str, vhost: str = "/") -> Inspector:
        """An inspector whose every method raises :class:`InspectionUnavailableError`."""
        inspector = cls.__new__(cls)
        inspector._backend = Unavailable(reason)
        inspector.vhost = vhost
        inspector.timeout = DEFAULT_TIMEOUT
        return inspector

    def for_vhost(self, vhost: str) -> Inspector:
        """The same broker, bound to another vhost."""
        other = Inspector.__new__(Inspector)
        other._backend = self._backend
        other.vhost = vhost
        other.timeout = self.timeout
        return other

    def __repr__(self) -> str:
        return f"<Inspector vhost={self.vhost!r} via {self._backend.describe()}>"

    @property
    def clock(self) -> VirtualClock:
        """The vhost's clock, frozen on first use (:class:`VirtualClock`): ``advance``
        moves it, ``resume`` lets it run again. Leveret only: another broker raises
        :class:`LeveretOnlyError` (the pytest plugin skips the test)."""
        if self._clock is None:
            backend = self._backend
            clocks: Clocks
            if isinstance(backend, LocalBackend):
                clocks = LocalClocks(backend)
            elif isinstance(backend, ManagementBackend):
                clocks = HttpClocks(backend.api)
            else:
                reason = backend.reason if isinstance(backend, Unavailable) else "no broker"
                clocks = NoClocks(reason)
            clock = VirtualClock(clocks, self.vhost)
            clock.freeze()
            self._clock = clock
        return self._clock

    @property
    def faults(self) -> Faults:
        """Injected faults on the bound vhost (:mod:`leveret.inspect.faults`)."""
        from leveret.inspect.faults import Faults

        return Faults(self._backend, self.vhost)

    @property
    def journal(self) -> Journal:
        """The vhost's traffic journal (:mod:`leveret.inspect.journal`); the first access
        starts recording. In-process broker only: JournalUnavailableError otherwise."""
        if self._journal is None:
            self._journal = Journal(self)
        return self._journal

    def stop_journal(self) -> None:
        """Stop recording, if the journal was ever used (the pytest fixture's teardown)."""
        if self._journal is not None:
            self._journal.stop()

    # -- reads ------------------------------------------------------------------------

    def queues(self, *, vhost: str | None = None) -> list[str]:
        """Names of the queues in the vhost, sorted."""
        return self._backend.queue_names(vhost or self.vhost)

    def queue_exists(self, queue: str, *, vhost: str | None = None) -> bool:
        """Whether ``queue`` exists."""
        return self._backend.snapshot(vhost or self.vhost, queue) is not None

    def stats(self, queue: str, *, vhost: str | None = None) -> QueueStats:
        """All of ``queue``'s counters at one instant; :class:`QueueNotFoundError` if absent."""
        vhost = vhost or self.vhost
        stats = self._backend.snapshot(vhost, queue)
        if stats is None:
            raise QueueNotFoundError(f"no queue '{queue}' in vhost '{vhost}'")
        return stats

    async def stats_async(self, queue: str, *, vhost: str | None = None) -> QueueStats:
        """:meth:`stats`, awaitable."""
        vhost = vhost or self.vhost
        stats = await self._backend.snapshot_async(vhost, queue)
        if stats is None:
            raise QueueNotFoundError(f"no queue '{queue}' in vhost '{vhost}'")
        return stats

    def queue_depth(self, queue: str, *, vhost: str | None = None) -> int:
        """Ready + unacknowledged messages (RabbitMQ's ``messages``)."""
        return self.stats(queue, vhost=vhost).messages

    def messages_ready(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages waiting for a consumer."""
        return self.stats(queue, vhost=vhost).messages_ready

    def messages_unacked(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages delivered and not yet acknowledged."""
        return self.stats(queue, vhost=vhost).messages_unacknowledged

    def consumers(self, queue: str, *, vhost: str | None = None) -> int:
        """Number of consumers."""
        return self.stats(queue, vhost=vhost).consumers

    def published(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages routed to the queue since it was declared."""
        return self.stats(queue, vhost=vhost).published

    def delivered(self, queue: str, *, vhost: str | None = None) -> int:
        """Deliveries and basic.get results since the queue was declared."""
        return self.stats(queue, vhost=vhost).delivered

    def acked(self, queue: str, *, vhost: str | None = None) -> int:
        """Deliveries acknowledged (basic.ack) since the queue was declared."""
        return self.stats(queue, vhost=vhost).acked

    # -- waits --------------------------------------------------------------------------

    def wait_until(
        self,
        queue: str,
        condition: Callable[[QueueStats], bool],
        timeout: float | None = None,
        *,
        description: str = "to satisfy the condition",
        vhost: str | None = None,
    ) -> QueueStats:
        """Wait until ``queue`` exists and ``condition(stats)`` is true.

        ``condition`` runs on the broker's loop for an in-process broker: keep it a quick,
        side-effect-free test of the :class:`QueueStats` it gets.
        """
        return self._backend.wait(
            vhost or self.vhost, queue, _existing(condition), self._t(timeout), description
        )

    async def wait_until_async(
        self,
        queue: str,
        condition: Callable[[QueueStats], bool],
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        description: str = "to satisfy the condition",
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_until`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost, queue, _existing(condition), self._t(timeout), description
        )

    def wait_for_queue(
        self, queue: str, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has been declared."""
        return self._backend.wait(
            vhost or self.vhost, queue, _exists, self._t(timeout), "to be declared"
        )

    async def wait_for_queue_async(
        self,
        queue: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_queue`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost, queue, _exists, self._t(timeout), "to be declared"
        )

    def wait_for_messages(
        self, queue: str, count: int, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has at least ``count`` ready messages (exactly none for
        ``count=0``: wait until consumers have taken everything)."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("messages_ready", count),
            self._t(timeout),
            _what(count, "ready message"),
        )

    async def wait_for_messages_async(
        self,
        queue: str,
        count: int,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_messages`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("messages_ready", count),
            self._t(timeout),
            _what(count, "ready message"),
        )

    def wait_until_acked(
        self, queue: str, n: int, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until message ``n`` is acked: ``n`` deliveries of ``queue`` acknowledged."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("acked", n),
            self._t(timeout),
            _what(n, "acknowledged message"),
        )

    async def wait_until_acked_async(
        self,
        queue: str,
        n: int,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_until_acked`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("acked", n),
            self._t(timeout),
            _what(n, "acknowledged message"),
        )

    def wait_for_consumers(
        self, queue: str, n: int = 1, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has at least ``n`` consumers (none at all for ``n=0``)."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("consumers", n),
            self._t(timeout),
            _what(n, "consumer"),
        )

    async def wait_for_consumers_async(
        self,
        queue: str,
        n: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_consumers`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("consumers", n),
            self._t(timeout),
            _what(n, "consumer"),
        )

    def _t(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout


def _exists(stats: QueueStats | None) -> bool:
    return stats is not None


def _existing(condition: Callable[[QueueStats], bool]) -> Condition:
    return lambda stats: stats is not None and condition(stats)


def _what(n: int, noun: str) -> str:
    if n == 0:
        return f"to have no {noun}s"
    return f"to have at least {n} {noun}{'s' if n != 1 else ''}"
