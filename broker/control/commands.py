"""What each control command does on the node.

Every change goes through the function the management API uses for it (users and
permissions through :class:`leveret.node.auth.AccessControl` and its regex check, vhosts and
policies through :class:`leveret.node.state.ServerState`, policy validation through
``exchanges.policies.parse``, definitions through :mod:`leveret.management.definitions`,
queue deletion and purge through :mod:`leveret.management.ops`), so no rule has a second
copy here; what is left is argument reading and RabbitMQ's CLI texts
(rabbitmq_cli's ``*_command.ex`` and their output clauses).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

# ControlError lives beside the exit statuses, so that the listings raise it without
# importing this module (which imports them).
from leveret.control.endpoint import (
    EX_DATAERR,
    EX_NOUSER,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    ControlError,
)

if TYPE_CHECKING:
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

Send = Callable[[dict[str, Any]], Awaitable[None]]
Args = dict[str, Any]

# Rows per reply line, each batch a turn of the event loop apart (see node.py).
BATCH = 200
# Seconds of loop time an import may take before it lets the clients have a turn.
SLICE = 0.005
# Definitions sections applied one object at a time (the others at once).
ONE_BY_ONE = ("exchanges", "queues", "bindings")


def text(args: Args, name: str) -> str:
    """A string argument the CLI always sends."""
    value = args.get(name)
    if not isinstance(value, str):
        raise ControlError(f"argument {name} missing", EX_USAGE)
    return value


def vhost_named(server: ServerState[Connection], name: str) -> VHost:
    """The vhost, or rabbitmqctl's error for one that does not exist."""
    vhost = server.vhosts.get(name)
    if vhost is None:
        raise ControlError(f"Virtual host '{name}' does not exist", EX_DATAERR)
    return vhost


def user_must_exist(server: ServerState[Connection], name: str) -> None:
    """rabbitmqctl's error for a user that does not exist (``no_such_user``)."""
    if name not in server.access.users:
        raise ControlError(f'User "{name}" does not exist', EX_NOUSER)


def queue_named(server: ServerState[Connection], args: Args) -> tuple[VHost, Queue]:
    """The queue ``args['name']`` of vhost ``args['vhost']``."""
    vhost = vhost_named(server, text(args, "vhost"))
    queue = vhost.queues.get(text(args, "name"))
    if queue is None:
        raise ControlError("Queue not found", EX_USAGE)  # delete_queue_command.ex
    return vhost, queue


Reply = tuple[str | None, Any]


def ping(server: ServerState[Connection], args: Args) -> Reply:
    """diagnostics ping: the node answers."""
    return "Ping succeeded", None


def status(server: ServerState[Connection], args: Args) -> Reply:
    """rabbitmqctl status: runtime, listeners, memory and disk, totals."""
    from leveret import __version__
    from leveret.management.api import object_totals
    from leveret.management.views import NODE, RABBITMQ_VERSION

    config, memory, disk = server.config, server.memory, server.disk
    keys = ("protocol", "interface", "port")  # status's shape, as before listeners had more
    listeners = [{key: item[key] for key in keys} for item in listeners_of(server)]
    alarms = [name for name, on in (("memory", memory.alarm), ("disk", disk.alarm)) if on]
    return None, {
        "node": NODE,
        "pid": os.getpid(),
        "product_name": "Leveret",
        "product_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION,
        "uptime": int(time.time() - server.started) if server.started is not None else 0,
        "data_directory": str(config.data_dir) if config.data_dir is not None else None,
        "listeners": listeners,
        "alarms": alarms,
        "memory": {"used": memory.used, "rss": memory.rss, "high_watermark": memory.limit},
        "disk": {"free": disk.reported_free(), "free_limit": disk.limit},
        "totals": {**object_totals(server), "vhosts": len(server.vhosts)},
    }


