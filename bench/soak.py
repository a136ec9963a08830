#!/usr/bin/env python3
"""Soak test: everything at once, bounded in time, against a broker killed -9 at random.

    .venv/bin/python bench/soak.py                  # 180 s (plus start, final restart, drain)
    .venv/bin/python bench/soak.py --quick          # 30 s, kills every 8-14 s
    .venv/bin/python bench/soak.py --seconds 600 --watermark 128MiB --seed 7 --keep-data

Leveret runs as a subprocess (``python -m leveret serve --port P --management-port -1
--data-dir DIR --memory-high-watermark SIZE --log-level warning``) on one free port and one
data directory for the whole run. It runs a copy of the source taken at the start
(``broker/``, ``storage/``, ``exchanges/``, ``pipeline/`` laid out as the ``leveret``
namespace, first on PYTHONPATH), so that every restart runs the same code while others edit
the working tree; ``--no-snapshot`` runs the installed (editable) ``leveret`` instead. The
JSON records the git HEAD, the changed files and a hash of their diff (``source``).
For ``--seconds`` these run together in this one process (uvloop, raw frames through
``bench/loadgen/wire.py``):

* publishers (``--publishers``): publisher confirms, persistent messages (``--body-size``,
  the first 8 bytes a unique id) into ``--queues`` durable queues, paced at
  ``--publish-rate`` in all with at most ``--window`` unconfirmed each; every id the
  broker confirms (Basic.Ack, single or multiple) is recorded; ``--big-fraction`` of the
  messages carry a ``--big-headers`` bytes headers table (about 10 KB, 200 entries);
* slow consumers (``--consumers``) on every durable queue: the first with prefetch 0
  (unlimited), the others ``--prefetch``; each acks only ``--ack-rate`` messages/s (oldest
  first, one Basic.Ack multiple per tick) and stops reading its socket while more than
  ``--max-unacked`` deliveries wait for their ack, so messages pile up in the queues and
  in the broker's write buffers;
* hostile connections (``--hostile`` workers, each a new connection after the last one
  ended, every ``--hostile-pause`` s): frame headers announcing a 4 GiB / 2 GiB payload
  sent alone (before and after the handshake), a 64 MiB frame header followed by 2 MiB of
  payload, random bytes after the protocol header, 10 publishes with a 120 KB headers
  table, a headers table nested 10,000 deep, an array nested 15,000 deep, queue.declare
  arguments nested 10,000 deep, 3 x 300 channels opened and closed pipelined; each waits
  (at most 5 s) until the broker closes it, or after the publishes and tables sends a
  round trip (``accepted`` if answered), and records the outcome (reply code, ``held
  open``, ``blocked by the memory alarm``);
* the fair client: every 10-20 ms, one publish (transient, 100 bytes) to its own exclusive
  queue and the delivery to its own no-ack consumer (``fair``), and on a second connection
  that never publishes, a queue.declare passive round trip (``fair_rpc``): latency
  percentiles;
* the killer: SIGKILL of the broker every ``--kill-min``..``--kill-max`` s (none in the last
  5 s), then a restart on the same port and data dir; every client reconnects by itself.

Then: publishers stop and wait up to ``--settle`` s for their last confirms, every client
closes, the broker gets a final SIGKILL and a restart, and every durable queue is drained.

Figures (one JSON line, last on stdout, also written to ``bench/results/soak-<ts>.json``,
after a human summary):

* ``confirmed``: messages the broker confirmed; ``lost``: confirmed ids that no consumer
  ever received and the final drain did not find (must be 0); ``lost_strict``: confirmed
  ids never acked by a consumer and not found by the drain (must be 0 too: a delivery
  that was not acked must come back); ``duplicates``: deliveries of an id already received
  (allowed after a kill: unacked messages, and acks not yet on disk, come back);
  ``phantoms``: ids received that were never published (must be 0);
* ``rss_max_bytes`` (VmRSS of the broker, sampled every 0.25 s) and ``hwm_max_bytes``
  (VmHWM, read before each kill and at the end: the peak between samples) against
  ``watermark_bytes``, the broker's RSS idle (``rss_idle_bytes``), ``memory_alarm_s``
  (time some publishing connection was blocked: Connection.Blocked .. Unblocked);
* ``fair`` / ``fair_rpc``: samples, p50 / p99 / p99.9 / max ms. A sample is dropped when
  its round trip overlaps a down window (from the SIGKILL until the restarted broker
  accepts TCP again) or when its connection died under it (the kill); ``fair`` samples
  during which its connection was blocked by the memory alarm (Connection.Blocked ..
  Unblocked) are dropped too and counted (``excluded_blocked``): a blocked publisher
  waiting is RabbitMQ's behaviour, not a stall. A round trip that takes more than
  ``--probe-timeout`` s is kept as that many seconds (``timeouts``), one still waiting
  when the load phase ends as what it waited (``cut_at_end``). The probe is closed-loop
  (one round trip at a time): a 5 s stall is one 5 s sample;
* ``kills`` (random SIGKILL restarts, each in ``kill_log`` with the next message id then,
  to place lost ids), ``restart_s`` (SIGKILL -> accepting TCP),
  ``unexpected_exits`` (the broker died by itself), ``hostile_connections`` and the
  outcome of each attack, the broker's and this harness's CPU (1.0 = one core), how late
  this harness's own event loop woke up (``harness_loop_lag_ms``: its share of a fair
  round trip) and the machine's load average every 10 s (other jobs share the cores).

Exit status 1 when a confirmed message is lost, a phantom was received or the harness
failed; the data dir, the source snapshot and the broker log are then kept (``kept``,
``broker_log`` in the JSON). Message ``id`` went to queue ``soak.d{id % --queues}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import wire
from pamqp import commands, frame, header

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

_FRAME_HEADER = struct.Struct(">BHI")
_ID = struct.Struct(">Q")
_CONTENT_HEAD = struct.Struct(">HHQH")  # class, weight, body size, property flags
HEADERS_FLAG = 0x2000
_SIZE_UNITS = {
    "": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
}


def parse_size(text: str) -> int:
    """``64MiB`` -> bytes (RabbitMQ's units: k/M/G powers of 1000, Ki/Mi/Gi of 1024)."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 67108864, 64MiB, 100MB)")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def raw_frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(kind, channel, len(payload)) + payload + b"\xce"


def now() -> float:
    return time.monotonic()


# ------------------------------------------------------------------------------------------
# the broker process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes ({} when it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return out


def proc_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The repository's folders and where they sit in the ``leveret`` namespace (pyproject.toml).
PACKAGES = {
    "broker": "leveret",
    "exchanges": "leveret/exchanges",
    "storage": "leveret/storage",
    "pipeline": "leveret/pipeline",
}


def snapshot_source(dest: Path) -> Path:
    """Copy the broker's source as it is now into ``dest/leveret``: every restart of the
    run then runs the same code, although other people edit the working tree meanwhile
    (the editable install would load whatever is on disk at each restart)."""
    for folder, target in PACKAGES.items():
        shutil.copytree(
            REPO / folder,
            dest / target,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )
    return dest


def source_state() -> dict[str, Any]:
    """The git revision and the uncommitted changes to the broker's source (read-only)."""

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=REPO, capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout

    folders = list(PACKAGES)
    diff = git("diff", "HEAD", "--", *folders)
    return {
        "head": git("rev-parse", "--short", "HEAD").strip(),
        "changed_files": git("status", "--porcelain", "--", *folders).split("\n")[:-1],
        "diff_sha1": hashlib.sha1(diff.encode()).hexdigest()[:12] if diff else None,
    }


def _load_prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not Linux
        return None


_PRCTL = _load_prctl()
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the broker's child process before exec: SIGKILL it when the harness dies, even
    by SIGKILL, so that no broker outlives its soak (Linux; nothing elsewhere)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


class Broker:
    """The broker subprocess, its down windows, its memory and CPU."""

    def __init__(
        self, args: argparse.Namespace, data_dir: Path, log_path: Path, source: Path | None
    ) -> None:
        self.args = args
        self.source = source  # a snapshot of the source to run (None: the installed leveret)
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = asyncio.Event()
        self.down_since: float | None = now()
        self.down_windows: list[tuple[float, float]] = []
        self.restart_s: list[float] = []
        self.kills = 0
        self.unexpected_exits: list[dict[str, Any]] = []
        self.killing = False
        self.lock = asyncio.Lock()  # one kill or restart at a time
        self.rss_max = 0
        self.hwm_max = 0
        self.rss_samples: list[tuple[float, int]] = []
        self.rss_idle = 0  # at the first start, before any client
        self.cpu_done = 0.0  # CPU seconds of the broker processes that are gone
        self.cpu_current = 0.0
        self.starts = 0

    def cmd(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            str(self.port),
            "--management-port",
            "-1",
            "--prometheus-port",
            "-1",
            "--data-dir",
            str(self.data_dir),
            "--memory-high-watermark",
            str(self.args.watermark),
            "--log-level",
            "warning",
        ]

    def _spawn(self, attempt: int) -> subprocess.Popen[bytes]:
        with open(self.log_path, "a") as log:
            log.write(f"--- start {self.starts} (attempt {attempt}) at {time.ctime()} ---\n")
            log.flush()
            env = dict(os.environ)
            if self.source is not None:  # ahead of the editable install's finder
                env["PYTHONPATH"] = os.pathsep.join(
                    [str(self.source), *filter(None, [env.get("PYTHONPATH")])]
                )
            proc = subprocess.Popen(
                self.cmd(),
                cwd=self.source or REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C of the harness is not the broker's
                preexec_fn=_die_with_parent,
            )
        self.starts += 1
        self.cpu_current = 0.0
        return proc

    async def start(self, within: float = 120.0) -> float:
        """Spawn and wait until it accepts TCP (it listens once recovery is done); a broker
        that exits or does not listen is tried again (3 times), then RuntimeError."""
        for attempt in range(3):
            began = now()
            self.proc = self._spawn(attempt)
            while now() - began < within:
                if self.proc.poll() is not None:
                    break
                if await accepts_tcp(self.port):
                    took = now() - began
                    if self.down_since is not None:
                        self.down_windows.append((self.down_since, now()))
                    self.down_since = None
                    self.up.set()
                    return took
                await asyncio.sleep(0.02)
            self._reap(kill=True)
            await asyncio.sleep(1.0)
        raise RuntimeError(f"the broker did not start: {self.log_tail()}")

    def _reap(self, kill: bool) -> None:
        if self.proc is None:
            return
        if kill and self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self.cpu_done += self.cpu_current
        self.cpu_current = 0.0

    def sample(self) -> None:
        """One memory and CPU sample of the live broker."""
        if self.proc is None or self.proc.poll() is not None:
            return
        status = proc_status(self.proc.pid)
        rss, hwm = status.get("VmRSS", 0), status.get("VmHWM", 0)
        self.rss_max = max(self.rss_max, rss)
        self.hwm_max = max(self.hwm_max, hwm)
        if rss:
            self.rss_samples.append((now(), rss))
        cpu = proc_cpu_s(self.proc.pid)
        if cpu is not None:
            self.cpu_current = cpu

    async def kill(self) -> float:
        """SIGKILL, then restart on the same port and dir; returns the seconds it was down."""
        async with self.lock:
            return await self._kill()

    async def _kill(self) -> float:
        self.killing = True
        try:
            self.sample()  # VmHWM: the peak of this broker's whole life
            self.up.clear()
            self.down_since = t0 = now()
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(self._reap, False)
            else:
                self._reap(kill=False)
            await self.start()
            took = now() - t0
            self.restart_s.append(took)
            return took
        finally:
            self.killing = False

    async def watch(self, stop: asyncio.Event) -> None:
        """Sample memory every 0.25 s; restart a broker that died by itself."""
        while not stop.is_set():
            if not self.killing and self.proc is not None and self.proc.poll() is not None:
                self.up.clear()
                self.down_since = now()
                self.unexpected_exits.append(
                    {"returncode": self.proc.returncode, "log_tail": self.log_tail(600)}
                )
                print(f"soak: broker exited by itself ({self.proc.returncode})", file=sys.stderr)
                self._reap(kill=False)
                async with self.lock:
                    self.killing = True
                    try:
                        await self.start()
                    except RuntimeError as exc:
                        print(f"soak: {exc}", file=sys.stderr)
                    finally:
                        self.killing = False
            self.sample()
            await asyncio.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.sample()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reap(kill=True)
        self.up.clear()

    def down_at(self, t0: float, t1: float) -> bool:
        """Does [t0, t1] overlap a down window (SIGKILL .. accepting TCP again)?"""
        if self.down_since is not None and t1 > self.down_since:
            return True
        return any(t0 < up and t1 > down for down, up in self.down_windows)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


async def accepts_tcp(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.5)
    except (OSError, TimeoutError):
        return False
    writer.transport.abort()
    return True


# ------------------------------------------------------------------------------------------
# clients


# (Connection.Blocked, Connection.Unblocked or the connection's end, which of the two) of
# every connection
BLOCKED: list[tuple[float, float, str]] = []


def merged(intervals: list[tuple[float, float, str]]) -> list[list[Any]]:
    """Overlapping intervals merged: [start, end, how the last of them ended]."""
    out: list[list[Any]] = []
    for start, stop, how in sorted(intervals):
        if out and start <= out[-1][1]:
            if stop >= out[-1][1]:
                out[-1][1:] = [stop, how]
        else:
            out.append([start, stop, how])
    return out


def union_s(intervals: list[tuple[float, float, str]]) -> float:
    """Seconds covered by at least one of ``intervals``."""
    return sum(stop - start for start, stop, _ in merged(intervals))


class Conn(wire.Connection):
    """wire.Connection that remembers when the broker blocked it (memory alarm) and
    tolerates Basic.Get-Ok content."""

    on_blocked: Callable[[], None] | None = None  # any connection got Connection.Blocked

    def __init__(self, url: wire.Url, name: str, frame_max: int) -> None:
        super().__init__(url, name, frame_max)
        self.blocked_at: float | None = None
        self.unblocked_at: float | None = None
        self.blocked_s = 0.0
        self.on_lost: Callable[[], None] | None = None  # wakes whoever waits on this socket

    def connection_lost(self, exc: Exception | None) -> None:
        if self.blocked_at is not None:
            BLOCKED.append((self.blocked_at, now(), "connection lost"))
        super().connection_lost(exc)
        if self.on_lost is not None:
            self.on_lost()

    def _on_method(self, channel: int, method: Any) -> None:
        if method.name == "Connection.Blocked" and self.blocked_at is None:
            self.blocked_at = now()
            if Conn.on_blocked is not None:
                Conn.on_blocked()
        elif method.name == "Connection.Unblocked" and self.blocked_at is not None:
            self.unblocked_at = now()
            self.blocked_s += self.unblocked_at - self.blocked_at
            BLOCKED.append((self.blocked_at, self.unblocked_at, "unblocked"))
            self.blocked_at = None
        elif method.name == "Basic.GetOk":
            self._content[channel] = [-1, -1, None]  # content skipped, like a Return
        super()._on_method(channel, method)

    def blocked_during(self, t0: float) -> bool:
        return self.blocked_at is not None or (
            self.unblocked_at is not None and self.unblocked_at >= t0
        )

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._closing = True
            self.transport.abort()


async def connect(url: str, name: str, wait_s: float = 5.0) -> Conn:
    parsed = wire.parse_url(url)
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(
        loop.create_connection(lambda: Conn(parsed, name, 131072), parsed.host, parsed.port),
        wait_s,
    )
    try:
        await asyncio.wait_for(conn.opened, wait_s)
    except BaseException:
        conn.abort()
        raise
    return conn


def error_text(exc: BaseException) -> str:
    """A short, countable description: the reply code if the broker sent one."""
    text = str(exc)
    match = re.search(r"broker: (\d+) ([A-Z_]+)", text)
    if match:
        return f"{match.group(1)} {match.group(2)}"
    if isinstance(exc, wire.AMQPError) or (isinstance(exc, TimeoutError) and text):
        return f"{type(exc).__name__} {text[:60]}"
    return type(exc).__name__


@dataclass
class Sample:
    t0: float
    t1: float
    blocked: bool = False  # the connection was blocked by the memory alarm meanwhile
    timeout: bool = False  # no reply within --probe-timeout: t1 - t0 is that timeout
    cut: bool = False  # still waiting when the run ended: t1 is the end


@dataclass
class Stats:
    published: int = 0  # publishes written to a socket
    confirmed: set[int] = field(default_factory=set)
    nacked: int = 0
    unconfirmed_at_loss: int = 0  # in flight when a publisher's connection died
    unconfirmed_at_end: int = 0
    seen: set[int] = field(default_factory=set)  # received by a consumer or the drain
    acked: set[int] = field(default_factory=set)  # a consumer wrote the ack
    deliveries: int = 0
    duplicates: int = 0
    duplicate_ids: set[int] = field(default_factory=set)
    phantoms: int = 0
    drained: int = 0
    drained_ids: set[int] = field(default_factory=set)
    drain_left: int = 0
    drain_s: float = 0.0
    publisher_blocked_s: float = 0.0
    client_errors: Counter[str] = field(default_factory=Counter)
    hostile_connections: int = 0
    hostile_connect_failed: int = 0
    hostile_outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    fair: list[Sample] = field(default_factory=list)
    fair_rpc: list[Sample] = field(default_factory=list)
    fair_aborted: int = 0
    held_at_first_alarm: int | None = None
    fair_rpc_aborted: int = 0


class Soak:
    def __init__(self, args: argparse.Namespace, broker: Broker) -> None:
        self.args = args
        self.broker = broker
        self.stats = Stats()
        self.stop = asyncio.Event()  # the load phase is over
        self.next_id = 1
        self.rng = random.Random(args.seed)
        self.queues = [f"soak.d{i}" for i in range(args.queues)]
        self.started = now()
        # per kill: when (s into the run), the next message id then (ids below it were
        # published before it), confirmed so far, the broker's last RSS, how long it was down
        self.kill_log: list[dict[str, Any]] = []
        # the machine's 1-minute load average every 10 s: other jobs share the 2 cores
        self.loadavg: list[float] = [round(os.getloadavg()[0], 2)]
        self._prepare_messages()
        Conn.on_blocked = self._on_blocked

    def _on_blocked(self) -> None:
        if self.stats.held_at_first_alarm is None:
            self.stats.held_at_first_alarm = round(self.held_bytes_estimate())

    # ---- message layouts, encoded once ----------------------------------------------------
    def _prepare_messages(self) -> None:
        args = self.args
        persistent = commands.Basic.Properties(delivery_mode=2, content_type="application/x")
        entries = max(1, args.big_headers // 50)  # ~50 bytes an entry
        big = commands.Basic.Properties(
            delivery_mode=2,
            headers={f"x-soak-{i:05d}": "v" * 34 for i in range(entries)},
        )
        self.method_frames = [
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=q), 1)
            for q in self.queues
        ]
        self.header_plain = raw_frame(
            2, 1, header.ContentHeader(0, args.body_size, persistent).marshal()
        )
        self.header_big = raw_frame(2, 1, header.ContentHeader(0, args.body_size, big).marshal())
        self.body_pad = b"s" * (args.body_size - _ID.size)
        self.body_head = _FRAME_HEADER.pack(3, 1, args.body_size)

    def held_bytes_estimate(self) -> float:
        """Bytes of the messages the broker holds, roughly: (published - acked) times the
        mean body + properties size (messages lost to a kill unconfirmed are counted)."""
        mean = (
            len(self.header_plain) * (1 - self.args.big_fraction)
            + len(self.header_big) * self.args.big_fraction
            + self.args.body_size
        )
        return (self.stats.published - len(self.stats.acked)) * mean

    def encode(self, msg_id: int) -> bytes:
        queue = msg_id % len(self.queues)
        big = self.rng.random() < self.args.big_fraction
        return b"".join(
            (
                self.method_frames[queue],
                self.header_big if big else self.header_plain,
                self.body_head,
                _ID.pack(msg_id),
                self.body_pad,
                b"\xce",
            )
        )

    # ---- helpers ---------------------------------------------------------------------------
    async def wait_up(self) -> bool:
        """Wait until the broker accepts connections; False if the run is over."""
        while not self.broker.up.is_set():
            if self.stop.is_set():
                return False
            await asyncio.sleep(0.05)
        return not self.stop.is_set()

    async def declare_queues(self, conn: Conn) -> None:
        for q in self.queues:
            await conn.rpc(1, commands.Queue.Declare(queue=q, durable=True), 15)

    def received(self, msg_id: int) -> None:
        s = self.stats
        s.deliveries += 1
        if msg_id in s.seen:
            s.duplicates += 1
            s.duplicate_ids.add(msg_id)
        else:
            s.seen.add(msg_id)
        if not 0 < msg_id < self.next_id:
            s.phantoms += 1

    def _error(self, role: str, exc: BaseException) -> None:
        self.stats.client_errors[f"{role}: {error_text(exc)}"] += 1

    async def _backoff(self) -> None:
        await asyncio.sleep(0.1 + 0.2 * self.rng.random())

    # ---- publishers -------------------------------------------------------------------------
    async def publisher(self, index: int) -> None:
        while await self.wait_up():
            if not await self._publish_session(index):
                await self._backoff()

    async def _publish_session(self, index: int) -> bool:
        """One publisher connection, until the run ends (True) or it fails (False)."""
        args, s = self.args, self.stats
        rate = args.publish_rate / args.publishers
        pending: dict[int, int] = {}  # delivery tag -> message id
        order: deque[int] = deque()  # the tags in pending, oldest first (lazily trimmed)
        wake = asyncio.Event()

        def on_confirm(tag: int, multiple: bool, nack: bool) -> None:
            done: list[int] = []
            if multiple:
                while order and order[0] <= tag:
                    oldest = order.popleft()
                    if oldest in pending:
                        done.append(pending.pop(oldest))
            elif tag in pending:
                done.append(pending.pop(tag))
            while order and order[0] not in pending:
                order.popleft()
            if nack:
                s.nacked += len(done)
            else:
                s.confirmed.update(done)
            wake.set()

        async def wait_wake() -> None:
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 0.5)

        conn: Conn | None = None
        stage = "connect"
        try:
            conn = await connect(self.broker.url, f"soak-publisher-{index}")
            stage = "setup"
            conn.on_lost = wake.set
            await conn.open_channel(1)
            await self.declare_queues(conn)
            await conn.rpc(1, commands.Confirm.Select(), 15)
            conn.on_confirm = on_confirm
            stage = "run"
            tag, credit, last = 0, 0.0, now()
            while not self.stop.is_set():
                conn.check()
                t = now()
                credit = min(credit + rate * (t - last), rate)  # at most 1 s of burst
                last = t
                room = args.window - len(pending)
                count = min(int(credit), room)
                if count > 0:
                    chunks = []
                    for _ in range(count):
                        msg_id = self.next_id
                        self.next_id += 1
                        tag += 1
                        pending[tag] = msg_id
                        order.append(tag)
                        chunks.append(self.encode(msg_id))
                    conn.write(b"".join(chunks))
                    s.published += count
                    credit -= count
                if conn.paused:  # the broker stopped reading (memory alarm, stall)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(conn.drain(), 0.5)
                elif room <= 0:
                    await wait_wake()
                else:
                    await asyncio.sleep(0.02)
            # the end: the last confirms, for a while
            settle_until = now() + args.settle
            while pending and now() < settle_until and conn.error is None:
                await wait_wake()
            s.unconfirmed_at_end += len(pending)
            return True
        except Exception as exc:
            self._error(f"publisher ({stage})", exc)
            s.unconfirmed_at_loss += len(pending)
            return False
        finally:
            if conn is not None:
                s.publisher_blocked_s += conn.blocked_s
                if conn.blocked_at is not None:
                    s.publisher_blocked_s += now() - conn.blocked_at
                conn.abort()

    # ---- slow consumers ---------------------------------------------------------------------
    async def consumer(self, index: int) -> None:
        while await self.wait_up():
            if not await self._consume_session(index):
                await self._backoff()

    async def _consume_session(self, index: int) -> bool:
        args, s = self.args, self.stats
        prefetch = 0 if index == 0 else args.prefetch
        waiting: deque[tuple[int, int]] = deque()  # (delivery tag, id) to ack
        paused = False
        conn: Conn | None = None

        def on_deliver(channel: int, tag: int, body: bytes | None) -> None:
            msg_id = _ID.unpack_from(body or b"\0" * 8)[0]
            self.received(msg_id)
            waiting.append((tag, msg_id))

        stage = "connect"
        try:
            conn = await connect(self.broker.url, f"soak-consumer-{index}")
            stage = "setup"
            conn.want_body = True
            conn.on_deliver = on_deliver
            await conn.open_channel(1)
            await conn.rpc(1, commands.Basic.Qos(prefetch_count=prefetch), 15)
            await self.declare_queues(conn)
            for q in self.queues:
                await conn.rpc(1, commands.Basic.Consume(queue=q), 15)
            stage = "run"
            credit, last = 0.0, now()
            while not self.stop.is_set():
                conn.check()
                await asyncio.sleep(0.05)
                t = now()
                credit = min(credit + args.ack_rate * (t - last), args.ack_rate)
                last = t
                count = min(int(credit), len(waiting))
                if count > 0:
                    credit -= count
                    tag = 0
                    for _ in range(count):
                        tag, msg_id = waiting.popleft()
                        s.acked.add(msg_id)
                    conn.write(wire.ack_frame(1, tag, multiple=True))
                # (not in on_deliver: a Consume-Ok behind deliveries must be read)
                assert conn.transport is not None
                if not paused and len(waiting) > args.max_unacked:
                    conn.transport.pause_reading()  # the broker's writes to us pile up
                    paused = True
                elif paused and len(waiting) < args.max_unacked // 2:
                    conn.transport.resume_reading()
                    paused = False
            if conn.transport is not None and not conn.transport.is_closing():
                if paused:
                    conn.transport.resume_reading()
                await conn.close(3)  # the unacked deliveries go back to their queues
            return True
        except Exception as exc:
            self._error(f"consumer ({stage})", exc)
            return False
        finally:
            if conn is not None:
                conn.abort()

    # ---- the fair client ----------------------------------------------------------------
    async def fair(self) -> None:
        """Publish + delivery round trips on an own exclusive queue, one every 10-20 ms."""
        while await self.wait_up():
            if not await self._fair_session():
                self.stats.fair_aborted += 1
                await self._backoff()

    async def _fair_session(self) -> bool:
        args, s = self.args, self.stats
        body = b"f" * 92
        arrived: dict[int, float] = {}
        wake = asyncio.Event()

        def on_deliver(channel: int, tag: int, body: bytes | None) -> None:
            arrived[_ID.unpack_from(body or b"\0" * 8)[0]] = now()
            wake.set()

        conn: Conn | None = None
        t0, stage = now(), "connect"
        try:
            conn = await connect(self.broker.url, "soak-fair")
            stage = "setup"
            conn.on_lost = wake.set
            conn.want_body = True
            conn.on_deliver = on_deliver
            await conn.open_channel(1)
            ok = await conn.rpc(1, commands.Queue.Declare(queue="", exclusive=True), 15)
            queue = ok.queue
            await conn.rpc(1, commands.Basic.Consume(queue=queue, no_ack=True), 15)
            seq = 0
            stage = "run"
            while not self.stop.is_set():
                conn.check()
                seq += 1
                message = wire.encode_publish("", queue, _ID.pack(seq) + body)
                arrived.clear()
                t0 = now()
                conn.write(message)
                deadline = t0 + args.probe_timeout
                while seq not in arrived and now() < deadline:
                    conn.check()
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), max(0.001, deadline - now()))
                if seq not in arrived:
                    s.fair.append(Sample(t0, now(), conn.blocked_during(t0), timeout=True))
                    raise TimeoutError(f"no delivery in {args.probe_timeout:g} s")
                s.fair.append(Sample(t0, arrived[seq], conn.blocked_during(t0)))
                await asyncio.sleep(self.rng.uniform(0.010, 0.020))
            return True
        except asyncio.CancelledError:
            if stage == "run" and conn is not None and not arrived:
                s.fair.append(Sample(t0, now(), conn.blocked_during(t0), cut=True))
            raise
        except Exception as exc:
            self._error(f"fair ({stage})", exc)
            return False
        finally:
            if conn is not None:
                conn.abort()

    async def fair_rpc(self) -> None:
        """queue.declare passive round trips on a connection that never publishes (a
        memory alarm does not block it)."""
        args, s = self.args, self.stats
        while await self.wait_up():
            conn: Conn | None = None
            t0, stage = now(), "connect"
            try:
                conn = await connect(self.broker.url, "soak-fair-rpc")
                stage = "setup"
                await conn.open_channel(1)
                await self.declare_queues(conn)
                declare = commands.Queue.Declare(queue=self.queues[0], passive=True)
                stage = "run"
                while not self.stop.is_set():
                    t0 = now()
                    await conn.rpc(1, declare, args.probe_timeout)
                    s.fair_rpc.append(Sample(t0, now()))
                    await asyncio.sleep(self.rng.uniform(0.010, 0.020))
            except asyncio.CancelledError:
                if stage == "run":  # the run is over: a round trip still waiting counts
                    s.fair_rpc.append(Sample(t0, now(), cut=True))
                raise
            except Exception as exc:
                if stage == "run" and isinstance(exc, TimeoutError):
                    s.fair_rpc.append(Sample(t0, now(), timeout=True))
                self._error(f"fair-rpc ({stage})", exc)
                s.fair_rpc_aborted += 1
                await self._backoff()
            finally:
                if conn is not None:
                    conn.abort()

    # ---- hostile connections --------------------------------------------------------------
    async def hostile(self, index: int) -> None:
        attacks = list(ATTACKS)
        while await self.wait_up():
            name = self.rng.choice(attacks)
            outcomes = self.stats.hostile_outcomes.setdefault(name, Counter())
            try:
                async with asyncio.timeout(15):
                    outcome = await ATTACKS[name](self)
            except TimeoutError:
                outcome = "harness timeout (15 s)"
            except Exception as exc:
                outcome = f"error {error_text(exc)}"
            outcomes[outcome] += 1
            await asyncio.sleep(self.args.hostile_pause * (0.5 + self.rng.random()))

    async def raw_attack(self, chunks: list[bytes], hold: float = 5.0) -> str:
        """Write ``chunks`` on a fresh socket, then wait until the broker closes it."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.broker.port), 3
            )
        except (OSError, TimeoutError):
            self.stats.hostile_connect_failed += 1
            return "connect failed"
        self.stats.hostile_connections += 1
        t0 = now()
        try:
            try:
                for chunk in chunks:
                    writer.write(chunk)
                    await asyncio.wait_for(writer.drain(), hold)
            except (OSError, TimeoutError):
                return "closed while sending"
            until = t0 + hold
            while now() < until:
                try:
                    data = await asyncio.wait_for(reader.read(65536), until - now())
                except TimeoutError:
                    break
                except OSError:
                    return "reset"
                if not data:
                    return "closed" if now() - t0 < 1 else "closed after > 1 s"
            return f"held open {hold:g} s"
        finally:
            writer.transport.abort()

    async def amqp_attack(self, payload: bytes, hold: float = 5.0, probe: bool = False) -> str:
        """Open a connection (handshake + channel 1), write ``payload``, then wait for the
        broker to close it; with ``probe``, a queue.declare passive right after tells
        whether the connection still works (``accepted``)."""
        try:
            conn = await connect(self.broker.url, "soak-hostile")
        except Exception:
            self.stats.hostile_connect_failed += 1
            return "connect failed"
        self.stats.hostile_connections += 1
        try:
            await conn.open_channel(1)
            conn.write(payload)
            if probe:
                return await probe_rpc(conn, commands.Basic.Qos(prefetch_count=10), hold)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(conn.closed), hold)
            if conn.error is not None:
                return f"closed {error_text(conn.error)}"
            return f"held open {hold:g} s"
        except Exception as exc:
            return hostile_failure(conn, exc)
        finally:
            conn.abort()


async def probe_rpc(conn: Conn, method: Any, hold: float = 5.0) -> str:
    """After an attack on an open connection: does the connection still answer? Gives up
    as soon as the memory alarm blocks it (it published): waiting is then RabbitMQ's
    behaviour, and the worker goes on to its next attack."""
    t0 = now()
    reply = conn.request(1, method)
    try:
        while not reply.done():
            if conn.blocked_at is not None:
                return "blocked by the memory alarm"
            if now() - t0 > hold:
                return f"no reply in {hold:g} s"
            await asyncio.sleep(0.05)
    finally:
        reply.cancel()  # no-op when done; else nothing is left to fail unretrieved
    reply.result()  # the broker's error, if it closed the connection
    return "accepted" if now() - t0 < 1 else "accepted, reply > 1 s"


def hostile_failure(conn: Conn, exc: Exception) -> str:
    """The outcome of an attack whose connection failed: a probe that timed out while the
    memory alarm blocked the connection (it published) is RabbitMQ's behaviour."""
    if isinstance(exc, TimeoutError) and conn.blocked_at is not None:
        return "blocked by the memory alarm"
    return f"closed {error_text(exc)}"


