"""Injected faults from a test: ``leveret.faults`` (the ``leveret`` fixture's
:class:`Faults`) drops or closes the test vhost's connections, restarts the broker (as
``kill -9`` or cleanly), sets the memory or disk alarm, cancels a queue's consumers, or
slows the network down, to show how the code under test copes.

Each call runs the node's own rule (:mod:`leveret.faults`, shared with the management API
and ``leveret ctl inject_fault``) on the broker's loop and returns when it is done; bad
input raises a :class:`leveret.faults.FaultError` (``UnknownVhostError``,
``UnknownQueueError``, ``InvalidFaultError``, ``NoDataDirError``) and changes nothing.
Faults need the in-process broker: against an external one (``--leveret-url``) every call
raises :class:`LeveretOnlyError` saying so, and the pytest plugin skips the test with that
line. The blocking calls are fine in
coroutines too (the broker runs in its own thread); :meth:`Faults.restart_async` awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import leveret.faults as node
from leveret.inspect.backends import LocalBackend, Unavailable
from leveret.inspect.loops import call_on_loop, running_loop
from leveret.inspect.stats import LeveretOnlyError

if TYPE_CHECKING:
    from leveret.inspect.backends import Backend
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

T = TypeVar("T")

#: Seconds a restart may take before :meth:`Faults.restart` gives up waiting.
RESTART_TIMEOUT = 30.0


class Faults:
    """Faults injected into one vhost of an in-process broker (see the module doc)."""

    def __init__(self, backend: Backend, vhost: str) -> None:
        self._backend = backend
        self.vhost = vhost

    def __repr__(self) -> str:
        return f"<Faults vhost={self.vhost!r} via {self._backend.describe()}>"

    def _local(self) -> LocalBackend:
        backend = self._backend
        if isinstance(backend, LocalBackend):
            return backend
        if isinstance(backend, Unavailable):
            reason = backend.reason
        else:
            reason = f"this inspector reads {backend.describe()}"
        raise LeveretOnlyError(
            f"injected faults need the in-process Leveret broker (not --leveret-url): {reason}"
        )

    def _run(self, fn: Callable[[ServerState[Connection]], T]) -> T:
        local = self._local()
        return call_on_loop(local.loop, lambda: fn(local.server.state), 10.0)

    def drop_connections(self, client: str | None = None) -> int:
        """Abort the sockets of the vhost's connections (TCP reset, no connection.close),
        as a network failure does; only those ``client`` names when given: their
        client-provided ``connection_name``, client ``product``, RabbitMQ connection name
        (``peer_host:peer_port -> host:port``), peer ``host:port`` or peer host, exactly.
        Returns how many were dropped."""
        return self._run(lambda state: node.drop_connections(state, self.vhost, client))

    def close_connections(
        self, reason: str = node.DEFAULT_REASON, client: str | None = None
    ) -> int:
        """Close the vhost's connections (those ``client`` names, as for
        :meth:`drop_connections`) with 320 CONNECTION_FORCED and ``reason``, as
        ``rabbitmqctl close_connection`` does; returns how many."""
        return self._run(lambda state: node.close_connections(state, self.vhost, reason, client))

    def restart(self, kill: bool = True, timeout: float = RESTART_TIMEOUT) -> None:
        """Stop the broker as ``kill -9`` would (``kill=True``: sockets aborted, nothing
        still in memory written, no clean-stop marker) or cleanly (``kill=False``: clients
        get 320 CONNECTION_FORCED), and start it again on the same port and data directory;
        returns once it listens again. Durable topology, persistent messages and the vhosts
        come back; unacked messages are redelivered. Needs a data directory
        (:class:`leveret.faults.NoDataDirError` otherwise)."""
        local = self._local()
        if running_loop() is local.loop:
            raise RuntimeError(
                "restart() on the broker's own loop would deadlock it: await "
                "restart_async() instead"
            )
        future = asyncio.run_coroutine_threadsafe(self._restart(local, kill), local.loop)
        future.result(timeout)

    async def restart_async(self, kill: bool = True) -> None:
        """:meth:`restart`, awaitable from any event loop."""
        local = self._local()
        if running_loop() is local.loop:
            await self._restart(local, kill)
        else:
            coro = self._restart(local, kill)
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, local.loop))

    async def _restart(self, local: LocalBackend, kill: bool) -> None:
        await node.restart(local.server.state, self.vhost, kill)

    def memory_alarm(self, on: bool = True) -> None:
        """Set (``on=True``) or clear the node's memory alarm: publishing connections get
        connection.blocked / connection.unblocked exactly as from a real alarm. The
        monitor's own checks do not clear it while injected. Node-wide, as in RabbitMQ;
        the ``leveret`` fixture clears it after the test."""
        self._run(lambda state: node.memory_alarm(state, self.vhost, on))

    def disk_alarm(self, on: bool = True) -> None:
        """Set or clear the node's disk alarm (as :meth:`memory_alarm`)."""
        self._run(lambda state: node.disk_alarm(state, self.vhost, on))

    def cancel_consumers(self, queue: str) -> int:
        """basic.cancel from the broker to every consumer of ``queue`` (as when it is
        deleted; clients with the ``consumer_cancel_notify`` capability hear it), which
        stays; their unacked deliveries stay with their channels. Returns how many."""
        return self._run(lambda state: node.cancel_consumers(state, self.vhost, queue))

    def delay(self, ms: float) -> None:
        """Hold every frame the broker sends to the vhost's connections (and to those
        opened later) ``ms`` milliseconds, in order; ``delay(0)`` turns it off."""
        self._run(lambda state: node.delay(state, self.vhost, ms))

    def reset(self) -> None:
        """Clear what a test injected and left on: the alarms and the vhost's delay (the
        ``leveret`` fixture calls it after each test). Nothing to do off-broker."""
        backend = self._backend
        if not isinstance(backend, LocalBackend) or not backend.loop.is_running():
            return
        state = backend.server.state
        host = state.vhosts.get(self.vhost)
        # Read from this thread first: flags, so a test that injected nothing costs no hop.
        if state.memory.injected or state.disk.injected or (host and host.write_delay):
            self._run(_reset_of(self.vhost))


def _reset_of(vhost: str) -> Callable[[ServerState[Connection]], None]:
    def reset(state: ServerState[Connection]) -> None:
        node.clear_alarms(state)
        if vhost in state.vhosts:
            node.delay(state, vhost, 0)

    return reset
