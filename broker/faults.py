"""Injected faults (issue 31, section 3): what a test does to the node to see how its
clients cope with a network failure, a forced close, a crash and restart, a resource alarm,
a cancelled consumer or a slow network.

Each rule is here once; the inspector (``leveret.inspect.faults``), the management API
(``POST /api/leveret/faults/{vhost}/{fault}``, ``leveret.management.faults``) and
``leveret ctl inject_fault`` (``leveret.control.commands``) only read their arguments, call
these functions on the broker's loop and turn :class:`FaultError` into their own errors.

Faults act on one vhost's connections and queues, except the resource alarms, which are
node-wide as in RabbitMQ (the vhost named must exist all the same), and the restart, which
restarts the node. Every function runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, Any

from leveret.wire import heldwrites

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

log = logging.getLogger(__name__)

#: The faults by their names in the management API and ``leveret ctl inject_fault`` (the
#: inspector's method names with ``-`` for ``_``), and the arguments each takes there.
ARGUMENTS: dict[str, frozenset[str]] = {
    "drop-connections": frozenset({"client"}),
    "close-connections": frozenset({"reason", "client"}),
    "restart": frozenset({"kill"}),
    "memory-alarm": frozenset({"on"}),
    "disk-alarm": frozenset({"on"}),
    "cancel-consumers": frozenset({"queue"}),
    "delay": frozenset({"ms"}),
}
FAULTS = tuple(ARGUMENTS)
#: The explanation of close_connections() when none is given.
DEFAULT_REASON = "Closed by an injected fault"


class FaultError(Exception):
    """A fault that cannot be injected; the message says why."""


class UnknownVhostError(FaultError, LookupError):
    """The vhost does not exist."""


class UnknownQueueError(FaultError, LookupError):
    """The queue does not exist."""


class InvalidFaultError(FaultError, ValueError):
    """A bad argument (a negative delay, a fault name that does not exist...)."""


class NoDataDirError(FaultError, RuntimeError):
    """A restart asked of a broker without a data directory."""


NO_DATA_DIR = (
    "restart() needs a broker with a data directory: without one, durable queues, "
    "persistent messages and the test's vhost cannot come back. Override the "
    "leveret_config fixture with Config(..., data_dir=tmp_path_factory.mktemp('leveret')) "
    "(docs/testing.md, 'Injected faults')"
)


def vhost_named(state: ServerState[Connection], name: str) -> VHost:
    """The vhost ``name``; :class:`UnknownVhostError` when there is none."""
    vhost = state.vhosts.get(name)
    if vhost is None:
        raise UnknownVhostError(f"no vhost '{name}'")
    return vhost


def matches(conn: Connection, client: str) -> bool:
    """Whether ``client`` names ``conn``: exactly its client-provided ``connection_name``,
    its client ``product`` (``pika``, ``aio-pika``...), its RabbitMQ name
    (``peer_host:peer_port -> host:port``), its peer ``host:port`` or its peer host."""
    props = conn.client_properties
    peer_host, peer_port, _host, _port = conn.endpoints()
    names = (
        props.get("connection_name"),
        props.get("product"),
        conn.name,
        f"{peer_host}:{peer_port}",
        peer_host,
    )
    return any(isinstance(n, str) and n == client for n in names)


def connections_of(
    state: ServerState[Connection], vhost: str, client: str | None = None
) -> list[Connection]:
    """The vhost's open connections (those ``client`` names, when given)."""
    from leveret.wire.handshake import State

    host = vhost_named(state, vhost)
    return [
        c
        for c in list(state.connections)
        if c.vhost is host and c.state is State.OPEN and (client is None or matches(c, client))
    ]


def drop_connections(state: ServerState[Connection], vhost: str, client: str | None = None) -> int:
    """A network failure: abort the sockets (TCP RST, no connection.close) of the vhost's
    connections that ``client`` names (all without it); returns how many."""
    dropped = connections_of(state, vhost, client)
    for conn in dropped:
        conn.drop()
    return len(dropped)


def close_connections(
    state: ServerState[Connection],
    vhost: str,
    reason: str = DEFAULT_REASON,
    client: str | None = None,
) -> int:
    """320 CONNECTION_FORCED with ``reason`` to the vhost's connections that ``client``
    names (all without it), as ``rabbitmqctl close_connection`` and ``DELETE
    /api/connections/NAME`` close one (the same ``Connection.force_close``); returns how
    many."""
    if not isinstance(reason, str):
        raise InvalidFaultError("reason must be a string")
    closed = connections_of(state, vhost, client)
    for conn in closed:
        conn.force_close(reason)
    return len(closed)


def memory_alarm(state: ServerState[Connection], vhost: str, on: bool = True) -> None:
    """Set (``on``) or stop injecting the node's memory alarm: publishers get
    connection.blocked / connection.unblocked from the monitor's own path
    (``MemoryMonitor.inject``); the periodic checks do not clear an injected alarm."""
    vhost_named(state, vhost)
    state.memory.inject(_flag(on, "on"))


def disk_alarm(state: ServerState[Connection], vhost: str, on: bool = True) -> None:
    """Set (``on``) or stop injecting the node's disk alarm (``DiskMonitor.inject``); the
    periodic free-space readings do not clear an injected alarm."""
    vhost_named(state, vhost)
    state.disk.inject(_flag(on, "on"))


