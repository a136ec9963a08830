"""What the node does for the runtime commands: resource limits (the memory watermark and
the disk free limit), closing every connection, the firehose tracer, stopping the node,
and rabbitmq-diagnostics' checks and reports.

The limits are parsed by the settings' own parsers (:class:`leveret.node.memory.Watermark`,
:class:`leveret.node.disk.DiskFreeLimit`) and applied by the monitors' setters; the texts and
exit statuses are rabbitmq_cli's (deps/rabbitmq_cli/lib/rabbitmq/cli/ctl/commands and
.../diagnostics/commands, ``*_command.ex``).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.config import NODE_NAME
from leveret.control.commands import listeners_of, status, text, vhost_named
from leveret.control.endpoint import (
    EX_DATAERR,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    ControlError,
)

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

Args = dict[str, Any]
Reply = tuple[str | None, Any]


def _values(args: Args) -> list[str]:
    values = args.get("values")
    if not isinstance(values, list):
        raise ControlError("argument values missing", EX_USAGE)
    return [str(value) for value in values]


def set_vm_memory_high_watermark(server: ServerState[Connection], args: Args) -> Reply:
    """set_vm_memory_high_watermark FRACTION | absolute VALUE (set_vm_memory_high_watermark
    _command.ex): a fraction of the memory available, or bytes with an optional unit; the
    alarm is judged against the new mark at once (:meth:`MemoryMonitor.set_limit`)."""
    from leveret.node.memory import Watermark

    values = _values(args)
    if not values or values == ["absolute"]:
        raise ControlError("not enough arguments", EX_USAGE)
    if len(values) > (2 if values[0] == "absolute" else 1):
        raise ControlError("too many arguments", EX_USAGE)
    raw = values[-1]
    try:
        # The fraction form is always a fraction ("1" is 1.0, not one byte), the absolute
        # form always a size: each through Watermark, which holds the bounds and units.
        if values[0] == "absolute":
            watermark = Watermark.parse(raw)
            if watermark.absolute is None:
                raise ValueError("The threshold should be an integer.")
        else:
            try:
                fraction = float(raw)
            except ValueError:
                raise ValueError(f"expected a fraction between 0.0 and 1.0, not '{raw}'") from None
            watermark = Watermark.parse(fraction)
    except ValueError as exc:
        raise ControlError(f"set_vm_memory_high_watermark: {raw}: {exc}", EX_DATAERR) from None
    server.memory.set_limit(watermark.limit())
    return None, {"high_watermark": server.memory.limit, "alarm": server.memory.alarm}


def set_disk_free_limit(server: ServerState[Connection], args: Args) -> Reply:
    """set_disk_free_limit LIMIT | mem_relative FRACTION (set_disk_free_limit_command.ex):
    bytes with an optional unit, or a multiple of the memory; the last reading is judged
    against it at once (:meth:`DiskMonitor.set_limit`)."""
    from leveret.node.disk import DiskFreeLimit

    values = _values(args)
    if not values or values == ["mem_relative"]:
        raise ControlError("not enough arguments", EX_USAGE)
    if len(values) > (2 if values[0] == "mem_relative" else 1):
        raise ControlError("too many arguments", EX_USAGE)
    raw = values[-1]
    try:
        if values[0] == "mem_relative":
            try:
                multiple = float(raw)
            except ValueError:
                raise ValueError(f"expected a multiple of the memory, not '{raw}'") from None
            limit = DiskFreeLimit.parse(multiple)
        else:
            limit = DiskFreeLimit.parse(raw)
            if limit.absolute is None:
                raise ValueError("expected a size in bytes with an optional unit (50MB, 1GiB)")
    except ValueError as exc:
        raise ControlError(f"set_disk_free_limit: {raw}: {exc}", EX_DATAERR) from None
    server.disk.set_limit(limit.limit())
    return None, {"disk_free_limit": server.disk.limit, "alarm": server.disk.alarm}


def close_all_connections(server: ServerState[Connection], args: Args) -> Reply:
    """close_all_connections [-p VHOST | --global] [--limit N] EXPLANATION: 320
    CONNECTION_FORCED with the explanation, as close_connection does for one."""
    explanation = text(args, "explanation")
    everywhere = bool(args.get("global"))
    vhost = None if everywhere else vhost_named(server, text(args, "vhost"))
    limit = args.get("limit")
    limit = int(limit) if isinstance(limit, int) and limit >= 0 else None
    closed = 0
    for conn in list(server.connections):
        if limit is not None and closed >= limit:
            break
        if conn.vhost is not None and (everywhere or conn.vhost is vhost):
            conn.force_close(explanation)
            closed += 1
    return f"Closed {closed} connection{'s' if closed != 1 else ''}", closed


def _trace(server: ServerState[Connection], args: Args, on: bool) -> Reply:
    vhost = vhost_named(server, text(args, "vhost"))
    vhost.firehose = on  # the firehose tracer (broker/firehose.py), as PUT /api/vhosts does
    return f"Trace {'enabled' if on else 'disabled'} for vhost {vhost.name}", None


def trace_on(server: ServerState[Connection], args: Args) -> Reply:
    """trace_on [-p VHOST]: the firehose copies the vhost's traffic to amq.rabbitmq.trace."""
    return _trace(server, args, True)


