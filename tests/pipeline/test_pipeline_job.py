"""The whole job on a synthetic trace with known counts: reports, what-if, Parquet, HTML.

One job run per trace format and way of working (module fixture) through ``main(argv)``, as
``spark-submit pipeline/job.py`` would call it; every test then reads the tables it wrote.
The formats: the broker's version 3 segments, with the keys routed and the tables derived on
the driver (the usual case) or both in Spark (many keys, many groups: forced here with
``--driver-keys 0 --driver-groups 0``), and the JSON lines of versions 2 and 1 (read whole).
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
    write_segments,
    write_trace,
    write_trace_v2,
)
from pyspark.sql import SparkSession

from leveret.pipeline import job
from leveret.pipeline.topology import SourceError

# The first Spark test of a session also starts Spark (seconds, more on a busy machine).
pytestmark = pytest.mark.timeout(180)


WRITERS = {
    "v3": write_segments,
    "v3-spark": write_segments,
    "v2": write_trace_v2,
    "v1": write_trace,
}
# Routes and tables in Spark, from every row of the segments rather than their counts.
IN_SPARK = ["--driver-keys", "0", "--driver-groups", "0", "--rows"]


def run_shop(base: Path, writer: str, *flags: str) -> Path:
    """The shop traffic as ``writer`` writes it, analysed with the proposal; returns OUT."""
    trace = WRITERS[writer](base / "trace", shop_records(), files=3)
    current = write_dump(base / "current.jsonl", SHOP_EVENTS)
    proposed = write_dump(base / "proposed.jsonl", PROPOSED_EVENTS)
    status = job.main(
        [
            "--trace", str(trace),
            "--topology", str(current),
            "--proposed", str(proposed),
            "--out", str(base / "out"),
            *flags,
        ]
    )  # fmt: skip
    assert status == 0
    return base / "out"


@pytest.fixture(scope="module", params=list(WRITERS))
def out(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    in_spark = request.param.endswith("-spark")
    result = run_shop(
        tmp_path_factory.mktemp("job"), request.param, *(IN_SPARK if in_spark else [])
    )
    summary = json.loads((result / "summary.json").read_text())
    # The shop's 50 messages are 40 key-minute groups: on the driver unless forced to Spark.
    assert summary["tables_on"] == ("spark" if in_spark else "driver")
    read = {"v3": "counts", "v3-spark": "rows"}.get(request.param, "json")
    assert summary["read"] == read
    return result


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


def test_spark_tables_equal_driver_tables(spark: SparkSession, tmp_path: Path) -> None:
    """The two ways of deriving the tables (Arrow on the driver, Spark queries), of routing
    (driver, mapPartitions) and of reading segments (their counts, their rows) give the
    same rows in every table."""
    driver = run_shop(tmp_path / "driver", "v3")
    in_spark = run_shop(tmp_path / "spark", "v3", *IN_SPARK)
    names = sorted(p.name for p in driver.iterdir() if p.is_dir())
    assert len(names) == 12
    for name in names:
        ours = [_plain(r.asDict()) for r in spark.read.parquet(str(driver / name)).collect()]
        theirs = [_plain(r.asDict()) for r in spark.read.parquet(str(in_spark / name)).collect()]
        assert sorted(map(repr, ours)) == sorted(map(repr, theirs)), name


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 12) if isinstance(v, float) else v for k, v in sorted(row.items())}


def test_a_bad_topology_stops_before_spark_works(spark: SparkSession, tmp_path: Path) -> None:
    """The topology is read before any Spark job: its error surfaces, and none ran."""
    trace = write_segments(tmp_path / "trace", shop_records(), files=2)
    (tmp_path / "bad.json").write_text("{not json")
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    options = job.JobOptions(
        trace=[str(trace)], topology=str(tmp_path / "bad.json"), out=tmp_path / "out"
    )
    with pytest.raises(SourceError, match=r"bad\.json"):
        job.run(options, spark)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) == jobs


def test_a_directory_with_json_lines_and_segments(spark: SparkSession, tmp_path: Path) -> None:
    """A broker upgraded mid-trace leaves JSON-lines files (version 1 here) next to version 3
    segments: the job reads them all, counts every message once, and each key is one key
    whatever the format of its files."""
    records = shop_records()
    trace = write_trace(tmp_path / "trace", records[: len(records) // 2], files=1)
    write_segments(trace, records[len(records) // 2 :], files=1)
    options = job.JobOptions(
        trace=[str(trace)],
        topology=str(write_dump(tmp_path / "current.jsonl", SHOP_EVENTS)),
        out=tmp_path / "out",
        report=False,
        progress_interval=0,
    )
    summary = job.run(options, spark)
    assert summary["messages"] == EXPECTED_MESSAGES
    assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
    assert summary["distinct_keys"] == 15
    keys = spark.read.parquet(str(tmp_path / "out" / "keys")).collect()
    assert len(keys) == 15 and sum(r["messages"] for r in keys) == EXPECTED_MESSAGES
