"""When a connection reads: write back-pressure, resource alarms and the read budget.

Three reasons stop a connection reading, each one a name in its ``_paused`` set: its socket
does not take our writes fast enough (asyncio's ``pause_writing``), a memory or disk alarm
blocks a publishing connection (docs/connection-blocked.md, Connection.Blocked/Unblocked),
and its input used :data:`leveret.connection.READ_BUDGET` of loop time, so it yields to the
other connections until the next loop iteration (the frames not yet handled wait, in
order). These run when the state changes, not per frame, so they are kept out of
:mod:`leveret.connection`, which binds them as its methods (``pause_writing`` and
``resume_writing`` are its asyncio.Protocol callbacks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands

from leveret.handshake import State

if TYPE_CHECKING:
    from leveret.connection import Connection

C = commands.Connection


def pause(conn: Connection, reason: str) -> None:
    """Stop reading for ``reason`` ("write", "memory", "budget"); reading stops once."""
    if not conn._paused and conn.transport is not None:
        conn.transport.pause_reading()
    conn._paused.add(reason)


def resume(conn: Connection, reason: str) -> None:
    """``reason`` no longer holds: read again once no reason is left."""
    conn._paused.discard(reason)
    if not conn._paused and conn.transport is not None and conn.state is not State.CLOSED:
        conn.transport.resume_reading()


def pause_writing(conn: Connection) -> None:
    """asyncio.Protocol: the client reads slower than we write. Stop delivering to it and
    stop reading from it until its socket drains (no unbounded buffers)."""
    conn.writable = False
    pause(conn, "write")


def resume_writing(conn: Connection) -> None:
    """asyncio.Protocol: the socket drained; read again and deliver what waited."""
    conn.writable = True
    resume(conn, "write")
    for channel in list(conn.channels.values()):
        for consumer in list(channel.consumers.values()):
            consumer.queue.drain()


def alarm_set(conn: Connection) -> bool:
    """Whether the memory or the disk alarm is set."""
    return conn.server.memory.alarm or conn.server.disk.alarm


def memory_alarm(conn: Connection, alarm: bool) -> None:
    """A resource alarm (memory or disk) changed: block publishers, or let them go again
    once neither is set."""
    if alarm and conn.published and not conn.blocked:
        block(conn)
    elif not alarm and conn.blocked and not alarm_set(conn):
        conn.blocked = False
        if conn.client_capability("connection.blocked"):
            conn.send_method(0, C.Unblocked())
        resume(conn, "memory")


def block(conn: Connection) -> None:
    """docs/connection-blocked.md: a publishing connection is told (when it can hear it)
    and is no longer read from until the alarm clears; consumers keep draining."""
    conn.blocked = True
    if conn.client_capability("connection.blocked") and conn.state is State.OPEN:
        # rabbit_reader:blocked_by_message/1: "low on memory", "low on disk", both.
        alarms = (("memory", conn.server.memory.alarm), ("disk", conn.server.disk.alarm))
        reason = "low on " + " & ".join(name for name, on in alarms if on)
        conn.send_method(0, C.Blocked(reason=reason))
    pause(conn, "memory")


def yield_turn(conn: Connection) -> None:
    """The read budget ran out (Connection._run): stop reading until the next loop
    iteration, so other connections are served."""
    conn._spent = 0.0
    if conn.state is State.CLOSED:
        conn._backlog = None
        conn._held.clear()
        return
    pause(conn, "budget")
    conn._yield_handle = conn.loop.call_soon(resume_after_yield, conn)


def resume_after_yield(conn: Connection) -> None:
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


def continue_backlog(conn: Connection, deadline: float) -> None:
    """Handle the frames and reads left over when the budget ran out."""
    if conn._backlog is not None:
        frames, index, error = conn._backlog
        conn._backlog = None
        if not conn._handle(frames, index, error, deadline):
            return
    while conn._held:
        if not conn._process(conn._held.popleft(), deadline):
            return