JUNK_QUEUE = "soak.junk"  # transient, x-max-length 100: where the big-header publishes go


def _nested_table(depth: int) -> bytes:
    """A field table {"a": {"a": ...}} ``depth`` deep, encoded by hand (no recursion)."""
    inner = b""
    for _ in range(depth):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    return struct.pack(">I", len(inner)) + inner


def _nested_array_table(depth: int) -> bytes:
    """{"a": [[[...]]]} with the array ``depth`` deep."""
    inner = b""
    for _ in range(depth):
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    entry = b"\x01a" + inner
    return struct.pack(">I", len(entry)) + entry


def _headers_only(table: bytes) -> bytes:
    """A content header frame (body size 0) whose headers property is ``table``."""
    return raw_frame(2, 1, _CONTENT_HEAD.pack(60, 0, 0, HEADERS_FLAG) + table)


def _publish_method(routing_key: str) -> bytes:
    return frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), 1)


_DEEP_HEADERS = _publish_method(JUNK_QUEUE) + _headers_only(_nested_table(10_000))
_DEEP_ARRAY = _publish_method(JUNK_QUEUE) + _headers_only(_nested_array_table(15_000))
# Queue.Declare: reserved short, queue name, the bits (none), the arguments table
_DEEP_ARGS = raw_frame(
    1, 1, struct.pack(">HHH", 50, 10, 0) + b"\x09soak.deep\x00" + _nested_table(10_000)
)
_HUGE_TABLE_PUBLISH = wire.encode_publish(
    "",
    JUNK_QUEUE,
    b"big-headers",
    properties=commands.Basic.Properties(
        headers={f"h{i:05d}": "v" * 19 for i in range(120_000 // 32)}
    ),
)


async def _huge_frame_preauth(soak: Soak) -> str:
    return await soak.raw_attack([wire.PROTOCOL_HEADER + _FRAME_HEADER.pack(1, 0, 0xFFFFFFF0)])


async def _huge_frame_open(soak: Soak) -> str:
    return await soak.amqp_attack(_FRAME_HEADER.pack(1, 1, 0x7FFFFFF0))


_TRICKLE = _FRAME_HEADER.pack(3, 1, 64 << 20) + bytes(2 << 20)


async def _huge_frame_trickle(soak: Soak) -> str:
    return await soak.amqp_attack(_TRICKLE)


async def _garbage(soak: Soak) -> str:
    return await soak.raw_attack([wire.PROTOCOL_HEADER + os.urandom(4096)])


async def _big_header_publishes(soak: Soak) -> str:
    try:
        conn = await connect(soak.broker.url, "soak-hostile")
    except Exception:
        soak.stats.hostile_connect_failed += 1
        return "connect failed"
    soak.stats.hostile_connections += 1
    try:
        await conn.open_channel(1)
        args = {"x-max-length": 100}
        await conn.rpc(1, commands.Queue.Declare(queue=JUNK_QUEUE, arguments=args), 10)
        conn.write(_HUGE_TABLE_PUBLISH * 10)
        return await probe_rpc(conn, commands.Queue.Declare(queue=JUNK_QUEUE, passive=True))
    except Exception as exc:
        return hostile_failure(conn, exc)
    finally:
        conn.abort()


async def _deep_headers(soak: Soak) -> str:
    return await soak.amqp_attack(_DEEP_HEADERS, probe=True)


async def _deep_array(soak: Soak) -> str:
    return await soak.amqp_attack(_DEEP_ARRAY, probe=True)


async def _deep_arguments(soak: Soak) -> str:
    return await soak.amqp_attack(_DEEP_ARGS, probe=True)


async def _channel_churn(soak: Soak) -> str:
    try:
        conn = await connect(soak.broker.url, "soak-hostile")
    except Exception:
        soak.stats.hostile_connect_failed += 1
        return "connect failed"
    soak.stats.hostile_connections += 1
    try:
        for _ in range(3):
            replies = []
            for channel in range(1, 301):
                replies.append(conn.request(channel, commands.Channel.Open()))
                replies.append(conn.request(channel, commands.Channel.Close(200, "churn", 0, 0)))
            results = await asyncio.wait_for(asyncio.gather(*replies, return_exceptions=True), 10)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                return f"closed {error_text(failed[0])}"
        return "ok"
    except Exception as exc:
        return f"closed {error_text(exc)}"
    finally:
        conn.abort()


ATTACKS = {
    "huge-frame-preauth": _huge_frame_preauth,
    "huge-frame-open": _huge_frame_open,
    "huge-frame-trickle": _huge_frame_trickle,
    "garbage": _garbage,
    "big-header-publishes": _big_header_publishes,
    "deep-headers": _deep_headers,
    "deep-array": _deep_array,
    "deep-arguments": _deep_arguments,
    "channel-churn": _channel_churn,
}


# ------------------------------------------------------------------------------------------
# the killer, progress, the final drain


async def killer(soak: Soak, deadline: float) -> None:
    args, broker = soak.args, soak.broker
    while True:
        wait = soak.rng.uniform(args.kill_min, args.kill_max)
        if now() + wait > deadline - 5:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), wait)
        if soak.stop.is_set():
            return
        s = soak.stats
        at = {"t_s": round(now() - soak.started, 1), "next_id": soak.next_id}
        rss = broker.rss_samples[-1][1] if broker.rss_samples else 0
        at |= {"confirmed": len(s.confirmed), "rss_mib": round(rss / 2**20)}
        took = await broker.kill()
        broker.kills += 1
        soak.kill_log.append(at | {"down_s": round(took, 2)})
        print(
            f"soak: t={now() - soak.started:6.1f}s SIGKILL #{broker.kills}, "
            f"accepting again after {took:.2f} s",
            file=sys.stderr,
            flush=True,
        )


