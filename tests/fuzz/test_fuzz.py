"""The fuzzer in ``make test``: every committed input (the seed corpus, and the inputs that
once crashed the broker, tests/fuzz/regressions/) replayed through the fuzz target, and a
short coverage-guided atheris run (fixed seed and number of runs, so it does the same
every time) from the committed corpus. ``make fuzz`` runs it for longer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pamqp import commands

from tests.fuzz.target import run

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
# About 10 s of instrumented runs on one free core (~220 executions/s, 2026-11-29).
RUNS = 2000
INPUTS = sorted(p for p in [*CORPUS.iterdir(), *REGRESSIONS.iterdir()] if p.name[0] != ".")


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_a_committed_input_keeps_the_invariants(path: Path) -> None:
    run(path.read_bytes())


def test_the_corpus_reaches_the_session() -> None:
    # The seeds must get past the handshake, or the fuzzer would only see the frame reader.
    replies = {type(value) for _, value in run((CORPUS / "seed_publish_consume").read_bytes())}
    assert commands.Basic.Deliver in replies
    assert commands.Basic.GetEmpty in replies or commands.Basic.GetOk in replies


def test_properties_that_do_not_decode_close_with_541_without_an_internal_error() -> None:
    # Found by the fuzzer: RabbitMQ's channel process crashes on content properties that
    # do not decode and the reader closes with 541 (broker/session/publish.py); the
    # broker must answer so without a bug of its own (run() checks no exception was logged).
    last = run((CORPUS / "found_undecodable_properties").read_bytes())[-1][1]
    assert isinstance(last, commands.Connection.Close)
    assert (last.reply_code, last.reply_text) == (541, "INTERNAL_ERROR")


@pytest.mark.timeout(180)
def test_a_short_coverage_guided_run_finds_no_crash(tmp_path: Path) -> None:
    new = tmp_path / "new"
    new.mkdir()
    result = subprocess.run(
        [
            sys.executable, "-m", "tests.fuzz.fuzz_amqp", "-seed=1", f"-runs={RUNS}",
            f"-artifact_prefix={tmp_path}/", str(new), str(CORPUS),
        ],
        cwd=ROOT,
        # A fixed hash seed: set and dict orders, hence the paths taken, are the same each run.
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=170,
    )  # fmt: skip
    tail = "\n".join(result.stderr.splitlines()[-30:])
    assert result.returncode == 0, tail
    assert f"Done {RUNS} runs" in result.stderr, tail
    assert not list(tmp_path.glob("crash-*")), tail
