#!/usr/bin/env python3
"""Benchmark Leveret against RabbitMQ and garagemq with the project's load generator
(``bench/loadgen/``); write JSONL + a markdown table.

Starts one Leveret (``python -m leveret serve``) per build on a free port, a private
garagemq node if the package is installed (``bench/garagemq.py``), uses a RabbitMQ node if
one is found (or given), and runs each workload against each broker, interleaved (the order
of the brokers rotates with every workload and rep), every run a fresh load-generator
process with the broker's PID so its CPU is recorded. Raw results go to
``bench/results/<timestamp>.jsonl``; the summary table (medians, the ratios of each Leveret
build to RabbitMQ and to garagemq, broker CPU in cores and in µs per message) is printed
and written to ``bench/results/latest.md``.

  .venv/bin/python bench/run.py --quick            # smoke run: 1 rep, small -n
  .venv/bin/python bench/run.py                    # 3 reps of the core workloads
  .venv/bin/python bench/run.py --extended         # + latency and aio-pika workloads
  .venv/bin/python bench/run.py --features         # + queue features (TTL, DLX, priority, headers)
  .venv/bin/python bench/run.py --no-rabbitmq --no-garagemq   # Leveret only
  .venv/bin/python bench/run.py --rabbitmq amqp://guest:guest@127.0.0.1:5691/ --rabbitmq-pid N
  .venv/bin/python bench/run.py --leveret-build pure= --leveret-build compiled=build/compiled

garagemq: started when ``garagemq`` is on PATH (``--garagemq`` insists, failing with one line
when it is not installed; ``--no-garagemq`` skips it). ``--leveret-build NAME=DIR`` (repeat
it) runs ``leveret serve`` with DIR first on PYTHONPATH (empty DIR: the venv's own install)
as the broker ``leveret-NAME``; default one build, ``pure``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import garagemq
from workloads import (
    CORE_WORKLOADS,
    REPO_ROOT,
    RESULTS_DIR,
    WORKLOADS,
    ChildBroker,
    LeveretProcess,
    Metric,
    Workload,
    accepts_tcp,
    cpu_us_per_unit,
    default_python,
    describe_build,
    run_script,
    workloads_in,
)

LEVERET = "leveret"
RABBITMQ = "rabbitmq"
GARAGEMQ = "garagemq"
PEERS = (RABBITMQ, GARAGEMQ)  # the brokers each Leveret build is compared with
PRETTY = {RABBITMQ: "RabbitMQ", GARAGEMQ: "garagemq"}
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_BUILD = "pure"
# A workload script gets --timeout T; the process is killed after T + this grace.
KILL_GRACE_S = 30.0
# Exit status for a usage error (as rabbitmqctl's EX_USAGE).
EX_USAGE = 64
Record = dict[str, Any]


@dataclass
class Broker:
    """A broker under test: a name for the records, a label for the table, its URL, its PID
    for CPU accounting, and the child process when the bench started it (restarted if it
    dies mid-run)."""

    name: str
    label: str
    url: str
    pid: int | None
    process: ChildBroker | None = None

    @property
    def is_leveret(self) -> bool:
        return self.name.startswith(LEVERET)


@contextmanager
def running(process: ChildBroker) -> Iterator[ChildBroker]:
    """Start ``process`` for the duration of the block; always stop it afterwards."""
    try:
        process.start()
        yield process
    finally:
        process.stop()
        process.close_log()


def parse_builds(values: list[str] | None) -> list[tuple[str, str]]:
    """``--leveret-build NAME=DIR`` values as (name, dir); default one build, pure."""
    if not values:
        return [(DEFAULT_BUILD, "")]
    builds: list[tuple[str, str]] = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
            usage_error(f"--leveret-build {value!r}: expected NAME=PYTHONPATH_DIR")
        # A directory without the package would silently run the venv's install instead.
        if path and not (Path(path) / "leveret" / "__init__.py").is_file():
            usage_error(f"--leveret-build {value!r}: no leveret package in {path}")
        if name in (b[0] for b in builds):
            usage_error(f"--leveret-build {value!r}: build {name} given twice")
        builds.append((name, str(Path(path).resolve()) if path else ""))
    return builds


def usage_error(message: str) -> None:
    """One line on stderr and exit 64 (a usage error)."""
    print(f"bench/{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    raise SystemExit(EX_USAGE)


def garagemq_executable(args: argparse.Namespace) -> str | None:
    """The garagemq binary to start: None with --no-garagemq or (by default) when it is
    not installed; --garagemq without it is an error."""
    if args.no_garagemq:
        return None
    executable = garagemq.binary()
    if executable is None:
        if args.garagemq:
            print(
                f"bench/run.py: --garagemq: no garagemq on PATH ({garagemq.INSTALL_HINT})",
                file=sys.stderr,
            )
            raise SystemExit(69)  # EX_UNAVAILABLE
        log(f"no garagemq on PATH: not compared ({garagemq.INSTALL_HINT})")
    return executable


# --------------------------------------------------------------------------------------------
# RabbitMQ discovery
# --------------------------------------------------------------------------------------------
def beam_pids() -> list[int]:
    """PIDs of running beam.smp processes (Erlang VMs; a RabbitMQ node is one)."""
    try:
        out = subprocess.run(
            ["pgrep", "-f", "beam.smp"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(p) for p in out.split()]


def listening_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on ``port`` (from /proc/net/tcp{,6})."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def listener_pid(port: int, candidates: list[int]) -> int | None:
    """Which of ``candidates`` listens on ``port`` (None if unknown: no permission, ...)."""
    inodes = listening_inodes(port)
    for pid in candidates:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return pid
    return None


def find_rabbitmq(args: argparse.Namespace) -> Broker | None:
    """The RabbitMQ to compare with: --rabbitmq URL, or a local node on 5672 if beam runs."""
    if args.no_rabbitmq:
        return None
    pids = beam_pids()
    if args.rabbitmq is None and not pids:
        log("no beam.smp running: Leveret-only run (start RabbitMQ to compare)")
        return None
    url = args.rabbitmq or DEFAULT_RABBITMQ_URL
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5672
    if not accepts_tcp(host, port, timeout=2.0):
        if args.rabbitmq is not None:
            raise SystemExit(f"--rabbitmq {url}: nothing accepts connections on {host}:{port}")
        log(f"beam.smp runs but nothing listens on {host}:{port}: Leveret-only run")
        return None
    pid = args.rabbitmq_pid
    if pid is None and host in ("127.0.0.1", "localhost", "::1"):
        pid = listener_pid(port, pids) or (pids[0] if len(pids) == 1 else None)
    if pid is None:
        log("RabbitMQ PID unknown (pass --rabbitmq-pid): its CPU will not be recorded")
    return Broker(RABBITMQ, PRETTY[RABBITMQ], url, pid)


# --------------------------------------------------------------------------------------------
# Running the matrix
# --------------------------------------------------------------------------------------------
def log(msg: str) -> None:
    """Progress goes to stderr so stdout carries only the table."""
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> str | None:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return None


def git_revision() -> str:
    """Short commit hash of the repo, ``-dirty`` if the work tree has changes."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (rev or "unknown") + ("-dirty" if dirty else "")