def listeners_of(server: ServerState[Connection]) -> list[dict[str, Any]]:
    """The node's listeners, as rabbitmq-diagnostics listeners reports them."""
    from leveret.management.views import NODE

    # One entry per bound address, as rabbitmq-diagnostics lists a listener per interface.
    found = [
        {
            "node": NODE,
            "interface": host,
            "port": port,
            "protocol": "amqp",
            "purpose": "AMQP 0-9-1 and AMQP 1.0",
        }
        for host, port in server.addresses
    ]
    if server.config.tls_cert is not None:
        found += [
            {
                "node": NODE,
                "interface": host,
                "port": port,
                "protocol": "amqp/ssl",
                "purpose": "AMQP 0-9-1 and AMQP 1.0 over TLS",
            }
            for host, port in server.tls_addresses
        ]
    if server.management is not None:
        found.append(
            {
                "node": NODE,
                "interface": server.management.host,
                "port": server.management.port,
                "protocol": "http",
                "purpose": "HTTP API",
            }
        )
    return found


def check_local_alarms(server: ServerState[Connection], args: Args) -> Reply:
    """rabbitmq-diagnostics check_local_alarms: exit 0 without alarms."""
    from leveret.management.views import NODE

    alarms = [
        name for name, on in (("memory", server.memory.alarm), ("disk", server.disk.alarm)) if on
    ]
    if alarms:
        raise ControlError(
            f"Node {NODE} reported local alarms: {', '.join(alarms)}", EX_UNAVAILABLE
        )
    return f"Node {NODE} reported no local alarms", None


def close_connection(server: ServerState[Connection], args: Args) -> Reply:
    """close_connection NAME EXPLANATION: 320 CONNECTION_FORCED with the explanation, as
    ``DELETE /api/connections/NAME`` does."""
    from leveret.management.views import connection_name

    name = text(args, "name")
    for conn in list(server.connections):
        if conn.vhost is not None and connection_name(conn) == name:
            conn.force_close(text(args, "explanation"))
            return None, None
    raise ControlError(f"Connection '{name}' not found", EX_DATAERR)


def inject_fault(server: ServerState[Connection], args: Args) -> Reply:
    """inject_fault [-p VHOST] FAULT [--client C] [--reason R] [--queue Q] [--ms N] [--off]
    [--clean]: what ``POST /api/leveret/faults/VHOST/FAULT`` does (leveret.faults.inject);
    a restart begins once this reply is out."""
    import leveret.faults as faults

    arguments = args.get("arguments")
    if not isinstance(arguments, dict):
        raise ControlError("argument arguments missing", EX_USAGE)
    try:
        result = faults.inject(server, text(args, "vhost"), text(args, "fault"), arguments)
    except (faults.UnknownVhostError, faults.UnknownQueueError) as exc:
        raise ControlError(str(exc), EX_DATAERR) from None
    except faults.FaultError as exc:
        raise ControlError(str(exc), EX_USAGE) from None
    counted = next((key for key in ("connections", "consumers") if key in result), None)
    message = f"{result[counted]} {counted}" if counted is not None else None
    return message, result


def add_user(server: ServerState[Connection], args: Args) -> Reply:
    """add_user NAME PASSWORD: a user without tags or permissions."""
    name = text(args, "name")
    if not name:
        raise ControlError("user cannot be an empty string", EX_USAGE)
    if name in server.access.users:
        raise ControlError(f'User "{name}" already exists', EX_SOFTWARE)
    server.access.add_user(name, password=text(args, "password"), tags=[])
    return (
        "Done. Don't forget to grant the user permissions to some virtual hosts! "
        "See 'leveret ctl set_permissions --help' to learn more.",
        None,
    )


def delete_user(server: ServerState[Connection], args: Args) -> Reply:
    """delete_user NAME (and the user's permissions)."""
    name = text(args, "name")
    user_must_exist(server, name)
    server.access.delete_user(name)
    return None, None


def change_password(server: ServerState[Connection], args: Args) -> Reply:
    """change_password NAME PASSWORD: tags, limits and permissions stay."""
    name = text(args, "name")
    user_must_exist(server, name)
    tags = list(server.access.users[name].tags)
    server.access.add_user(name, password=text(args, "password"), tags=tags)
    return None, None