async def loop_lag(soak: Soak, lags: list[tuple[float, float]], every: float = 0.01) -> None:
    """How late this process's own event loop wakes up: the part of a fair round trip
    that is the harness's, not the broker's. (lag, when) pairs."""
    while not soak.stop.is_set():
        t0 = now()
        await asyncio.sleep(every)
        lags.append((now() - t0 - every, t0 - soak.started))


async def progress(soak: Soak, every: float = 10.0) -> None:
    s, broker = soak.stats, soak.broker
    last_fair = 0
    while not soak.stop.is_set():
        await asyncio.sleep(every)
        soak.loadavg.append(round(os.getloadavg()[0], 2))
        recent = [
            x.t1 - x.t0
            for x in s.fair[last_fair:]
            if not x.blocked and not broker.down_at(x.t0, x.t1)
        ]
        last_fair = len(s.fair)
        rss = broker.rss_samples[-1][1] if broker.rss_samples else 0
        held = soak.held_bytes_estimate()
        print(
            f"soak: t={now() - soak.started:6.1f}s published {s.published} confirmed "
            f"{len(s.confirmed)} acked {len(s.acked)} deliveries {s.deliveries} "
            f"rss {rss / 2**20:.0f} MiB (messages ~{held / 2**20:.0f} MiB) alarm "
            f"{union_s(BLOCKED):.0f} s hostile {s.hostile_connections} "
            f"fair max {max(recent, default=0) * 1000:.0f} ms ({len(recent)}) "
            f"load {soak.loadavg[-1]}",
            file=sys.stderr,
            flush=True,
        )


