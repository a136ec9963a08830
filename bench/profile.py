#!/usr/bin/env python3
"""Where Leveret's time goes: run the broker in-process under cProfile, drive it with one
workload of the load generator (a subprocess), print the top functions by tottime and by
cumtime.

  .venv/bin/python bench/profile.py                          # pubsub-noack, 200k messages
  .venv/bin/python bench/profile.py --workload fanout --top 40
  .venv/bin/python bench/profile.py --workload confirms --quick

Writes bench/results/profile-<workload>.txt (the same text) and .prof (for pstats, snakeviz).
cProfile adds a fixed cost per Python call, so small, often-called functions look more
expensive than they are; compare shares between runs, not absolute seconds with run.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named profile.py, like the stdlib module that cProfile imports. Run as a
# script, its directory is sys.path[0] and would shadow the stdlib module: import cProfile
# with that directory removed, then put it back (``profile`` is cached by then).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
import cProfile  # noqa: E402
import pstats  # noqa: E402

sys.path.insert(0, str(_HERE))
sys.path.insert(1, str(_HERE.parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from workloads import (  # noqa: E402
    REPO_ROOT,
    RESULTS_DIR,
    WORKLOADS,
    default_python,
    parse_last_json,
)

from leveret.config import Config  # noqa: E402
from leveret.server import Server  # noqa: E402


@dataclass
class ProfiledRun:
    """What one profiled workload produced."""

    stats: pstats.Stats
    result: dict[str, Any]
    wall_s: float
    broker_cpu_s: float


async def drive(args: argparse.Namespace, profiler: cProfile.Profile) -> ProfiledRun:
    """Start Leveret in this loop, run the workload script against it, profile meanwhile."""
    workload = WORKLOADS[args.workload]
    server = Server(Config(host="127.0.0.1", port=0))
    await server.start()
    url = f"amqp://guest:guest@127.0.0.1:{server.port}/"
    # No --broker-pid: the script is our child, so "our process tree" would include it.
    cmd = workload.command(args.python, url, quick=args.quick, label="leveret-cprofile")
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=REPO_ROOT,  # workload scripts are relative to the repository root
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        t0, cpu0 = time.monotonic(), time.process_time()
        profiler.enable()
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), workload.timeout_s + 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        finally:
            profiler.disable()
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    finally:
        await server.stop()
    result = parse_last_json(stdout.decode()) or {
        "ok": False,
        "error": f"no JSON (rc {proc.returncode}): {stderr.decode()[-500:]}",
    }
    return ProfiledRun(pstats.Stats(profiler), result, wall, cpu)


def run_profiled(args: argparse.Namespace) -> ProfiledRun:
    """Run :func:`drive` on uvloop (as ``leveret serve`` does) unless --no-uvloop."""
    profiler = cProfile.Profile()
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(drive(args, profiler))
    return asyncio.run(drive(args, profiler))


def shorten_paths(text: str) -> str:
    """Drop the repo root and interpreter prefixes from file names in pstats output."""
    prefixes = {
        f"{REPO_ROOT}/": "",
        f"{sysconfig.get_paths()['purelib']}/": "site:",
        f"{sysconfig.get_paths()['stdlib']}/": "stdlib:",
    }
    for prefix, short in prefixes.items():
        text = text.replace(prefix, short)
    return text


def report(run: ProfiledRun, args: argparse.Namespace) -> str:
    """Header (workload figures, CPU) + top functions by tottime and by cumtime."""
    figures = {
        k: v
        for k, v in run.result.items()
        if k.endswith(("_per_s", "_us")) or k in ("ok", "error", "messages", "deliveries")
    }
    lines = [
        f"# cProfile of Leveret under {args.workload} ({'quick' if args.quick else 'full'} size)",
        f"# workload result under the profiler: {json.dumps(figures)}",
        f"# broker CPU {run.broker_cpu_s:.2f} s over {run.wall_s:.2f} s wall "
        f"({run.broker_cpu_s / run.wall_s:.2f} of one core)",
    ]
    for key, title in (("tottime", "own time (tottime)"), ("cumulative", "cumulative (cumtime)")):
        buf = io.StringIO()
        run.stats.stream = buf  # type: ignore[attr-defined]
        run.stats.sort_stats(key).print_stats(args.top)
        lines += ["", f"## top {args.top} by {title}", shorten_paths(buf.getvalue()).strip()]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=list(WORKLOADS), default="pubsub-noack")
    parser.add_argument("--quick", action="store_true", help="the smaller --quick size")
    parser.add_argument("--top", type=int, default=30, help="functions per table")
    parser.add_argument("--no-uvloop", action="store_true", help="stdlib asyncio loop")
    parser.add_argument("--python", default=default_python(), help="interpreter for the script")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    run = run_profiled(args)
    text = report(run, args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    base = args.results_dir / f"profile-{args.workload}"
    base.with_suffix(".txt").write_text(text)
    run.stats.dump_stats(base.with_suffix(".prof"))
    print(text)
    print(json.dumps({"profile": str(base.with_suffix(".txt")), "ok": bool(run.result.get("ok"))}))
    return 0 if run.result.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
