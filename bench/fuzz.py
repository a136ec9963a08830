"""Run the AMQP fuzzer (tests/fuzz/fuzz_amqp.py) for a while and sum it up: ``make fuzz``
or ``python bench/fuzz.py [--seconds N] [--seed N]``.

libFuzzer's progress is shown as it goes (without atheris' per-module lines); the last line
gives executions, executions per second and coverage (``cov``: instrumented edges of
Leveret and pamqp reached; ``ft``: libFuzzer's features; the corpus kept). New inputs go to
build/fuzz-corpus/ (seeded from tests/fuzz/corpus/), a crash to build/fuzz/crash-<sha1>.
The exit status is the fuzzer's: non-zero when it found a crash.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def main() -> int:
    """Run the fuzzer, stream its output, print the summary; its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=300, help="how long (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer seed (0: random)")
    args = parser.parse_args()
    corpus = ROOT / "build" / "fuzz-corpus"
    artifacts = ROOT / "build" / "fuzz"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "tests.fuzz.fuzz_amqp", f"-max_total_time={args.seconds}",
        f"-seed={args.seed}", "-print_final_stats=1", f"-artifact_prefix={artifacts}/",
        str(corpus), str(ROOT / "tests" / "fuzz" / "corpus"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    last = done = None
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, errors="replace"
    ) as fuzzer:
        assert fuzzer.stderr is not None
        for line in fuzzer.stderr:
            if line.startswith("INFO: Instrumenting"):
                continue
            sys.stderr.write(line)
            last = STATUS.match(line) or last
            done = DONE.match(line) or done
    if last is not None and done is not None:
        runs, seconds = int(done[1]), max(int(done[2]), 1)
        print(
            f"fuzz: {runs} executions in {seconds} s ({runs / seconds:.0f}/s), "
            f"coverage {last[2]} edges, {last[3]} features, corpus {last[4]} inputs ({last[5]})"
        )
    return fuzzer.returncode


if __name__ == "__main__":
    sys.exit(main())
