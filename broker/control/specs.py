"""The command-line shape of ``leveret ctl`` / ``leveret diagnostics`` commands
(:class:`Spec`), and :data:`SPECS`, the one table of every command, with rabbitmq_cli's
names, positionals, flags and banners (``*_command.ex`` in
deps/rabbitmq_cli/lib/rabbitmq/cli/ctl/commands and .../diagnostics/commands). The node
side is in :mod:`.commands`, :mod:`.runtime` and :mod:`.settings`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leveret.config import NODE_NAME


@dataclass(frozen=True)
class Spec:
    """A command: its positionals and flags, its banner (a template of the arguments, or a
    function of them), and what it sends the node."""

    help: str
    positionals: tuple[str, ...] = ()
    banner: str | Callable[[argparse.Namespace], str] = ""
    vhost: bool = False
    diagnostics: bool = False
    options: Callable[[argparse.ArgumentParser], None] | None = None
    extra: Callable[[argparse.Namespace], dict[str, Any]] = field(default=lambda args: {})


def _memory_banner(args: argparse.Namespace) -> str:
    values = list(args.values or [])
    if values[:1] == ["absolute"]:
        return f"Setting memory threshold on {NODE_NAME} to {' '.join(values[1:])} bytes ..."
    return f"Setting memory threshold on {NODE_NAME} to {' '.join(values)} ..."


def _disk_banner(args: argparse.Namespace) -> str:
    values = list(args.values or [])
    if values[:1] == ["mem_relative"]:
        return (
            f"Setting disk free limit on {NODE_NAME} to {' '.join(values[1:])} "
            "times the total RAM ..."
        )
    return f"Setting disk free limit on {NODE_NAME} to {' '.join(values)} bytes ..."


def _close_all_banner(args: argparse.Namespace) -> str:
    limit = f" (limit: {args.limit})" if args.limit is not None else ""
    if args.global_:
        return f"Closing all connections to node {NODE_NAME} (across all vhosts){limit} ..."
    return f"Closing all connections in vhost {args.vhost} on node {NODE_NAME}{limit} ..."


def _close_all_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--global", dest="global_", action="store_true", help="in every vhost (not only -p's)"
    )
    parser.add_argument("--limit", type=int, default=None, help="close at most N")
    parser.add_argument(
        "--per-connection-delay", type=int, default=None, help="accepted; Leveret closes at once"
    )


def _global_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--global", dest="global_", action="store_true", help="all vhosts")


def _user_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", default=None, help="one user (default: all)")


def _unit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unit", default="gb", help="bytes, kb, mb or gb (gb)")


def _await_options(parser: argparse.ArgumentParser) -> None:
    # The wait is -t/--timeout (rabbitmqctl await_startup's, default 300 s there).
    pass


def _global_arg(args: argparse.Namespace) -> dict[str, Any]:
    return {"global": bool(getattr(args, "global_", False))}


def _vhost_limits_banner(args: argparse.Namespace) -> str:
    if args.global_:
        return "Listing limits for all vhosts ..."
    return f'Listing limits for vhost "{args.vhost}" ...'


def _user_limits_banner(args: argparse.Namespace) -> str:
    if args.user is None:
        return "Listing limits for all users ..."
    return f'Listing limits for user "{args.user}" ...'


def _listener_port(args: argparse.Namespace) -> dict[str, Any]:
    return {"port": args.listener_port}


def _delete_queue_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-e", "--if-empty", action="store_true", help="only if it is empty")
    parser.add_argument(
        "-u", "--if-unused", action="store_true", help="only if it has no consumers"
    )


def _vhost_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--description", help="a description for the vhost")
    parser.add_argument("--tags", help="comma-separated tags")
    parser.add_argument("--default-queue-type", help="classic, quorum or stream")


def _policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--priority", type=int, default=None, help="policy priority (0)")
    parser.add_argument("--apply-to", default=None, help="queues, exchanges or all (the default)")


def _fault_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", help="only the connections this names (drop/close)")
    parser.add_argument("--reason", help="the close_connections explanation")
    parser.add_argument("--queue", help="the queue of cancel_consumers")
    parser.add_argument("--ms", type=float, help="the delay in milliseconds (0: none)")
    parser.add_argument("--off", action="store_true", help="clear the alarm (memory/disk)")
    parser.add_argument("--clean", action="store_true", help="restart cleanly, not as kill -9")


def _fault_args(args: argparse.Namespace) -> dict[str, Any]:
    """The fault's JSON arguments, as the management API takes them (leveret.faults)."""
    values: dict[str, Any] = {
        key: getattr(args, key)
        for key in ("client", "reason", "queue", "ms")
        if getattr(args, key) is not None
    }
    if args.off:
        values["on"] = False
    if args.clean:
        values["kill"] = False
    return {"fault": args.fault, "arguments": values}


