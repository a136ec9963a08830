"""A vhost's clock, driven from a test: :class:`VirtualClock` (``leveret.clock`` in the
pytest plugin).

The broker's side is :class:`leveret.node.clock.Clock`, one per vhost. Here it is reached on
the broker's own loop for an in-process broker (:class:`LocalClocks`), or through
``/api/leveret/clock`` for an external Leveret (:class:`HttpClocks`); another broker has
no such endpoint, and every call raises :class:`LeveretOnlyError` saying so.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from leveret.inspect.http import ManagementAPI, ManagementError
from leveret.inspect.loops import call_on_loop, running_loop
from leveret.inspect.stats import LeveretOnlyError, VHostNotFoundError
from leveret.node.clock import checked_seconds

if TYPE_CHECKING:
    from leveret.inspect.backends import LocalBackend
    from leveret.node.clock import Clock

T = TypeVar("T")


class Clocks(Protocol):
    """Where a :class:`VirtualClock` drives a vhost's clock."""

    def set_mode(self, vhost: str, mode: str) -> None: ...

    def now(self, vhost: str) -> float: ...

    def advance(self, vhost: str, seconds: float) -> float: ...

    async def advance_async(self, vhost: str, seconds: float) -> float: ...


class VirtualClock:
    """The clock of one vhost, for a test: :meth:`freeze`, :meth:`advance`, :meth:`now`,
    :meth:`resume`. Times are seconds since the epoch, as ``time.time()``.

    While frozen, the vhost's time stands still: no message expires, no queue goes unused,
    no delayed message is released, no consumer times out, however long the test takes.
    :meth:`advance` moves it forward and fires every timer that comes due on the way, in
    order (a TTL that dead-letters into a queue whose messages expire in turn: the whole
    chain), and returns once clients can see the effects: the dead-lettered message can be
    got right after. Other vhosts keep the real time.
    """

    def __init__(self, clocks: Clocks, vhost: str) -> None:
        self._clocks = clocks
        self.vhost = vhost

    def __repr__(self) -> str:
        return f"<VirtualClock vhost={self.vhost!r}>"

    def freeze(self) -> None:
        """Stop the vhost's time where it stands (idempotent)."""
        self._clocks.set_mode(self.vhost, "manual")

    def resume(self) -> None:
        """Let the vhost's time run again from where it stands (it does not jump back)."""
        self._clocks.set_mode(self.vhost, "real")

    def now(self) -> float:
        """The vhost's time: seconds since the epoch."""
        return self._clocks.now(self.vhost)

    def advance(self, seconds: float) -> float:
        """Move the vhost's time ``seconds`` forward (freezing it first if it runs),
        firing what comes due; returns the new :meth:`now`. ``ValueError`` for a negative
        or non-number ``seconds``."""
        return self._clocks.advance(self.vhost, checked_seconds(seconds))

    async def advance_async(self, seconds: float) -> float:
        """:meth:`advance`, awaitable (from any loop, the broker's too)."""
        return await self._clocks.advance_async(self.vhost, checked_seconds(seconds))


class LocalClocks:
    """The clocks of an in-process broker, reached on its loop."""

    def __init__(self, backend: LocalBackend) -> None:
        # The backend, not its server: a restarted broker is a new server behind it.
        self._backend = backend

    def _clock(self, vhost: str) -> Clock:
        host = self._backend.server.state.vhosts.get(vhost)
        if host is None:
            raise VHostNotFoundError(f"no vhost '{vhost}'")
        return host.clock

    def _on_loop(self, fn: Callable[[], T]) -> T:
        return call_on_loop(self._backend.loop, fn, 10.0)

    def set_mode(self, vhost: str, mode: str) -> None:
        self._on_loop(lambda: self._clock(vhost).set_mode(mode))

    def now(self, vhost: str) -> float:
        return self._on_loop(lambda: self._clock(vhost).wall())

    async def _advance_here(self, vhost: str, seconds: float) -> float:
        clock = self._clock(vhost)
        await clock.advance(seconds)
        return clock.wall()

    def advance(self, vhost: str, seconds: float) -> float:
        loop = self._backend.loop
        if running_loop() is loop:
            raise RuntimeError(
                "advancing the clock blocks until the broker's loop has run the timers: "
                "on that loop, await advance_async() instead"
            )
        future = asyncio.run_coroutine_threadsafe(self._advance_here(vhost, seconds), loop)
        return future.result()

    async def advance_async(self, vhost: str, seconds: float) -> float:
        loop = self._backend.loop
        coro = self._advance_here(vhost, seconds)
        if running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class HttpClocks:
    """The clocks of an external Leveret, through ``/api/leveret/clock``."""

    def __init__(self, api: ManagementAPI) -> None:
        self._api = api

    def _call(self, method: str, vhost: str, suffix: str = "", body: Any = None) -> Any:
        path = f"/api/leveret/clock/{urllib.parse.quote(vhost, safe='')}{suffix}"
        try:
            return self._api.request(method, path, body)
        except ManagementError as exc:
            if exc.status not in (404, 405):  # 405: a router with the path for other methods
                raise
            if not self._api.vhost_exists(vhost):
                raise VHostNotFoundError(f"no vhost '{vhost}'") from None
            raise LeveretOnlyError(
                f"the virtual clock needs Leveret: the broker at {self._api.base_url} has "
                f"no {path} (RabbitMQ cannot move its time)"
            ) from None

    def set_mode(self, vhost: str, mode: str) -> None:
        self._call("PUT", vhost, body={"mode": mode})

    def now(self, vhost: str) -> float:
        return float(self._call("GET", vhost)["now"])

    def advance(self, vhost: str, seconds: float) -> float:
        return float(self._call("POST", vhost, "/advance", {"seconds": seconds})["now"])

    async def advance_async(self, vhost: str, seconds: float) -> float:
        return await asyncio.to_thread(self.advance, vhost, seconds)


class NoClocks:
    """No clock to drive: every call raises :class:`LeveretOnlyError` with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def _fail(self) -> LeveretOnlyError:
        return LeveretOnlyError(f"the virtual clock is not available: {self.reason}")

    def set_mode(self, vhost: str, mode: str) -> None:
        raise self._fail()

    def now(self, vhost: str) -> float:
        raise self._fail()

    def advance(self, vhost: str, seconds: float) -> float:
        raise self._fail()

    async def advance_async(self, vhost: str, seconds: float) -> float:
        raise self._fail()