async def drain(soak: Soak) -> None:
    """Consume (no-ack) everything left in every durable queue after the final restart."""
    s = soak.stats
    t0 = now()
    conn = await connect(soak.broker.url, "soak-drain", wait_s=30)
    try:
        conn.want_body = True
        got = 0
        wake = asyncio.Event()

        def on_deliver(channel: int, tag: int, body: bytes | None) -> None:
            nonlocal got
            got += 1
            msg_id = _ID.unpack_from(body or b"\0" * 8)[0]
            soak.received(msg_id)
            s.drained_ids.add(msg_id)
            wake.set()

        conn.on_deliver = on_deliver
        await conn.open_channel(1)
        await conn.rpc(1, commands.Basic.Qos(prefetch_count=5000), 30)
        expected = 0
        for q in soak.queues:
            ok = await conn.rpc(1, commands.Queue.Declare(queue=q, durable=True), 60)
            expected += ok.message_count
        for q in soak.queues:
            await conn.rpc(1, commands.Basic.Consume(queue=q, no_ack=True), 30)
        idle_since = now()
        while got < expected and now() - idle_since < 30:
            before = got
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 1.0)
            if got > before:
                idle_since = now()
        await asyncio.sleep(0.5)  # anything beyond the count declared
        left = 0
        for q in soak.queues:
            ok = await conn.rpc(1, commands.Queue.Declare(queue=q, passive=True), 30)
            left += ok.message_count
        s.drained, s.drain_left = got, left
        if got < expected:
            soak._error("drain", RuntimeError(f"drained {got} of {expected}"))
    finally:
        s.drain_s = now() - t0
        await conn.close(3)
        conn.abort()


