"""Single transforms on small DataFrames, and the job's guards (versions, paths, sessions)."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import (
    MINUTE0,
    SHOP_EVENTS,
    shop_records,
    trace_record,
    write_dump,
    write_segments,
    write_trace,
)
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as sf
from pyspark.testing import assertDataFrameEqual

from leveret.pipeline import inputs, job, local, report, session, transforms
from leveret.pipeline.progress import Progress
from leveret.pipeline.schema import ROWS_SCHEMA, TRACE_SCHEMA
from leveret.pipeline.topology import SourceError, Topology

# The first Spark test of a session also starts Spark (seconds, more on a busy machine).
pytestmark = pytest.mark.timeout(180)


def test_aggregate_json_groups_by_key_and_minute(spark: SparkSession, tmp_path: Path) -> None:
    records = [
        trace_record(MINUTE0 + 1, "x", "a", queues=["q2", "q1"], body_size=10),
        trace_record(MINUTE0 + 59.9, "x", "a", queues=["q1", "q2"], body_size=20, delivery_mode=2),
        trace_record(MINUTE0 + 60, "x", "a", queues=["q1", "q2"], body_size=5),
        trace_record(MINUTE0 + 2, "x", "a", headers={"h": 1}, body_size=1),
        {"schema_version": 1, "ts": MINUTE0 + 3, "exchange": "y"},  # defaults filled in
    ]
    trace = spark.read.schema(TRACE_SCHEMA).json(str(write_trace(tmp_path, records, files=1)))
    got = transforms.aggregate_json(trace)
    minute = MINUTE0 // 60
    expected = [
        Row("/", "x", "a", None, ["q1", "q2"], minute, 2, 30, 1),
        Row("/", "x", "a", None, ["q1", "q2"], minute + 1, 1, 5, 0),
        Row("/", "x", "a", '{"h":1}', [], minute, 1, 1, 0),
        Row("/", "y", "", None, [], minute, 1, 0, 0),
    ]
    columns = ["vhost", "exchange", "routing_key", "headers", "recorded", "minute"]
    columns += ["messages", "bytes", "persistent"]
    selected = got.select(*columns)
    assertDataFrameEqual(selected, spark.createDataFrame(expected, selected.schema))
    ids = {(r["routing_key"], r["headers"]): r["key"] for r in got.collect()}
    assert len(set(ids.values())) == 3  # one id per key, whatever its minutes


def test_segments_count_like_json_lines(spark: SparkSession, tmp_path: Path) -> None:
    """Version 3 segments grouped on their ids, with the strings from the dictionaries, give
    the same totals per key and minute as the same messages read whole from JSON lines."""
    records = shop_records()
    segments = inputs.find_traces([str(write_segments(tmp_path / "v3", records, files=3))])
    lines = inputs.find_traces([str(write_trace(tmp_path / "v1", records, files=2))])
    assert (len(segments.segments), len(segments.jsonl)) == (3, 0)
    assert (len(lines.segments), len(lines.jsonl)) == (0, 2)
    rows = spark.read.schema(ROWS_SCHEMA).parquet(*segments.segments)
    keys, sets = inputs.read_dictionaries(segments.segments)
    assert keys.num_rows == 15 and sets.num_rows == len({tuple(r["queues"]) for r in records})
    by_key = {k["key"]: k for k in keys.to_pylist()}
    from_segments = {
        (*(by_key[g["key"]][f] for f in ("exchange", "routing_key", "headers")), g["minute"]): (
            g["messages"],
            g["bytes"],
        )
        for g in transforms.aggregate_segments(rows).collect()
    }
    whole = transforms.aggregate_json(spark.read.schema(TRACE_SCHEMA).json(lines.jsonl))
    from_lines = {
        (g["exchange"], g["routing_key"], g["headers"], g["minute"]): (g["messages"], g["bytes"])
        for g in whole.collect()
    }
    assert from_segments == from_lines
    assert sum(m for m, _ in from_segments.values()) == len(records)


def test_driver_totals_count_by_key_and_by_route_class(spark: SparkSession) -> None:
    """What comes to the driver: a row per key id and queue set id, and one per route class
    and minute (keys reaching the same queues of a vhost share a class), whatever the number
    of key-minute groups."""
    import pyarrow as pa

    keys = pa.table(
        {
            "key": pa.array([1, 2, 3, 4], pa.int64()),
            "vhost": ["/", "/", "other", "/"],
            "exchange": ["x"] * 4,
            "routing_key": ["a", "b", "a", "c"],
            "headers": pa.nulls(4, pa.string()),
        }
    )
    routes = pa.table(
        {
            "key": pa.array([4, 3, 2, 1], pa.int64()),
            "queues": [[], ["q1"], ["q1", "q2"], ["q1", "q2"]],
        }
    )
    key_class, classes = local.route_classes(keys, routes)
    by_key = dict(zip(key_class["key"].to_pylist(), key_class["class"].to_pylist(), strict=True))
    assert by_key[1] == by_key[2]  # same vhost, same queues
    assert len({by_key[1], by_key[3], by_key[4]}) == 3  # another vhost; no queue
    assert classes.num_rows == 3

    # (key, queue set, minute, messages, bytes, persistent): 6 key-minute groups.
    groups = spark.createDataFrame(
        [
            (1, 10, 100, 2, 20, 1),
            (1, 10, 101, 1, 10, 0),
            (2, 10, 100, 3, 30, 3),
            (2, 11, 102, 1, 5, 0),
            (3, 12, 100, 4, 40, 0),
            (4, 13, 101, 5, 50, 5),
        ],
        "key long, queue_set long, minute long, messages long, bytes long, persistent long",
    )
    totals = transforms.driver_totals(groups, spark.createDataFrame(key_class)).toArrow()
    per_id, class_minutes = local.split_totals(totals)
    assert sorted(tuple(r.values()) for r in per_id.to_pylist()) == [
        (1, 10, 3, 30, 1, 100, 101),
        (2, 10, 3, 30, 3, 100, 100),
        (2, 11, 1, 5, 0, 102, 102),
        (3, 12, 4, 40, 0, 100, 100),
        (4, 13, 5, 50, 5, 101, 101),
    ]
    minutes = local.minute_routes(class_minutes, classes)
    rows = sorted(
        (r["minute"], r["vhost"], tuple(r["queues"]), r["messages"], r["bytes"])
        for r in minutes.to_pylist()
    )
    assert rows == [
        (100, "/", ("q1", "q2"), 5, 50),  # keys 1 and 2 in one row
        (100, "other", ("q1",), 4, 40),
        (101, "/", (), 5, 50),
        (101, "/", ("q1", "q2"), 1, 10),
        (102, "/", ("q1", "q2"), 1, 5),
    ]
    queue_rates = local.queue_rates(minutes)
    assert sorted(
        (r["minute"].minute, r["vhost"], r["queue"], r["messages"]) for r in queue_rates.to_pylist()
    ) == [
        (40, "/", "q1", 5),
        (40, "/", "q2", 5),
        (40, "other", "q1", 4),
        (41, "/", "q1", 1),
        (41, "/", "q2", 1),
        (42, "/", "q1", 1),
        (42, "/", "q2", 1),
    ]


def test_find_traces(tmp_path: Path) -> None:
    write_segments(tmp_path, [trace_record(MINUTE0, "x", "a")], files=1)
    write_trace(tmp_path, [trace_record(MINUTE0, "x", "a")], files=1)
    (tmp_path / "notes.txt").write_text("not a trace")
    found = inputs.find_traces([str(tmp_path)])
    assert [Path(p).name for p in found.segments] == ["trace-20251122T000000-0001.parquet"]
    assert [Path(p).name for p in found.jsonl] == ["trace-20251122T000000-0001.jsonl"]
    assert inputs.find_traces(["s3a://bucket/traces/"]).urls == ["s3a://bucket/traces/"]
    assert inputs.segment_minutes(found.segments) == 1


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda d: d / "nothing", "nothing: no such file or directory"),
        (lambda d: d, "no trace files in it"),
        (lambda d: _write(d / "x.jsonl", '{"a": 1}\n'), "not a Leveret trace"),
        (lambda d: _write(d / "x.jsonl", "hello\n"), "not a Leveret trace"),
        (lambda d: _write(d / "x.jsonl", ""), "empty, not a trace file"),
        (lambda d: _write(d / "x.jsonl", '{"v": 9, "ts": 1}\n'), "version 9 is newer"),
        (lambda d: _write(d / "x.bin", b"\xff\xfe\x00"), "not a trace file"),
        (lambda d: _write(d / "trace-1.parquet", b"PAR1garbage"), "a damaged Parquet file"),
        (lambda d: d / "*.jsonl", "matches no file"),
    ],
)
def test_what_is_not_a_trace(tmp_path: Path, make: Any, error: str) -> None:
    """Today's mistakes, each one line (no Spark involved): a path that is not there, an
    empty directory, a file that is not a trace (once 'analysed' as one unroutable message),
    a trace newer than the pipeline."""
    with pytest.raises(SourceError, match=re.escape(error)) as caught:
        inputs.find_traces([str(make(tmp_path))])
    assert "\n" not in str(caught.value)


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def test_a_segment_needs_its_dictionary(tmp_path: Path) -> None:
    write_segments(tmp_path, [trace_record(MINUTE0, "x", "a")], files=1)
    (tmp_path / "keys-20251122T000000-0001.parquet").unlink()
    with pytest.raises(SourceError, match=r"its dictionary .* is missing"):
        inputs.find_traces([str(tmp_path)])


def test_the_inputs_are_checked_before_spark(tmp_path: Path) -> None:
    """Topology and output problems, found by ``job.prepare`` (which needs no Spark)."""
    trace = write_segments(tmp_path / "trace", [trace_record(MINUTE0, "x", "a")], files=1)
    dump = write_dump(tmp_path / "t.jsonl", SHOP_EVENTS)

    def options(**changes: Any) -> job.JobOptions:
        base = {"trace": [str(trace)], "topology": str(dump), "out": tmp_path / "out"}
        return job.JobOptions(**(base | changes))

    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe")
    (tmp_path / "file").write_text("")
    for changes, error in [
        ({"topology": str(tmp_path / "missing.json")}, "--topology"),
        ({"topology": str(tmp_path / "bad.json")}, "bad.json"),
        ({"topology": str(tmp_path / "binary.json")}, "not a text file"),
        ({"proposed": str(tmp_path / "missing.json")}, "--proposed"),
        ({"out": tmp_path / "file" / "out"}, "--out"),
    ]:
        with pytest.raises(SourceError, match=re.escape(error)):
            job.prepare(options(**changes))
    prepared = job.prepare(options())
    assert prepared.traces.segments and prepared.current.describe().startswith("1 vhost")


def test_url_traces_are_listed_through_hadoop(spark: SparkSession, tmp_path: Path) -> None:
    """A URL (here ``file://``, the same code path as ``hdfs://``/``s3a://``) is listed with
    Hadoop's file system: the segments and JSON-lines files, not the dictionaries, and each
    segment's dictionary is read through Spark."""
    write_segments(tmp_path, shop_records(), files=2)
    write_trace(tmp_path, shop_records()[:3], files=1)
    traces = inputs.find_traces([tmp_path.as_uri()])
    session.list_urls(spark, traces)
    assert [f.rsplit("/", 1)[1] for f in traces.segments] == [
        "trace-20251122T000000-0001.parquet",
        "trace-20251122T000000-0002.parquet",
    ]
    assert [f.rsplit("/", 1)[1] for f in traces.jsonl] == ["trace-20251122T000000-0001.jsonl"]
    keys, _ = session.read_dictionaries(spark, traces.segments)
    assert keys.num_rows == 15
    (tmp_path / "keys-20251122T000000-0002.parquet").unlink()
    with pytest.raises(SourceError, match="dictionary is missing"):
        session.list_urls(spark, inputs.find_traces([tmp_path.as_uri()]))
    with pytest.raises(SourceError, match="no trace files"):
        session.list_urls(spark, inputs.find_traces([(tmp_path / "nothing").as_uri()]))


def test_key_pattern(spark: SparkSession) -> None:
    """Spark's and Arrow's regular expressions agree on the unroutable report's patterns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["order.42.created", "order..x1", "", "a.b", "#.v2.*", "uuid.3f2a-11ee.done", "1.2.3"]
    expected = ["order.*.created", "order..*", "", "a.b", "#.*.*", "uuid.*.done", "*.*.*"]
    frame = spark.createDataFrame([(k,) for k in keys], "k string")
    got = [r[0] for r in frame.select(transforms.key_pattern(sf.col("k"))).collect()]
    assert got == expected
    arrow = pc.replace_substring_regex(pa.array(keys), local.KEY_PATTERN, "*").to_pylist()
    assert arrow == expected


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


def test_the_active_session_is_reused(spark: SparkSession) -> None:
    assert session.spark_session("local[4]", {"spark.sql.shuffle.partitions": "1"}) is spark


def test_local_cores() -> None:
    assert session._local_cores("local") == 1
    assert session._local_cores("local[3]") == 3
    assert session._local_cores("local[4,2]") == 4
    assert session._local_cores("local[*]") >= 1


def test_rates_chart_for_short_and_long_traces() -> None:
    """A trace within one minute is drawn (bars around that minute), and one of weeks is
    summed per hour (or day) instead of 30,000 minutes."""
    start = dt.datetime(2025, 11, 22, 2, 53, tzinfo=dt.UTC)
    assert report.rate_buckets([(start, 5, 1)]) == ("minute", [(start, 5, 1)])
    weeks = [(start + dt.timedelta(minutes=m), 1, 0) for m in range(0, 21 * 1440, 7)]
    unit, buckets = report.rate_buckets(weeks)
    assert unit == "hour" and 500 < len(buckets) <= 505
    assert sum(b[1] for b in buckets) == len(weeks)
    months = [(start + dt.timedelta(hours=h), 1, 0) for h in range(0, 24 * 90)]
    assert report.rate_buckets(months)[0] == "day"
    for rows in ([(start, 5, 1)], weeks):
        assert report.rates_chart(rows).uri.startswith("data:image/png;base64,")


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
        ["--trace", "a", "--trace", "b", "--topology", "data", "--out", "o",
         "--conf", "spark.executor.memory=2g", "--no-bindings", "--master", "local[1]",
         "--driver-keys", "5", "--ui"]
    )  # fmt: skip
    options = job.options_from_args(args, topology=[{"event": "queue.declared", "name": "q"}])
    assert options.trace == ("a", "b") and options.master == "local[1]"
    assert options.conf == {"spark.executor.memory": "2g"}
    assert not options.bindings and options.recorded and options.report
    assert options.ui and options.driver_keys == 5 and options.driver_groups == 4_000_000
    # Read from a data dir: the report names the directory, not "dump".
    assert isinstance(options.topology, Topology)
    assert options.topology.name == "data (Leveret data dir)"
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
