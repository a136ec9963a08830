#!/usr/bin/env python3
"""How long does an in-process Leveret take to start? (issue 6: "under 20 ms")

    .venv/bin/python bench/startup_bench.py            # 200 runs of each in-process figure
    .venv/bin/python bench/startup_bench.py -n 50 --cold 5 --json results.json

In-process figures (one interpreter, modules already imported, N runs each):

``server.start``
    ``Server(Config(port=0))`` + ``await server.start()`` on a running event loop: what
    the issue's number is about (construction and start are also shown apart).
``BrokerThread.start``
    ``BrokerThread(config).start()``: a new event loop in a new thread, the server started
    on it; what the ``leveret_broker`` fixture does.
``fixture -> AMQP ready``
    From ``BrokerThread(...)`` until a client has connected and read ``Connection.Start``
    (raw socket: protocol header out, Start frame in), i.e. the fixture end to end.
``fixture -> pika open``
    The same until ``pika.BlockingConnection`` is open (includes pika's own handshake
    cost, about the same against any broker).

Fresh-process figures (``--cold`` interpreters each; interpreter start-up excluded), with
compiled bytecode cached as usual (a private ``PYTHONPYCACHEPREFIX``, warmed first) and,
with ``--no-bytecode``, also compiling every module from source as under
``PYTHONDONTWRITEBYTECODE=1``:

``import + BrokerThread start + ready``
    ``from leveret.inspect import BrokerThread`` + start + ``Connection.Start`` received:
    the whole cost of the broker for a test session (per xdist worker), imports included.
``import leveret.server after asyncio``
    The broker's own import cost in a process that already has asyncio (pytest-asyncio
    imports it at start-up).
``import leveret.testing after pytest``
    What the pytest11 entry point adds to every pytest session of a project with Leveret
    installed (pytest and pytest-asyncio already imported).

The last lines list the slowest imports (``-X importtime``, cumulative) of a fresh
``import leveret.server``, to show where the import time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from leveret.config import Config  # noqa: E402
from leveret.inspect import BrokerThread  # noqa: E402
from leveret.server import Server  # noqa: E402

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def summary(samples_ms: list[float]) -> dict[str, float]:
    """median, p95, min, max of ``samples_ms`` (milliseconds)."""
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p95": p95,
        "min": ordered[0],
        "max": ordered[-1],
    }


def read_connection_start(port: int) -> None:
    """Connect, send the protocol header, read the Connection.Start frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(PROTOCOL_HEADER)
        header = b""
        while len(header) < 7:
            chunk = sock.recv(7 - len(header))
            if not chunk:
                raise ConnectionError("closed before Connection.Start")
            header += chunk
        frame_type, _channel, size = header[0], header[1:3], int.from_bytes(header[3:7], "big")
        if frame_type != 1:
            raise ConnectionError(f"expected a method frame, got type {frame_type}")
        remaining = size + 1
        while remaining:
            chunk = sock.recv(remaining)
            if not chunk:
                raise ConnectionError("closed in Connection.Start")
            remaining -= len(chunk)


def config() -> Config:
    """The plugin's configuration of the in-process broker."""
    return Config(host="127.0.0.1", port=0, shutdown_timeout=0.5)


def bench_server_start(runs: int) -> dict[str, list[float]]:
    """``Server(Config(port=0))`` + ``start()`` on a running loop, ``runs`` times."""

    async def main() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"construct": [], "start": [], "total": []}
        for _ in range(runs):
            t0 = time.perf_counter()
            server = Server(config())
            t1 = time.perf_counter()
            await server.start()
            t2 = time.perf_counter()
            out["construct"].append((t1 - t0) * 1e3)
            out["start"].append((t2 - t1) * 1e3)
            out["total"].append((t2 - t0) * 1e3)
            await server.stop()
        return out

    return asyncio.run(main())


def bench_thread(runs: int, until: Callable[[BrokerThread], None] | None) -> list[float]:
    """``BrokerThread(...).start()`` (then ``until(broker)``), ``runs`` times."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        broker = BrokerThread(config()).start()
        if until is not None:
            until(broker)
        samples.append((time.perf_counter() - t0) * 1e3)
        broker.stop()
    return samples


def pika_open(broker: BrokerThread) -> None:
    """Open and close a pika BlockingConnection."""
    import pika

    pika.BlockingConnection(pika.URLParameters(broker.url)).close()


COLD_START = """
import time
t0 = time.perf_counter()
import socket
from leveret.inspect import BrokerThread
from leveret.config import Config
t1 = time.perf_counter()
broker = BrokerThread(Config(host="127.0.0.1", port=0)).start()
t2 = time.perf_counter()
with socket.create_connection(("127.0.0.1", broker.server.port)) as s:
    s.sendall(b"AMQP\\x00\\x00\\x09\\x01")
    s.recv(1)