# ------------------------------------------------------------------------------------------
# figures


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    rank = max(1, math.ceil(p / 100 * len(values)))
    return values[min(rank, len(values)) - 1]


def latency(samples: list[Sample], broker: Broker) -> dict[str, Any]:
    up = [x for x in samples if not broker.down_at(x.t0, x.t1)]
    kept = sorted((x.t1 - x.t0) * 1000 for x in up if not x.blocked)
    restarts = [up_at for _, up_at in broker.down_windows[1:]]
    slow = [x for x in up if not x.blocked and x.t1 - x.t0 > 0.1]
    near = [x for x in slow if any(0 <= x.t0 - r < 5 for r in restarts)]
    out: dict[str, Any] = {
        "samples": len(kept),
        "excluded_down": len(samples) - len(up),
        "excluded_blocked": sum(1 for x in up if x.blocked),
        "blocked_wait_s": round(sum(x.t1 - x.t0 for x in up if x.blocked), 1),
        "timeouts": sum(1 for x in up if x.timeout and not x.blocked),
        "cut_at_end": sum(1 for x in up if x.cut and not x.blocked),
    }
    if kept:
        out.update(
            {
                "p50_ms": round(percentile(kept, 50), 2),
                "p99_ms": round(percentile(kept, 99), 2),
                "p999_ms": round(percentile(kept, 99.9), 2),
                "max_ms": round(kept[-1], 2),
                "over_100ms": sum(1 for v in kept if v > 100),
                "over_1s": sum(1 for v in kept if v > 1000),
                "over_100ms_within_5s_after_a_restart": len(near),
            }
        )
    return out


