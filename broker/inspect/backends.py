"""Where an :class:`leveret.inspect.Inspector` reads queues from: the broker's own loop
(in-process), the management HTTP API (an external broker), or nowhere (a clear error)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from leveret.inspect.http import ManagementAPI, ManagementError
from leveret.inspect.loops import call_on_loop, call_on_loop_async, running_loop
from leveret.inspect.stats import (
    HTTP_CHECK_INTERVAL,
    LOCAL_CHECK_INTERVAL,
    Condition,
    InspectionUnavailableError,
    QueueStats,
    timeout_message,
)

if TYPE_CHECKING:
    from leveret.server import Server

T = TypeVar("T")


class Backend(Protocol):
    """Where an :class:`Inspector` reads queues from."""

    def describe(self) -> str: ...

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None: ...

    def queue_names(self, vhost: str) -> list[str]: ...

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats: ...

    def snapshot_async(self, vhost: str, queue: str) -> Awaitable[QueueStats | None]: ...

    def wait_async(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> Awaitable[QueueStats]: ...


class LocalBackend:
    """Reads a :class:`~broker.server.Server` on its loop; waits run there too."""

    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    def describe(self) -> str:
        return f"in-process Leveret on port {self.server.port}"

    def _read(self, vhost: str, queue: str) -> QueueStats | None:
        host = self.server.state.vhosts.get(vhost)
        q = host.queues.get(queue) if host is not None else None
        if q is None:
            return None
        return QueueStats(
            vhost=vhost,
            name=queue,
            messages_ready=q.message_count,
            messages_unacknowledged=q.unacked,
            consumers=len(q.consumers),
            published=q.published_total,
            delivered=q.delivered_total,
            acked=q.acked_total,
        )

    def _names(self, vhost: str) -> list[str]:
        host = self.server.state.vhosts.get(vhost)
        return sorted(host.queues) if host is not None else []

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        return call_on_loop(self.loop, lambda: self._read(vhost, queue), 10.0)

    def queue_names(self, vhost: str) -> list[str]:
        return call_on_loop(self.loop, lambda: self._names(vhost), 10.0)

    async def _wait_here(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        # Runs on the broker's loop: each check is consistent with the broker's state. The
        # deadline is on the machine's monotonic clock, as the HTTP backend's: uvloop's
        # loop.time() has millisecond steps, and a wait must never give up early.
        deadline = time.monotonic() + timeout
        while True:
            stats = self._read(vhost, queue)
            if condition(stats):
                if stats is None:  # a condition satisfied by an absent queue
                    return QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
                return stats
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    timeout_message(vhost, queue, what, timeout, stats, self._names(vhost))
                )
            await asyncio.sleep(min(LOCAL_CHECK_INTERVAL, remaining))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise RuntimeError("the broker's event loop is not running (was it started? stopped?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        if running_loop() is self.loop:
            raise RuntimeError(
                "a blocking wait on the broker's own event loop would deadlock it: "
                "await the *_async variant instead"
            )
        fut = self._submit(self._wait_here(vhost, queue, condition, timeout, what))
        try:
            return fut.result(timeout + 10.0)
        except TimeoutError as exc:
            fut.cancel()
            # Raised again here, so the traceback shows the test, not the broker's loop.
            raise TimeoutError(str(exc) or f"waiting for queue '{queue}' {what}") from None

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        return await call_on_loop_async(self.loop, lambda: self._read(vhost, queue))

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        coro = self._wait_here(vhost, queue, condition, timeout, what)
        if running_loop() is self.loop:
            return await coro
        try:
            return await asyncio.wrap_future(self._submit(coro))
        except TimeoutError as exc:
            raise TimeoutError(str(exc)) from None


def _stats_from_json(vhost: str, queue: str, item: dict[str, Any]) -> QueueStats:
    stats = item.get("message_stats") or {}

    def count(value: Any) -> int:
        return int(value) if isinstance(value, int | float) else 0

    return QueueStats(
        vhost=vhost,
        name=queue,
        messages_ready=count(item.get("messages_ready")),
        messages_unacknowledged=count(item.get("messages_unacknowledged")),
        consumers=count(item.get("consumers")),
        published=count(stats.get("publish")),
        delivered=count(stats.get("deliver_get")),
        acked=count(stats.get("ack")),
    )


class ManagementBackend:
    """Reads queues through the management HTTP API; waits re-read it every 50 ms."""

    def __init__(self, api: ManagementAPI) -> None:
        self.api = api

    def describe(self) -> str:
        return f"management API {self.api.base_url}"

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        item = self.api.queue(vhost, queue)
        return _stats_from_json(vhost, queue, item) if item is not None else None

    def queue_names(self, vhost: str) -> list[str]:
        return self.api.queue_names(vhost)

    def _timed_out(
        self, vhost: str, queue: str, what: str, timeout: float, last: QueueStats | None
    ) -> TimeoutError:
        try:
            names = self.queue_names(vhost) if last is None else []
        except (OSError, ManagementError):
            names = []
        return TimeoutError(timeout_message(vhost, queue, what, timeout, last, names))

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        deadline = time.monotonic() + timeout
        while True:
            stats = self.snapshot(vhost, queue)
            if condition(stats):
                return stats if stats is not None else QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(vhost, queue, what, timeout, stats)
            time.sleep(min(HTTP_CHECK_INTERVAL, remaining))

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        return await asyncio.to_thread(self.snapshot, vhost, queue)

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        deadline = time.monotonic() + timeout
        while True:
            stats = await self.snapshot_async(vhost, queue)
            if condition(stats):
                return stats if stats is not None else QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise await asyncio.to_thread(self._timed_out, vhost, queue, what, timeout, stats)
            await asyncio.sleep(min(HTTP_CHECK_INTERVAL, remaining))


class Unavailable:
    """Every read raises :class:`InspectionUnavailableError` with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def describe(self) -> str:
        return "unavailable"

    def _fail(self) -> InspectionUnavailableError:
        return InspectionUnavailableError(self.reason)

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        raise self._fail()

    def queue_names(self, vhost: str) -> list[str]:
        raise self._fail()

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        raise self._fail()

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        raise self._fail()

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        raise self._fail()
