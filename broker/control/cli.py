"""``leveret ctl`` and ``leveret diagnostics``: rabbitmqctl and rabbitmq-diagnostics for a
Leveret node, over its control socket (no management credentials; see
:mod:`leveret.control.node` for who may use it).

Command names, positional arguments, ``-p VHOST``, info-key columns, ``--formatter
json|table``, ``-q``/``--quiet``, ``-s``/``--silent``, ``--no-table-headers`` and
``-t``/``--timeout`` are rabbitmqctl's (rabbitmq_cli's ``*_command.ex``), as are the banners
and exit statuses (sysexits: 64 usage, 65 data, 67 no such user, 69 node unavailable).
Errors are one ``leveret: error: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from leveret.config import NODE_NAME
from leveret.control.endpoint import (
    EX_DATAERR,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    address,
    default_socket,
)
from leveret.control.listing import KINDS
from leveret.control.output import Listing, report_text, status_text
from leveret.control.specs import RESULT_AS_JSON, SPECS

EX_TEMPFAIL = 75  # a timed-out operation, as rabbitmqctl's


class CommandError(Exception):
    """One ``leveret: error:`` line and an exit status."""

    def __init__(self, text: str, status: int) -> None:
        super().__init__(text)
        self.status = status


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name (rabbitmqctl accepts
    both): on a sub-command they default to nothing, so the earlier ones stay."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default(False), help="no banners"
    )
    parser.add_argument(
        "-s", "--silent", action="store_true", default=default(False), help="no banners or headers"
    )
    parser.add_argument("--formatter", choices=("table", "json"), default=default("table"))
    parser.add_argument(
        "--no-table-headers", action="store_true", default=default(False), help="no header line"
    )
    parser.add_argument(
        "-t", "--timeout", type=float, default=default(60.0), help="seconds (default 60)"
    )
    parser.add_argument(
        "--control-socket",
        type=Path,
        default=default(None),
        help="the node's control socket (default: DATA_DIR/control.sock)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=default(None), help="the node's --data-dir"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=default(None),
        help="the node's AMQP port, to find its socket when it has no data dir (5672)",
    )


def usage_parser(base: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """``base``, whose errors (a missing or extra argument, an unknown flag) are one
    ``leveret: error:`` line and rabbitmqctl's usage status, 64, not argparse's 2."""

    class CommandParser(base):  # type: ignore[valid-type,misc]
        def error(self, message: str) -> NoReturn:
            print(f"leveret: error: {message}", file=sys.stderr)
            sys.exit(EX_USAGE)

    return CommandParser


def add_parsers(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``ctl`` and ``diagnostics`` to the ``leveret`` sub-commands."""
    for tool, text in (
        ("ctl", "control a running node (rabbitmqctl)"),
        ("diagnostics", "check a running node (rabbitmq-diagnostics)"),
    ):
        parser = commands.add_parser(tool, help=text, description=text)
        _common(parser, suppress=False)
        # -p before the command name too, as rabbitmqctl takes it (its default is here: the
        # commands' own -p only overrides it).
        parser.add_argument("-p", "--vhost", default="/", help="vhost (/)")
        sub = parser.add_subparsers(
            dest="ctl_command", required=True, parser_class=usage_parser(parser_class)
        )
        for name, kind in KINDS.items():
            what = "dynamic shovels' status" if kind.banner else kind.what
            listing = sub.add_parser(name, help=f"list {what} (info keys as columns)")
            _common(listing, suppress=True)
            # rabbitmqctl takes -p on every command; node-wide listings ignore it.
            listing.add_argument("-p", "--vhost", default=argparse.SUPPRESS, help="vhost (/)")
            listing.add_argument(
                "columns", nargs="*", metavar="infoitem", help=", ".join(kind.keys)
            )
        for name, spec in SPECS.items():
            if tool == "diagnostics" and not spec.diagnostics:
                continue
            command = sub.add_parser(name, help=spec.help, description=spec.help)
            _common(command, suppress=True)
            if spec.vhost:
                command.add_argument("-p", "--vhost", default=argparse.SUPPRESS, help="vhost (/)")
            for positional in spec.positionals:
                nargs = {"?": "?", "*": "*"}.get(positional[-1])
                command.add_argument(positional.rstrip("?*"), nargs=nargs)
            if spec.options is not None:
                spec.options(command)