def run_workload(workload: Workload, broker: Broker, args: argparse.Namespace) -> Record:
    """One fresh load-generator process for ``workload`` against ``broker``."""
    cmd = workload.command(
        args.python, broker.url, quick=args.quick, label=broker.name, broker_pid=broker.pid
    )
    before = loadavg()
    record = run_script(cmd, workload.timeout_s + KILL_GRACE_S)
    record.update({"key": workload.key, "broker_name": broker.name, "loadavg_before": before})
    record["cmd"] = " ".join(cmd[1:])
    return record


def brief(workload: Workload, record: Record) -> str:
    """One progress line for a finished run."""
    figures = ", ".join(f"{m.field}={record.get(m.field)}" for m in workload.metrics)
    cpu = record.get("broker_cpu_frac_of_1_core")
    status = "ok" if record.get("ok") else f"FAILED: {record.get('error')}"
    return f"{figures} broker_cpu={cpu} ({record.get('wall_s')}s) {status}"


def run_matrix(
    workloads: list[Workload], brokers: list[Broker], args: argparse.Namespace, out: TextIO
) -> list[Record]:
    """All reps x workloads x brokers, interleaved: the order of the brokers rotates by one
    with every workload and every rep, so that each takes each place in turn. Each record is
    also appended to ``out``."""
    records: list[Record] = []
    common = {"quick": args.quick, "leveret_revision": args.revision}
    width = max(len(b.name) for b in brokers)
    for rep in range(1, args.reps + 1):
        for index, workload in enumerate(workloads):
            # rep r, workload w: the brokers from number (r - 1 + w) on, so that for every
            # workload each broker takes each place in turn over the reps
            shift = (rep - 1 + index) % len(brokers)
            for broker in brokers[shift:] + brokers[:shift]:
                restarted = broker.process is not None and broker.process.ensure_running()
                if restarted and broker.process is not None:
                    broker.url, broker.pid = broker.process.url, broker.process.pid
                record = run_workload(workload, broker, args)
                record.update(common, rep=rep)
                if restarted:
                    record["broker_restarted_before"] = True
                out.write(json.dumps(record) + "\n")
                out.flush()
                records.append(record)
                log(
                    f"[rep {rep}/{args.reps}] {workload.key:<19} {broker.name:<{width}} "
                    + brief(workload, record)
                )
    return records