def figures(soak: Soak, wall: float, cpu: float, final_restart_s: float | None) -> dict[str, Any]:
    s, b, args = soak.stats, soak.broker, soak.args
    lost = s.confirmed - s.seen
    lost_strict = s.confirmed - s.acked - s.drained_ids
    log_text = b.log_tail(1 << 30)
    out: dict[str, Any] = {
        "workload": "soak",
        "seconds": args.seconds,
        "seed": args.seed,
        "watermark_bytes": args.watermark,
        "published": s.published,
        "confirmed": len(s.confirmed),
        "nacked": s.nacked,
        "unconfirmed_at_connection_loss": s.unconfirmed_at_loss,
        "unconfirmed_at_end": s.unconfirmed_at_end,
        "lost": len(lost),
        "lost_strict": len(lost_strict),
        "lost_ids_sample": sorted(lost | lost_strict)[:20],
        "duplicates": s.duplicates,
        "duplicate_ids": len(s.duplicate_ids),
        "phantoms": s.phantoms,
        "acked_by_consumers": len(s.acked),
        "consumer_deliveries": s.deliveries - s.drained,
        "drained": s.drained,
        "drain_left": s.drain_left,
        "drain_s": round(s.drain_s, 2),
        "final_restart_s": None if final_restart_s is None else round(final_restart_s, 2),
        "rss_idle_bytes": b.rss_idle,
        "rss_max_bytes": b.rss_max,
        "hwm_max_bytes": b.hwm_max,
        "rss_max_over_watermark": round(b.rss_max / args.watermark, 2),
        "hwm_max_over_watermark": round(b.hwm_max / args.watermark, 2),
        "rss_every_10s_mib": rss_timeline(b, soak.started),
        "rss_every_1s_mib": rss_timeline(b, soak.started, 1),
        "publisher_blocked_s": round(s.publisher_blocked_s, 1),
        "memory_alarm_s": round(union_s(BLOCKED), 1),
        "memory_alarm_first_at_s": (round(min(BLOCKED)[0] - soak.started, 1) if BLOCKED else None),
        # [from s, to s, "unblocked" or "connection lost" (a kill, or the end of the run)]
        "memory_alarm_windows": [
            [round(a - soak.started, 1), round(z - soak.started, 1), how]
            for a, z, how in merged(BLOCKED)
        ],
        "held_bytes_estimate_at_first_alarm": s.held_at_first_alarm,
        "fair": latency(s.fair, b),
        "fair_rpc": latency(s.fair_rpc, b),
        "fair_reconnects": s.fair_aborted,
        "kills": b.kills,
        "restart_s": {
            "min": round(min(b.restart_s), 2) if b.restart_s else None,
            "max": round(max(b.restart_s), 2) if b.restart_s else None,
            "all": [round(x, 2) for x in b.restart_s],
        },
        "down_s_total": round(sum(u - d for d, u in b.down_windows[1:]), 2),
        "kill_log": soak.kill_log,
        "unexpected_exits": b.unexpected_exits,
        "hostile_connections": s.hostile_connections,
        "hostile_connect_failed": s.hostile_connect_failed,
        "hostile_outcomes": {k: dict(v) for k, v in sorted(s.hostile_outcomes.items())},
        "client_errors": dict(s.client_errors.most_common()),
        "broker_tracebacks": log_text.count("Traceback"),
        "broker_errors": log_text.count(" ERROR "),
        "broker_log_lines": log_text.count("\n"),
        "broker_cpu_frac_of_1_core": round((b.cpu_done + b.cpu_current) / wall, 3),
        "harness_cpu_frac_of_1_core": round(cpu / wall, 3),
        "loadavg_1min_every_10s": soak.loadavg,
        "wall_s": round(wall, 1),
        "loop": "uvloop" if "uvloop" in sys.modules else "asyncio",
    }
    return out


