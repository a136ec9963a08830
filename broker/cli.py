"""Command line: ``leveret serve`` (also ``python -m leveret serve``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import re
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from leveret import __version__, build_kind
from leveret.config import Config
from leveret.node.auth import AccessControl, Permission
from leveret.node.memory import CGROUP_ROOT
from leveret.settings import Settings, SettingsError, add_arguments, one_line, resolve

if TYPE_CHECKING:
    from leveret.server import Server

# The server, the storage layer and the log tools are imported by the commands that use
# them: a refused setting, --help and --version answer at once.


class StartupError(Exception):
    """The broker cannot start (a listener, the data directory): one line, exit 1."""

    status = 1


class UsageError(SettingsError):
    """A command line argparse refuses (exit 2, as argparse)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, whose errors are one ``leveret: error: ...`` line without the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser(with_analyze: bool = False) -> argparse.ArgumentParser:
    """The ``leveret`` argument parser (``analyze``'s own flags, which import PySpark, only
    when that is the command)."""
    parser = ArgumentParser(prog="leveret", description="Leveret AMQP 0-9-1 broker")
    parser.add_argument(
        "--version", action="version", version=f"leveret {__version__} ({build_kind()})"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the broker",
        description="Run the broker. Each setting comes from a flag, else the LEVERET_* "
        "environment variable, else the --config TOML file, else the default.",
    )
    add_arguments(serve)
    analyze = commands.add_parser(
        "analyze",
        help="analyse a traffic trace with Spark (reports, what-if)",
        description="Run the PySpark job in pipeline/ on a trace recorded with --trace-dir. "
        "--topology and --proposed accept a Leveret data dir, `leveret log dump` output "
        "or a RabbitMQ definitions.json.",
    )
    if with_analyze:
        # leveret.pipeline.cli declares the job's flags without importing PySpark.
        from leveret.pipeline.cli import add_arguments as add_analyze_arguments

        add_analyze_arguments(analyze)
    traces = commands.add_parser("trace", help="read traffic traces (--trace-dir)")
    trace_commands = traces.add_subparsers(dest="trace_command", required=True)
    dump = trace_commands.add_parser(
        "dump", help="print trace segments as JSON lines, one message per line (for jq)"
    )
    dump.add_argument("path", nargs="+", type=Path, help="a trace directory or segment")
    convert = trace_commands.add_parser(
        "convert", help="write JSON-lines traces (versions 1 and 2) as version 3 segments"
    )
    convert.add_argument("path", nargs="+", type=Path, help="a trace directory or file")
    convert.add_argument("--out", type=Path, required=True, help="directory for the segments")
    logs = commands.add_parser("log", help="inspect the definitions log of a data directory")
    log_commands = logs.add_subparsers(dest="log_command", required=True)
    for name, text in (
        ("dump", "print the log as JSON lines, one event per line"),
        ("check", "verify the log (framing, CRCs, payloads); exit 1 if it is damaged"),
    ):
        sub = log_commands.add_parser(name, help=text)
        sub.add_argument("--data-dir", type=Path, required=True, help="the broker's data dir")
    from leveret.control.cli import add_parsers as add_control_parsers

    add_control_parsers(commands, ArgumentParser)
    return parser


def dump_objects(data_dir: Path) -> list[dict[str, object]]:
    """A data dir's definitions log as `leveret log dump` objects (for the pipeline), then
    its policies (saved with the users) as ``policy.set`` objects: an alternate exchange
    set by a policy changes routing."""
    from leveret.node.persistence import USERS_FILE
    from leveret.storage.logtools import read_log
    from leveret.storage.records import event_to_json

    objects = [
        event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")
    ]
    users = data_dir / USERS_FILE
    if users.exists():
        saved = json.loads(users.read_text("utf-8"))
        objects += [{"event": "policy.set", **policy} for policy in saved.get("policies", [])]
    return objects


def analyze_command(args: argparse.Namespace) -> int:
    """``leveret analyze``: data-dir sources are read here (the pipeline never reads the
    binary log: it imports only pyspark and exchanges/)."""
    try:
        from leveret.pipeline.job import run_args
    except ImportError:  # PySpark not installed
        print("leveret analyze needs PySpark: pip install -e '.[pipeline]'", file=sys.stderr)
        return 2

    def source(path: Path | None) -> list[dict[str, object]] | None:
        if path is not None and Path(path).is_dir():
            return dump_objects(Path(path))
        return None

    return run_args(args, source(args.topology), source(args.proposed))