def clear_alarms(state: ServerState[Connection]) -> None:
    """Stop injecting both alarms (each then clears as a real one would)."""
    if state.memory.injected:
        state.memory.inject(False)
    if state.disk.injected:
        state.disk.inject(False)


def cancel_consumers(state: ServerState[Connection], vhost: str, queue: str) -> int:
    """basic.cancel from the server to every consumer of ``queue`` (to clients with the
    ``consumer_cancel_notify`` capability), as when the queue is deleted; the consumers
    leave the queue, which stays. Their unacknowledged deliveries stay with their channels,
    to be acked, rejected or requeued as the client decides (or requeued when the channel
    closes), as RabbitMQ keeps them after a consumer is cancelled. Returns how many."""
    host = vhost_named(state, vhost)
    q = host.queues.get(queue) if isinstance(queue, str) else None
    if q is None:
        raise UnknownQueueError(f"no queue '{queue}' in vhost '{vhost}'")
    consumers = list(q.consumers)
    for consumer in consumers:
        consumer.channel.cancel_live(consumer)
    return len(consumers)


def delay(state: ServerState[Connection], vhost: str, ms: float) -> None:
    """Hold every write from the broker to the vhost's connections (and to those opened
    later) ``ms`` milliseconds, in order; ``0`` turns it off."""
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms):
        raise InvalidFaultError(f"ms must be a number of milliseconds, not {ms!r}")
    if ms < 0:
        raise InvalidFaultError(f"ms must be 0 or more, not {ms}")
    host = vhost_named(state, vhost)
    host.write_delay = ms / 1000.0
    for conn in connections_of(state, vhost):
        heldwrites.delay_writes(conn, host.write_delay)


def check_restart(state: ServerState[Connection], vhost: str, kill: bool) -> None:
    """Raise what a restart of this node would raise before it stops anything."""
    vhost_named(state, vhost)
    _flag(kill, "kill")
    if state.config.data_dir is None:
        raise NoDataDirError(NO_DATA_DIR)
    if state.restart is None:
        raise FaultError("this broker cannot restart itself (it was not started by a Server)")


async def restart(state: ServerState[Connection], vhost: str, kill: bool = True) -> None:
    """Stop the node as ``kill -9`` would (``kill``) or cleanly, and start it again on the
    same ports and data directory; returns once it listens again."""
    check_restart(state, vhost, kill)
    assert state.restart is not None
    await state.restart(kill)


def restart_soon(
    state: ServerState[Connection], vhost: str, kill: bool = True
) -> asyncio.Task[None]:
    """:func:`restart`, checked now and begun on the next loop iteration: what the
    management API and the control socket use, so that their reply goes out before the
    listener that serves it stops."""
    check_restart(state, vhost, kill)
    restarter = state.restart
    assert restarter is not None
    task = asyncio.get_running_loop().create_task(_later(restarter, kill))
    _restarting.add(task)  # held until done: the loop keeps only a weak reference
    task.add_done_callback(_restarted)
    return task


# Restarts begun by restart_soon() and not yet done.
_restarting: set[asyncio.Task[None]] = set()


async def _later(restarter: Callable[[bool], Awaitable[None]], kill: bool) -> None:
    await asyncio.sleep(0)  # the reply is written first
    await restarter(kill)


def _restarted(task: asyncio.Task[None]) -> None:
    """Nobody awaits a restart begun for the API or ctl: a failure is logged here."""
    _restarting.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("the injected restart failed", exc_info=task.exception())


def inject(
    state: ServerState[Connection], vhost: str, fault: str, args: dict[str, Any]
) -> dict[str, Any]:
    """Inject ``fault`` (a name of :data:`FAULTS`; ``_`` may stand for ``-``) into
    ``vhost`` with its JSON arguments, for the management API and ``leveret ctl``; returns
    what it did as JSON. A restart is checked now and begun once the caller's reply is out
    (:func:`restart_soon`)."""
    name = fault.replace("_", "-")
    if name not in ARGUMENTS:
        raise InvalidFaultError(f"unknown fault '{fault}' (one of {', '.join(FAULTS)})")
    unknown = sorted(set(args) - ARGUMENTS[name])
    if unknown:
        raise InvalidFaultError(f"{name} takes no argument {', '.join(unknown)}")
    client = _optional_text(args, "client")
    result: dict[str, Any] = {"vhost": vhost, "fault": name}
    if name == "drop-connections":
        result["connections"] = drop_connections(state, vhost, client)
    elif name == "close-connections":
        reason = _optional_text(args, "reason") or DEFAULT_REASON
        result["connections"] = close_connections(state, vhost, reason, client)
    elif name == "restart":
        kill = args.get("kill", True)
        restart_soon(state, vhost, kill)
        result["kill"] = kill
    elif name in ("memory-alarm", "disk-alarm"):
        on = args.get("on", True)
        (memory_alarm if name == "memory-alarm" else disk_alarm)(state, vhost, on)
        result["on"] = on
    elif name == "cancel-consumers":
        queue = _optional_text(args, "queue")
        if queue is None:
            raise InvalidFaultError("cancel-consumers needs queue")
        result["consumers"] = cancel_consumers(state, vhost, queue)
    else:
        if "ms" not in args:
            raise InvalidFaultError("delay needs ms")
        delay(state, vhost, args["ms"])
        result["ms"] = args["ms"]
    return result


def _optional_text(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidFaultError(f"{name} must be a string")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidFaultError(f"{name} must be true or false, not {value!r}")
    return value
