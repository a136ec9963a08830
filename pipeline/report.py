"""The self-contained HTML report: headline numbers, charts and tables in one file.

Charts are drawn with matplotlib's object API (no pyplot, no display needed) into PNGs that
are embedded as ``data:`` URIs, and the style sheet is inline, so the report is a single
file that can be mailed or attached to a ticket. Inputs are plain Python rows, already
collected from Spark and cut to a readable size by :mod:`leveret.pipeline.collect`.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from matplotlib.figure import Figure

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: .6em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .5em 1em; min-width: 9em; }
.card b { display: block; font-size: 1.3em; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
.charts figure { margin: 0; } .charts img { width: 100%; border: 1px solid #eee; }
.note { color: #555; } code { background: #f6f6f6; padding: 0 .2em; }
"""


@dataclass
class Table:
    """One table of the report (rows already cut to size)."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    note: str = ""


@dataclass
class Chart:
    """One chart of the report, as a PNG data URI."""

    title: str
    uri: str


@dataclass
class Report:
    """Everything the HTML page shows."""

    title: str
    cards: list[tuple[str, Any]] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inputs: list[tuple[str, str]] = field(default_factory=list)


# -- charts ------------------------------------------------------------------------------------


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure() -> tuple[Figure, Any]:
    figure = Figure(figsize=(6.4, 3.6))
    axes = figure.add_subplot()
    axes.grid(True, alpha=0.3)
    return figure, axes


def _empty(axes: Any, text: str = "no data") -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes)


def rate_buckets(
    rows: Sequence[tuple[datetime, int, int]], points: int = 1500
) -> tuple[str, list[tuple[datetime, int, int]]]:
    """Per-minute ``(minute, routed, unroutable)`` rows summed into the unit that keeps the
    chart readable: minutes up to ``points`` of them (a day), then hours, then days.
    Returns the unit and the rows."""
    if not rows:
        return "minute", []
    span = (max(r[0] for r in rows) - min(r[0] for r in rows)).total_seconds()
    for unit, seconds in (("minute", 60), ("hour", 3600), ("day", 86400)):
        if span / seconds < points or unit == "day":
            break
    if unit == "minute":
        return unit, sorted(rows)
    sums: dict[datetime, list[int]] = {}
    for minute, routed, unroutable in rows:
        start = minute.replace(second=0, microsecond=0, minute=0)
        if unit == "day":
            start = start.replace(hour=0)
        bucket = sums.setdefault(start, [0, 0])
        bucket[0] += routed
        bucket[1] += unroutable
    return unit, [(start, r, u) for start, (r, u) in sorted(sums.items())]


def rates_chart(rows: Sequence[tuple[datetime, int, int]]) -> Chart:
    """Messages over time, routed and unroutable (``(minute, routed, unroutable)`` rows):
    per minute, or per hour or day for a trace of days or weeks. A trace within one minute
    is one bar per series, the x axis around that minute (a line needs two points, and
    matplotlib widens a one-point date axis to years)."""
    import matplotlib.dates

    dates: Any = matplotlib.dates  # untyped functions: called through Any
    figure, axes = _figure()
    unit, buckets = rate_buckets(rows)
    if buckets:
        times = [b[0] for b in buckets]
        routed = [b[1] for b in buckets]
        unroutable = [b[2] for b in buckets]
        width = {"minute": 60, "hour": 3600, "day": 86400}[unit] / 86400  # days
        if len(buckets) <= 3:
            axes.bar(times, routed, width=width * 0.8, align="edge", label="routed",
                     color="#2a7ab9")  # fmt: skip
            axes.bar(times, unroutable, width=width * 0.8, align="edge", bottom=routed,
                     label="unroutable", color="#d9534f")  # fmt: skip
        else:
            axes.plot(times, routed, label="routed", color="#2a7ab9", drawstyle="steps-post")
            axes.plot(times, unroutable, label="unroutable", color="#d9534f",
                      drawstyle="steps-post")  # fmt: skip
        start = dates.date2num(times[0])
        end = dates.date2num(times[-1]) + width
        margin = (end - start) * 0.02
        axes.set_xlim(start - margin, end + margin)
        locator = dates.AutoDateLocator(minticks=3, maxticks=8)
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
        axes.set_ylim(bottom=0)
        axes.legend(loc="best")
    else:
        _empty(axes)
    axes.set_ylabel(f"messages / {unit}")
    axes.set_title("Rates over time (UTC)")
    return Chart("Rates over time", _png(figure))


def _barh(title: str, labels: Sequence[str], values: Sequence[float], xlabel: str) -> Chart:
    figure, axes = _figure()
    if labels:
        positions = list(range(len(labels)))[::-1]
        axes.barh(positions, values, color="#2a7ab9")
        axes.set_yticks(positions, [label[:40] for label in labels], fontsize=8)
    else:
        _empty(axes)
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    return Chart(title, _png(figure))


def top_queues_chart(rows: Sequence[tuple[str, int]]) -> Chart:
    """Queues with the most messages delivered (``(label, messages)``, biggest first)."""
    return _barh("Top queues", [r[0] for r in rows], [r[1] for r in rows], "messages delivered")


def fanout_chart(rows: Sequence[tuple[int, int]]) -> Chart:
    """Messages by number of queues reached (``(fanout, messages)``); 0 is unroutable."""
    figure, axes = _figure()
    if rows:
        colors = ["#d9534f" if fanout == 0 else "#2a7ab9" for fanout, _ in rows]
        positions = list(range(len(rows)))
        axes.bar(positions, [r[1] for r in rows], color=colors)
        step = max(1, len(rows) // 20)  # at most ~20 tick labels
        axes.set_xticks(positions[::step], [str(r[0]) for r in rows][::step])
    else:
        _empty(axes)
    axes.set_xlabel("queues reached per message (0 = unroutable)")
    axes.set_ylabel("messages")
    axes.set_title("Fan-out distribution")
    return Chart("Fan-out distribution", _png(figure))


def whatif_chart(rows: Sequence[tuple[str, int, int]]) -> Chart:
    """Per queue, messages gained (right) and lost (left) under the proposed topology."""
    figure, axes = _figure()
    if rows:
        positions = list(range(len(rows)))[::-1]
        axes.barh(positions, [r[1] for r in rows], color="#5cb85c", label="gained")
        axes.barh(positions, [-r[2] for r in rows], color="#d9534f", label="lost")
        axes.set_yticks(positions, [r[0][:40] for r in rows], fontsize=8)
        axes.axvline(0, color="#444", linewidth=0.8)
        axes.legend(loc="best")
    else:
        _empty(axes, "no queue changes")
    axes.set_xlabel("messages (lost < 0 < gained)")
    axes.set_title("What-if: per-queue difference")
    return Chart("What-if diff", _png(figure))


# -- HTML --------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return f"<td>{html.escape(str(value if value is not None else ''))}</td>"
    if isinstance(value, int):
        return f'<td class="n">{value:,}</td>'
    if isinstance(value, float):
        return f'<td class="n">{value:,.4g}</td>'
    if isinstance(value, list | tuple):
        value = ", ".join(str(v) for v in value)
    return f"<td>{html.escape(str(value))}</td>"


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in table.rows)
    if not table.rows:
        body = f'<tr><td colspan="{len(table.columns)}" class="note">none</td></tr>'
    note = f'<p class="note">{html.escape(table.note)}</p>' if table.note else ""
    return f"<h2>{html.escape(table.title)}</h2>{note}<table><tr>{head}</tr>{body}</table>"


def render(report: Report) -> str:
    """The report as one HTML document."""
    cards = "".join(
        f'<div class="card">{html.escape(label)}<b>{_number(value)}</b></div>'
        for label, value in report.cards
    )
    charts = "".join(
        f'<figure><img alt="{html.escape(c.title)}" src="{c.uri}"></figure>' for c in report.charts
    )
    inputs = "".join(
        f"<li>{html.escape(k)}: <code>{html.escape(v)}</code></li>" for k, v in report.inputs
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(report.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
        f"<ul>{inputs}</ul>" if inputs else "",
        f'<div class="cards">{cards}</div>',
        f'<h2>Charts</h2><div class="charts">{charts}</div>',
        *(_table(t) for t in report.tables),
        f'<h2>Notes</h2><ul class="note">{notes}</ul>' if notes else "",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _number(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return html.escape(str(value))