def set_user_tags(server: ServerState[Connection], args: Args) -> Reply:
    """set_user_tags NAME [TAG ...]: replaces the tags (none: no tags)."""
    name = text(args, "name")
    user_must_exist(server, name)
    user = server.access.users[name]
    tags = [str(tag) for tag in args.get("tags") or []]
    server.access.add_user(
        name, password_hash=user.password_hash, tags=tags, hashing_algorithm=user.hashing_algorithm
    )
    return None, None


def add_vhost(server: ServerState[Connection], args: Args) -> Reply:
    """add_vhost NAME [--description D] [--tags T] [--default-queue-type Q]."""
    from leveret.management.actions import tags_of
    from leveret.management.state import state_of

    name = text(args, "name")
    if not name:
        raise ControlError("vhost cannot be an empty string", EX_USAGE)
    server.add_vhost(name)
    meta = state_of(server).vhost_meta(name)
    if args.get("description") is not None:
        meta.description = str(args["description"])
    if args.get("tags") is not None:
        meta.tags = tags_of(str(args["tags"]))
    if args.get("default_queue_type"):
        meta.default_queue_type = str(args["default_queue_type"])
    return None, None


def delete_vhost(server: ServerState[Connection], args: Args) -> Reply:
    """delete_vhost NAME: its connections closed, its queues and permissions gone."""
    import leveret.management.ops as ops

    name = text(args, "name")
    if not ops.delete_vhost(server, name):
        raise ControlError(f"Virtual host '{name}' does not exist", EX_DATAERR)
    return None, None


def set_permissions(server: ServerState[Connection], args: Args) -> Reply:
    """set_permissions [-p VHOST] USER CONF WRITE READ."""
    from leveret.node.auth import Permission, invalid_regexp

    vhost, user = text(args, "vhost"), text(args, "user")
    user_must_exist(server, user)
    vhost_named(server, vhost)
    patterns = [text(args, key) for key in ("configure", "write", "read")]
    for pattern in patterns:
        reason = invalid_regexp(pattern)
        if reason is not None:
            raise ControlError(json.dumps(reason), EX_DATAERR)
    server.access.set_permissions(user, vhost, Permission(*patterns))
    return None, None


def clear_permissions(server: ServerState[Connection], args: Args) -> Reply:
    """clear_permissions [-p VHOST] USER."""
    vhost, user = text(args, "vhost"), text(args, "user")
    user_must_exist(server, user)
    vhost_named(server, vhost)
    server.access.clear_permissions(user, vhost)
    return None, None


def set_policy(server: ServerState[Connection], args: Args) -> Reply:
    """set_policy [-p VHOST] [--priority N] [--apply-to W] NAME PATTERN DEFINITION,
    validated by the parser the management API and definitions use."""
    from leveret.exchanges.policies import PolicyError, parse

    vhost = vhost_named(server, text(args, "vhost")).name
    try:
        definition = json.loads(text(args, "definition"))
    except ValueError as exc:
        raise ControlError(f"definition is not valid JSON: {exc}", EX_DATAERR) from None
    body: dict[str, Any] = {"pattern": text(args, "pattern"), "definition": definition}
    for key, field in (("priority", "priority"), ("apply_to", "apply-to")):
        if args.get(key) is not None:
            body[field] = args[key]
    try:
        policy = parse(vhost, text(args, "name"), body)
    except PolicyError as exc:
        raise ControlError(" ".join(exc.reason.split()), EX_DATAERR) from None
    server.set_policy(policy)
    return None, None


def clear_policy(server: ServerState[Connection], args: Args) -> Reply:
    """clear_policy [-p VHOST] NAME (rabbit_runtime_parameters' text when it has none)."""
    vhost = vhost_named(server, text(args, "vhost")).name
    if not server.delete_policy(vhost, text(args, "name")):
        raise ControlError("Parameter does not exist", EX_DATAERR)
    return None, None


def export_definitions(server: ServerState[Connection], args: Args) -> Reply:
    """export_definitions: the document GET /api/definitions serves."""
    from leveret.management.definitions import export_definitions as export

    return None, export(server)


