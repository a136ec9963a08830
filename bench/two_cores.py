#!/usr/bin/env python3
"""The step after compiling (issue 34): what a second core could give Leveret, measured.

Leveret runs on one core (one asyncio loop); garagemq's Go runtime uses every core. This
bench measures the ceiling of the cheapest way to a second core, queues sharded over worker
processes, before anything is built for it: two load-generator pairs (each a publisher and a
consumer on a queue of its own, ``bench/loadgen/pubsub.py``) run at the same time against

- ``leveret x1``: one Leveret process (both pairs share its core), the build as it is;
- ``leveret x2``: two Leveret processes, one pair each: the ideal sharding (each worker owns
  its queues, no message crosses processes, the clients know which worker to connect to);
- ``garagemq``: one garagemq (Debian's package), both pairs.

The figure is the pairs' summed rate; the brokers' CPU is their process CPU over the run, in
cores. Interleaved, ``--reps`` rounds (the order rotates), medians printed as a markdown
table and written to ``bench/results/two_cores.md``. The load generators run on the same two
cores (about 0.2 of a core per pair), so every broker here has less than two cores: the
ceiling is the ratio between the rows, not the absolute rates.

  .venv/bin/python bench/two_cores.py --leveret-build compiled=build/compiled
  .venv/bin/python bench/two_cores.py --workloads pubsub-noack --reps 1 --quick
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from garagemq import GaragemqProcess, binary
from workloads import (
    REPO_ROOT,
    RESULTS_DIR,
    WORKLOADS,
    ChildBroker,
    LeveretProcess,
    default_python,
    describe_build,
    parse_last_json,
)

PAIRS = 2


def broker_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / 100.0  # USER_HZ


def run_pairs(key: str, brokers: list[ChildBroker], args: argparse.Namespace) -> dict[str, Any]:
    """Run PAIRS copies of workload ``key`` at once, pair i against brokers[i % len]; return
    the summed rate, the brokers' CPU in cores and whether every pair succeeded."""
    workload = WORKLOADS[key]
    field = workload.metrics[0].field
    pids = [b.pid for b in brokers if b.pid is not None]
    cpu0 = [broker_cpu_s(pid) for pid in pids]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            workload.command(args.python, brokers[i % len(brokers)].url, quick=args.quick),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PAIRS)
    ]
    results = []
    for proc in procs:
        out, _err = proc.communicate(timeout=workload.timeout_s + 30)
        results.append(parse_last_json(out) or {"ok": False})
    wall = time.monotonic() - t0
    cpu = sum(broker_cpu_s(pid) - before for pid, before in zip(pids, cpu0, strict=True))
    ok = all(r.get("ok") for r in results)
    rate = sum(float(r.get(field) or 0) for r in results)
    return {"ok": ok, "rate": rate, "broker_cores": cpu / wall, "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="pubsub-noack,pubsub-ack")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--leveret-build", default="compiled=build/compiled", metavar="NAME=DIR")
    parser.add_argument("--python", default=default_python())
    args = parser.parse_args()
    keys = [k for k in args.workloads.split(",") if k]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        print(f"two_cores.py: unknown workload: {unknown[0]}", file=sys.stderr)
        return 64
    if binary() is None:
        print("two_cores.py: garagemq not found (apt-get install garagemq)", file=sys.stderr)
        return 69
    build_name, _, build_dir = args.leveret_build.partition("=")
    build_dir = str((REPO_ROOT / build_dir).resolve()) if build_dir else ""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    logs = RESULTS_DIR / f"two-cores-{stamp}"

    def leveret(i: int) -> LeveretProcess:
        return LeveretProcess(args.python, Path(f"{logs}-leveret{i}.log"), build_dir)

    setups: dict[str, list[ChildBroker]] = {
        f"leveret {build_name} x1": [leveret(0)],
        f"leveret {build_name} x2 (sharded)": [leveret(1), leveret(2)],
        "garagemq": [GaragemqProcess(Path(f"{logs}-garagemq.log"), binary() or "garagemq")],
    }
    for brokers in setups.values():
        for broker in brokers:
            broker.start()
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        names = list(setups)
        for rep in range(args.reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for key in keys:
                for name in order:
                    result = run_pairs(key, setups[name], args)
                    rows.setdefault((key, name), []).append(result)
                    print(
                        f"[rep {rep + 1}] {key:<13} {name:<28} {result['rate']:>10,.0f}/s "
                        f"broker {result['broker_cores']:.2f} cores ok={result['ok']}",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        for brokers in setups.values():
            for broker in brokers:
                broker.stop()
                broker.close_log()
    lines = [
        "# A second core: two pubsub pairs at once (bench/two_cores.py)",
        "",
        f"- {stamp}, {args.reps} interleaved reps, medians; {PAIRS} pairs, each a publisher"
        " and a consumer on its own queue; the load generators share the 2 cores",
        f"- Leveret build {build_name}: {describe_build(args.python, build_dir)}",
        "",
        "| workload | broker | msgs/s (sum of pairs) | / garagemq | broker CPU (cores) |",
        "|---|---|---:|---:|---:|",
    ]
    for key in keys:
        garage = statistics.median(r["rate"] for r in rows[(key, "garagemq")])
        for name in setups:
            runs = rows[(key, name)]
            rate = statistics.median(r["rate"] for r in runs)
            cores = statistics.median(r["broker_cores"] for r in runs)
            failed = "" if all(r["ok"] for r in runs) else " (a pair failed)"
            lines.append(
                f"| {key} | {name}{failed} | {rate:,.0f} | {rate / garage:.2f} | {cores:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    (RESULTS_DIR / "two_cores.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
