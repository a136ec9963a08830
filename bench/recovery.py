#!/usr/bin/env python3
"""Start-up replay time: ``Server.start()`` on a data dir full of bindings or of messages.

    .venv/bin/python bench/recovery.py                       # both scenarios, 3 reps each
    .venv/bin/python bench/recovery.py --scenario bindings --bindings 100000
    .venv/bin/python bench/recovery.py --scenario messages --message-queues 10 --per-queue 100000

Two scenarios, each in a fresh temporary data dir, built with the storage API directly
(the same calls the broker makes, without the network in between):

* ``bindings``: one durable topic exchange, ``--queues`` (100) durable queues and
  ``--bindings`` (100k) durable bindings, written to the definitions log with
  :meth:`leveret.storage.log.DefinitionLog.append_many`. Binding keys follow the seeds' topic mix
  (``topicwords.py``, as ``loadgen/topic.py`` binds them): 3-7 words, the first a literal from a
  1000-word vocabulary, the others a literal (p 0.7), ``*`` (0.2) or ``#`` (0.1), never
  ``##``; bindings round-robin over the queues, every (key, queue) pair distinct.
* ``messages``: ``--message-queues`` (10) durable queues in the log and ``--per-queue``
  (100k) persistent messages each of ``--body-size`` (100) bytes in the message store
  (:meth:`leveret.storage.messages.MessageStore.append`, one ``sync()`` per 100k), content header
  ``delivery_mode=2``.

Then, ``--reps`` times, a new :class:`leveret.server.Server` on the directory (uvloop, as
``leveret serve``) is timed from ``start()`` to listening, checked (binding count, queue
depths), and stopped. Target (issue 5): 100k bindings replayed in under 1 s.

The last stdout line is one JSON object: per scenario the build time, ``start_s`` per rep and
their median, RSS growth, and the broker's own recovery log lines.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pamqp import commands, header  # noqa: E402

from bench.topicwords import binding_words, vocabulary  # noqa: E402
from leveret.config import Config  # noqa: E402
from leveret.exchanges.model import (  # noqa: E402
    Binding,
    BindingAdded,
    DestKind,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.server import Server  # noqa: E402
from leveret.storage.log import DefinitionLog  # noqa: E402
from leveret.storage.messages import MessageStore  # noqa: E402

VHOST = "/"
EXCHANGE = "recovery.topic"


def topic_bindings(count: int, queues: int, seed: int) -> list[tuple[str, str]]:
    """``count`` distinct (binding key, queue) pairs, round-robin over the queues."""
    rng = random.Random(seed)
    vocab = vocabulary()
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    while len(pairs) < count:
        pair = (".".join(binding_words(rng, vocab)), f"recovery.q{len(pairs) % queues}")
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs


def build_bindings(data_dir: Path, bindings: int, queues: int, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    pairs = topic_bindings(bindings, queues, seed)
    generated = time.perf_counter()
    events: list[tuple[str, Any]] = [
        (VHOST, ExchangeDeclared(Exchange(EXCHANGE, ExchangeType.TOPIC, durable=True)))
    ]
    events += [(VHOST, QueueDeclared(Queue(f"recovery.q{i}", durable=True))) for i in range(queues)]
    events += [
        (VHOST, BindingAdded(Binding(EXCHANGE, queue, DestKind.QUEUE, key))) for key, queue in pairs
    ]
    with DefinitionLog.open(data_dir / "definitions.log") as log:
        log.append_many(events)
        size = log.size
    return {
        "bindings": bindings,
        "queues": queues,
        "log_bytes": size,
        "generate_s": round(generated - started, 3),
        "build_s": round(time.perf_counter() - generated, 3),
    }


def build_messages(
    data_dir: Path, queues: int, per_queue: int, body_size: int, acked_fraction: float
) -> dict[str, Any]:
    started = time.perf_counter()
    names = [f"recovery.m{i}" for i in range(queues)]
    with DefinitionLog.open(data_dir / "definitions.log") as log:
        log.append_many((VHOST, QueueDeclared(Queue(name, durable=True))) for name in names)
    content = header.ContentHeader(0, body_size, commands.Basic.Properties(delivery_mode=2))
    head = content.marshal()
    body = b"x" * body_size
    total = queues * per_queue
    acked = 0
    keys = [(VHOST, name) for name in names]
    step = max(1, round(1 / acked_fraction)) if acked_fraction > 0 else 0
    with MessageStore.open(data_dir / "msgs") as store:
        append, ack = store.append, store.ack
        for i in range(total):
            key = keys[i % queues]
            msg_id = append(key, "", key[1], head, body)
            if step and i % step == 0:
                ack(key, msg_id)
                acked += 1
            if i % 100_000 == 99_999:
                store.sync()
        store.sync()
        stats = store.stats()
    return {
        "queues": queues,
        "per_queue": per_queue,
        "body_size": body_size,
        "stored": total,
        "acked": acked,
        "live": total - acked,
        "segments": stats.segments,
        "store_bytes": stats.bytes,
        "build_s": round(time.perf_counter() - started, 3),
    }


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Captured(logging.Handler):
    """Keeps the broker's INFO lines (its own timing of the recovery steps)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.INFO and "listening" not in record.getMessage():
            self.lines.append(f"{record.name}: {record.getMessage()}")


