"""From the job's tables to the summary and the HTML report.

:func:`queries` are the Spark queries that bring the report's rows to the driver (the job
runs them a few at a time): the tables that stay small whatever the trace (exchanges, rates,
fan-out, the what-if summary) whole, the others as their top N rows; :func:`assemble` puts
their results together; :func:`report_rows` gives the same rows from Arrow tables, when the
driver derived them. :func:`summarise` and :func:`build_report` then work on plain Python
rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from leveret.pipeline import report
from leveret.pipeline.topology import Topology

EXCHANGE_COLUMNS = ["vhost", "exchange", "type", "messages", "bytes", "routed_messages"]
EXCHANGE_COLUMNS += ["unroutable_messages", "unroutable_bytes", "deliveries"]
QUEUE_COLUMNS = ["vhost", "queue", "messages", "bytes", "persistent"]
BINDING_COLUMNS = ["binding_id", "vhost", "source", "destination", "routing_key", "arguments"]
UNROUTABLE_COLUMNS = ["vhost", "exchange", "pattern", "reason", "messages", "bytes", "keys"]
UNROUTABLE_COLUMNS += ["example"]
MISMATCH_COLUMNS = ["vhost", "exchange", "routing_key", "recorded", "queues", "missing"]
MISMATCH_COLUMNS += ["messages"]
WHATIF_COLUMNS = ["vhost", "queue", "current_messages", "proposed_messages"]
WHATIF_COLUMNS += ["gained_messages", "lost_messages"]

Rows = list[list[Any]]
Query = Callable[[], Any]  # one Spark action


@dataclass
class Gathered:
    """The rows the summary and the report need, already on the driver."""

    exchanges: Rows
    rates: Rows  # minute, messages, routed, unroutable
    fanout: Rows  # fanout, messages, bytes, keys
    queues: Rows
    unroutable: Rows
    mismatch: Rows
    mismatch_messages: int
    hot_bindings: Rows | None = None
    never_bindings: Rows | None = None
    binding_counts: tuple[int, int] = (0, 0)  # bindings, never matched
    whatif: dict[str, Any] | None = None
    whatif_queues: Rows = field(default_factory=list)
    whatif_unroutable: Rows = field(default_factory=list)


def _all(frame: DataFrame, columns: Sequence[str], order: Sequence[Any]) -> Query:
    return lambda: [list(row) for row in frame.select(*columns).orderBy(*order).collect()]


def _top(frame: DataFrame, columns: Sequence[str], order: Sequence[Any], limit: int) -> Query:
    return lambda: [
        list(row) for row in frame.orderBy(*order).select(*columns).limit(limit).collect()
    ]


def _first(frame: DataFrame) -> Query:
    return lambda: frame.first()


def queries(tables: Mapping[str, DataFrame], top: int) -> dict[str, Query]:
    """The report's rows as a dozen small queries over the cached tables, by name (the job
    runs them a few at a time; :func:`assemble` makes their results a :class:`Gathered`)."""
    by_messages = [sf.desc("messages")]
    rates_columns = ["minute", "messages", "routed_messages", "unroutable_messages"]
    mismatch = tables["recorded_mismatch"]
    queries: dict[str, Query] = {
        "exchanges": _all(tables["exchanges"], EXCHANGE_COLUMNS, [sf.desc("messages"), "exchange"]),
        "rates": _all(tables["rates"].where("minute IS NOT NULL"), rates_columns, ["minute"]),
        "fanout": _all(tables["fanout"], ["fanout", "messages", "bytes", "keys"], ["fanout"]),
        "queues": _top(tables["queues"], QUEUE_COLUMNS, [*by_messages, "queue"], top),
        "unroutable": _top(tables["unroutable"], UNROUTABLE_COLUMNS, by_messages, top),
        "mismatch": _top(mismatch, MISMATCH_COLUMNS, by_messages, top),
        "mismatch_total": _first(mismatch.agg(sf.coalesce(sf.sum("messages"), sf.lit(0)))),
    }
    if "bindings" in tables:
        bindings = tables["bindings"]
        columns = [*BINDING_COLUMNS, "messages", "share"]
        hot = bindings.where("messages > 0")
        queries["hot"] = _top(hot, columns, [*by_messages, "binding_id"], top)
        never = bindings.where("messages = 0")
        queries["never"] = _top(never, BINDING_COLUMNS, ["binding_id"], top)
        queries["binding_counts"] = _first(
            bindings.agg(
                sf.count(sf.lit(1)),
                sf.coalesce(sf.sum(sf.when(sf.col("messages") == 0, 1)), sf.lit(0)),
            )
        )
    if "whatif_summary" in tables:
        queries["whatif"] = _first(tables["whatif_summary"])
        changed = tables["whatif_queues"].where("gained_messages > 0 OR lost_messages > 0")
        order = [sf.desc(sf.col("gained_messages") + sf.col("lost_messages")), "queue"]
        queries["whatif_queues"] = _top(changed, WHATIF_COLUMNS, order, top)
        queries["whatif_unroutable"] = _top(
            tables["whatif_unroutable"], UNROUTABLE_COLUMNS, by_messages, top
        )
    return queries


# -- the same rows, from Arrow tables --------------------------------------------------------------


def _arrow_rows(table: Any, columns: Sequence[str]) -> list[list[Any]]:
    data = [table.column(c).to_pylist() for c in columns]
    return [list(row) for row in zip(*data, strict=True)]


def _arrow_top(
    table: Any, columns: Sequence[str], order: Sequence[tuple[str, str]], limit: int | None
) -> list[list[Any]]:
    ordered = table.sort_by(list(order)) if table.num_rows else table
    if limit is not None:
        ordered = ordered.slice(0, limit)
    return _arrow_rows(ordered, columns)


def report_rows(tables: Mapping[str, Any], top: int) -> dict[str, Any]:
    """The results of :func:`queries`, from the tables as Arrow tables (when the driver
    derived them: leveret.pipeline.local)."""
    desc = [("messages", "descending")]
    exchanges = tables["exchanges"]
    rates_table = tables["rates"]
    mismatch = tables["recorded_mismatch"]
    got: dict[str, Any] = {
        "exchanges": _arrow_top(
            exchanges, EXCHANGE_COLUMNS, [*desc, ("exchange", "ascending")], None
        ),
        "rates": _arrow_top(
            rates_table,
            ["minute", "messages", "routed_messages", "unroutable_messages"],
            [("minute", "ascending")],
            None,
        ),
        "fanout": _arrow_top(
            tables["fanout"],
            ["fanout", "messages", "bytes", "keys"],
            [("fanout", "ascending")],
            None,
        ),
        "queues": _arrow_top(tables["queues"], QUEUE_COLUMNS, [*desc, ("queue", "ascending")], top),
        "unroutable": _arrow_top(tables["unroutable"], UNROUTABLE_COLUMNS, desc, top),
        "mismatch": _arrow_top(mismatch, MISMATCH_COLUMNS, desc, top),
        "mismatch_total": (int(pc.sum(mismatch.column("messages")).as_py() or 0),),
    }
    if "bindings" in tables:
        bindings = tables["bindings"]
        hot = bindings.filter(pc.greater(bindings.column("messages"), 0))
        never = bindings.filter(pc.equal(bindings.column("messages"), 0))
        columns = [*BINDING_COLUMNS, "messages", "share"]
        got["hot"] = _arrow_top(hot, columns, [*desc, ("binding_id", "ascending")], top)
        got["never"] = _arrow_top(never, BINDING_COLUMNS, [("binding_id", "ascending")], top)
        got["binding_counts"] = (bindings.num_rows, never.num_rows)
    if "whatif_summary" in tables:
        got["whatif"] = tables["whatif_summary"].to_pylist()[0]
        queues = tables["whatif_queues"]
        changed = queues.filter(
            pc.or_(
                pc.greater(queues.column("gained_messages"), 0),
                pc.greater(queues.column("lost_messages"), 0),
            )
        )
        changed = changed.append_column(
            "change", pc.add(changed.column("gained_messages"), changed.column("lost_messages"))
        )
        got["whatif_queues"] = _arrow_top(
            changed, WHATIF_COLUMNS, [("change", "descending"), ("queue", "ascending")], top
        )
        got["whatif_unroutable"] = _arrow_top(
            tables["whatif_unroutable"], UNROUTABLE_COLUMNS, desc, top
        )
    return got


def assemble(got: Mapping[str, Any]) -> Gathered:
    """The :class:`Gathered` rows from the results of :func:`queries`, by name."""
    mismatch_total = got["mismatch_total"]
    out = Gathered(
        exchanges=got["exchanges"],
        rates=got["rates"],
        fanout=got["fanout"],
        queues=got["queues"],
        unroutable=got["unroutable"],
        mismatch=got["mismatch"],
        mismatch_messages=int(mismatch_total[0]) if mismatch_total is not None else 0,
    )
    if "hot" in got:  # per-binding attribution ran
        out.hot_bindings, out.never_bindings = got["hot"], got["never"]
        counts = got["binding_counts"]
        out.binding_counts = (int(counts[0]), int(counts[1])) if counts is not None else (0, 0)
    if "whatif" in got:
        row = got["whatif"]
        out.whatif = (row.asDict() if hasattr(row, "asDict") else dict(row)) if row else {}
        out.whatif_queues = got["whatif_queues"]
        out.whatif_unroutable = got["whatif_unroutable"]
    return out


def summarise(gathered: Gathered) -> dict[str, Any]:
    """Headline numbers, from the gathered rows (no Spark)."""
    columns = EXCHANGE_COLUMNS[3:]
    totals = {c: sum(row[3 + i] or 0 for row in gathered.exchanges) for i, c in enumerate(columns)}
    minutes = [row[0] for row in gathered.rates]
    out: dict[str, Any] = {
        **totals,
        "first_minute": min(minutes) if minutes else None,
        "last_minute": max(minutes) if minutes else None,
        "recorded_mismatch_messages": gathered.mismatch_messages,
    }
    if gathered.hot_bindings is not None:
        out["bindings"], out["bindings_never_matched"] = gathered.binding_counts
    if gathered.whatif is not None:
        out["whatif"] = gathered.whatif
    return out


# -- the report --------------------------------------------------------------------------------


def _label(vhost: str, name: str) -> str:
    return name if vhost == "/" else f"{vhost}:{name}"


def cards(summary: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The headline numbers shown at the top."""
    messages = summary.get("messages", 0) or 0
    unroutable = summary.get("unroutable_messages", 0) or 0
    share = f"{100.0 * unroutable / messages:.2f} %" if messages else "-"
    out: list[tuple[str, Any]] = [
        ("messages", messages),
        ("bytes", summary.get("bytes", 0)),
        ("routed", summary.get("routed_messages", 0)),
        ("unroutable", unroutable),
        ("unroutable share", share),
        ("deliveries", summary.get("deliveries", 0)),
        ("distinct keys", summary.get("distinct_keys", 0)),
    ]
    if "bindings" in summary:
        out.append(("bindings never matched", summary["bindings_never_matched"]))
    out.append(("recorded ≠ routed (messages)", summary.get("recorded_mismatch_messages", 0)))
    whatif = summary.get("whatif")
    if whatif:
        out.append(("what-if: newly unroutable", whatif["newly_unroutable"]))
        out.append(("what-if: routes changed", whatif["changed"]))
    return out