def trace_command(args: argparse.Namespace) -> int:
    """``leveret trace dump PATH...`` and ``leveret trace convert PATH... --out DIR``."""
    from leveret.trace import TraceError, convert, read_messages, segment_files

    try:
        if args.trace_command == "convert":
            for segment in convert(args.path, args.out):
                print(segment)
            return 0
        for segment in segment_files(args.path):
            for message in read_messages(segment):
                print(json.dumps(message, separators=(",", ":")))
    except TraceError as exc:
        raise StartupError(str(exc)) from None
    except BrokenPipeError:  # `leveret trace dump DIR | head`
        sys.stderr.close()
    return 0


def log_command(command: str, data_dir: Path) -> int:
    """``leveret log dump|check --data-dir DIR`` (read-only: nothing is repaired)."""
    from leveret.storage.logtools import check, read_log
    from leveret.storage.records import event_to_json

    path = data_dir / "definitions.log"
    if not path.exists():
        print(f"{path}: no definitions log", file=sys.stderr)
        return 1
    if command == "dump":
        try:
            for vhost, event in read_log(path):
                print(json.dumps(event_to_json(vhost, event), sort_keys=True))
        except BrokenPipeError:  # `leveret log dump | head`
            sys.stderr.close()
        return 0
    report = check(path)
    print(report)
    return 0 if report.ok else 1


def build_access(settings: Settings) -> AccessControl:
    """The user database from the settings' ``[users]`` and ``[permissions]`` tables
    (guest/guest with full permissions when the file has no users, as RabbitMQ; the
    ``[permissions]`` of guest then replace its own)."""
    if not settings.users:
        access = AccessControl.with_users({"guest": "guest"}, settings.vhosts)
    else:
        access = AccessControl()
        for name, user in settings.users.items():
            access.add_user(
                name,
                password=user.password,
                password_hash=user.password_hash,
                tags=list(user.tags),
            )
    for user_name, per_vhost in settings.permissions.items():
        for vhost, perms in per_vhost.items():
            access.set_permissions(
                user_name, vhost, Permission(perms.configure, perms.write, perms.read)
            )
    return access


def config_from(settings: Settings, cgroup_root: Path = CGROUP_ROOT) -> Config:
    """A :class:`Config` from merged settings (``cgroup_root``: where a container's memory
    limit is read, for the default memory watermark)."""
    v = settings.values
    management_port = v["management_port"]
    return Config(
        host=v["host"],
        port=v["port"],
        data_dir=v["data_dir"],
        frame_max=v["frame_max"],
        channel_max=v["channel_max"],
        heartbeat=v["heartbeat"],
        max_message_size=v["max_message_size"],
        consumer_timeout=v["consumer_timeout"],
        memory_high_watermark=v["memory_high_watermark"].limit(cgroup_root),
        disk_free_limit=v["disk_free_limit"].limit(cgroup_root),
        max_connections=v["max_connections"],
        loopback_users=tuple(v["loopback_users"]),
        vhosts=settings.vhosts,
        trace_dir=v["trace_dir"],
        tls_port=v["tls_port"],
        tls_cert=v["tls_cert"],
        tls_key=v["tls_key"],
        tls_ca=v["tls_ca"],
        management_host=v["management_host"],
        management_port=management_port if management_port >= 0 else None,
        prometheus_port=v["prometheus_port"] if v["prometheus_port"] >= 0 else None,
        load_definitions=v["load_definitions"],
        control=True,
        control_socket=v["control_socket"],
        force_recovery=v["force_recovery"],
        access=build_access(settings),
    )