t3 = time.perf_counter()
broker.stop()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t0) * 1e3)
"""

IMPORT_AFTER = """
import time
import {before}
t0 = time.perf_counter()
import {module}
print((time.perf_counter() - t0) * 1e3)
"""


def child_env(bytecode: str | None) -> dict[str, str]:
    """The environment of a fresh interpreter: bytecode cached under ``bytecode``, or
    never written (every module compiled from source) when None."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if bytecode is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode
    return env


def fresh(code: str, bytecode: str | None) -> list[float]:
    """Run ``code`` in a new interpreter; the floats it prints."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=child_env(bytecode),
        check=True,
    )
    return [float(x) for x in out.stdout.split()]


def cold_figures(runs: int, bytecode: str | None, label: str) -> dict[str, dict[str, float]]:
    """The fresh-process figures, ``runs`` interpreters each."""
    if bytecode is not None:
        fresh("import leveret.server, leveret.testing, pytest, pytest_asyncio", bytecode)
    cold = [fresh(COLD_START, bytecode) for _ in range(runs)]
    results = {
        f"fresh process{label}: import leveret.inspect": summary([c[0] for c in cold]),
        f"fresh process{label}: import + BrokerThread start + ready": summary([c[2] for c in cold]),
    }
    for before, module in (
        ("asyncio", "leveret.server"),
        ("pytest, pytest_asyncio", "leveret.testing"),
    ):
        code = IMPORT_AFTER.format(before=before, module=module)
        results[f"fresh process{label}: import {module} after {before}"] = summary(
            [fresh(code, bytecode)[0] for _ in range(runs)]
        )
    return results


def slowest_imports(module: str, top: int, bytecode: str | None) -> list[tuple[float, str]]:
    """(cumulative ms, name) of the slowest imports of ``module`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=child_env(bytecode),
        check=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line[len("import time:") :].split("|")
        rows.append((int(cumulative) / 1e3, name.rstrip()))
    rows.sort(reverse=True)
    return rows[:top]


def table(results: dict[str, dict[str, float]]) -> str:
    """The results as a markdown table."""
    lines = [
        "| figure | n | median ms | p95 ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in results.items():
        lines.append(
            f"| {name} | {s['n']:.0f} | {s['median']:.2f} | {s['p95']:.2f} | {s['min']:.2f} "
            f"| {s['max']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Run every figure and print a markdown table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=200, help="in-process runs (200)")
    parser.add_argument("--cold", type=int, default=10, help="fresh interpreters (10)")
    parser.add_argument("--top", type=int, default=12, help="slowest imports listed (12)")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="also measure fresh processes compiling every module from source",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    bench_server_start(5)  # warm-up: first-call costs (lazy imports, caches)
    server = bench_server_start(args.runs)
    results["Server(Config(port=0)) construct"] = summary(server["construct"])
    results["server.start()"] = summary(server["start"])
    results["construct + start (issue's figure)"] = summary(server["total"])
    results["BrokerThread.start()"] = summary(bench_thread(args.runs, None))
    ready = bench_thread(args.runs, lambda b: read_connection_start(b.server.port))
    results["fixture -> AMQP ready (Connection.Start read)"] = summary(ready)
    results["fixture -> pika open"] = summary(bench_thread(max(1, args.runs // 4), pika_open))

    with tempfile.TemporaryDirectory(prefix="leveret-pycache-") as pycache:
        if args.cold:
            results.update(cold_figures(args.cold, pycache, ""))
            if args.no_bytecode:
                results.update(cold_figures(args.cold, None, " (no bytecode cache)"))
        print(f"# Leveret start-up (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)\n")
        print(table(results))
        if args.top:
            print("\nSlowest imports of a fresh `import leveret.server` (cumulative ms):")
            for ms, name in slowest_imports("leveret.server", args.top, pycache):
                print(f"    {ms:8.1f}  {name}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
