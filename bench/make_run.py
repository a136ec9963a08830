#!/usr/bin/env python3
"""How long after ``git clone`` does ``make run`` serve AMQP, and how big is its venv?

    .venv/bin/python bench/make_run.py                        # HEAD, 3 reps
    .venv/bin/python bench/make_run.py --rev e2c718a --rev HEAD --reps 3 --json out.jsonl

Each run is a fresh machine as far as this repository can make one: a new clone of the
revision, a new, empty pip cache (``PIP_CACHE_DIR``), no venv. The clock starts before
``make`` builds the venv (``.venv/.installed-run``, the first half of ``make run``) and stops
when the broker, started as ``make run`` starts it but on free ports, accepts a TCP
connection on its AMQP port. Revisions alternate within each rep, so a slow minute of the
network or of the machine falls on all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workloads import REPO_ROOT, accepts_tcp, free_port

LISTEN_TIMEOUT_S = 30.0


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what ``du --apparent-size`` counts)."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def one_run(rev: str, workdir: Path) -> dict[str, Any]:
    """Clone ``rev``, then time ``make`` of the run install and the broker until it listens."""
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", rev], check=True)
    commit = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    env = dict(os.environ, PIP_CACHE_DIR=str(workdir / "pip-cache"))
    env.pop("VIRTUAL_ENV", None)
    amqp_port = free_port()
    started = time.monotonic()
    install = subprocess.run(
        ["make", "-C", str(clone), ".venv/.installed-run"], env=env, capture_output=True
    )
    installed = time.monotonic()
    if install.returncode != 0:
        tail = install.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return {"rev": rev, "commit": commit, "ok": False, "error": " ".join(tail)}
    serve = subprocess.Popen(
        [
            str(clone / ".venv/bin/leveret"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(amqp_port),
            "--management-port",
            str(free_port()),
            "--prometheus-port",
            "-1",
            "--data-dir",
            str(clone / "data"),
        ],
        cwd=clone,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not accepts_tcp("127.0.0.1", amqp_port, timeout=0.05):
            if serve.poll() is not None or time.monotonic() - installed > LISTEN_TIMEOUT_S:
                return {"rev": rev, "commit": commit, "ok": False, "error": "did not listen"}
            time.sleep(0.02)
        listening = time.monotonic()
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    return {
        "rev": rev,
        "commit": commit,
        "ok": True,
        "install_s": round(installed - started, 2),
        "listen_s": round(listening - started, 2),
        "venv_mb": round(directory_bytes(clone / ".venv") / 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", help="git revision (repeatable; default HEAD)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="append one JSON line per run here")
    args = parser.parse_args()
    revs = args.rev or ["HEAD"]
    records: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for rev in revs:
            workdir = Path(tempfile.mkdtemp(prefix="make-run-"))
            try:
                record = one_run(rev, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            record["rep"] = rep
            record["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            records.append(record)
            print(json.dumps(record), flush=True)
            if args.json:
                with args.json.open("a") as out:
                    out.write(json.dumps(record) + "\n")
    print("\n| revision | listening after (s), median | min - max | install (s) | venv (MB) |")
    print("|---|---:|---|---:|---:|")
    for rev in revs:
        ok = [r for r in records if r["rev"] == rev and r["ok"]]
        if not ok:
            print(f"| {rev} | failed | | | |")
            continue
        listen = [r["listen_s"] for r in ok]
        print(
            f"| {rev} ({ok[0]['commit']}) | {statistics.median(listen):.1f} | "
            f"{min(listen):.1f} - {max(listen):.1f} | "
            f"{statistics.median(r['install_s'] for r in ok):.1f} | {ok[0]['venv_mb']} |"
        )
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