# --------------------------------------------------------------------------------------------
# Summary table
# --------------------------------------------------------------------------------------------
def median_of(records: list[Record], field: str) -> float | None:
    values = [r[field] for r in records if r.get("ok") and r.get(field) is not None]
    return statistics.median(values) if values else None


def fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def fmt_cpu(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def select(records: list[Record], key: str, broker: str) -> list[Record]:
    return [r for r in records if r["key"] == key and r["broker_name"] == broker]


def fmt_us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def comparisons(brokers: list[Broker]) -> list[tuple[Broker, Broker]]:
    """(Leveret build, peer) pairs for the ratio columns: each build against each of
    RabbitMQ and garagemq that runs."""
    peers = [b for name in PEERS for b in brokers if b.name == name]
    return [(lev, peer) for peer in peers for lev in brokers if lev.is_leveret]


def verdict(workload: Workload, runs: list[Record]) -> str | None:
    """What the table prints instead of a figure: the workload's check label when a run
    failed its check (a broker that misroutes), "failed" when no run succeeded."""
    if workload.check is not None and any(r.get("ok") and workload.check.failed(r) for r in runs):
        return workload.check.label
    if runs and not any(r.get("ok") for r in runs):
        return "failed"
    return None


def median_cpu_us(runs: list[Record], metric: Metric) -> float | None:
    """Median over the ok runs of the broker's CPU µs per unit of ``metric``."""
    values = [cpu_us_per_unit(r, metric) for r in runs if r.get("ok")]
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary_rows(
    records: list[Record], workloads: list[Workload], brokers: list[Broker]
) -> list[list[str]]:
    """Main table: one row per workload metric, medians per broker, the Leveret/peer ratios,
    broker CPU (cores) and broker CPU µs per message (per unit of the metric)."""
    names = [b.name for b in brokers]
    rows = []
    for workload in workloads:
        runs = {name: select(records, workload.key, name) for name in names}
        verdicts = {name: verdict(workload, runs[name]) for name in names}
        for metric in workload.metrics:
            medians = {n: None if verdicts[n] else median_of(runs[n], metric.field) for n in names}
            row = [workload.key, metric.label]
            row += [verdicts[n] or fmt_value(medians[n]) for n in names]
            row += [
                fmt_ratio(medians[lev.name], medians[peer.name])
                for lev, peer in comparisons(brokers)
            ]
            row += [fmt_cpu(median_of(runs[n], "broker_cpu_frac_of_1_core")) for n in names]
            row += ["-" if verdicts[n] else fmt_us(median_cpu_us(runs[n], metric)) for n in names]
            row.append(
                "; ".join(
                    f"{sum(bool(r.get('ok')) for r in runs[n])}/{len(runs[n])}" for n in names
                )
            )
            rows.append(row)
    return rows


def detail_rows(
    records: list[Record], workloads: list[Workload], names: list[str]
) -> list[list[str]]:
    """Spread table: min-max per broker and the harness CPU (near 1.0 = harness-bound)."""
    rows = []
    for workload in workloads:
        for name in names:
            runs = select(records, workload.key, name)
            failed = verdict(workload, runs)
            runs = [r for r in runs if r.get("ok")]
            for metric in workload.metrics:
                values = [r[metric.field] for r in runs if r.get(metric.field) is not None]
                spread = f"{fmt_value(min(values))} - {fmt_value(max(values))}" if values else "-"
                spread = failed or spread
                harness = fmt_cpu(median_of(runs, "harness_cpu_frac_of_1_core"))
                rows.append([workload.key, metric.label, name, spread, str(len(values)), harness])
    return rows


def display_path(path: Path) -> str:
    """``path`` relative to the repo root when it is inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# The block of bench/README.md that `make bench` rewrites: the current figures only (their
# history is in git and in bench/results/).
README = Path(__file__).resolve().parent / "README.md"
README_START = "<!-- make bench: current figures -->"
README_END = "<!-- /make bench -->"


def main_table(records: list[Record], workloads: list[Workload], brokers: list[Broker]) -> str:
    """The summary table: per workload the median figure per broker, the ratios, the CPU."""
    labels = [b.label for b in brokers]
    header = ["workload", "metric", *labels]
    header += [f"{lev.label}/{peer.label}" for lev, peer in comparisons(brokers)]
    header += [f"{label} CPU" for label in labels]
    header += [f"{label} CPU µs/msg" for label in labels]
    header.append(f"runs ok ({'; '.join(labels)})")
    return markdown_table(header, summary_rows(records, workloads, brokers))


def update_readme(path: Path, table: str, args: argparse.Namespace, jsonl: Path) -> None:
    """Replace the block between the markers of ``path`` with ``table`` and its context."""
    text = path.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"bench/run.py: {path} has no '{README_START}' ... '{README_END}' block")
    block = "\n".join(
        [
            README_START,
            f"`make bench` on {time.strftime('%Y-%m-%d', time.gmtime())}, Leveret "
            f"{args.revision}, medians of {args.reps} interleaved runs, {os.cpu_count()} CPUs, "
            f"load average {args.loadavg_start} before; raw results `{display_path(jsonl)}`.",
            "",
            table,
            "",
        ]
    )
    path.write_text(text[:start] + block + text[end:])


def render_markdown(
    records: list[Record],
    workloads: list[Workload],
    brokers: list[Broker],
    args: argparse.Namespace,
    jsonl: Path,
) -> str:
    """The whole ``latest.md``: context, main table, spread table, failures."""
    names = [b.name for b in brokers]
    peers = [b for b in brokers if b.name in PEERS]
    title = " vs ".join(["Leveret", *(b.label for b in peers)])
    parts = [
        f"# {title} (bench/loadgen)",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, Leveret {args.revision}, "
        f"{'QUICK (smoke) mode, ' if args.quick else ''}{args.reps} rep(s), "
        f"{os.cpu_count()} CPUs, load before {args.loadavg_start}",
    ]
    parts += [
        f"- {b.label}: {args.build_info[b.name]} (pid {b.pid})" for b in brokers if b.is_leveret
    ]
    parts += [
        f"- {b.label}: {b.url.split('@')[-1]} (pid {b.pid}){args.peer_info.get(b.name, '')}"
        for b in peers
    ]
    parts += [
        f"- raw results: `{display_path(jsonl)}`",
        "- figures are medians; CPU = broker process-tree CPU seconds / wall seconds "
        "(1.00 = one full core); CPU µs/msg = that CPU share / the rate (for fanout per "
        "delivery)"
        + ("; ratio > 1 means Leveret is faster (for latency: slower)" if peers else ""),
        "",
        main_table(records, workloads, brokers),
        "",
        "Spread (min - max of ok runs) and harness CPU (near 1.00 = the client limits):",
        "",
        markdown_table(
            ["workload", "metric", "broker", "min - max", "n", "harness CPU"],
            detail_rows(records, workloads, names),
        ),
    ]
    troubled = [(b, b.process.tracebacks()) for b in brokers if b.process is not None]
    for broker, count in troubled:
        if count and broker.process is not None:
            log_file = display_path(broker.process.log_path)
            parts += ["", f"**{broker.name} logged {count} tracebacks** (`{log_file}`)."]
    failures = [r for r in records if not r.get("ok")]
    if failures:
        parts += ["", "Failed runs:", ""]
        parts += [
            f"- rep {r['rep']} {r['key']} {r['broker_name']}: {r.get('error')}" for r in failures
        ]
    checks = [
        f"- rep {r['rep']} {r['key']} {r['broker_name']}: {w.check.field} {r.get(w.check.field)}"
        for w in workloads
        if w.check is not None
        for r in records
        if r["key"] == w.key and r.get("ok") and w.check.failed(r)
    ]
    if checks:
        parts += ["", "Failed checks (no figure in the table):", "", *checks]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3; quick 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 rep, small -n")
    parser.add_argument(
        "--extended", action="store_true", help="also run latency, aiopika-noack, aiopika-ack"
    )
    parser.add_argument(
        "--features",
        action="store_true",
        help="also run "
        + ", ".join(workloads_in({"features"}))
        + " (queue features, property-driven paths)",
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=list(WORKLOADS),
        help=f"explicit subset (default: {' '.join(CORE_WORKLOADS)})",
    )
    rabbit = parser.add_mutually_exclusive_group()
    rabbit.add_argument(
        "--rabbitmq",
        metavar="URL",
        help=f"compare with this broker (default: {DEFAULT_RABBITMQ_URL} if beam.smp runs)",
    )
    rabbit.add_argument("--no-rabbitmq", action="store_true", help="no RabbitMQ")
    parser.add_argument("--rabbitmq-pid", type=int, help="RabbitMQ beam.smp PID (CPU accounting)")
    garage = parser.add_mutually_exclusive_group()
    garage.add_argument(
        "--garagemq",
        action="store_true",
        help="start a private garagemq node (default: when garagemq is on PATH); "
        f"fails if it is not installed ({garagemq.INSTALL_HINT})",
    )
    garage.add_argument("--no-garagemq", action="store_true", help="no garagemq")
    parser.add_argument(
        "--leveret-build",
        action="append",
        metavar="NAME=PYTHONPATH_DIR",
        help="a Leveret build to run as broker leveret-NAME, with PYTHONPATH_DIR (a directory "
        "holding the leveret package, e.g. build/compiled; empty: the venv's install) first "
        f"on PYTHONPATH; repeat for several (default: {DEFAULT_BUILD}=)",
    )
    parser.add_argument(
        "--python",
        default=default_python(),
        help="interpreter for Leveret and the scripts (default: the repo's .venv)",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--readme",
        action="store_true",
        help="put the main table into bench/README.md's current figures (make bench)",
    )
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    return args


def selected_workloads(args: argparse.Namespace) -> list[Workload]:
    """--workloads if given, else the core workloads (+ --extended, + --features groups)."""
    groups = {"core"} | {g for g in ("extended", "features") if getattr(args, g)}
    keys = args.workloads or workloads_in(groups)
    return [WORKLOADS[k] for k in keys]


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so the ``finally`` blocks stop the brokers."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def run_all(
    workloads: list[Workload],
    builds: list[tuple[str, str]],
    rabbitmq: Broker | None,
    garage_binary: str | None,
    args: argparse.Namespace,
    jsonl: Path,
) -> tuple[list[Record], list[Broker]]:
    """Start the Leveret builds and garagemq, run the matrix, stop what was started."""
    args.build_info, args.peer_info = {}, {}
    with ExitStack() as stack:
        brokers: list[Broker] = []
        for build, path in builds:
            name = f"{LEVERET}-{build}"
            label = "Leveret" if len(builds) == 1 else f"Leveret {build}"
            log_path = args.results_dir / f"{name}-{jsonl.stem}.log"
            process = stack.enter_context(running(LeveretProcess(args.python, log_path, path)))
            brokers.append(Broker(name, label, process.url, process.pid, process))
            args.build_info[name] = (
                f"build {build}, PYTHONPATH {path or '(unchanged)'}: "
                f"{describe_build(args.python, path)}"
            )
        if rabbitmq is not None:
            brokers.append(rabbitmq)
        if garage_binary is not None:
            log_path = args.results_dir / f"{GARAGEMQ}-{jsonl.stem}.log"
            garage = garagemq.GaragemqProcess(log_path, garage_binary)
            process = stack.enter_context(running(garage))
            brokers.append(Broker(GARAGEMQ, PRETTY[GARAGEMQ], process.url, process.pid, process))
            args.peer_info[GARAGEMQ] = f", Debian package {garagemq.version()}"
        for broker in brokers:
            log(f"broker {broker.name}: {broker.url} pid {broker.pid}")
            if broker.name in args.build_info:
                log(f"  {args.build_info[broker.name]}")
        log(f"workloads: {' '.join(w.key for w in workloads)}; reps {args.reps}; -> {jsonl}")
        with open(jsonl, "w") as out:
            return run_matrix(workloads, brokers, args, out), brokers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_on_sigterm()
    workloads = selected_workloads(args)
    builds = parse_builds(args.leveret_build)
    garage_binary = garagemq_executable(args)
    args.revision = git_revision()
    args.loadavg_start = loadavg()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    jsonl = args.results_dir / f"{stamp}.jsonl"
    rabbitmq = find_rabbitmq(args)
    try:
        records, brokers = run_all(workloads, builds, rabbitmq, garage_binary, args, jsonl)
    except RuntimeError as exc:  # a broker the bench starts did not come up
        print(f"bench/run.py: {exc}", file=sys.stderr)
        return 70
    report = render_markdown(records, workloads, brokers, args, jsonl)
    (args.results_dir / f"{stamp}.md").write_text(report)
    (args.results_dir / "latest.md").write_text(report)
    if args.readme and not args.quick:
        update_readme(README, main_table(records, workloads, brokers), args, jsonl)
    print(report)
    failed = sum(not r.get("ok") for r in records)
    summary = {"jsonl": str(jsonl), "runs": len(records), "failed": failed}
    print(json.dumps(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
