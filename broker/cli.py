"""Command line: ``leveret serve`` (also ``python -m leveret serve``)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from leveret.auth import AccessControl, Permission
from leveret.config import Config
from leveret.memory import total_memory
from leveret.persistence import USERS_FILE
from leveret.server import Server
from leveret.settings import Settings, add_arguments, resolve
from leveret.storage.logtools import check, read_log
from leveret.storage.records import event_to_json


def build_parser(with_analyze: bool = False) -> argparse.ArgumentParser:
    """The ``leveret`` argument parser (``analyze``'s own flags, which import PySpark, only
    when that is the command)."""
    parser = argparse.ArgumentParser(prog="leveret", description="Leveret AMQP 0-9-1 broker")
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
    logs = commands.add_parser("log", help="inspect the definitions log of a data directory")
    log_commands = logs.add_subparsers(dest="log_command", required=True)
    for name, text in (
        ("dump", "print the log as JSON lines, one event per line"),
        ("check", "verify the log (framing, CRCs, payloads); exit 1 if it is damaged"),
    ):
        sub = log_commands.add_parser(name, help=text)
        sub.add_argument("--data-dir", type=Path, required=True, help="the broker's data dir")
    return parser


def dump_objects(data_dir: Path) -> list[dict[str, object]]:
    """A data dir's definitions log as `leveret log dump` objects (for the pipeline), then
    its policies (saved with the users) as ``policy.set`` objects: an alternate exchange
    set by a policy changes routing."""
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


def log_command(command: str, data_dir: Path) -> int:
    """``leveret log dump|check --data-dir DIR`` (read-only: nothing is repaired)."""
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


def watermark_bytes(value: float) -> int:
    """``--memory-high-watermark``: absolute bytes, or a fraction of RAM below 1."""
    if 0 < value < 1:
        return int(total_memory() * value)
    return int(value)


def build_access(settings: Settings) -> AccessControl:
    """The user database from the settings' ``[users]`` and ``[permissions]`` tables
    (guest/guest with full permissions when the file has no users, as RabbitMQ)."""
    if not settings.users:
        return AccessControl.with_users({"guest": "guest"}, settings.vhosts)
    access = AccessControl()
    for name, user in settings.users.items():
        access.add_user(
            name,
            password=user.get("password"),
            password_hash=user.get("password_hash"),
            tags=list(user.get("tags", [])),
        )
    for user_name, per_vhost in settings.permissions.items():
        for vhost, perms in per_vhost.items():
            access.set_permissions(
                user_name,
                vhost,
                Permission(
                    perms.get("configure", ""), perms.get("write", ""), perms.get("read", "")
                ),
            )
    return access


def config_from(settings: Settings) -> Config:
    """A :class:`Config` from merged settings."""
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
        memory_high_watermark=watermark_bytes(v["memory_high_watermark"]),
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
        load_definitions=v["load_definitions"],
        access=build_access(settings),
    )


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    # A broker keeps millions of long-lived objects (messages, bindings) and makes few
    # reference cycles: collect the young generation far less often than CPython's
    # default of every 700 allocations, whose full collections walk everything.
    gc.set_threshold(50_000, 20, 20)
    server = Server(config)
    try:
        await server.start()
    except OSError as exc:
        # A port in use, an address this host does not have: one line and exit status 1,
        # not a traceback (RabbitMQ also stops when a listener cannot start).
        await server.stop()
        raise SystemExit(f"leveret: cannot listen: {exc}") from None
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
    """Entry point of the ``leveret`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(with_analyze=argv[:1] == ["analyze"]).parse_args(argv)
    if args.command == "analyze":
        return analyze_command(args)
    if args.command == "log":
        logging.basicConfig(level="WARNING")
        return log_command(args.log_command, args.data_dir)
    settings = resolve(args)
    logging.basicConfig(
        level=str(settings.values["log_level"]).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = config_from(settings)
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