def trace_off(server: ServerState[Connection], args: Args) -> Reply:
    """trace_off [-p VHOST]."""
    return _trace(server, args, False)


def stop(server: ServerState[Connection], args: Args) -> Reply:
    """stop / shutdown: the node shuts down gracefully, as on SIGTERM (what ``leveret
    serve`` handles), once this reply is out; the CLI waits for the socket to go."""
    import asyncio

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
        # No graceful path (a broker inside a test run, say): SIGTERM would kill the host
        # process, not stop a node.
        raise ControlError(
            f"node {NODE_NAME} cannot stop itself: it was not started by `leveret serve`",
            EX_SOFTWARE,
        )
    asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
    return None, {"pid": os.getpid()}


def authenticate_user(server: ServerState[Connection], args: Args) -> Reply:
    """authenticate_user USER PASSWORD: the check an AMQP client's login goes through
    (:meth:`AccessControl.authenticate`); refused: authenticate_user_command.ex's text and
    65."""
    user = text(args, "user")
    if server.access.authenticate(user, text(args, "password")) is None:
        raise ControlError(
            f"failed to authenticate user \"{user}\": user '{user}' - invalid credentials",
            EX_DATAERR,
        )
    return "Success", None


def _listener_text(item: dict[str, Any]) -> str:
    return (
        f"Interface: {item['interface']}, port: {item['port']}, protocol: "
        f"{item['protocol']}, purpose: {item['purpose']}"
    )


