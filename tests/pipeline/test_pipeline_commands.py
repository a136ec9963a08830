"""The job as an operator starts it: ``leveret analyze`` and ``spark-submit pipeline/job.py``.

Both run as subprocesses with their own JVM, on a trace a real broker recorded
(``broker_traffic``): ``leveret analyze`` reads the topology from the broker's data dir and a
proposed topology from a RabbitMQ ``definitions.json``; ``spark-submit`` gets the same
topology as ``leveret log dump`` output. The what-if numbers are worked out by hand below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from broker_traffic import EXPECTED_QUEUES, EXPECTED_UNROUTABLE, PUBLISHED, record_traffic
from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# Two JVMs start here, one after the other.
pytestmark = pytest.mark.timeout(300)


def _binding(source: str, destination: str, key: str, **arguments: Any) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": "/",
        "destination": destination,
        "destination_type": "exchange" if destination == "shop.audit" else "queue",
        "routing_key": key,
        "arguments": arguments,
    }


def _exchange(name: str, kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "vhost": "/",
        "type": kind,
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
    }


# The shop topology as a RabbitMQ export, with two changes: shop.all also takes invoices,
# and shop.eu is no longer bound.
PROPOSED = {
    "rabbit_version": "3.13.7",
    "vhosts": [{"name": "/"}],
    "queues": [
        {"name": name, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
        for name in EXPECTED_QUEUES
    ],
    "exchanges": [
        _exchange("shop.orders", "topic"),
        _exchange("shop.audit", "fanout"),
        _exchange("shop.hdr", "headers"),
    ],
    "bindings": [
        _binding("shop.orders", "shop.all", "order.#"),
        _binding("shop.orders", "shop.all", "invoice.#"),
        _binding("shop.orders", "shop.audit", "order.created.*"),
        _binding("shop.audit", "shop.audit.q", ""),
        _binding("shop.hdr", "shop.pdf", "", **{"x-match": "all", "format": "pdf"}),
    ],
}
# invoice.1 (7) becomes routable; order.created.eu (20) no longer reaches shop.eu.
EXPECTED_WHATIF = {
    "routed_now": 44,  # 60 published, 16 unroutable
    "routed_proposed": 51,
    "newly_unroutable": 0,
    "newly_routable": 7,
    "changed": 27,
}
EXPECTED_WHATIF_QUEUES = {"shop.all": (7, 0), "shop.eu": (0, 20)}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _check_summary(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["messages"] == sum(n for n, *_ in PUBLISHED)
    assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
    assert summary["tables_on"] == "driver"
    assert (out / "report.html").stat().st_size > 0
    return summary


def test_leveret_analyze_and_spark_submit(spark: SparkSession, tmp_path: Path) -> None:
    data_dir, trace_dir = tmp_path / "data", tmp_path / "trace"
    record_traffic(data_dir, trace_dir)
    proposed = tmp_path / "definitions.json"
    proposed.write_text(json.dumps(PROPOSED))
    spark_options = ["--master", "local[2]", "--conf", "spark.ui.enabled=false"]

    analyzed = tmp_path / "analyzed"
    done = _run(
        [
            str(BIN / "leveret"),
            "analyze",
            *("--trace", str(trace_dir), "--topology", str(data_dir)),
            *("--proposed", str(proposed), "--out", str(analyzed)),
            *spark_options,
        ],
        cwd=tmp_path,
    )
    # Progress while it runs: one line per stage on stderr, then the headline.
    for stage in range(1, 6):
        assert f"[{stage}/5]" in done.stderr
    assert "analysed 60 messages" in done.stderr
    summary = _check_summary(analyzed)
    page = (analyzed / "report.html").read_text()
    assert f"topology: <code>{data_dir} (Leveret data dir)</code>" in page  # not "dump"
    assert f"proposed: <code>{proposed}</code>" in page
    assert {key: summary["whatif"][key] for key in EXPECTED_WHATIF} == EXPECTED_WHATIF
    rows = spark.read.parquet(str(analyzed / "whatif_queues")).collect()
    changed = {
        row["queue"]: (row["gained_messages"], row["lost_messages"])
        for row in rows
        if row["gained_messages"] or row["lost_messages"]
    }
    assert changed == EXPECTED_WHATIF_QUEUES
    queues = spark.read.parquet(str(analyzed / "queues")).collect()
    assert {row["queue"]: row["messages"] for row in queues} == EXPECTED_QUEUES

    dump = tmp_path / "topology.jsonl"
    dumped = _run([str(BIN / "leveret"), "log", "dump", "--data-dir", str(data_dir)], tmp_path)
    dump.write_text(dumped.stdout)
    submitted = tmp_path / "submitted"
    _run(
        [
            str(BIN / "spark-submit"),
            *spark_options,
            str(REPO / "pipeline" / "job.py"),
            *("--trace", str(trace_dir), "--topology", str(dump), "--out", str(submitted)),
        ],
        cwd=tmp_path,  # not the checkout: job.py finds its packages from its own path
    )
    _check_summary(submitted)
    for table in ("queues", "exchanges", "bindings", "unroutable", "fanout", "rates"):
        ours = spark.read.parquet(str(submitted / table)).collect()
        theirs = spark.read.parquet(str(analyzed / table)).collect()
        assert sorted(map(repr, ours)) == sorted(map(repr, theirs)), table


def _wrong(tmp_path: Path, name: str, content: str | bytes | None) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return str(path)


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("missing-trace", "--trace {tmp}/nothing: no such file or directory"),
        ("not-a-trace", "--trace {tmp}/notes.txt: not a Leveret trace"),
        ("missing-topology", "--topology {tmp}/nothing.json: no such file or directory"),
        ("bad-definitions", "--topology {tmp}/definitions.json: line 1: not JSON"),
    ],
)
def test_leveret_analyze_refuses_bad_inputs_before_spark(
    tmp_path: Path, case: str, error: str
) -> None:
    """One line, exit status 2, and no JVM started (so it answers in about a second)."""
    trace = _wrong(tmp_path, "trace-20251122T000000-0001.jsonl", '{"v": 2, "ts": 1}\n')
    topology = _wrong(tmp_path, "topology.jsonl", "")
    if case == "missing-trace":
        trace = str(tmp_path / "nothing")
    elif case == "not-a-trace":
        trace = _wrong(tmp_path, "notes.txt", "hello, world\n")
    elif case == "missing-topology":
        topology = str(tmp_path / "nothing.json")
    else:
        topology = _wrong(tmp_path, "definitions.json", "{not json")
    argv = [str(BIN / "leveret"), "analyze", "--trace", trace, "--topology", topology]
    done = subprocess.run(
        [*argv, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line[:2].isdigit()]
    assert lines == ["error: " + error.format(tmp=tmp_path)] or (
        len(lines) == 1 and lines[0].startswith("error: " + error.format(tmp=tmp_path))
    ), done.stderr
    assert "Spark" not in done.stderr and "log4j" not in done.stderr
