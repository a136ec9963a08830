"""Shared by ``run.py``, ``layers.py`` and ``profile.py``: the workloads, how to run one,
and a broker as a child process (:class:`ChildBroker`).

Each workload is one script of the project's load generator (``bench/loadgen/``, plus the
workload scripts in ``bench/`` built on ``loadgen/wire.py``) run in a fresh process from the
repository root; the script prints one JSON object on its last stdout line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

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

    @property
    def is_rate(self) -> bool:
        """A per-second figure: the broker's CPU per unit of it can be derived."""
        return self.field.endswith("_per_s")


@dataclass(frozen=True)
class Check:
    """A correctness verdict a workload script reports next to its figure: when the
    record's ``field`` is not ``ok_value``, the table prints ``label`` instead of a figure
    (e.g. topic's ``routing_check``: a broker that routes wrongly gets no throughput)."""

    field: str
    ok_value: str
    label: str

    def failed(self, record: dict[str, Any]) -> bool:
        value = record.get(self.field)
        return value is not None and value != self.ok_value


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
    check: Check | None = None

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
TOPIC = repo_relative(LOADGEN_DIR / "topic.py")
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
            "topic",
            TOPIC,
            ("--bindings", "10000", "--queues", "100"),
            ("-n", "50000"),
            ("-n", "10000", "--max-seconds", "5"),
            (Metric("publish_msgs_per_s", "routed msgs/s"),),
            "topic exchange, 10k bindings over 100 queues (bench/topicwords.py's mix), no "
            "consumer; queue depths checked against a reference matcher",
            timeout_s=180.0,
            check=Check("routing_check", "ok", "wrong routes"),
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


def cpu_us_per_unit(record: dict[str, Any], metric: Metric) -> float | None:
    """The broker's CPU microseconds per unit of a rate metric (per message; per delivery
    for fanout): its CPU share of one core over the measured interval divided by the rate
    over (about) the same interval. None when the run recorded no broker CPU."""
    frac, rate = record.get("broker_cpu_frac_of_1_core"), record.get(metric.field)
    if not metric.is_rate or frac is None or not rate:
        return None
    return float(frac) * 1e6 / float(rate)


class ChildBroker:
    """A broker as a child process of the bench on a free port, with a scratch directory of
    its own (created empty at each start, removed at stop); restartable if it dies.

    Subclasses say how to launch it (:meth:`command`, :meth:`environment`,
    :meth:`prepare`); this class owns the life cycle, so that Leveret and garagemq are
    started, watched and stopped the same way.
    """

    kind = "broker"

    def __init__(self, log_path: Path, startup_timeout: float = 20.0) -> None:
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: TextIO | None = None
        self.scratch: Path | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def prepare(self, scratch: Path) -> None:
        """Write what the broker needs into its fresh scratch directory (a config file)."""

    def command(self, scratch: Path) -> list[str]:
        """The argv that starts the broker."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The broker's environment (None: the bench's own)."""
        return None

    def start(self) -> None:
        """Launch the broker in a fresh scratch directory and wait until its port accepts
        TCP."""
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{self.kind}-bench-"))
        self.prepare(self.scratch)
        self.proc = subprocess.Popen(
            self.command(self.scratch),
            cwd=REPO_ROOT,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self.startup_timeout
        while not accepts_tcp("127.0.0.1", self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} exited with {self.proc.returncode}; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.kind} did not listen within {self.startup_timeout}s")
            time.sleep(0.05)

    def ensure_running(self) -> bool:
        """Restart the broker if it died; returns True if a restart was needed."""
        if self.proc is not None and self.proc.poll() is None:
            return False
        print(
            f"{self.kind} is not running (rc {self.proc and self.proc.returncode}); restarting",
            file=sys.stderr,
            flush=True,
        )
        self.stop()
        self.start()
        return True

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; remove the scratch directory."""
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
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    # Parts of log lines a broker writes at every start whatever happens (kept logs are for
    # errors).
    noise: tuple[str, ...] = ()

    def tracebacks(self) -> int:
        """Python tracebacks in the broker's log: a broker that raised while measured (a
        callback failing on every message, say) gives figures not worth quoting."""
        try:
            return self.log_path.read_text(errors="replace").count("Traceback (most recent")
        except OSError:
            return 0

    def close_log(self) -> None:
        """Remove the log file if the broker wrote nothing but noise to it (no clutter)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return
        if all(any(n in line for n in self.noise) for line in lines if line.strip()):
            self.log_path.unlink()


class LeveretProcess(ChildBroker):
    """``python -m leveret serve`` with a temporary ``--data-dir``; ``pythonpath`` (a
    directory holding a built copy of the ``leveret`` package, e.g. ``build/compiled``)
    goes first on PYTHONPATH, so that build is the one that runs."""

    kind = "leveret"

    def __init__(self, python: str, log_path: Path, pythonpath: str = "") -> None:
        super().__init__(log_path)
        self.python = python
        self.pythonpath = pythonpath

    def command(self, scratch: Path) -> list[str]:
        cmd = [self.python, "-m", "leveret", "serve", "--port", str(self.port)]
        # never collide on 15672/15692
        cmd += ["--management-port", "-1", "--prometheus-port", "-1"]
        return [*cmd, "--data-dir", str(scratch), "--log-level", "warning"]

    def environment(self) -> dict[str, str] | None:
        return build_environment(self.pythonpath)


def build_environment(pythonpath: str) -> dict[str, str] | None:
    """The environment that runs the ``leveret`` package in ``pythonpath`` (None: as is)."""
    if not pythonpath:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    return env


def describe_build(python: str, pythonpath: str) -> str:
    """Which ``leveret`` a build runs: its ``__init__`` path and how many of its modules are
    C extensions (``.so``), asked of the interpreter with the build's environment."""
    probe = (
        "import leveret, pathlib; root = pathlib.Path(leveret.__file__).parent; "
        "print(leveret.__file__, len(list(root.rglob('*.so'))))"
    )
    try:
        out = subprocess.run(
            [python, "-c", probe],
            cwd=REPO_ROOT,
            env=build_environment(pythonpath),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    if out.returncode != 0:
        return f"import failed: {out.stderr.strip().splitlines()[-1:]}"
    path, so_count = out.stdout.split()
    return f"{path}, {so_count} .so"
