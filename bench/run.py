#!/usr/bin/env python3
"""Benchmark Leveret against RabbitMQ with the project's load generator (``bench/loadgen/``);
write JSONL + a markdown table.

Starts Leveret (``python -m leveret serve``) on a free port, uses a RabbitMQ node if one is
found (or given), and runs each workload against each broker, interleaved (rep 1: A then B,
rep 2: B then A, ...), every run a fresh load-generator process with the broker's PID so
its CPU is recorded. Raw results go to ``bench/results/<timestamp>.jsonl``; the summary table
(medians, Leveret/RabbitMQ ratio, broker CPU) is printed and written to
``bench/results/latest.md``.

  .venv/bin/python bench/run.py --quick            # smoke run: 1 rep, small -n
  .venv/bin/python bench/run.py                    # 3 reps of the core workloads
  .venv/bin/python bench/run.py --extended         # + latency and aio-pika workloads
  .venv/bin/python bench/run.py --features         # + queue features (TTL, DLX, priority, headers)
  .venv/bin/python bench/run.py --no-rabbitmq      # Leveret only
  .venv/bin/python bench/run.py --rabbitmq amqp://guest:guest@127.0.0.1:5691/ --rabbitmq-pid N
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from workloads import (
    CORE_WORKLOADS,
    REPO_ROOT,
    RESULTS_DIR,
    WORKLOADS,
    Workload,
    accepts_tcp,
    default_python,
    free_port,
    run_script,
    workloads_in,
)

LEVERET = "leveret"
RABBITMQ = "rabbitmq"
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
# A workload script gets --timeout T; the process is killed after T + this grace.
KILL_GRACE_S = 30.0
Record = dict[str, Any]


@dataclass
class Broker:
    """A broker under test: a name for the table, its URL, its PID for CPU accounting."""

    name: str
    url: str
    pid: int | None


# --------------------------------------------------------------------------------------------
# Leveret subprocess
# --------------------------------------------------------------------------------------------
class LeveretProcess:
    """Leveret as a child process on a free port; restartable if it dies mid-run."""

    def __init__(self, python: str, log_path: Path, startup_timeout: float = 20.0) -> None:
        self.python = python
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: TextIO | None = None
        # A fresh --data-dir per start (durable workloads need one), removed in stop().
        self.data_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self) -> None:
        """Launch ``python -m leveret serve`` with a temporary ``--data-dir`` and wait until
        the port accepts TCP."""
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()
        self.data_dir = Path(tempfile.mkdtemp(prefix="leveret-bench-"))
        cmd = [self.python, "-m", "leveret", "serve", "--port", str(self.port)]
        cmd += [
            "--management-port",
            "-1",
            "--prometheus-port",
            "-1",
        ]  # never collide on 15672/15692
        cmd += ["--data-dir", str(self.data_dir), "--log-level", "warning"]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + self.startup_timeout
        while not accepts_tcp("127.0.0.1", self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Leveret exited with {self.proc.returncode}; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Leveret did not listen within {self.startup_timeout}s")
            time.sleep(0.05)

    def ensure_running(self) -> bool:
        """Restart Leveret if it died; returns True if a restart was needed."""
        if self.proc is not None and self.proc.poll() is None:
            return False
        log(f"Leveret is not running (rc {self.proc and self.proc.returncode}); restarting")
        self.stop()
        self.start()
        return True

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; remove the data dir."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


@contextmanager
def running_leveret(python: str, log_path: Path) -> Iterator[LeveretProcess]:
    """Start Leveret for the duration of the block; always stop it afterwards."""
    leveret = LeveretProcess(python, log_path)
    try:
        leveret.start()
        yield leveret
    finally:
        leveret.stop()
        if log_path.exists() and log_path.stat().st_size == 0:
            log_path.unlink()  # nothing logged at warning level: no clutter


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
    return Broker(RABBITMQ, url, pid)


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
    workloads: list[Workload],
    brokers: list[Broker],
    leveret: LeveretProcess,
    args: argparse.Namespace,
    out: TextIO,
) -> list[Record]:
    """All reps x workloads x brokers, interleaved; each record is also appended to ``out``."""
    records: list[Record] = []
    common = {"quick": args.quick, "leveret_revision": args.revision}
    for rep in range(1, args.reps + 1):
        order = brokers if rep % 2 == 1 else list(reversed(brokers))
        for workload in workloads:
            for broker in order:
                restarted = broker.name == LEVERET and leveret.ensure_running()
                if restarted:
                    broker.url, broker.pid = leveret.url, leveret.pid
                record = run_workload(workload, broker, args)
                record.update(common, rep=rep)
                if restarted:
                    record["leveret_restarted_before"] = True
                out.write(json.dumps(record) + "\n")
                out.flush()
                records.append(record)
                log(
                    f"[rep {rep}/{args.reps}] {workload.key:<17} {broker.name:<9} "
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


def summary_rows(
    records: list[Record], workloads: list[Workload], names: list[str]
) -> list[list[str]]:
    """Main table: one row per workload metric, medians per broker, ratio, broker CPU."""
    rows = []
    for workload in workloads:
        runs = {name: select(records, workload.key, name) for name in names}
        for metric in workload.metrics:
            medians = {name: median_of(runs[name], metric.field) for name in names}
            row = [workload.key, metric.label] + [fmt_value(medians[n]) for n in names]
            if RABBITMQ in names:
                row.append(fmt_ratio(medians[LEVERET], medians[RABBITMQ]))
            row += [fmt_cpu(median_of(runs[n], "broker_cpu_frac_of_1_core")) for n in names]
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
            runs = [r for r in select(records, workload.key, name) if r.get("ok")]
            for metric in workload.metrics:
                values = [r[metric.field] for r in runs if r.get(metric.field) is not None]
                spread = f"{fmt_value(min(values))} - {fmt_value(max(values))}" if values else "-"
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
    """The summary table: per workload the median figure per broker, the ratio, the CPU."""
    names = [b.name for b in brokers]
    pretty = {LEVERET: "Leveret", RABBITMQ: "RabbitMQ"}
    header = ["workload", "metric"] + [pretty[n] for n in names]
    if RABBITMQ in names:
        header.append("Leveret/RabbitMQ")
    header += [f"{pretty[n]} CPU" for n in names]
    header.append(f"runs ok ({'; '.join(pretty[n] for n in names)})")
    return markdown_table(header, summary_rows(records, workloads, names))


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
    rabbit = next((b for b in brokers if b.name == RABBITMQ), None)
    parts = [
        f"# Leveret{' vs RabbitMQ' if rabbit else ''} (bench/loadgen)",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, Leveret {args.revision}, "
        f"{'QUICK (smoke) mode, ' if args.quick else ''}{args.reps} rep(s), "
        f"{os.cpu_count()} CPUs, load before {args.loadavg_start}",
        f"- RabbitMQ: {rabbit.url.split('@')[-1] + f' (pid {rabbit.pid})' if rabbit else 'none'}",
        f"- raw results: `{display_path(jsonl)}`",
        "- figures are medians; CPU = broker process-tree CPU seconds / wall seconds "
        "(1.00 = one full core)"
        + ("; ratio > 1 means Leveret is faster (for latency: slower)" if rabbit else ""),
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
    failures = [r for r in records if not r.get("ok")]
    if failures:
        parts += ["", "Failed runs:", ""]
        parts += [
            f"- rep {r['rep']} {r['key']} {r['broker_name']}: {r.get('error')}" for r in failures
        ]
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
    rabbit.add_argument("--no-rabbitmq", action="store_true", help="Leveret only")
    parser.add_argument("--rabbitmq-pid", type=int, help="RabbitMQ beam.smp PID (CPU accounting)")
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
    """Turn SIGTERM into SystemExit so the ``finally`` blocks stop Leveret."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_on_sigterm()
    workloads = selected_workloads(args)
    args.revision = git_revision()
    args.loadavg_start = loadavg()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    jsonl = args.results_dir / f"{stamp}.jsonl"
    rabbitmq = find_rabbitmq(args)
    with running_leveret(args.python, args.results_dir / f"leveret-{stamp}.log") as leveret:
        brokers = [Broker(LEVERET, leveret.url, leveret.pid)]
        if rabbitmq is not None:
            brokers.append(rabbitmq)
        log(f"brokers: {', '.join(f'{b.name} {b.url} pid {b.pid}' for b in brokers)}")
        log(f"workloads: {' '.join(w.key for w in workloads)}; reps {args.reps}; -> {jsonl}")
        with open(jsonl, "w") as out:
            records = run_matrix(workloads, brokers, leveret, args, out)
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