def listeners(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics listeners: one line per listener (listeners_command.ex's text)."""
    found = listeners_of(server)
    return "\n".join(_listener_text(item) for item in found), found


def alarms(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics alarms: the resource alarms in effect (exit 0 either way)."""
    found = [
        {"type": kind, "node": NODE_NAME}
        for kind, on in (("memory", server.memory.alarm), ("disk", server.disk.alarm))
        if on
    ]
    if not found:
        return f"Node {NODE_NAME} reported no alarms, local or clusterwide", found
    lines = [f"{item['type'].capitalize()} alarm on node {NODE_NAME}" for item in found]
    return "\n".join(lines), found


def check_running(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics check_running: the node answers, so it is booted and serving."""
    return f"RabbitMQ on node {NODE_NAME} is fully booted and running", None


def _connects(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host or "127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def check_port_connectivity(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics check_port_connectivity: a TCP connection to every listener succeeds
    (69 when one does not)."""
    found = listeners_of(server)
    failed = [
        item
        for item in found
        if not _connects(
            "127.0.0.1" if item["interface"] in ("", "0.0.0.0") else item["interface"],
            int(item["port"]),
            2.0,
        )
    ]
    if failed:
        raise ControlError(
            f"Connection to ports {', '.join(str(i['port']) for i in failed)} on node "
            f"{NODE_NAME} has failed",
            EX_UNAVAILABLE,
        )
    ports = ", ".join(str(item["port"]) for item in found)
    return f"Successfully connected to ports {ports} on node {NODE_NAME}.", None


def check_port_listener(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics check_port_listener PORT: 69 when no listener uses it."""
    raw = args.get("port")
    try:
        port = int(str(raw))
    except ValueError:
        raise ControlError(f"port must be an integer, not '{raw}'", EX_USAGE) from None
    found = [int(item["port"]) for item in listeners_of(server)]
    if port not in found:
        raise ControlError(
            f"No listener for port {port} is active on node {NODE_NAME}. Found listeners "
            f"that use the following ports: {', '.join(map(str, found))}",
            EX_UNAVAILABLE,
        )
    return f"A listener for port {port} is running on node {NODE_NAME}.", None


def server_version(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics server_version: the RabbitMQ version Leveret behaves as (what clients
    see in connection.start's server properties)."""
    from leveret.management.views import RABBITMQ_VERSION

    return RABBITMQ_VERSION, RABBITMQ_VERSION


_UNITS = {"bytes": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3}


def memory_breakdown(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics memory_breakdown [--unit U]: what the memory monitor counts, as
    categories: the messages held (``queue_procs``, RabbitMQ's category for them) and the
    rest of the process's RSS (``other_proc``)."""
    memory = server.memory
    unit = str(args.get("unit") or "gb").lower()
    if unit not in _UNITS:
        raise ControlError(f"unit must be one of {', '.join(_UNITS)}, not '{unit}'", EX_USAGE)
    rss = memory.rss if memory.rss is not None else memory.used
    parts = {"queue_procs": memory.used, "other_proc": max(rss - memory.used, 0)}
    total = sum(parts.values()) or 1
    lines = [
        f"{name}: {value / _UNITS[unit]:.4f} {unit} ({100 * value / total:.2f}%)"
        for name, value in sorted(parts.items(), key=lambda item: -item[1])
    ]
    return "\n".join(lines), {**parts, "total": {"rss": rss}}


def environment(server: ServerState[Connection], args: Args) -> Reply:
    """environment: the node's settings (its Config) and the limits in effect."""
    import dataclasses

    config: dict[str, Any] = {}
    for item in dataclasses.fields(server.config):
        value = getattr(server.config, item.name)
        # Settings only: not the hooks and objects a Config may carry (callables, state).
        if isinstance(value, bool | int | float | str | type(None)):
            config[item.name] = value
        elif isinstance(value, Path):
            config[item.name] = str(value)
    config.update(
        vm_memory_high_watermark_bytes=server.memory.limit,
        disk_free_limit_bytes=server.disk.limit,
    )
    lines = [f"{key}: {value}" for key, value in sorted(config.items())]
    return "\n".join(lines), config


async def report(server: ServerState[Connection], args: Args) -> Reply:
    """report: status, listeners, alarms, and the vhosts' objects, in one reply."""
    from leveret.control.listing import KINDS, rows

    _message, node = status(server, args)
    listings: dict[str, Any] = {}
    for name in ("list_connections", "list_channels", "list_vhosts", "list_users"):
        kind = KINDS[name]
        listings[name] = list(rows(server, kind, None, kind.columns([])))
    for vhost in list(server.vhosts.values()):
        for name in ("list_queues", "list_exchanges", "list_bindings", "list_permissions"):
            kind = KINDS[name]
            listings[f"{name} -p {vhost.name}"] = list(rows(server, kind, vhost, kind.columns([])))
    return None, {"status": node, "listeners": listeners_of(server), "listings": listings}


COMMANDS: dict[str, Callable[[ServerState[Connection], Args], Reply | Awaitable[Reply]]] = {
    handler.__name__: handler
    for handler in (
        set_vm_memory_high_watermark,
        set_disk_free_limit,
        close_all_connections,
        trace_on,
        trace_off,
        stop,
        authenticate_user,
        listeners,
        alarms,
        check_running,
        check_port_connectivity,
        check_port_listener,
        server_version,
        memory_breakdown,
        environment,
        report,
    )
}
COMMANDS["shutdown"] = stop