def _writable_directory(path: Path, what: str) -> None:
    """Create ``path`` if needed and check that a file can be written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"{what} {path} cannot be created: {exc.strerror or exc}") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise StartupError(f"{what} {path} cannot be written: {exc.strerror or exc}") from None


def check_files(config: Config) -> None:
    """What can be checked before the server starts: the directories it writes and the
    TLS files it loads (one-line errors instead of a traceback from deep inside)."""
    if config.data_dir is not None:
        _writable_directory(config.data_dir, "data directory")
    if config.trace_dir is not None:
        _writable_directory(config.trace_dir, "trace directory")
        from leveret.trace import TraceError, require_arrow

        try:
            require_arrow()  # the trace is written with pyarrow (the pipeline extra)
        except TraceError as exc:
            raise StartupError(str(exc)) from None
    if config.tls_cert is not None and config.tls_key is not None:
        import ssl

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(config.tls_cert, config.tls_key)
        except OSError as exc:  # ssl.SSLError is one
            raise SettingsError(
                f"--tls-cert {config.tls_cert} / --tls-key {config.tls_key}: cannot load "
                f"the certificate and key: {exc.strerror or exc}"
            ) from None
        if config.tls_ca is not None:
            try:
                context.load_verify_locations(cafile=config.tls_ca)
            except OSError as exc:
                raise SettingsError(
                    f"--tls-ca {config.tls_ca}: cannot load the CA bundle: {exc.strerror or exc}"
                ) from None


_BIND_PREFIX = re.compile(r"^error while attempting to bind on address .*?\): ")


def _start_failure(server: Server, config: Config, exc: BaseException) -> Exception | None:
    """The one-line error for an exception of ``Server.start`` (None: not a known one)."""
    if config.load_definitions is not None:
        from leveret.management.definitions import DefinitionsError

        if isinstance(exc, DefinitionsError):
            return SettingsError(f"--load-definitions: {exc}")
    from leveret.storage.errors import StorageError

    if isinstance(exc, StorageError):  # a damaged data directory: the error names the file
        return StartupError(str(exc))
    from leveret.control.node import ControlSocketError

    if isinstance(exc, ControlSocketError):
        return StartupError(str(exc))
    if not isinstance(exc, OSError):
        return None
    from leveret.wire.listen import BindError

    if isinstance(exc, BindError):  # an AMQP(S) address: the error names it
        return StartupError(f"cannot listen on {exc.address}: {exc.strerror}")
    # asyncio says "error while attempting to bind on address ('::', 5672): address
    # already in use": the address is said once, below.
    reason = _BIND_PREFIX.sub("", exc.strerror or str(exc))
    if exc.filename is not None:  # the data directory's files
        return StartupError(f"data directory {config.data_dir}: {exc.filename}: {reason}")
    # The listeners start in this order: AMQP, AMQPS (BindError, above), management,
    # Prometheus.
    if config.management_port is not None and server.management is None:
        host, port = config.management_host, config.management_port
    else:
        host, port = config.management_host, config.prometheus_port or 0
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return StartupError(f"cannot listen on {address}: {reason}")


class _HeldLogs(logging.Handler):
    """Holds the records logged while the server starts: all are shown once it has
    started, only warnings and errors if it could not (then the error is the last line)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _held_logs() -> Iterator[_HeldLogs]:
    root = logging.getLogger()
    handlers = root.handlers[:]
    held = _HeldLogs()
    root.handlers[:] = [held]
    failed = True
    try:
        yield held
        failed = False
    finally:
        root.handlers[:] = handlers
        for record in held.records:
            if failed and record.levelno < logging.WARNING:
                continue
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    # A broker keeps millions of long-lived objects (messages, bindings) and makes few
    # reference cycles: collect the young generation far less often than CPython's
    # default of every 700 allocations, whose full collections walk everything.
    gc.set_threshold(50_000, 20, 20)
    from leveret.server import Server

    server = Server(config)
    with _held_logs():
        try:
            await server.start()
        except Exception as exc:
            # A port in use, an address this host does not have, a bad definitions file:
            # one line, not a traceback (RabbitMQ also stops when a listener cannot start).
            failure = _start_failure(server, config, exc)
            await server.stop()
            if failure is None:
                raise
            raise failure from None
    if server.management is not None:
        logging.getLogger("leveret").info("management API on %s", server.management.url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("leveret").info("shutting down")
    await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``leveret`` console script: a user error (a refused setting, a
    port in use...) is one ``leveret: error: ...`` line on stderr and a non-zero status."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except (SettingsError, StartupError) as exc:
        print(f"leveret: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers are installed
        return 130


def _main(argv: list[str]) -> int:
    try:
        args = build_parser(with_analyze=argv[:1] == ["analyze"]).parse_args(argv)
    except UsageError as exc:
        if argv[:1] in (["ctl"], ["diagnostics"]):
            from leveret.control.endpoint import EX_USAGE

            # rabbitmqctl: an unknown command or flag is a usage error, 64 (EX_USAGE).
            exc.status = EX_USAGE
        raise
    if args.command == "analyze":
        return analyze_command(args)
    if args.command == "trace":
        return trace_command(args)
    if args.command in ("ctl", "diagnostics"):
        from leveret.control.cli import run as run_control

        return run_control(args)
    if args.command == "log":
        logging.basicConfig(level="WARNING")
        return log_command(args.log_command, args.data_dir)
    settings = resolve(args)
    config = config_from(settings)
    level = str(settings.values["log_level"]).upper()
    logging.basicConfig(
        level=logging.CRITICAL + 1 if level == "NONE" else level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    check_files(config)
    if config.use_uvloop:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
            pass
        else:
            uvloop.run(serve(config))
            return 0
    asyncio.run(serve(config))
    return 0
