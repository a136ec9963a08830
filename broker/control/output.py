"""How ``leveret ctl`` prints what the node sends: rabbitmqctl's ``table`` formatter (a
header line, then one tab-separated line per object) and its ``json`` formatter (an array,
one object a line), banners included unless ``--quiet``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO


def cell(value: Any) -> str:
    """One value in a table: booleans as Erlang prints them, tables and lists as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in value):
        return "[" + ", ".join(cell(v) for v in value) + "]"  # tags: [administrator]
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


class Listing:
    """Prints a listing as its rows arrive (the node sends them in batches)."""

    def __init__(self, formatter: str, headers: bool, out: TextIO = sys.stdout) -> None:
        self.formatter = formatter
        self.headers = headers
        self.out = out
        self.count = 0

    def start(self, columns: list[str]) -> None:
        """Before the first row: the header line or the array's opening."""
        if self.formatter == "json":
            self.out.write("[\n")
        elif self.headers:
            self.out.write("\t".join(columns) + "\n")

    def rows(self, rows: Iterable[dict[str, Any]]) -> None:
        """Some rows, in the node's column order."""
        for row in rows:
            if self.formatter == "json":
                prefix = "," if self.count else ""
                self.out.write(prefix + json.dumps(row, ensure_ascii=False) + "\n")
            else:
                self.out.write("\t".join(cell(v) for v in row.values()) + "\n")
            self.count += 1

    def finish(self) -> None:
        """After the last row."""
        if self.formatter == "json":
            self.out.write("]\n")


def status_text(status: dict[str, Any]) -> str:
    """``status`` for people, in rabbitmqctl status's sections."""
    memory, disk, totals = status["memory"], status["disk"], status["totals"]
    lines = [
        "Runtime",
        "",
        f"OS PID: {status['pid']}",
        f"Product name: {status['product_name']}",
        f"Product version: {status['product_version']}",
        f"RabbitMQ version (behaviour profile): {status['rabbitmq_version']}",
        f"Uptime (seconds): {status['uptime']}",
        f"Data directory: {status['data_directory'] or '(none: memory only)'}",
        "",
        "Alarms",
        "",
        *([f"{name} alarm" for name in status["alarms"]] or ["(none)"]),
        "",
        "Memory",
        "",
        f"Held by messages: {memory['used']} bytes",
        f"Process RSS: {cell(memory['rss']) or 'unknown'} bytes",
        f"High watermark: {memory['high_watermark']} bytes",
        "",
        "Free Disk Space",
        "",
        f"Low free disk space watermark: {disk['free_limit']} bytes",
        f"Free disk space: {cell(disk['free']) or 'not monitored (no data directory)'}",
        "",
        "Listeners",
        "",
        *(
            f"Interface: {item['interface']}, port: {item['port']}, protocol: {item['protocol']}"
            for item in status["listeners"]
        ),
        "",
        "Totals",
        "",
        *(f"{name}: {count}" for name, count in totals.items()),
    ]
    return "\n".join(lines)


def report_text(report: dict[str, Any]) -> str:
    """``report`` for people: the status, the listeners, then each listing as a table."""
    lines = [status_text(report["status"]), ""]
    for name, rows in report["listings"].items():
        lines += [f"{name}:", ""]
        if rows:
            lines.append("\t".join(rows[0]))
            lines += ["\t".join(cell(value) for value in row.values()) for row in rows]
        lines.append("")
    return "\n".join(lines).rstrip("\n")
