"""When a connection reads: write back-pressure, resource alarms and the read budget.

Three reasons stop a connection reading, each one a name in its ``_paused`` set: its socket
does not take our writes fast enough (asyncio's ``pause_writing``), a memory or disk alarm
blocks a publishing connection (docs/connection-blocked.md, Connection.Blocked/Unblocked),
and its input used :data:`leveret.connection.READ_BUDGET` of loop time, so it yields to the
other connections until the next loop iteration (the frames not yet handled wait, in
order). These run when the state changes, not per frame, so they are kept out of
:mod:`leveret.connection`, which binds them as its methods (``pause_writing`` and
``resume_writing`` are its asyncio.Protocol callbacks); they see it as :class:`Paused`,
which lists what they use, so this module does not import :mod:`leveret.connection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret.handshake import State

if TYPE_CHECKING:
    import asyncio
    from collections import deque
    from collections.abc import Mapping

    from leveret.codec import DropConnectionError
    from leveret.errors import AMQPError
    from leveret.queue import Consumer


class Alarm(Protocol):
    """A resource alarm (leveret.memory's monitor, broker/disk.py's)."""

    @property
    def alarm(self) -> bool:
        """Whether it is set."""


class Alarms(Protocol):
    """The node's resource alarms (leveret.state.ServerState implements it)."""

    @property
    def memory(self) -> Alarm:
        """The memory high watermark."""

    @property
    def disk(self) -> Alarm:
        """The free disk space limit."""


class Subscribed(Protocol):
    """A channel as flow control sees it: its consumers, drained on a resumed socket."""

    @property
    def consumers(self) -> Mapping[str, Consumer]:
        """Its consumers, by tag."""


class Paused(Protocol):
    """A connection as flow control sees it (:class:`leveret.connection.Connection`
    implements it; the functions below are its methods): why it does not read, its
    alarms, and the frames left over when its read budget ran out."""

    writable: bool
    blocked: bool
    _spent: float
    _backlog: tuple[list[tuple[int, Any]], int, Any] | None
    _yield_handle: asyncio.Handle | None

    @property
    def _paused(self) -> set[str]:
        """Why reading is paused: "write", "memory", "budget"."""

    @property
    def _held(self) -> deque[bytes]:
        """Reads not yet handled."""

    @property
    def transport(self) -> asyncio.Transport | None:
        """Its socket (None before it is made)."""

    @property
    def state(self) -> State:
        """Where it is in its life."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """Its event loop."""

    @property
    def server(self) -> Alarms:
        """The node's state (its alarms)."""

    @property
    def published(self) -> bool:
        """Whether it has published (the alarms block publishers only)."""

    @property
    def channels(self) -> Mapping[int, Subscribed]:
        """Its channels, by number."""

    def client_capability(self, name: str) -> bool:
        """Whether the client announced capability ``name``."""

    def send_method(self, channel: int, method: Any) -> None:
        """Send a pamqp method on ``channel``."""

    def _run(self, data: bytes | None) -> None:
        """Handle a read (None: what waited)."""

    def _handle(
        self,
        frames: list[tuple[int, Any]],
        index: int,
        error: AMQPError | DropConnectionError | None,
        deadline: float,
    ) -> bool:
        """Handle parsed frames from ``index``; False when the budget ran out."""

    def _process(self, data: bytes, deadline: float) -> bool:
        """Parse and handle a read; False when the budget ran out."""


C = commands.Connection


def pause(conn: Paused, reason: str) -> None:
    """Stop reading for ``reason`` ("write", "memory", "budget"); reading stops once."""
    if not conn._paused and conn.transport is not None:
        conn.transport.pause_reading()
    conn._paused.add(reason)


def resume(conn: Paused, reason: str) -> None:
    """``reason`` no longer holds: read again once no reason is left."""
    conn._paused.discard(reason)
    if not conn._paused and conn.transport is not None and conn.state is not State.CLOSED:
        conn.transport.resume_reading()


def pause_writing(conn: Paused) -> None:
    """asyncio.Protocol: the client reads slower than we write. Stop delivering to it and
    stop reading from it until its socket drains (no unbounded buffers)."""
    conn.writable = False
    pause(conn, "write")


def resume_writing(conn: Paused) -> None:
    """asyncio.Protocol: the socket drained; read again and deliver what waited."""
    conn.writable = True
    resume(conn, "write")
    for channel in list(conn.channels.values()):
        for consumer in list(channel.consumers.values()):
            consumer.queue.drain()


def alarm_set(conn: Paused) -> bool:
    """Whether the memory or the disk alarm is set."""
    return conn.server.memory.alarm or conn.server.disk.alarm


def memory_alarm(conn: Paused, alarm: bool) -> None:
    """A resource alarm (memory or disk) changed: block publishers, or let them go again
    once neither is set."""
    if alarm and conn.published and not conn.blocked:
        block(conn)
    elif not alarm and conn.blocked and not alarm_set(conn):
        conn.blocked = False
        if conn.client_capability("connection.blocked"):
            conn.send_method(0, C.Unblocked())
        resume(conn, "memory")


def block(conn: Paused) -> None:
    """docs/connection-blocked.md: a publishing connection is told (when it can hear it)
    and is no longer read from until the alarm clears; consumers keep draining."""
    conn.blocked = True
    if conn.client_capability("connection.blocked") and conn.state is State.OPEN:
        # rabbit_reader:blocked_by_message/1: "low on memory", "low on disk", both.
        alarms = (("memory", conn.server.memory.alarm), ("disk", conn.server.disk.alarm))
        reason = "low on " + " & ".join(name for name, on in alarms if on)
        conn.send_method(0, C.Blocked(reason=reason))
    pause(conn, "memory")


def yield_turn(conn: Paused) -> None:
    """The read budget ran out (Connection._run): stop reading until the next loop
    iteration, so other connections are served."""
    conn._spent = 0.0
    if conn.state is State.CLOSED:
        conn._backlog = None
        conn._held.clear()
        return
    pause(conn, "budget")
    conn._yield_handle = conn.loop.call_soon(resume_after_yield, conn)


def resume_after_yield(conn: Paused) -> None:
    """The next loop iteration after a yield: handle what waited, then read again."""
    conn._yield_handle = None
    if conn.state is State.CLOSED:
        conn._backlog = None
        conn._held.clear()
        return
    if conn._backlog is not None or conn._held:
        conn._run(None)
        if conn._yield_handle is not None:
            return  # still more than one budget's worth: later again
    resume(conn, "budget")


def continue_backlog(conn: Paused, deadline: float) -> None:
    """Handle the frames and reads left over when the budget ran out."""
    if conn._backlog is not None:
        frames, index, error = conn._backlog
        conn._backlog = None
        if not conn._handle(frames, index, error, deadline):
            return
    while conn._held:
        if not conn._process(conn._held.popleft(), deadline):
            return
