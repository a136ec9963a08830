"""A crash at any point of compaction leaves a loadable log with the same live definitions.

A child process opens the log and compacts it, and SIGKILLs itself at one of the
``COMPACT_STEPS`` (what ``kill -9`` or a power cut would do there); the parent then opens the
log as the broker would at start-up.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from storage_helpers import project

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
    QueueDeleted,
)
from leveret.storage.log import COMPACT_STEPS, DefinitionLog
from leveret.storage.logtools import check

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, signal, sys
from leveret.storage.log import DefinitionLog

def crash(step):
    if step == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)

log = DefinitionLog.open(sys.argv[1])
log.compact(on_step=crash)
"""


def history() -> list[tuple[str, Event]]:
    records: list[tuple[str, Event]] = [
        ("/", ExchangeDeclared(Exchange("x", ExchangeType.TOPIC))),
    ]
    for i in range(300):
        records.append(("/", QueueDeclared(Queue(f"q{i}", durable=True))))
        records.append(("/", BindingAdded(Binding("x", f"q{i}", DestKind.QUEUE, f"k.{i}"))))
        if i % 3:
            records.append(("/", QueueDeleted(f"q{i}")))
    return records


@pytest.mark.parametrize("step", COMPACT_STEPS)
def test_a_crash_during_compaction_leaves_a_loadable_log(tmp_path: Path, step: str) -> None:
    path = tmp_path / "definitions.log"
    records = history()
    with DefinitionLog.open(path) as log:
        log.append_many(records)
        expected_live = log.live_events()
    before = path.read_bytes()

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), step], cwd=ROOT, capture_output=True, timeout=60
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()

    compacted = path.read_bytes() != before
    assert compacted == (COMPACT_STEPS.index(step) >= COMPACT_STEPS.index("renamed"))
    with DefinitionLog.open(path) as log:
        replayed = log.replay()
        assert project(replayed) == project(records)
        assert log.live_events() == expected_live
        assert len(replayed) == (len(expected_live) if compacted else len(records))
    assert check(path).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["definitions.log"]  # temp removed
