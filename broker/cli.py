"""Command line: ``leveret serve`` (also ``python -m broker serve``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from broker.config import MAX_MESSAGE_SIZE, Config
from broker.memory import total_memory
from broker.server import Server
from storage.logtools import check, read_log
from storage.records import event_to_json


def build_parser() -> argparse.ArgumentParser:
    """The ``leveret`` argument parser."""
    parser = argparse.ArgumentParser(prog="leveret", description="Leveret AMQP 0-9-1 broker")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=5672, help="AMQP port (0: any free port)")
    serve.add_argument(
        "--data-dir", type=Path, default=None, help="directory for durable data (none: memory only)"
    )
    serve.add_argument(
        "--loopback-users",
        default="guest",
        help="comma-separated users allowed to connect only from loopback, as RabbitMQ's "
        "loopback_users (default: guest; '' lets guest connect from anywhere)",
    )
    serve.add_argument(
        "--memory-high-watermark",
        type=float,
        default=0.0,
        help="bytes of queued messages above which publishers are blocked; a value below 1 "
        "is a fraction of RAM (default 0.4 of RAM, as RabbitMQ)",
    )
    serve.add_argument(
        "--max-connections", type=int, default=0, help="open connections allowed (0: no limit)"
    )
    serve.add_argument(
        "--max-message-size",
        type=int,
        default=MAX_MESSAGE_SIZE,
        help=f"largest message body in bytes (default {MAX_MESSAGE_SIZE}, as RabbitMQ 3.13)",
    )
    serve.add_argument(
        "--trace-dir",
        type=Path,
        default=None,
        help="record one JSON line per published message here (schema: broker/trace.py)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="logging level",
    )
    logs = commands.add_parser("log", help="inspect the definitions log of a data directory")
    log_commands = logs.add_subparsers(dest="log_command", required=True)
    for name, text in (
        ("dump", "print the log as JSON lines, one event per line"),
        ("check", "verify the log (framing, CRCs, payloads); exit 1 if it is damaged"),
    ):
        sub = log_commands.add_parser(name, help=text)
        sub.add_argument("--data-dir", type=Path, required=True, help="the broker's data dir")
    return parser


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


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    server = Server(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("broker").info("shutting down")
    await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``leveret`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "log":
        logging.basicConfig(level="WARNING")
        return log_command(args.log_command, args.data_dir)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = Config(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        loopback_users=tuple(u for u in args.loopback_users.split(",") if u),
        memory_high_watermark=watermark_bytes(args.memory_high_watermark),
        max_connections=args.max_connections,
        max_message_size=args.max_message_size,
        trace_dir=args.trace_dir,
    )
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