# Every command of leveret ctl and leveret diagnostics: its arguments, banner and options,
# in one table (rabbitmq_cli's *_command.ex, one module each there).
SPECS: dict[str, Spec] = {
    "ping": Spec(
        "check that the node answers (no credentials needed)",
        banner="Will ping {node}. This only checks if the node answers on its control socket.",
        diagnostics=True,
    ),
    "status": Spec("node status", banner="Status of node {node} ...", diagnostics=True),
    "check_local_alarms": Spec(
        "exit 0 when the node has no memory or disk alarm",
        banner="Asking node {node} to report any local resource alarms ...",
        diagnostics=True,
    ),
    "close_connection": Spec(
        "close a connection (its name, as list_connections pid shows it) with 320",
        ("name", "explanation"),
        banner="Closing connection {name}, reason: {explanation}...",
    ),
    "add_user": Spec(
        "add a user (password from stdin when not given)",
        ("name", "password?"),
        banner='Adding user "{name}" ...',
    ),
    "delete_user": Spec("delete a user", ("name",), banner='Deleting user "{name}" ...'),
    "change_password": Spec(
        "change a user's password (from stdin when not given)",
        ("name", "password?"),
        banner='Changing password for user "{name}" ...',
    ),
    "set_user_tags": Spec(
        "replace a user's tags",
        ("name", "tags*"),
        banner='Setting tags for user "{name}" to [{tags_text}] ...',
    ),
    "add_vhost": Spec(
        "add a vhost", ("name",), banner='Adding vhost "{name}" ...', options=_vhost_options
    ),
    "delete_vhost": Spec("delete a vhost", ("name",), banner='Deleting vhost "{name}" ...'),
    "set_permissions": Spec(
        "set a user's permissions in a vhost",
        ("user", "configure", "write", "read"),
        banner='Setting permissions for user "{user}" in vhost "{vhost}" ...',
        vhost=True,
    ),
    "clear_permissions": Spec(
        "clear a user's permissions in a vhost",
        ("user",),
        banner='Clearing permissions for user "{user}" in vhost "{vhost}" ...',
        vhost=True,
    ),
    "set_policy": Spec(
        "set a policy",
        ("name", "pattern", "definition"),
        banner='Setting policy "{name}" for pattern "{pattern}" to "{definition}" '
        'with priority "{priority_text}" for vhost "{vhost}" ...',
        vhost=True,
        options=_policy_options,
    ),
    "clear_policy": Spec(
        "clear a policy",
        ("name",),
        banner='Clearing policy "{name}" on vhost "{vhost}" ...',
        vhost=True,
    ),
    "export_definitions": Spec(
        "write the definitions (users, vhosts, permissions, policies, topology) to a file or -",
        ("path",),
        banner='Exporting definitions in JSON to a file at "{path}" ...',
    ),
    "import_definitions": Spec(
        "import definitions from a file or - (stdin)",
        ("path",),
        banner='Importing definitions in JSON from a file at "{path}" ...',
    ),
    "purge_queue": Spec(
        "purge a queue",
        ("name",),
        banner="Purging queue '{name}' in vhost '{vhost}' ...",
        vhost=True,
    ),
    "delete_queue": Spec(
        "delete a queue",
        ("name",),
        banner="Deleting queue '{name}' on vhost '{vhost}' ...",
        vhost=True,
        options=_delete_queue_options,
    ),
    # Leveret's own (no rabbitmqctl counterpart): the vhost's virtual clock, for tests.
    "advance_clock": Spec(
        "advance a vhost's clock SECONDS (it stays manual: time stands still after)",
        ("seconds",),
        banner="Advancing the clock of vhost '{vhost}' by {seconds} s ...",
        vhost=True,
    ),
    # A Leveret extension (no rabbitmqctl counterpart): docs/testing.md, "Injected faults".
    "inject_fault": Spec(
        "inject a fault: drop_connections, close_connections, restart, memory_alarm, "
        "disk_alarm, cancel_consumers or delay",
        ("fault",),
        banner="Injecting fault {fault} into vhost '{vhost}' ...",
        vhost=True,
        options=_fault_options,
        extra=_fault_args,
    ),
    "set_vm_memory_high_watermark": Spec(
        "set the memory high watermark: FRACTION of the memory, or absolute VALUE "
        "(bytes, or with a unit: 2GB, 512MiB)",
        ("values*",),
        banner=_memory_banner,
    ),
    "set_disk_free_limit": Spec(
        "set the free disk space limit: LIMIT (bytes, or with a unit: 50MB, 1GiB), or "
        "mem_relative FRACTION (a multiple of the memory)",
        ("values*",),
        banner=_disk_banner,
    ),
    "close_all_connections": Spec(
        "close every connection of the vhost (or, with --global, of the node) with 320",
        ("explanation",),
        banner=_close_all_banner,
        vhost=True,
        options=_close_all_options,
        extra=lambda args: {**_global_arg(args), "limit": args.limit},
    ),
    "trace_on": Spec(
        "start the firehose tracer of the vhost (amq.rabbitmq.trace)",
        banner='Starting tracing for vhost "{vhost}" ...',
        vhost=True,
    ),
    "trace_off": Spec(
        "stop the firehose tracer of the vhost",
        banner='Stopping tracing for vhost "{vhost}" ...',
        vhost=True,
    ),
    "stop": Spec("stop the node (gracefully)", banner="Stopping and halting node {node} ..."),
    "shutdown": Spec("stop the node (gracefully)", banner="Shutting down node {node} ..."),
    "await_startup": Spec(
        "wait until the node answers (up to -t/--timeout seconds)",
        banner="Waiting for node {node} to start ...",
        diagnostics=True,
        options=_await_options,
    ),
    "authenticate_user": Spec(
        "check a user's password (from stdin when not given)",
        ("user", "password?"),
        banner='Authenticating user "{user}" ...',
        diagnostics=True,
    ),
    "environment": Spec(
        "the node's settings",
        banner="Application environment of node {node} ...",
        diagnostics=True,
    ),
    "report": Spec(
        "status, listeners and every listing, for a support request",
        banner="Reporting server status of node {node} ...",
        diagnostics=True,
    ),
    "check_running": Spec(
        "exit 0 when the node is running",
        banner="Checking if RabbitMQ is running on node {node} ...",
        diagnostics=True,
    ),
    "check_port_connectivity": Spec(
        "exit 0 when every listener accepts a TCP connection",
        banner="Testing TCP connections to all active listeners on node {node} ...",
        diagnostics=True,
    ),
    "check_port_listener": Spec(
        "exit 0 when a listener uses PORT",
        ("listener_port",),
        banner="Testing for a listener on port {listener_port} on node {node} ...",
        diagnostics=True,
        extra=_listener_port,
    ),
    "listeners": Spec(
        "the node's listeners",
        banner="Asking node {node} to report its protocol listeners ...",
        diagnostics=True,
    ),
    "alarms": Spec(
        "the resource alarms in effect",
        banner="Asking node {node} to report any known resource alarms ...",
        diagnostics=True,
    ),
    "memory_breakdown": Spec(
        "what the node's memory holds",
        banner="Reporting memory breakdown on node {node}...",
        diagnostics=True,
        options=_unit_option,
    ),
    "server_version": Spec(
        "the RabbitMQ version the node behaves as",
        banner="Asking node {node} for its RabbitMQ version...",
        diagnostics=True,
    ),
    "set_parameter": Spec(
        "set a runtime parameter (vhost-limits, operator_policy, shovel); VALUE is JSON",
        ("component", "name", "value"),
        banner='Setting runtime parameter "{name}" for component "{component}" to "{value}" '
        'in vhost "{vhost}" ...',
        vhost=True,
    ),
    "delete_shovel": Spec(
        "delete a dynamic shovel (clears its parameter)",
        ("name",),
        banner="Deleting shovel {name} in vhost {vhost}",
        vhost=True,
    ),
    "restart_shovel": Spec(
        "restart a dynamic shovel (its connections anew)",
        ("name",),
        banner="Restarting dynamic Shovel {name} in virtual host {vhost} on node {node}",
        vhost=True,
    ),
    "clear_parameter": Spec(
        "clear a runtime parameter",
        ("component", "name"),
        banner='Clearing runtime parameter "{name}" for component "{component}" on vhost '
        '"{vhost}" ...',
        vhost=True,
    ),
    "set_topic_permissions": Spec(
        "set a user's topic permissions on an exchange",
        ("user", "exchange", "write", "read"),
        banner='Setting topic permissions on "{exchange}" for user "{user}" in vhost "{vhost}" ...',
        vhost=True,
    ),
    "clear_topic_permissions": Spec(
        "clear a user's topic permissions (all, or on EXCHANGE)",
        ("user", "exchange?"),
        banner='Clearing topic permissions for user "{user}" in vhost "{vhost}" ...',
        vhost=True,
    ),
    "set_vhost_limits": Spec(
        "set the vhost's limits (JSON: max-connections, max-queues)",
        ("definition",),
        banner='Setting vhost limits to "{definition}" for vhost "{vhost}" ...',
        vhost=True,
    ),
    "clear_vhost_limits": Spec(
        "clear the vhost's limits",
        banner='Clearing vhost "{vhost}" limits ...',
        vhost=True,
    ),
    "list_vhost_limits": Spec(
        "the vhost's limits (JSON), or with --global every vhost's",
        banner=_vhost_limits_banner,
        vhost=True,
        options=_global_option,
        extra=_global_arg,
    ),
    "set_user_limits": Spec(
        "set a user's limits (JSON: max-connections, max-channels)",
        ("user", "definition"),
        banner='Setting user limits to "{definition}" for user "{user}" ...',
    ),
    "clear_user_limits": Spec(
        "clear a user's limit (a name, or all)",
        ("user", "limit"),
        banner='Clearing "{limit}" limit for user "{user}" ...',
    ),
    "list_user_limits": Spec(
        "a user's limits (JSON), or every user's",
        banner=_user_limits_banner,
        options=_user_option,
    ),
}

# Their json output is the node's result itself (the others print {"result": "ok", ...}).
RESULT_AS_JSON = frozenset(
    {
        "status",
        "listeners",
        "alarms",
        "memory_breakdown",
        "server_version",
        "environment",
        "report",
        "list_vhost_limits",
        "list_user_limits",
    }
)