def rss_timeline(broker: Broker, started: float, step: float = 10) -> list[int]:
    """Max VmRSS (MiB) per ``step`` s slice of the run (0: no sample, the broker down)."""
    slices: dict[int, int] = {}
    for t, rss in broker.rss_samples:
        key = int((t - started) // step)
        slices[key] = max(slices.get(key, 0), rss)
    return [round(slices.get(k, 0) / 2**20) for k in range(max(slices, default=-1) + 1)]


def human(out: dict[str, Any]) -> str:
    mib = 2**20
    lines = [
        f"soak {out['seconds']} s (seed {out['seed']}), wall {out['wall_s']} s",
        f"  confirmed {out['confirmed']} of {out['published']} published "
        f"(nacked {out['nacked']}, unconfirmed at a kill {out['unconfirmed_at_connection_loss']},"
        f" at the end {out['unconfirmed_at_end']})",
        f"  LOST {out['lost']} (never received), lost_strict {out['lost_strict']} "
        f"(never acked nor drained); phantoms {out['phantoms']}",
        f"  duplicates {out['duplicates']} deliveries ({out['duplicate_ids']} ids); acked "
        f"{out['acked_by_consumers']}, drained {out['drained']} in {out['drain_s']} s "
        f"(left {out['drain_left']})",
        f"  broker RSS max {out['rss_max_bytes'] / mib:.0f} MiB (idle "
        f"{out['rss_idle_bytes'] / mib:.0f} MiB), VmHWM max "
        f"{out['hwm_max_bytes'] / mib:.0f} MiB vs watermark {out['watermark_bytes'] / mib:.0f}"
        f" MiB ({out['hwm_max_over_watermark']}x); some connection blocked by the memory "
        f"alarm {out['memory_alarm_s']} s",
        f"  RSS per 10 s (MiB): {out['rss_every_10s_mib']}",
    ]
    for key in ("fair", "fair_rpc"):
        f = out[key]
        if f.get("samples"):
            lines.append(
                f"  {key}: {f['samples']} samples p50 {f['p50_ms']} ms p99 {f['p99_ms']} ms "
                f"p99.9 {f['p999_ms']} ms max {f['max_ms']} ms; >100 ms {f['over_100ms']} ("
                f"{f['over_100ms_within_5s_after_a_restart']} < 5 s after a restart), "
                f">1 s {f['over_1s']}, timeouts {f['timeouts']} (excluded: down "
                f"{f['excluded_down']}, blocked {f['excluded_blocked']} waiting "
                f"{f['blocked_wait_s']} s)"
            )
        else:
            lines.append(f"  {key}: no samples {f}")
    lines.append(
        f"  kill -9 restarts {out['kills']} (down {out['restart_s']['all']} s), final restart "
        f"{out['final_restart_s']} s, unexpected exits {len(out['unexpected_exits'])}"
    )
    lines.append(
        f"  hostile connections {out['hostile_connections']} "
        f"(connect failed {out['hostile_connect_failed']})"
    )
    for name, outcomes in out["hostile_outcomes"].items():
        lines.append(f"    {name}: {outcomes}")
    lines.append(f"  client errors: {out['client_errors']}")
    lines.append(
        f"  broker tracebacks {out['broker_tracebacks']}; CPU broker "
        f"{out['broker_cpu_frac_of_1_core']}, harness {out['harness_cpu_frac_of_1_core']}; "
        f"harness loop lag {out.get('harness_loop_lag_ms')} ms"
    )
    lines.append(f"  machine load average (1 min) every 10 s: {out['loadavg_1min_every_10s']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# the run


async def run(args: argparse.Namespace, broker: Broker) -> dict[str, Any]:
    t_wall, t_cpu = now(), time.process_time()
    await broker.start()
    await asyncio.sleep(0.5)
    broker.sample()
    broker.rss_idle = broker.rss_max
    soak = Soak(args, broker)
    watcher_stop = asyncio.Event()
    watcher = asyncio.create_task(broker.watch(watcher_stop))
    deadline = soak.started + args.seconds
    tasks = [asyncio.create_task(soak.publisher(i)) for i in range(args.publishers)]
    tasks += [asyncio.create_task(soak.consumer(i)) for i in range(args.consumers)]
    others = [asyncio.create_task(soak.hostile(i)) for i in range(args.hostile)]
    others += [asyncio.create_task(soak.fair()), asyncio.create_task(soak.fair_rpc())]
    kill_task = asyncio.create_task(killer(soak, deadline) if args.kill else asyncio.sleep(0))
    prog = asyncio.create_task(progress(soak))
    lags: list[tuple[float, float]] = []
    others.append(asyncio.create_task(loop_lag(soak, lags)))
    final_restart_s = None
    try:
        await asyncio.sleep(max(0.0, deadline - now()))
        soak.stop.set()
        # publishers settle (--settle), consumers close, the rest stop at once (a round
        # trip in flight is dropped)
        for task in others:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=args.settle + 15)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, *others, return_exceptions=True)
        prog.cancel()
        # the killer returns at once, or after the restart it is in the middle of
        await asyncio.gather(kill_task, prog, return_exceptions=True)
        watcher_stop.set()
        await watcher
        # the final restart, then everything left in the queues
        broker.sample()
        final_restart_s = await broker.kill()
        await drain(soak)
    finally:
        for task in [*tasks, *others, kill_task, prog, watcher]:
            task.cancel()
        broker.stop()
    out = figures(soak, now() - t_wall, time.process_time() - t_cpu, final_restart_s)
    if lags:
        late = sorted(lag for lag, _ in lags)
        out["harness_loop_lag_ms"] = {
            "p99": round(percentile(late, 99) * 1000, 2),
            "max": round(late[-1] * 1000, 2),
            "over_50ms": sum(1 for x in late if x > 0.05),
        }
        # when the harness's own loop was late by over 50 ms (s into the run)
        out["harness_loop_lag_over_50ms_at_s"] = [round(at, 1) for lag, at in lags if lag > 0.05]
    return out


