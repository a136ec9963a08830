"""The whole job on a synthetic trace with known counts: reports, what-if, Parquet, HTML.

One job run per trace format (module fixture) through ``main(argv)``, as ``spark-submit
pipeline/job.py`` would call it; every test then reads the tables it wrote. The formats: the
broker's version 2 lines with their key index, and version 1 lines (read whole).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import (
    EXPECTED_BINDINGS,
    EXPECTED_CHANGED,
    EXPECTED_FANOUT,
    EXPECTED_MESSAGES,
    EXPECTED_NEWLY_ROUTABLE,
    EXPECTED_NEWLY_UNROUTABLE,
    EXPECTED_QUEUES,
    EXPECTED_UNROUTABLE,
    EXPECTED_WHATIF,
    MINUTE0,
    PROPOSED_EVENTS,
    SHOP_EVENTS,
    shop_records,
    write_dump,
    write_trace,
    write_trace_v2,
)
from pyspark.sql import SparkSession

from leveret.pipeline import job
from leveret.pipeline.topology import SourceError

# The first Spark test of a session also starts Spark (seconds, more on a busy machine).
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=["v2-indexed", "v1"])
def out(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    base = tmp_path_factory.mktemp("job")
    writer = write_trace_v2 if request.param == "v2-indexed" else write_trace
    trace = writer(base / "trace", shop_records(), files=3)
    current = write_dump(base / "current.jsonl", SHOP_EVENTS)
    proposed = write_dump(base / "proposed.jsonl", PROPOSED_EVENTS)
    status = job.main(
        [
            "--trace", str(trace),
            "--topology", str(current),
            "--proposed", str(proposed),
            "--out", str(base / "out"),
        ]
    )  # fmt: skip
    assert status == 0
    summary = json.loads((base / "out" / "summary.json").read_text())
    assert summary["indexed"] is (request.param == "v2-indexed")
    return base / "out"


def table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.read.parquet(str(out / name)).collect()]


def test_summary(out: Path) -> None:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["messages"] == EXPECTED_MESSAGES
    assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
    assert summary["routed_messages"] == EXPECTED_MESSAGES - EXPECTED_UNROUTABLE
    assert summary["deliveries"] == sum(EXPECTED_QUEUES.values())
    assert summary["recorded_mismatch_messages"] == 0
    assert summary["distinct_keys"] == 15
    assert summary["bindings_never_matched"] == 2  # never.* and direct "b"
    assert summary["whatif"]["newly_unroutable"] == EXPECTED_NEWLY_UNROUTABLE


def test_per_queue(spark: SparkSession, out: Path) -> None:
    rows = table(spark, out, "queues")
    assert {r["queue"]: r["messages"] for r in rows} == EXPECTED_QUEUES


def test_per_exchange(spark: SparkSession, out: Path) -> None:
    rows = {r["exchange"]: r for r in table(spark, out, "exchanges")}
    assert rows["orders"]["messages"] == 18
    assert rows["orders"]["unroutable_messages"] == 3
    assert rows["orders"]["deliveries"] == 25
    assert rows["missing"]["type"] is None and rows["missing"]["unroutable_messages"] == 7
    assert rows["amq.topic"]["messages"] == 0  # idle exchanges are listed too
    assert rows["front"]["deliveries"] == 6


def test_per_binding(spark: SparkSession, out: Path) -> None:
    rows = table(spark, out, "bindings")
    found = {(r["source"], r["destination"], r["routing_key"]): r["messages"] for r in rows}
    assert found == EXPECTED_BINDINGS
    share = {r["destination"]: r["share"] for r in rows if r["source"] == "orders"}
    assert share["q.orders.all"] == pytest.approx(15 / EXPECTED_MESSAGES)


def test_unroutable_by_pattern(spark: SparkSession, out: Path) -> None:
    rows = {(r["exchange"], r["pattern"]): r for r in table(spark, out, "unroutable")}
    assert set(rows) == {("orders", "invoice.*.paid"), ("direct", "zzz"), ("hdr", ""),
                         ("missing", "k.*")}  # fmt: skip
    assert rows[("missing", "k.*")]["reason"] == "no such exchange"
    assert rows[("missing", "k.*")]["messages"] == 7
    assert rows[("orders", "invoice.*.paid")]["reason"] == "no matching binding"
    assert rows[("direct", "zzz")]["messages"] == 6


def test_fanout_and_rates(spark: SparkSession, out: Path) -> None:
    fanout = {r["fanout"]: r["messages"] for r in table(spark, out, "fanout")}
    assert fanout == EXPECTED_FANOUT
    rates = sorted(table(spark, out, "rates"), key=lambda r: r["minute"])
    assert [int(r["minute"].timestamp()) for r in rates] == [MINUTE0, MINUTE0 + 60, MINUTE0 + 120]
    assert [r["messages"] for r in rates] == [17, 17, 16]  # round-robin over three minutes
    assert sum(r["unroutable_messages"] for r in rates) == EXPECTED_UNROUTABLE
    queue_rates = table(spark, out, "queue_rates")
    assert sum(r["messages"] for r in queue_rates if r["queue"] == "q.log1") == 9


def test_whatif(spark: SparkSession, out: Path) -> None:
    rows = table(spark, out, "whatif_queues")
    found = {
        r["queue"]: (
            r["current_messages"], r["proposed_messages"], r["gained_messages"],
            r["lost_messages"],
        )
        for r in rows
        if r["queue"] in EXPECTED_WHATIF
    }  # fmt: skip
    assert found == EXPECTED_WHATIF
    (summary,) = table(spark, out, "whatif_summary")
    assert summary["newly_unroutable"] == EXPECTED_NEWLY_UNROUTABLE
    assert summary["newly_routable"] == EXPECTED_NEWLY_ROUTABLE
    assert summary["changed"] == EXPECTED_CHANGED
    lost = {
        (r["exchange"], r["reason"]): r["messages"] for r in table(spark, out, "whatif_unroutable")
    }
    assert lost == {
        ("logs", "exchange removed"): 4,
        ("front", "no matching binding"): 3,
        ("alt", "no matching binding"): 2,
    }


def test_html_report_is_self_contained_with_charts(out: Path) -> None:
    page = (out / "report.html").read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert [alt for alt, _ in images] == [
        "Rates over time", "Top queues", "Fan-out distribution", "What-if diff"
    ]  # fmt: skip
    assert all(len(data) > 1000 for _, data in images)
    for title in ("Unroutable traffic", "Hot bindings", "Bindings that never matched",
                  "What-if: per queue", "What-if: newly unroutable", "Exchanges"):  # fmt: skip
        assert f"<h2>{title}</h2>" in page
    assert "invoice.*.paid" in page and "never.*" in page
    assert "http://" not in page and "https://" not in page  # nothing to fetch


def read_whole_and_check(spark: SparkSession, trace: Path, tmp_path: Path) -> dict[str, Any]:
    """Run the job on ``trace`` (shop traffic): it must have read the trace whole and still
    counted every message; returns the summary."""
    options = job.JobOptions(
        trace=[str(trace)],
        topology=str(write_dump(tmp_path / "current.jsonl", SHOP_EVENTS)),
        out=tmp_path / "out",
        report=False,
        progress_interval=0,
    )
    summary = job.run(options, spark)
    assert summary["indexed"] is False
    assert summary["messages"] == EXPECTED_MESSAGES
    assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
    return summary


def test_a_damaged_index_is_read_whole(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index that lacks a key the lines use: a warning, then the trace read whole, with
    every message counted."""
    trace = write_trace_v2(tmp_path / "trace", shop_records(), files=2)
    index = trace / "keys-20251122T000000-0001.jsonl"
    index.write_text("".join(index.read_text().splitlines(keepends=True)[1:]))
    read_whole_and_check(spark, trace, tmp_path)
    assert "reading every field of every line instead" in caplog.text


def test_a_bad_topology_stops_the_count(spark: SparkSession, tmp_path: Path) -> None:
    """The topology is read while the count runs: its error surfaces, and no Spark job is
    left running (the count is cancelled if it has started; on a trace this small it may
    simply finish first, so the test does not tell the two apart)."""
    trace = write_trace_v2(tmp_path / "trace", shop_records(), files=2)
    (tmp_path / "bad.json").write_text("{not json")
    options = job.JobOptions(
        trace=[str(trace)], topology=str(tmp_path / "bad.json"), out=tmp_path / "out"
    )
    with pytest.raises(SourceError):
        job.run(options, spark)
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()


def test_a_directory_with_v1_and_v2_files_is_read_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A broker upgraded mid-trace leaves version 1 files (no index) next to version 2 ones:
    the job reads them all whole, and counts every message once."""
    records = shop_records()
    trace = write_trace(tmp_path / "trace", records[: len(records) // 2], files=1)
    newer = write_trace_v2(tmp_path / "v2", records[len(records) // 2 :], files=1)
    for path in newer.iterdir():  # same directory, later file names
        path.rename(trace / path.name.replace("-0001", "-0002"))
    summary = read_whole_and_check(spark, trace, tmp_path)
    assert summary["distinct_keys"] == 15
