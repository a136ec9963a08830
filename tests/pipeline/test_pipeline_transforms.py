"""Single transforms on small DataFrames, and the job's guards (versions, paths, sessions)."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from pathlib import Path

import pytest
from pipeline_helpers import (
    MINUTE0,
    SHOP_EVENTS,
    shop_records,
    trace_record,
    write_dump,
    write_trace,
    write_trace_v2,
)
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as sf
from pyspark.testing import assertDataFrameEqual

from leveret.pipeline import job, report, transforms
from leveret.pipeline.progress import Progress
from leveret.pipeline.schema import TRACE_SCHEMA
from leveret.pipeline.topology import SourceError

# The first Spark test of a session also starts Spark (seconds, more on a busy machine).
pytestmark = pytest.mark.timeout(180)


def test_aggregate_groups_by_key_and_minute(spark: SparkSession, tmp_path: Path) -> None:
    records = [
        trace_record(MINUTE0 + 1, "x", "a", queues=["q2", "q1"], body_size=10),
        trace_record(MINUTE0 + 59.9, "x", "a", queues=["q1", "q2"], body_size=20, delivery_mode=2),
        trace_record(MINUTE0 + 60, "x", "a", queues=["q1", "q2"], body_size=5),
        trace_record(MINUTE0 + 2, "x", "a", headers={"h": 1}, body_size=1),
        {"schema_version": 1, "ts": MINUTE0 + 3, "exchange": "y"},  # defaults filled in
    ]
    trace = spark.read.schema(TRACE_SCHEMA).json(str(write_trace(tmp_path, records, files=1)))
    got = transforms.aggregate(trace).drop("schema_version")
    minute = dt.datetime.fromtimestamp(MINUTE0, dt.UTC).replace(tzinfo=None)
    later = minute + dt.timedelta(minutes=1)
    expected = [
        Row("/", "x", "a", None, minute, ["q1", "q2"], 2, 30, 1),
        Row("/", "x", "a", None, later, ["q1", "q2"], 1, 5, 0),
        Row("/", "x", "a", '{"h":1}', minute, [], 1, 1, 0),
        Row("/", "y", "", None, minute, None, 1, 0, 0),
    ]
    columns = ["vhost", "exchange", "routing_key", "headers", "minute", "recorded"]
    columns += ["messages", "bytes", "persistent"]
    got = got.select(*columns)
    assertDataFrameEqual(got, spark.createDataFrame(expected, got.schema))
    totals = transforms.key_totals(*transforms.split_groups(transforms.aggregate(trace)))
    row = totals.where("exchange = 'x' AND headers IS NULL").first()
    assert row is not None and (row["messages"], row["bytes"]) == (3, 35)


def test_indexed_read_counts_like_the_whole_read(spark: SparkSession, tmp_path: Path) -> None:
    """Version 2 lines grouped by key id, with the strings from the index, give the same key
    totals as the same lines read whole."""
    records = shop_records()
    trace_dir = write_trace_v2(tmp_path / "v2", records, files=3)
    files = job.trace_paths([str(trace_dir)])
    index = job.index_paths(files)
    assert index is not None and len(index) == 3
    counts = transforms.aggregate_indexed(job.extract_messages(spark, files))
    keys = transforms.index_keys(job.extract_index(spark, index))
    ((version, messages, _),) = transforms.versions(counts).collect()
    assert (version, messages) == (2, len(records))
    indexed = transforms.key_totals(counts, keys)
    whole = transforms.key_totals(
        *transforms.split_groups(transforms.aggregate(job.extract_trace(spark, files)))
    )
    assertDataFrameEqual(indexed, whole)
    assert indexed.count() == len(
        {(r["exchange"], r["routing_key"], str(r["headers"])) for r in records}
    )


def test_index_paths(tmp_path: Path) -> None:
    trace_dir = write_trace_v2(tmp_path, [trace_record(MINUTE0, "x", "a")], files=1)
    (trace,) = job.trace_paths([str(trace_dir)])
    assert job.index_paths([trace]) == [str(tmp_path / "keys-20251122T000000-0001.jsonl")]
    (tmp_path / "keys-20251122T000000-0001.jsonl").unlink()
    assert job.index_paths([trace]) is None  # one file without its index: read whole
    assert job.index_paths([str(tmp_path / "other.jsonl")]) is None


def test_url_traces_are_listed_through_hadoop(spark: SparkSession, tmp_path: Path) -> None:
    """A URL (here ``file://``, the same code path as ``hdfs://``/``s3a://``) is listed with
    Hadoop's file system: the trace files, not their indexes, and the indexes are found."""
    write_trace_v2(tmp_path, shop_records(), files=2)
    url = tmp_path.as_uri()
    files = job.trace_paths([url], spark)
    assert [f.rsplit("/", 1)[1] for f in files] == [
        "trace-20251122T000000-0001.jsonl",
        "trace-20251122T000000-0002.jsonl",
    ]
    index = job.index_paths(files, spark)
    assert index is not None and [i.rsplit("/", 1)[1][:5] for i in index] == ["keys-"] * 2
    (tmp_path / "keys-20251122T000000-0002.jsonl").unlink()
    assert job.index_paths(files, spark) is None
    with pytest.raises(SourceError, match="no trace files"):
        job.trace_paths([(tmp_path / "nothing").as_uri()], spark)


def test_key_pattern(spark: SparkSession) -> None:
    keys = ["order.42.created", "order..x1", "", "a.b", "#.v2.*", "uuid.3f2a-11ee.done"]
    frame = spark.createDataFrame([(k,) for k in keys], "k string")
    got = [r[0] for r in frame.select(transforms.key_pattern(sf.col("k"))).collect()]
    assert got == ["order.*.created", "order..*", "", "a.b", "#.*.*", "uuid.*.done"]


def test_newer_trace_versions_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    newer = dict(trace_record(MINUTE0, "x", "a"), schema_version=3)
    trace = write_trace(tmp_path / "trace", [trace_record(MINUTE0, "x", "a"), newer], files=1)
    options = job.JobOptions(
        trace=[str(trace)],
        topology=str(write_dump(tmp_path / "t.jsonl", SHOP_EVENTS)),
        out=tmp_path / "out",
        progress_interval=0,
    )
    with pytest.raises(SourceError, match=r"version\(s\) \[3\]"):
        job.run(options, spark)


def test_trace_paths(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no trace files"):
        job.trace_paths([str(tmp_path)])
    write_trace(tmp_path, [trace_record(MINUTE0, "x", "a")], files=1)
    (tmp_path / "notes.txt").write_text("not a trace")
    assert [Path(p).name for p in job.trace_paths([str(tmp_path)])] == [
        "trace-20251122T000000-0001.jsonl"
    ]
    assert job.trace_paths(["s3a://bucket/traces/"]) == ["s3a://bucket/traces/"]


def test_the_active_session_is_reused(spark: SparkSession) -> None:
    assert job.spark_session("local[4]", {"spark.sql.shuffle.partitions": "1"}) is spark


def test_local_cores() -> None:
    assert job._local_cores("local") == 1
    assert job._local_cores("local[3]") == 3
    assert job._local_cores("local[4,2]") == 4
    assert job._local_cores("local[*]") >= 1


def test_report_renders_without_data() -> None:
    page = report.render(
        report.Report(
            title="empty <trace>",
            charts=[report.rates_chart([]), report.fanout_chart([]), report.whatif_chart([])],
            tables=[report.Table("Nothing", ["a"], [])],
        )
    )
    assert "empty &lt;trace&gt;" in page and page.count("data:image/png;base64,") == 3
    assert "none" in page


def test_cli_options() -> None:
    args = job.build_parser().parse_args(
        ["--trace", "a", "--trace", "b", "--topology", "t.json", "--out", "o",
         "--conf", "spark.executor.memory=2g", "--no-bindings", "--master", "local[1]"]
    )  # fmt: skip
    options = job.options_from_args(args, topology=[{"event": "queue.declared", "name": "q"}])
    assert options.trace == ("a", "b") and options.master == "local[1]"
    assert options.conf == {"spark.executor.memory": "2g"}
    assert not options.bindings and options.recorded and options.report
    assert isinstance(options.topology, list)
    assert job._headline({"messages": 1, "out": "o", "groups": 7}) == {
        "messages": 1, "unroutable_messages": None, "distinct_keys": None, "seconds": None,
        "messages_per_second": None, "out": "o",
    }  # fmt: skip


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_progress_logs_numbered_stages(spark: SparkSession) -> None:
    logger, handler = logging.getLogger("leveret.pipeline"), _Lines()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        progress = Progress(spark.sparkContext, stages=2, interval=0.05)
        with progress.stage("count things") as done:
            slow = spark.sparkContext.parallelize(range(4), 2).map(lambda x: time.sleep(0.3) or x)
            done.append(f"{slow.count()} things")
        with progress.stage("nothing"):
            pass
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = handler.lines
    assert lines[0] == "[1/2] count things"
    assert any(
        re.fullmatch(r" {4}spark stage \d+: \d+/\d+ tasks \(\d+ running\)", x) for x in lines
    )
    assert re.fullmatch(r"\[1/2\] done in \d+\.\d s: 4 things", lines[-3])
    assert lines[-2] == "[2/2] nothing" and lines[-1].startswith("[2/2] done in")
    assert set(progress.timings) == {"count things", "nothing"}


def test_overlapping_stages_share_one_ticker(spark: SparkSession) -> None:
    """The job counts and routes at once: one ticker, since it lists every Spark stage."""
    progress = Progress(spark.sparkContext, stages=3, interval=0.05)

    def tickers() -> int:
        return sum(thread.name == "leveret-progress" for thread in threading.enumerate())

    with progress.stage("count"), progress.stage("route"):
        assert tickers() == 1
    with progress.stage("write"):
        assert tickers() == 1  # the next stage gets its own
    assert progress.current == 3 and set(progress.timings) == {"count", "route", "write"}
