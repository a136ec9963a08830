"""Running a function on a broker's event loop from any thread, or from that loop itself.

Apart from :mod:`.brokerthread` so that the backends, which read an in-process broker on
its loop, need not import the thread that runs it (nor, through it, the package).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def call_on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn()`` on ``loop`` (directly when already on it) and return its result."""
    if running_loop() is loop:
        return fn()
    return _schedule(loop, fn).result(timeout)


async def call_on_loop_async(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
    """:func:`call_on_loop` for a coroutine on any loop: awaits instead of blocking."""
    if running_loop() is loop:
        return fn()
    return await asyncio.wrap_future(_schedule(loop, fn))


def _schedule(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
    if loop.is_closed():
        raise RuntimeError("the broker's event loop is closed (was the broker stopped?)")
    if not loop.is_running():
        raise RuntimeError("the broker's event loop is not running (was the broker started?)")
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not result.set_running_or_notify_cancel():
            return
        try:
            result.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            result.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return result


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