def socket_path(args: argparse.Namespace) -> Path:
    """The control socket: ``--control-socket``, else ``LEVERET_CONTROL_SOCKET``, else the
    default of ``--data-dir`` / ``LEVERET_DATA_DIR`` and ``--port`` / ``LEVERET_PORT``."""
    if args.control_socket is not None:
        return Path(args.control_socket)
    env = os.environ
    if env.get("LEVERET_CONTROL_SOCKET"):
        return Path(env["LEVERET_CONTROL_SOCKET"])
    data_dir = args.data_dir or (
        Path(env["LEVERET_DATA_DIR"]) if env.get("LEVERET_DATA_DIR") else None
    )
    port = args.port
    if port is None:
        try:
            port = int(env.get("LEVERET_PORT") or 5672)
        except ValueError:
            raise CommandError(f"LEVERET_PORT: invalid value {env['LEVERET_PORT']!r}", 2) from None
    return default_socket(data_dir, port)


def _secret(args: argparse.Namespace) -> str:
    """A password from the command line, else the first line of stdin."""
    if args.password is not None:
        return str(args.password)
    line = sys.stdin.readline()
    if not line:
        # add_user_command.ex's text.
        raise CommandError("Password is not provided via argument or stdin", EX_DATAERR)
    return line.rstrip("\r\n")


