"""Shared by ``run.py`` and ``profile.py``: the workloads and how to run one.

Each workload is one script of the project's load generator (``bench/loadgen/``, plus the
workload scripts in ``bench/`` built on ``loadgen/wire.py``) run in a fresh process from the
repository root; the script prints one JSON object on its last stdout line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
LOADGEN_DIR = BENCH_DIR / "loadgen"


@dataclass(frozen=True)
class Metric:
    """One figure a workload reports (a key of the script's JSON output)."""

    field: str
    label: str
    higher_is_better: bool = True


@dataclass(frozen=True)
class Workload:
    """A load-generator script with fixed arguments, in a full and a ``--quick`` size.

    ``script`` is relative to the repository root (the scripts' working directory, see
    :func:`run_script`), so that the command recorded with a result can be rerun from there.
    ``group``: ``core`` (run by default), ``extended`` (``run.py --extended``) or
    ``features`` (``run.py --features``).
    """

    key: str
    script: str
    args: tuple[str, ...]
    full_size: tuple[str, ...]
    quick_size: tuple[str, ...]
    metrics: tuple[Metric, ...]
    description: str
    timeout_s: float = 120.0
    group: str = "core"

    def command(
        self, python: str, url: str, *, quick: bool, label: str = "", broker_pid: int | None = None
    ) -> list[str]:
        """The argv that runs this workload against ``url``."""
        size = self.quick_size if quick else self.full_size
        cmd = [python, self.script, "--url", url, "--timeout", str(self.timeout_s)]
        if label:
            cmd += ["--label", label]
        if broker_pid is not None:
            cmd += ["--broker-pid", str(broker_pid)]
        return cmd + list(self.args) + list(size)


def repo_relative(path: Path) -> str:
    """``path`` as a workload's ``script``: relative to the repository root."""
    return str(path.relative_to(REPO_ROOT))


MSGS = Metric("msgs_per_s", "msgs/s")
PUBSUB = repo_relative(LOADGEN_DIR / "pubsub.py")
CONFIRMS = repo_relative(LOADGEN_DIR / "confirms.py")
FANOUT = repo_relative(LOADGEN_DIR / "fanout.py")
LATENCY = repo_relative(LOADGEN_DIR / "latency.py")
AIOPIKA_PUBSUB = repo_relative(LOADGEN_DIR / "aiopika_pubsub.py")
# Workloads of their own, in bench/ next to this file, built on loadgen/wire.py.
QUEUE_FEATURES = repo_relative(BENCH_DIR / "queue_features.py")
PERSISTENT_CONFIRMS = repo_relative(BENCH_DIR / "persistent.py")
BACKLOG = repo_relative(BENCH_DIR / "backlog.py")
WORKLOADS: dict[str, Workload] = {
    w.key: w
    for w in [
        Workload(
            "pubsub-noack",
            PUBSUB,
            ("--ack", "none"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "default exchange -> 1 queue -> 1 no-ack consumer, 100-byte transient bodies",
        ),
        Workload(
            "pubsub-ack",
            PUBSUB,
            ("--ack", "single", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as pubsub-noack, manual Basic.Ack per delivery, prefetch 1000",
        ),
        Workload(
            "queue-ttl-dlx",
            QUEUE_FEATURES,
            ("--mode", "ttl-dlx", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as pubsub-ack, queue with x-message-ttl 60 s + fanout DLX -> DLQ (never triggered)",
            group="features",
        ),
        Workload(
            "queue-dead-letter",
            QUEUE_FEATURES,
            ("--mode", "dead-letter", "--prefetch", "1000"),
            ("-n", "100000"),
            ("-n", "10000"),
            (Metric("dead_lettered_per_s", "dead-lettered msgs/s"),),
            "consumer rejects all (requeue=false) -> fanout DLX -> DLQ, no-ack DLQ consumer",
            group="features",
        ),
        Workload(
            "queue-expire",
            QUEUE_FEATURES,
            ("--mode", "expire"),
            ("-n", "100000"),
            ("-n", "10000"),
            (Metric("expired_dead_lettered_per_s", "expired+dead-lettered msgs/s"),),
            "queue x-message-ttl 1 ms, no consumer -> fanout DLX -> DLQ, no-ack DLQ consumer",
            group="features",
        ),
        Workload(
            "queue-stream",
            QUEUE_FEATURES,
            ("--mode", "stream", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as queue-plain, the queue a stream (durable, on disk), read from offset first",
            group="features",
        ),
        Workload(
            "queue-plain",
            QUEUE_FEATURES,
            ("--mode", "plain", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "control for the property-driven rows: as pubsub-ack, in the same script",
            group="features",
        ),
        Workload(
            "queue-priority",
            QUEUE_FEATURES,
            ("--mode", "priority", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as queue-plain, queue x-max-priority 10, every message priority 5",
            group="features",
        ),
        Workload(
            "message-ttl",
            QUEUE_FEATURES,
            ("--mode", "message-ttl", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as queue-plain, every message with expiration 60000 (never triggered)",
            group="features",
        ),
        Workload(
            "headers-exchange",
            QUEUE_FEATURES,
            ("--mode", "headers", "--prefetch", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (MSGS,),
            "as queue-plain, through a headers exchange (x-match all, 2 headers) to the queue",
            group="features",
        ),
        Workload(
            "backlog",
            BACKLOG,
            ("--properties", "pika"),
            ("-n", "1000000"),
            ("-n", "100000"),
            (Metric("rss_per_message_bytes", "broker RSS bytes per queued message", False),),
            "1M 100-byte messages queued without a consumer: broker memory per message",
            timeout_s=300.0,
            group="features",
        ),
        Workload(
            "enqueue",
            BACKLOG,
            ("--properties", "pika", "--settle", "0"),
            ("-n", "200000"),
            ("-n", "20000"),
            (Metric("fill_msgs_per_s", "msgs/s enqueued"),),
            "publish into a queue without consumer, the same properties on every message",
            group="features",
        ),
        Workload(
            "enqueue-message-id",
            BACKLOG,
            ("--properties", "message-id", "--settle", "0"),
            ("-n", "200000"),
            ("-n", "20000"),
            (Metric("fill_msgs_per_s", "msgs/s enqueued"),),
            "as enqueue, every message with its own message_id (aio-pika's default)",
            group="features",
        ),
        Workload(
            "confirms",
            CONFIRMS,
            ("--window", "1000"),
            ("-n", "200000"),
            ("-n", "20000"),
            (Metric("confirmed_msgs_per_s", "confirmed msgs/s"),),
            "publisher confirms, <= 1000 unconfirmed, into a queue without consumer",
        ),
        Workload(
            "confirms-persistent",
            PERSISTENT_CONFIRMS,
            ("--window", "1000"),
            ("-n", "50000"),
            ("-n", "5000"),
            (Metric("confirmed_msgs_per_s", "confirmed msgs/s"),),
            "as confirms, persistent (delivery_mode 2) into a durable queue: confirm after fsync",
        ),
        Workload(
            "fanout",
            FANOUT,
            ("--queues", "10"),
            ("-n", "50000"),
            ("-n", "5000"),
            (Metric("deliveries_per_s", "deliveries/s"),),
            "fanout exchange -> 10 queues, one no-ack consumer connection each",
        ),
        Workload(
            "pubsub-1mb",
            PUBSUB,
            ("--ack", "single", "--prefetch", "100", "--body-size", "1048576"),
            ("-n", "3000"),
            ("-n", "300"),
            (MSGS,),
            "as pubsub-ack with 1 MiB bodies (8 body frames each way at frame_max 131072), "
            "prefetch 100",
            group="extended",
        ),
        Workload(
            "latency",
            LATENCY,
            ("--rate", "5000"),
            ("--seconds", "10"),
            ("--seconds", "3", "--warmup", "0.5"),
            (
                Metric("p50_us", "p50 latency us (lower is better)", higher_is_better=False),
                Metric("p99_us", "p99 latency us (lower is better)", higher_is_better=False),
            ),
            "5000 msgs/s paced publisher, publish-write -> delivery latency, no-ack",
            group="extended",
        ),
        Workload(
            "aiopika-noack",
            AIOPIKA_PUBSUB,
            ("--ack", "none"),
            ("-n", "50000"),
            ("-n", "10000"),
            (MSGS,),
            "pubsub as an aio-pika user writes it (one await per publish), no-ack",
            timeout_s=200.0,
            group="extended",
        ),
        Workload(
            "aiopika-ack",
            AIOPIKA_PUBSUB,
            ("--ack", "single"),
            ("-n", "50000"),
            ("-n", "10000"),
            (MSGS,),
            "as aiopika-noack with manual acks",
            timeout_s=200.0,
            group="extended",
        ),
    ]
}
CORE_WORKLOADS = [k for k, w in WORKLOADS.items() if w.group == "core"]


def workloads_in(groups: set[str]) -> list[str]:
    """Keys of the workloads in ``groups``, in table order."""
    return [k for k, w in WORKLOADS.items() if w.group in groups]


def default_python() -> str:
    """The project's venv interpreter if there is one, else the running interpreter."""
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def accepts_tcp(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if something accepts a TCP connection on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def run_script(cmd: list[str], timeout: float, cwd: Path = REPO_ROOT) -> dict[str, Any]:
    """Run one workload script (from the repository root unless ``cwd``); return its final
    JSON line (plus ``wall_s``).

    Never raises for a failed run: the result then has ``ok: false`` and an ``error``.
    """
    t0 = time.monotonic()
    result: dict[str, Any] | None
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        result = {"ok": False, "error": f"killed after {timeout:.0f}s"}
    else:
        result = parse_last_json(proc.stdout)
        if result is None:
            result = {"ok": False, "error": f"no JSON (rc {proc.returncode}): {proc.stderr[-500:]}"}
        elif proc.returncode != 0 and "error" not in result:
            result["error"] = f"rc {proc.returncode}: {proc.stderr[-300:]}"
    result["wall_s"] = round(time.monotonic() - t0, 2)
    return result


def parse_last_json(stdout: str) -> dict[str, Any] | None:
    """The last stdout line that parses as a JSON object, or None."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None