async def import_definitions(server: ServerState[Connection], args: Args) -> Reply:
    """import_definitions: merged in by the loader POST /api/definitions uses, in the same
    order, but a turn of the event loop apart every :data:`SLICE` seconds: users, vhosts,
    permissions, parameters and policies at once, then exchanges, queues and bindings one
    by one (a durable queue costs a synced log append: 20,000 of them took 37 s of the
    loop at once, during which no client was served). As with RabbitMQ, an error leaves
    what was applied before it in place."""
    from leveret.management.definitions import DefinitionsError, Skipped, load_definitions

    data = args.get("definitions")
    if not isinstance(data, dict):
        raise ControlError("definitions must be a JSON object", EX_DATAERR)
    skipped = Skipped()  # one for the whole import: a binding of a skipped exchange is skipped
    try:
        load_definitions(
            server, {k: v for k, v in data.items() if k not in ONE_BY_ONE}, None, skipped
        )
        started = time.monotonic()
        for section in ONE_BY_ONE:
            items = data.get(section)
            for part in items if isinstance(items, list) else [items]:
                if part is not None:
                    one = {section: [part] if isinstance(items, list) else part}
                    load_definitions(server, one, None, skipped)
                if time.monotonic() - started > SLICE:
                    await asyncio.sleep(0)
                    started = time.monotonic()
    except DefinitionsError as exc:
        reason = exc.reason if isinstance(exc.reason, str) else json.dumps(exc.reason)
        raise ControlError(" ".join(reason.split()), EX_DATAERR) from None
    # What was skipped, one line each, printed after the banner (rabbitmqctl prints nothing).
    return "\n".join(skipped.lines) or None, None


def purge_queue(server: ServerState[Connection], args: Args) -> Reply:
    """purge_queue [-p VHOST] NAME."""
    from leveret.node.errors import AMQPError
    from leveret.session.topology import purge

    _vhost, queue = queue_named(server, args)
    try:
        purge(queue)
    except AMQPError as exc:
        raise ControlError(exc.explanation, EX_SOFTWARE) from None
    return None, None


def delete_queue(server: ServerState[Connection], args: Args) -> Reply:
    """delete_queue [-p VHOST] NAME [--if-empty] [--if-unused]: the texts of
    delete_queue_command.ex's output clauses."""
    import leveret.management.ops as ops
    from leveret.session.topology import QueueInUseError, QueueNotEmptyError

    vhost, queue = queue_named(server, args)
    try:
        count = ops.delete_queue(
            server, vhost, queue, bool(args.get("if_unused")), bool(args.get("if_empty"))
        )
    except QueueInUseError:
        raise ControlError("Queue is in use", EX_USAGE) from None
    except QueueNotEmptyError:
        raise ControlError("Queue is not empty", EX_USAGE) from None
    return f"Queue was successfully deleted with {count} messages", count


async def advance_clock(server: ServerState[Connection], args: Args) -> Reply:
    """advance_clock [-p VHOST] SECONDS: the vhost's clock moves on (manual from then on),
    firing what comes due (:meth:`leveret.node.clock.Clock.advance`)."""
    from leveret.node.clock import checked_seconds

    vhost = vhost_named(server, text(args, "vhost"))
    raw = text(args, "seconds")
    try:
        seconds = checked_seconds(float(raw))
    except ValueError:
        raise ControlError(f"SECONDS must be a number >= 0, not '{raw}'", EX_USAGE) from None
    fired = await vhost.clock.advance(seconds)
    return f"Fired {fired} timer{'s' if fired != 1 else ''}", fired


COMMANDS: dict[str, Callable[[ServerState[Connection], Args], Reply | Awaitable[Reply]]] = {
    handler.__name__: handler
    for handler in (
        ping,
        status,
        check_local_alarms,
        close_connection,
        inject_fault,
        add_user,
        delete_user,
        change_password,
        set_user_tags,
        add_vhost,
        delete_vhost,
        set_permissions,
        clear_permissions,
        set_policy,
        clear_policy,
        export_definitions,
        import_definitions,
        purge_queue,
        delete_queue,
        advance_clock,
    )
}
