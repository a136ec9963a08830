"""End to end: a real broker records a trace, the job analyses it, the numbers match what the
test published.

The broker runs in-process with a data dir (so durable topology goes to its binding log) and
a trace dir. The topology comes from that binding log, read through ``storage`` and turned
into dump objects, exactly as ``leveret analyze`` does for a data dir, and is handed to
``leveret.pipeline.job.run_args``. A transient queue is bound too: it is not in the binding log, so
the report must show the broker's recorded queues differing from the routes for exactly
the messages it received.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from broker_traffic import EXPECTED_QUEUES, EXPECTED_UNROUTABLE, PUBLISHED, record_traffic
from pyspark.sql import SparkSession

from leveret.pipeline import job
from leveret.storage.logtools import read_log
from leveret.storage.records import event_to_json

pytestmark = pytest.mark.timeout(180)


def test_broker_trace_analysed(spark: SparkSession, tmp_path: Path) -> None:
    data_dir, trace_dir, out = tmp_path / "data", tmp_path / "trace", tmp_path / "out"
    record_traffic(data_dir, trace_dir)
    lines = [
        json.loads(line)
        for path in sorted(trace_dir.glob("trace-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert len(lines) == sum(n for n, *_ in PUBLISHED)
    assert {line["v"] for line in lines} == {2}
    assert all(line["mode"] == 2 and "body" not in line for line in lines)
    # Every line's key is in its file's index, with the line's own fields, once per file.
    key_fields = ("vhost", "exchange", "key", "headers", "queues")
    for path in sorted(trace_dir.glob("trace-*.jsonl")):
        index_lines = (path.parent / ("keys-" + path.name[6:])).read_text().splitlines()
        index = {entry["id"]: entry for entry in map(json.loads, index_lines)}
        assert len(index) == len(index_lines)
        used = [json.loads(line) for line in path.read_text().splitlines()]
        for line in used:
            assert {f: line.get(f) for f in key_fields} == {
                f: index[line["id"]].get(f) for f in key_fields
            }
        assert {line["id"] for line in used} == set(index)
    assert len({line["id"] for line in lines}) == len(PUBLISHED)

    # What `leveret analyze --topology DATA_DIR` does: read the binding log through storage.
    dump = [event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")]
    args = job.build_parser().parse_args(
        ["--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out)]
    )
    assert job.run_args(args, topology=dump) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["indexed"] is True
    assert summary["messages"] == sum(n for n, *_ in PUBLISHED)
    assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
    assert summary["bytes"] == sum(10 * n + n * (n - 1) // 2 for n, *_ in PUBLISHED)
    queues = {r["queue"]: r["messages"] for r in spark.read.parquet(str(out / "queues")).collect()}
    assert queues == EXPECTED_QUEUES
    persistent = spark.read.parquet(str(out / "queues")).where("queue = 'shop.pdf'").first()
    assert persistent is not None and persistent["persistent"] == 9
    unroutable = {
        (r["exchange"], r["pattern"]): r["messages"]
        for r in spark.read.parquet(str(out / "unroutable")).collect()
    }
    assert unroutable == {
        ("shop.orders", "invoice.*"): 7,
        ("shop.hdr", ""): 3,
        ("amq.fanout", "any"): 6,
    }
    # The broker also delivered order.created.eu to the transient queue: the report says so.
    (mismatch,) = spark.read.parquet(str(out / "recorded_mismatch")).collect()
    assert mismatch["missing"] == ["shop.tmp"] and mismatch["messages"] == 20
    assert summary["recorded_mismatch_messages"] == 20


def test_broker_trace_read_whole_gives_the_same_answers(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``--no-index`` reads every field of every line: every table equals the indexed read's."""
    data_dir, trace_dir = tmp_path / "data", tmp_path / "trace"
    record_traffic(data_dir, trace_dir)
    dump = [event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")]
    outs = {}
    for flag in ([], ["--no-index"]):
        out = tmp_path / ("whole" if flag else "indexed")
        argv = ["--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out), *flag]
        assert job.run_args(job.build_parser().parse_args(argv), topology=dump) == 0
        outs[bool(flag)] = out
    assert json.loads((outs[False] / "summary.json").read_text())["indexed"] is True
    assert json.loads((outs[True] / "summary.json").read_text())["indexed"] is False
    tables = sorted(path.name for path in outs[False].iterdir() if path.is_dir())
    assert len(tables) == 9
    for table in tables:
        indexed = spark.read.parquet(str(outs[False] / table))
        whole = spark.read.parquet(str(outs[True] / table))
        assert sorted(map(repr, indexed.collect())) == sorted(map(repr, whole.collect())), table