async def time_start(data_dir: Path, scenario: str) -> dict[str, Any]:
    """One Server.start() on ``data_dir``: seconds to listening, checks, stop time."""
    captured = Captured()
    for name in ("broker", "leveret"):
        logging.getLogger(name).addHandler(captured)
    gc.collect()
    rss_before = rss_kb()
    server = Server(Config(host="127.0.0.1", port=0, data_dir=data_dir))
    try:
        started = time.perf_counter()
        await server.start()
        start_s = time.perf_counter() - started
        result: dict[str, Any] = {
            "start_s": round(start_s, 3),
            "rss_growth_mb": round((rss_kb() - rss_before) / 1024, 1),
        }
        vhost = server.state.vhosts[VHOST]
        if scenario == "bindings":
            result["bindings_replayed"] = len(vhost.projection.bindings_from(EXCHANGE))
            result["queues"] = sum(1 for q in vhost.queues if q.startswith("recovery.q"))
        else:
            depths = [q.message_count for n, q in vhost.queues.items() if n.startswith("recovery.")]
            result["messages_restored"] = sum(depths)
            result["queues"] = len(depths)
    finally:
        stopping = time.perf_counter()
        await server.stop()
        for name in ("broker", "leveret"):
            logging.getLogger(name).removeHandler(captured)
    result["stop_s"] = round(time.perf_counter() - stopping, 3)
    result["broker_log"] = captured.lines
    return result


def run_scenario(args: argparse.Namespace, scenario: str, work: Path) -> dict[str, Any]:
    data_dir = work / scenario
    data_dir.mkdir(parents=True)
    if scenario == "bindings":
        build = build_bindings(data_dir, args.bindings, args.queues, args.seed)
        expected = args.bindings
    else:
        build = build_messages(
            data_dir, args.message_queues, args.per_queue, args.body_size, args.acked_fraction
        )
        expected = build["live"]
    print(f"{scenario}: built {json.dumps(build)}", file=sys.stderr, flush=True)
    reps = []
    for rep in range(args.reps):
        result = run_loop(time_start(data_dir, scenario))
        got = result.get("bindings_replayed", result.get("messages_restored"))
        result["check"] = "ok" if got == expected else f"MISMATCH {got} != {expected}"
        print(f"{scenario} rep {rep + 1}: {json.dumps(result)}", file=sys.stderr, flush=True)
        reps.append(result)
    starts = [r["start_s"] for r in reps]
    summary: dict[str, Any] = {"build": build, "start_s": starts}
    summary["start_s_median"] = statistics.median(starts)
    summary["start_s_min"] = min(starts)
    summary["rss_growth_mb"] = reps[0]["rss_growth_mb"]
    summary["stop_s_median"] = statistics.median(r["stop_s"] for r in reps)
    summary["check"] = "ok" if all(r["check"] == "ok" for r in reps) else reps[-1]["check"]
    summary["broker_log_first_rep"] = reps[0]["broker_log"]
    if scenario == "bindings":
        summary["target_s"] = 1.0
        summary["meets_target"] = summary["start_s_median"] < 1.0
    return summary


def run_loop(coro: Any) -> Any:
    """Run on uvloop when available, as ``leveret serve`` does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=["bindings", "messages", "both"], default="both")
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=100, help="queues the bindings go to")
    parser.add_argument("--message-queues", type=int, default=10)
    parser.add_argument("--per-queue", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument(
        "--acked-fraction",
        type=float,
        default=0.0,
        help="ack this fraction of the stored messages before the restart (default 0)",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="parent of the data dirs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    parser.add_argument("--log-level", default="INFO", help="the broker's log level")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger().setLevel(args.log_level)
    work = Path(tempfile.mkdtemp(prefix="leveret-recovery-", dir=args.dir))
    scenarios = ["bindings", "messages"] if args.scenario == "both" else [args.scenario]
    summary: dict[str, Any] = {"workload": "recovery", "reps": args.reps, "python": sys.version}
    try:
        for scenario in scenarios:
            summary[scenario] = run_scenario(args, scenario, work)
    finally:
        if args.keep:
            summary["kept"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary["ok"] = all(summary[s]["check"] == "ok" for s in scenarios)
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