async def bounded(args: argparse.Namespace, broker: Broker) -> dict[str, Any]:
    """:func:`run`, with a hard bound: the load phase, the settling, and 10 minutes for
    the restarts, the final restart and the drain."""
    async with asyncio.timeout(args.seconds + args.settle + 600):
        return await run(args, broker)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=180.0, help="load phase (default 180)")
    p.add_argument("--quick", action="store_true", help="30 s, kills every 8-14 s")
    p.add_argument("--seed", type=int, help="default: random (reported)")
    p.add_argument(
        "--watermark",
        type=parse_size,
        default=parse_size("128MiB"),
        help="--memory-high-watermark of the broker (default 128MiB; idle it takes ~40 MiB)",
    )
    p.add_argument("--queues", type=int, default=4, help="durable queues")
    p.add_argument("--publishers", type=int, default=2)
    p.add_argument("--publish-rate", type=float, default=1200.0, help="msgs/s, all publishers")
    p.add_argument("--window", type=int, default=500, help="unconfirmed per publisher")
    p.add_argument("--body-size", type=int, default=1024)
    p.add_argument("--big-fraction", type=float, default=0.05, help="share with big headers")
    p.add_argument("--big-headers", type=int, default=10_000, help="bytes of the big table")
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2000, help="consumers after the first")
    p.add_argument("--ack-rate", type=float, default=200.0, help="acks/s per consumer")
    p.add_argument("--max-unacked", type=int, default=5000, help="then a consumer stops reading")
    p.add_argument("--hostile", type=int, default=4, help="hostile workers")
    p.add_argument("--hostile-pause", type=float, default=0.02, help="s between connections")
    p.add_argument("--probe-timeout", type=float, default=30.0)
    p.add_argument("--no-kill", dest="kill", action="store_false")
    p.add_argument("--kill-min", type=float, default=20.0)
    p.add_argument("--kill-max", type=float, default=40.0)
    p.add_argument("--settle", type=float, default=10.0, help="s to wait for the last confirms")
    p.add_argument("--keep-data", action="store_true", help="keep the data dir and broker log")
    p.add_argument("--no-uvloop", action="store_true")
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the installed leveret (the working tree as it is at each restart) instead "
        "of a copy of the source taken at the start",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.kill_min, args.kill_max = 30.0, 8.0, 14.0
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    if args.body_size < _ID.size:
        p.error(f"--body-size must be at least {_ID.size}")
    return args


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)  # stop the broker and report, as on Ctrl-C
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="leveret-soak-"))
    log_path = RESULTS / f"soak-{stamp}-broker.log"
    source = source_state()
    snapshot = None if args.no_snapshot else snapshot_source(work / "src")
    broker = Broker(args, work / "data", log_path, snapshot)
    source["snapshot"] = snapshot is not None
    out: dict[str, Any] = {"workload": "soak", "ok": False, "source": source}
    interrupted = False
    try:
        if args.no_uvloop:
            out = asyncio.run(bounded(args, broker))
        else:
            import uvloop

            out = uvloop.run(bounded(args, broker))
        out["ok"] = out["lost"] == 0 and out["lost_strict"] == 0 and out["phantoms"] == 0
        out["source"] = source
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: no evidence to keep
        interrupted = True
        out["error"] = f"interrupted ({exc or 'SIGINT'})"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        broker.stop()
        keep = args.keep_data or not (out.get("ok") or interrupted)
        if keep:
            out["kept"] = str(work)  # data/ (the broker's data dir), src/ (the snapshot)
        else:
            shutil.rmtree(work, ignore_errors=True)
        if log_path.exists() and (keep or out.get("broker_tracebacks")):
            out["broker_log"] = str(log_path.relative_to(REPO))
        elif log_path.exists():
            log_path.unlink()
        if "published" in out:
            print(human(out))
        if not interrupted:
            path = RESULTS / f"soak-{stamp}.json"
            path.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out), flush=True)
    return 0 if out.get("ok") else 130 if interrupted else 1


if __name__ == "__main__":
    raise SystemExit(main())
