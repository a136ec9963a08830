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

import pyarrow.parquet as pq
import pytest
from broker_traffic import EXPECTED_QUEUES, EXPECTED_UNROUTABLE, PUBLISHED, record_traffic
from pyspark.sql import SparkSession

from leveret.pipeline import job
from leveret.storage.logtools import read_log
from leveret.storage.records import event_to_json
from leveret.trace import read_dictionary, read_messages, segment_files

pytestmark = pytest.mark.timeout(180)


def test_broker_trace_analysed(spark: SparkSession, tmp_path: Path) -> None:
    data_dir, trace_dir, out = tmp_path / "data", tmp_path / "trace", tmp_path / "out"
    record_traffic(data_dir, trace_dir)
    segments = segment_files([trace_dir])
    assert segments and not list(trace_dir.glob("*.part"))  # closed when the broker stopped
    lines = [message for segment in segments for message in read_messages(segment)]
    assert len(lines) == sum(n for n, *_ in PUBLISHED)
    assert all(line["mode"] == 2 and "body" not in line for line in lines)
    published = [(e, k, h) for n, e, k, h in PUBLISHED for _ in range(n)]
    assert [(m["exchange"], m["key"], m.get("headers")) for m in lines] == published
    # Every row's key and queue set is in its segment's dictionary, which holds nothing else.
    for segment in segments:
        keys, queue_sets = read_dictionary(segment)
        rows = pq.read_table(segment)
        assert set(rows.column("key").to_pylist()) == set(keys)
        assert set(rows.column("queues").to_pylist()) == set(queue_sets)

    # What `leveret analyze --topology DATA_DIR` does: read the binding log through storage.
    dump = [event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")]
    args = job.build_parser().parse_args(
        ["--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out)]
    )
    assert job.run_args(args, topology=dump) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["tables_on"] == "driver"
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


def test_broker_trace_in_spark_gives_the_same_answers(spark: SparkSession, tmp_path: Path) -> None:
    """Routed and derived in Spark (as for many keys and groups) or on the driver (the
    usual case): every table is the same."""
    data_dir, trace_dir = tmp_path / "data", tmp_path / "trace"
    record_traffic(data_dir, trace_dir)
    dump = [event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")]
    outs = {}
    for flags in ([], ["--driver-keys", "0", "--driver-groups", "0"]):
        out = tmp_path / ("spark" if flags else "driver")
        argv = ["--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out), *flags]
        assert job.run_args(job.build_parser().parse_args(argv), topology=dump) == 0
        outs[bool(flags)] = out
    assert json.loads((outs[False] / "summary.json").read_text())["tables_on"] == "driver"
    assert json.loads((outs[True] / "summary.json").read_text())["tables_on"] == "spark"
    tables = sorted(path.name for path in outs[False].iterdir() if path.is_dir())
    assert len(tables) == 9
    for table in tables:
        driver = spark.read.parquet(str(outs[False] / table))
        in_spark = spark.read.parquet(str(outs[True] / table))
        assert sorted(map(repr, driver.collect())) == sorted(map(repr, in_spark.collect())), table