def charts(gathered: Gathered) -> list[report.Chart]:
    """Rates over time, top queues, fan-out histogram and (with a proposal) the what-if diff."""
    out = [
        report.rates_chart([(r[0], r[2], r[3]) for r in gathered.rates]),
        report.top_queues_chart([(_label(r[0], r[1]), r[2]) for r in gathered.queues if r[2]]),
        report.fanout_chart([(r[0], r[1]) for r in gathered.fanout]),
    ]
    if gathered.whatif is not None:
        rows = [(_label(r[0], r[1]), r[4], r[5]) for r in gathered.whatif_queues]
        out.append(report.whatif_chart(rows))
    return out


def _shown(rows: Rows, *columns: int) -> Rows:
    """Rows with empty names made visible: the default exchange, an empty routing key."""
    out = []
    for row in rows:
        row = list(row)
        for i in columns:
            if row[i] == "":
                row[i] = "(default)" if i == 1 else "(empty)"
        out.append(row)
    return out


def report_tables(gathered: Gathered, summary: Mapping[str, Any], top: int) -> list[report.Table]:
    """The report's tables, biggest first."""
    out: list[report.Table] = []
    if gathered.whatif is not None:
        whatif = gathered.whatif
        out.append(report.Table("What-if summary", list(whatif), [list(whatif.values())]))
        note = "messages each queue would gain and lose if the proposed topology routed this trace"
        out.append(report.Table("What-if: per queue", WHATIF_COLUMNS, gathered.whatif_queues, note))
        out.append(
            report.Table(
                "What-if: newly unroutable", UNROUTABLE_COLUMNS, gathered.whatif_unroutable
            )
        )
    note = "type empty: the trace names an exchange the topology does not have"
    exchanges = _shown(gathered.exchanges[:top], 1)
    out.append(report.Table("Exchanges", EXCHANGE_COLUMNS, exchanges, note))
    out.append(report.Table("Top queues", QUEUE_COLUMNS, gathered.queues))
    if gathered.hot_bindings is not None and gathered.never_bindings is not None:
        columns = [*BINDING_COLUMNS, "messages", "share"]
        out.append(report.Table("Hot bindings", columns, gathered.hot_bindings))
        never = f"{summary.get('bindings_never_matched', 0):,} binding(s) matched no message"
        out.append(
            report.Table(
                "Bindings that never matched", BINDING_COLUMNS, gathered.never_bindings, never
            )
        )
    note = "routing keys grouped by pattern: words holding a digit are shown as *"
    unroutable = _shown(gathered.unroutable, 1, 2, 7)
    out.append(report.Table("Unroutable traffic", UNROUTABLE_COLUMNS, unroutable, note))
    out.append(
        report.Table(
            "Fan-out distribution", ["fanout", "messages", "bytes", "keys"], gathered.fanout
        )
    )
    note = (
        "usually transient queues or bindings missing from the topology source (the binding "
        "log keeps durable topology only), or a topology that changed during the trace"
    )
    title = "Recorded by the broker ≠ routed here"
    out.append(report.Table(title, MISMATCH_COLUMNS, _shown(gathered.mismatch, 1, 2), note))
    return out


def build_report(
    gathered: Gathered,
    summary: Mapping[str, Any],
    top: int,
    current: Topology,
    proposed: Topology | None,
    trace: Sequence[str],
) -> report.Report:
    """The whole :class:`~pipeline.report.Report` of one job run."""
    inputs = [("trace", ", ".join(trace)), ("topology", current.name or "(objects)")]
    if proposed is not None:
        inputs.append(("proposed", proposed.name or "(objects)"))
    notes = [f"topology: {n}" for n in current.notes]
    notes += [f"proposed: {n}" for n in proposed.notes] if proposed is not None else []
    notes.append(
        "Routing uses leveret.exchanges.routing.route, the broker's own function; headers come "
        "from the trace's JSON (bytes as text, decimals as numbers, timestamps as epoch seconds), "
        "so headers-exchange bindings on decimal or timestamp values do not match them."
    )
    return report.Report(
        title="Leveret traffic analysis",
        cards=cards(summary),
        charts=charts(gathered),
        tables=report_tables(gathered, summary, top),
        notes=notes,
        inputs=inputs,
    )
