#!/usr/bin/env python3
"""The standing fault campaign: one subcommand per row of ``RELIABILITY.md``, each printing
its figure as one JSON line (the last stdout line).

    .venv/bin/python bench/faults.py kill9 [-n 10]
    .venv/bin/python bench/faults.py bitflip
    .venv/bin/python bench/faults.py watermark [--rabbitmq URL --rabbitmq-node NODE]
    .venv/bin/python bench/faults.py fairness  [--rabbitmq URL] [--runs 3]
    .venv/bin/python bench/faults.py idle      [--rabbitmq URL --rabbitmq-node NODE] [-n 5000]
    .venv/bin/python bench/faults.py slowloris [--rabbitmq URL]
    .venv/bin/python bench/faults.py heartbeat [--rabbitmq URL]
    .venv/bin/python bench/faults.py requeue   [--rabbitmq URL] [-n 20000]
    .venv/bin/python bench/faults.py permissions [--rabbitmq URL --rabbitmq-management URL]

Leveret runs as ``python -m leveret serve`` (uvloop, as deployed) on a free port, started
by each subcommand. RabbitMQ is measured where ``--rabbitmq`` names a node (its RSS needs
``--rabbitmq-node``, asked with ``rabbitmqctl eval``): ``bench/rabbitmq_node.sh`` starts a
private 3.10.8 node. Where a row is a test rather than a measurement (kill9, bitflip,
permissions) the subcommand runs that test or its benchmark and reports its counts; kill9
against RabbitMQ lives in ``bench/rabbitmq_crash.py``.

Each JSON line carries the date, the load average before and after, and ``ok`` (the
property the row's test asserts held on this run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import pika  # noqa: E402
from pamqp import commands  # noqa: E402
from rabbitmq_crash import rabbitmq_kill9, rabbitmq_pid  # noqa: E402
from workloads import accepts_tcp, free_port  # noqa: E402

from tests.integration.wire import PeerClosedError, WireClient  # noqa: E402

MIB = 1024 * 1024


def vmrss(pid: int) -> int:
    """VmRSS of ``pid`` in bytes (the whole process)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _start_leveret(extra: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m leveret serve`` on a free port and make one full connection to it
    (the loop finishes its start-up work after listening, which would otherwise delay the
    first measured connection by ~0.4-0.9 s here)."""
    port = free_port()
    cmd = [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", str(port)]
    # no management or Prometheus listener: their fixed ports may be taken by other brokers
    cmd += ["--management-port", "-1", "--prometheus-port", "-1", "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    url = f"amqp://guest:guest@127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while not accepts_tcp("127.0.0.1", port, timeout=1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("leveret serve did not start")
            time.sleep(0.05)
        pika.BlockingConnection(pika.URLParameters(url)).close()
        if proc.poll() is not None:
            raise RuntimeError("leveret serve exited (port taken?)")
    except Exception:
        _stop(proc)
        raise
    return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def leveret(*extra: str) -> Iterator[tuple[str, int]]:
    """``python -m leveret serve`` on a free port; yields (URL, PID). Other work on this
    machine starts brokers on free ports too: a start that meets one is retried."""
    for attempt in range(3):
        try:
            proc, url = _start_leveret(extra)
            break
        except Exception:
            if attempt == 2:
                raise
    try:
        yield url, proc.pid
    finally:
        _stop(proc)


def brokers(args: argparse.Namespace, *extra: str) -> Iterator[tuple[str, str, int | None]]:
    """(name, URL, PID or None) for Leveret, then RabbitMQ if ``--rabbitmq`` names one."""
    with leveret(*extra) as (url, pid):
        yield "leveret", url, pid
    if args.rabbitmq:
        node = getattr(args, "rabbitmq_node", None)
        yield "rabbitmq", args.rabbitmq, rabbitmq_pid(node) if node else None


def quantiles(times: list[float]) -> dict[str, float]:
    """p50, p99 and max of durations in seconds, as milliseconds."""
    cut = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return {
        "p50_ms": round(cut[49] * 1000, 2),
        "p99_ms": round(cut[98] * 1000, 2),
        "max_ms": round(max(times) * 1000, 2),
        "samples": len(times),
    }


# -- kill -9 under confirmed load ------------------------------------------------------------


def kill9(args: argparse.Namespace) -> dict[str, Any]:
    """bench/crash_test.py (both scenarios, ``-n`` iterations): confirmed messages lost,
    duplicates, and deliveries that came back without the redelivered flag. With
    ``--rabbitmq-kill`` the same scenarios (crash_test's functions) run against a private
    RabbitMQ node of their own, killed -9 and restarted on its data directory."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "crash_test.py"), "-n", str(args.n)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = {"leveret": json.loads(out.stdout.strip().splitlines()[-1])}
    ok = out.returncode == 0
    if args.rabbitmq_kill:
        result["rabbitmq"] = rabbitmq_kill9(args.rabbitmq_kill_n or args.n)
    result["ok"] = ok
    return result


# -- bit flips: pytest's counts for the two corruption tests ---------------------------------


def run_pytest(*selection: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run pytest on ``selection``; the counts of its summary line."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *list(selection),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]
    counts: dict[str, Any] = {"summary": tail, "exit": out.returncode}
    for part in tail.strip("= ").split(","):
        words = part.split()
        if len(words) >= 2 and words[0].isdigit():
            counts[words[1]] = int(words[0])
    return counts


def bitflip(args: argparse.Namespace) -> dict[str, Any]:
    """The definitions-log and message-segment bit flips of tests/test_recovery_corruption.py
    (every message kept / one message of 4,000 lost, for each bit of the length field)."""
    counts = run_pytest("tests/test_recovery_corruption.py")
    return {"leveret": counts, "ok": counts["exit"] == 0}


# -- memory watermark under a slow consumer --------------------------------------------------


def watermark(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario of tests/test_memory_watermark.py (a never-acking consumer, 14 KiB
    header tables): the broker's peak RSS against a 256 MiB watermark until the publisher
    is blocked (and 2 s after)."""
    from tests import test_memory_watermark as wm

    # where a broker that never blocks is given up on (the test's 1.6 x by default)
    wm.RSS_CAP = args.rss_cap
    result: dict[str, Any] = {}
    for name, url, pid in brokers(args, "--memory-high-watermark", str(wm.WATERMARK)):
        if pid is None:
            result[name] = "needs --rabbitmq-node"
            continue
        if name == "rabbitmq":
            subprocess.run(
                [
                    "rabbitmqctl",
                    "-n",
                    args.rabbitmq_node,
                    "set_vm_memory_high_watermark",
                    "absolute",
                    str(wm.WATERMARK),
                ],
                check=True,
                capture_output=True,
            )
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        scenario = wm.Scenario(_Pid(pid), port)  # type: ignore[arg-type]
        try:
            blocked_at = scenario.publish_until_blocked(within=60)
            if blocked_at is not None:
                until = time.monotonic() + wm.STALL_S
                while time.monotonic() < until:
                    scenario.publisher.step()
                    scenario.sample()
            result[name] = {
                "blocked": blocked_at is not None,
                "idle_rss_mib": round(scenario.baseline / MIB, 1),
                "max_rss_mib": round(scenario.max_rss / MIB, 1),
                "max_rss_over_watermark": round(scenario.max_rss / wm.WATERMARK, 3),
                "unacked": scenario.reader.deliveries,
                "rss_cap_over_watermark": args.rss_cap,
            }
        finally:
            scenario.close()
            if name == "rabbitmq":
                subprocess.run(
                    [
                        "rabbitmqctl",
                        "-n",
                        args.rabbitmq_node,
                        "set_vm_memory_high_watermark",
                        "0.4",
                    ],
                    check=True,
                    capture_output=True,
                )
    lev = result["leveret"]
    result["ok"] = lev["blocked"] and lev["max_rss_over_watermark"] <= wm.RSS_FACTOR
    return result


class _Pid:
    """What Scenario reads of a Popen: its pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid


# -- a flooding client against a fair one ----------------------------------------------------


def fairness(args: argparse.Namespace) -> dict[str, Any]:
    """tests/integration/test_fairness.py's measure(): a pika publisher with confirms (one
    round trip per publish) while a raw socket floods 120 KB header tables; ``--runs`` runs
    per broker, the median run (by p99) reported with all runs' figures."""
    from tests.integration import test_fairness as tf

    result: dict[str, Any] = {}
    for name, url, _pid in brokers(args):
        runs = []
        for _ in range(args.runs):
            times, sent = tf.measure(url)
            runs.append({**quantiles(times), "flood_messages": sent})
        runs.sort(key=lambda r: r["p99_ms"])
        result[name] = {"median_run": runs[len(runs) // 2], "runs": runs}
    lev = result["leveret"]["median_run"]
    result["ok"] = lev["p99_ms"] / 1000 < tf.ROUND_TRIP_MAX
    return result


# -- idle connections ------------------------------------------------------------------------


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """``-n`` connections opened (handshake and connection.open, heartbeats off) and left
    idle with one channel each: the broker's RSS growth per connection, read once they are
    all open and again after 5 s."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result: dict[str, Any] = {}
    for name, url, pid in brokers(args):
        if pid is None:
            result[name] = "needs --rabbitmq-node"
            continue
        before = vmrss(pid)
        clients: list[WireClient] = []
        error = None
        began = time.monotonic()
        try:
            for _ in range(args.n):
                client = WireClient(url, timeout=30)
                clients.append(client)
                client.connect()
                client.open_channel(1)
        except (OSError, PeerClosedError, AssertionError) as exc:
            error = f"after {len(clients) - 1} connections: {exc!r}"[:200]
        opened = time.monotonic() - began
        time.sleep(5)  # let lazily-allocated buffers settle before the second reading
        after = vmrss(pid)
        alive = sum(1 for c in clients if _still_open(c))
        for client in clients:
            client.close()
        result[name] = {
            "connections": len(clients) if error is None else len(clients) - 1,
            "alive_after_5s": alive,
            "rss_before_mib": round(before / MIB, 1),
            "rss_after_mib": round(after / MIB, 1),
            "rss_per_connection_kib": round((after - before) / max(len(clients), 1) / 1024, 1),
            "open_seconds": round(opened, 1),
            "error": error,
        }
    result["ok"] = result["leveret"]["alive_after_5s"] == args.n
    return result


def _still_open(client: WireClient) -> bool:
    """A heartbeat-less idle connection is open if a read finds no EOF (nothing to read)."""
    try:
        client.sock.setblocking(False)
        return client.sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


# -- slowloris before and during the handshake -----------------------------------------------


def _time_to_close(url: str, act: Callable[[WireClient], None], cap: float) -> float | None:
    """Seconds from connect until the broker closes the socket (None: still open at cap).
    ``act`` is what the client does meanwhile (it may block, reading or trickling)."""
    began = time.monotonic()
    client = WireClient(url, timeout=cap)
    try:
        act(client)
        client.read_until_closed(timeout=max(cap - (time.monotonic() - began), 0.01))
    except (PeerClosedError, ConnectionError):
        pass
    except TimeoutError:
        return None
    finally:
        client.close()
    elapsed = time.monotonic() - began
    return round(elapsed, 2) if elapsed < cap else None


def _silent(client: WireClient) -> None:
    """Connect and say nothing."""


def _half_header(client: WireClient) -> None:
    """Four of the eight octets of the protocol header."""
    client.send_raw(b"AMQP")


def _silent_after_start(client: WireClient) -> None:
    """The whole header; read connection.start; then nothing."""
    client.send_raw(b"AMQP\x00\x00\x09\x01")
    client.expect(commands.Connection.Start, channel=0)


def _trickle_start_ok(client: WireClient) -> None:
    """The header, then connection.start-ok one octet a second (slowloris proper: the
    connection is never idle, so only a handshake deadline ends it)."""
    client.send_raw(b"AMQP\x00\x00\x09\x01")
    client.expect(commands.Connection.Start, channel=0)
    from pamqp import frame

    start_ok = commands.Connection.StartOk(
        client_properties={"product": "slowloris"},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    )
    for octet in frame.marshal(start_ok, 0):
        try:
            client.send_raw(bytes([octet]))
        except OSError:
            return
        # wait a second, or less if the broker closes meanwhile (then the caller reads EOF)
        if select.select([client.sock], [], [], 1.0)[0]:
            return


def _silent_after_tune(client: WireClient) -> None:
    """Header, start-ok, read connection.tune; then no tune-ok."""
    client.send_raw(b"AMQP\x00\x00\x09\x01")
    client.expect(commands.Connection.Start, channel=0)
    client.send(
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
        )
    )
    client.expect(commands.Connection.Tune, channel=0)


def _record_close(
    into: dict[str, float | None], key: str, url: str, act: Callable[[WireClient], None]
) -> None:
    """One slow client's :func:`_time_to_close` (40 s cap), stored under ``key``."""
    into[key] = _time_to_close(url, act, 40.0)


SLOW = {
    "silent_before_header": _silent,
    "half_header": _half_header,
    "silent_after_start": _silent_after_start,
    "trickled_start_ok": _trickle_start_ok,
    "silent_after_tune": _silent_after_tune,
}


def slowloris(args: argparse.Namespace) -> dict[str, Any]:
    """Each slow client of :data:`SLOW`, all at once in threads: seconds until the broker
    closed the socket (handshake timeout: 10 s in both brokers by default)."""
    result: dict[str, Any] = {}
    for name, url, _pid in brokers(args):
        closed: dict[str, float | None] = {}

        threads = [
            threading.Thread(target=_record_close, args=(closed, key, url, act))
            for key, act in SLOW.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result[name] = closed
    lev = result["leveret"]
    result["ok"] = all(v is not None and v <= 12.0 for v in lev.values())
    return result


# -- heartbeats ------------------------------------------------------------------------------


def heartbeat(args: argparse.Namespace) -> dict[str, Any]:
    """A client that negotiates ``--interval`` s heartbeats, opens a channel and then sends
    nothing: seconds until the broker closes the socket (``-n`` times), and whether it sent
    connection.close first."""
    result: dict[str, Any] = {}
    for name, url, _pid in brokers(args):
        runs = []
        for _ in range(args.n):
            client = WireClient(url, timeout=30)
            client.connect(heartbeat=args.interval)
            client.open_channel(1)
            began = time.monotonic()
            frames = client.wait_closed(timeout=10 * args.interval)
            runs.append(
                {
                    "closed_after_s": round(time.monotonic() - began, 2),
                    "heartbeats_received": client.heartbeats,
                    "connection_close_sent": any(
                        isinstance(f, commands.Connection.Close) for _, f in frames
                    ),
                }
            )
            client.close()
        result[name] = {"interval_s": args.interval, "runs": runs}
    worst = max(r["closed_after_s"] for r in result["leveret"]["runs"])
    result["ok"] = worst <= 3 * args.interval
    return result


# -- requeue of many unacked messages --------------------------------------------------------


def requeue(args: argparse.Namespace) -> dict[str, Any]:
    """``-n`` messages delivered to a no-qos consumer and left unacked, then its channel
    closed (all requeued at once) while another connection publishes with confirms: that
    client's round trips during the requeue (p50/p99/max), the time until the queue is
    whole again, and whether it came back in order with the redelivered flag."""
    from tests.integration.test_requeue_many import requeue_while_measured

    result: dict[str, Any] = {}
    for name, url, _pid in brokers(args):
        figures = requeue_while_measured(url, args.n)
        times = figures.pop("round_trips")
        result[name] = {**figures, **quantiles(times)}
    result["ok"] = bool(result["leveret"]["in_order"] and result["leveret"]["redelivered"])
    return result


# -- the permission matrix -------------------------------------------------------------------


def permissions(args: argparse.Namespace) -> dict[str, Any]:
    """tests/integration/test_permission_matrix.py against Leveret, and with ``-m
    rabbitmq`` against the node given: passed/failed counts."""
    result: dict[str, Any] = {"leveret": run_pytest("tests/integration/test_permission_matrix.py")}
    if args.rabbitmq:
        env = {"RABBITMQ_URL": args.rabbitmq}
        if args.rabbitmq_management:
            env["RABBITMQ_MANAGEMENT_URL"] = args.rabbitmq_management
        result["rabbitmq"] = run_pytest(
            "tests/integration/test_permission_matrix.py", "-m", "rabbitmq", env=env
        )
    result["ok"] = all(r["exit"] == 0 for k, r in result.items() if k != "ok")
    return result


ROWS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "kill9": kill9,
    "bitflip": bitflip,
    "watermark": watermark,
    "fairness": fairness,
    "idle": idle,
    "slowloris": slowloris,
    "heartbeat": heartbeat,
    "requeue": requeue,
    "permissions": permissions,
}


def main() -> int:
    """Parse the command line, run one row, print its JSON line; exit 1 if ``ok`` is false."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("row", choices=sorted(ROWS))
    parser.add_argument("-n", type=int, help="iterations / connections / messages")
    parser.add_argument("--runs", type=int, default=3, help="fairness: runs per broker")
    parser.add_argument("--interval", type=int, default=2, help="heartbeat: seconds")
    parser.add_argument(
        "--rabbitmq-kill", action="store_true", help="kill9: also a private RabbitMQ node"
    )
    parser.add_argument("--rabbitmq-kill-n", type=int, help="kill9: its iterations (-n)")
    parser.add_argument("--rss-cap", type=float, default=1.6, help="watermark: give up at")
    parser.add_argument("--rabbitmq", help="AMQP URL of a RabbitMQ node to measure too")
    parser.add_argument("--rabbitmq-node", help="its node name, for its RSS (rabbitmqctl)")
    parser.add_argument("--rabbitmq-management", help="its management API URL (permissions)")
    args = parser.parse_args()
    defaults = {"kill9": 10, "idle": 5000, "requeue": 20000, "heartbeat": 3}
    if args.n is None:
        args.n = defaults.get(args.row, 1)
    load_before = os.getloadavg()
    began = time.monotonic()
    figures = ROWS[args.row](args)
    line = {
        "row": args.row,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(time.monotonic() - began, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        **figures,
    }
    print(json.dumps(line))
    return 0 if figures.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