def request_args(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """What the command sends the node."""
    values = {
        key: value
        for key, value in vars(args).items()
        if key
        in (
            "vhost",
            "name",
            "explanation",
            "user",
            "configure",
            "write",
            "read",
            "pattern",
            "definition",
            "priority",
            "apply_to",
            "if_empty",
            "if_unused",
            "description",
            "tags",
            "default_queue_type",
            "columns",
            "seconds",
            "values",
            "component",
            "value",
            "exchange",
            "unit",
        )
    }
    spec = SPECS.get(name)
    if spec is not None:
        values.update(spec.extra(args))
    if name == "clear_user_limits":
        values["limit"] = args.limit
    if name in ("add_user", "change_password", "authenticate_user"):
        values["password"] = _secret(args)
    if name == "import_definitions":
        values["definitions"] = _read_definitions(args.path)
    return values


def _read_definitions(path: str) -> Any:
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text("utf-8")
    except OSError as exc:
        raise CommandError(
            f"import_definitions: {path}: {exc.strerror or exc}", EX_DATAERR
        ) from None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CommandError(
            f"import_definitions: {path}: not valid JSON ({exc})", EX_DATAERR
        ) from None


class Connection:
    """One request to the node and its reply lines."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        try:
            with address(path) as name:
                self.sock.connect(name)
        except OSError as exc:
            self.sock.close()
            reason = exc.strerror or str(exc)
            raise CommandError(
                f"unable to connect to node {NODE_NAME}: control socket {path}: {reason} "
                "(is the node running? the socket is in its --data-dir, or give "
                "--control-socket)",
                EX_UNAVAILABLE,
            ) from None
        self.lines = self.sock.makefile("rb")

    def send(self, command: str, args: dict[str, Any]) -> None:
        request = {"command": command, "args": args}
        try:
            self.sock.sendall(json.dumps(request).encode("utf-8") + b"\n")
        except OSError:
            pass  # the node refused us and closed: its reason is waiting to be read

    def replies(self, command: str) -> Any:
        """The node's reply lines, as dicts; an error line raises."""
        while True:
            try:
                line = self.lines.readline()
            except TimeoutError:
                raise CommandError(
                    f"operation {command} on node {NODE_NAME} timed out. "
                    f"Timeout value used: {self.timeout:g} s",
                    EX_TEMPFAIL,
                ) from None
            except OSError as exc:
                raise CommandError(
                    f"node {NODE_NAME}: {exc.strerror or exc}", EX_SOFTWARE
                ) from None
            if not line:
                raise CommandError(
                    f"node {NODE_NAME} closed the control connection without an answer",
                    EX_SOFTWARE,
                )
            reply = json.loads(line)
            if "error" in reply:
                raise CommandError(str(reply["error"]), int(reply.get("status", EX_SOFTWARE)))
            yield reply
            if reply.get("done"):
                return

    def close(self) -> None:
        self.lines.close()
        self.sock.close()


def banner(name: str, args: argparse.Namespace) -> str | None:
    """The line rabbitmqctl prints before it runs ``name`` (None: none)."""
    kind = KINDS.get(name)
    if kind is not None and kind.banner:
        return kind.banner.format(node=NODE_NAME)
    if kind is not None:
        where = f" for vhost {args.vhost}" if kind.per_vhost else ""
        return f"Timeout: {args.timeout:g} seconds ...\nListing {kind.what}{where} ..."
    template = SPECS[name].banner
    if callable(template):
        return template(args)
    values = {key: value for key, value in vars(args).items() if value is not None}
    values.update(
        node=NODE_NAME,
        tags_text=", ".join(getattr(args, "tags", None) or []),
        priority_text=getattr(args, "priority", None) or 0,
    )
    return template.format_map(_Blank(values)) if template else None


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


def run(args: argparse.Namespace) -> int:
    """Run one ``leveret ctl`` / ``leveret diagnostics`` command; the exit status."""
    try:
        return _run(args)
    except CommandError as exc:
        print(f"leveret: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.status
    except BrokenPipeError:  # `leveret ctl list_queues | head`
        sys.stderr.close()
        return 0


def _run(args: argparse.Namespace) -> int:
    name = args.ctl_command
    machine = args.formatter == "json" or (name == "export_definitions" and args.path == "-")
    payload = request_args(name, args)
    text = None if (args.quiet or args.silent or machine) else banner(name, args)
    if name == "await_startup":
        return _await_startup(args, text)
    connection = Connection(socket_path(args), args.timeout)
    try:
        if text:
            print(text, flush=True)
        connection.send(name, payload)
        listing = Listing(args.formatter, not (args.no_table_headers or args.silent))
        for reply in connection.replies(name):
            if "columns" in reply:
                listing.start(reply["columns"])
            elif "rows" in reply:
                listing.rows(reply["rows"])
            elif name in KINDS:
                listing.finish()
            else:
                _print_result(name, args, reply)
    finally:
        connection.close()
    if name in ("stop", "shutdown"):
        _await_stop(args)
    return 0


def _await_startup(args: argparse.Namespace, text: str | None) -> int:
    """await_startup: until the node answers a ping, up to ``--timeout`` seconds (75,
    rabbitmqctl's tempfail, when it does not)."""
    if text:
        print(text, flush=True)
    path = socket_path(args)
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            connection = Connection(path, max(deadline - time.monotonic(), 0.1))
        except CommandError:
            pass
        else:
            try:
                connection.send("ping", {})
                for _reply in connection.replies("ping"):
                    pass
                return 0
            except CommandError:
                pass
            finally:
                connection.close()
        if time.monotonic() >= deadline:
            raise CommandError(
                f"node {NODE_NAME} did not start within {args.timeout:g} s", EX_TEMPFAIL
            )
        time.sleep(0.1)


def _await_stop(args: argparse.Namespace) -> None:
    """After stop: until the node's control socket stops answering (rabbitmqctl stop
    returns once the node is down), up to ``--timeout`` seconds."""
    path = socket_path(args)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            Connection(path, 1.0).close()
        except CommandError:
            return
        time.sleep(0.1)
    raise CommandError(f"node {NODE_NAME} did not stop within {args.timeout:g} s", EX_TEMPFAIL)


def _print_result(name: str, args: argparse.Namespace, reply: dict[str, Any]) -> None:
    message, result = reply.get("message"), reply.get("result")
    if name == "export_definitions":
        document = json.dumps(result, ensure_ascii=False)
        if args.path == "-":
            print(document)
            return
        try:
            Path(args.path).write_text(document + "\n", "utf-8")
        except OSError as exc:
            raise CommandError(
                f"export_definitions: {args.path}: {exc.strerror or exc}", EX_DATAERR
            ) from None
        return
    if args.formatter == "json":
        shown = (
            result
            if name in RESULT_AS_JSON
            else {"result": "ok", "node": NODE_NAME, "message": message}
        )
        print(json.dumps(shown, ensure_ascii=False))
    elif name == "status":
        print(status_text(dict(result or {})))
    elif name == "report":
        print(report_text(dict(result or {})))
    elif message and not args.silent:
        print(message)
