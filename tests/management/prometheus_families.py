"""Read metric families out of Prometheus text (RabbitMQ's or Leveret's), and capture
rabbitmq_prometheus's families from a running RabbitMQ into the data file the tests compare
Leveret with:

    python -m tests.management.prometheus_families http://127.0.0.1:15692 \\
        > tests/management/data/rabbitmq-3.10.8-prometheus.json

Run it with a few queues, connections, channels and consumers open and some messages
published, consumed and fetched, so that labelled families show their labels.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from typing import Any

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \S+)?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# Suffixes of a summary's or histogram's samples: they belong to the family without them.
SUFFIXES = ("_count", "_sum", "_bucket", "_created")

# The groups of /metrics/detailed?family=... in rabbitmq_prometheus 3.10.8
# (deps/rabbitmq_prometheus/metrics-detailed.md).
DETAILED_GROUPS = (
    "connection_churn_metrics",
    "queue_coarse_metrics",
    "queue_consumer_count",
    "queue_metrics",
    "channel_metrics",
    "channel_exchange_metrics",
    "channel_queue_metrics",
    "channel_queue_exchange_metrics",
    "channel_process_metrics",
    "connection_metrics",
    "connection_coarse_metrics",
    "connection_process_metrics",
    "vhost_status",
    "exchange_names",
    "exchange_bindings",
)


def families(text: str) -> dict[str, dict[str, Any]]:
    """name -> {"type", "help", "labels": sorted label names seen on its samples}, for every
    family with a TYPE line; every sample line must belong to one."""
    found: dict[str, dict[str, Any]] = {}
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            found.setdefault(name, {"help": None})["type"] = kind
            labels.setdefault(name, set())
        elif line.startswith("# HELP "):
            _, _, name, *rest = line.split(" ", 3)
            found.setdefault(name, {})["help"] = rest[0] if rest else ""
        elif line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name = match.group(1)
            if name not in labels:
                for suffix in SUFFIXES:
                    if name.endswith(suffix) and name[: -len(suffix)] in labels:
                        name = name[: -len(suffix)]
                        break
            assert name in labels, f"{name} has no TYPE line"
            labels[name].update(key for key, _ in LABEL.findall(match.group(2) or ""))
    for name, info in found.items():
        info["labels"] = sorted(labels.get(name, ()))
    return found


def samples(text: str) -> dict[str, dict[str, float]]:
    """sample name -> {labels text: value}, the labels written in name order
    (``{queue="q",vhost="/"}``) whatever order the exposition has them in."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            pairs = sorted(LABEL.findall(match.group(2) or ""))
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if pairs else ""
            found.setdefault(match.group(1), {})[labels] = float(match.group(3))
    return found


def capture(base: str) -> dict[str, Any]:
    """Every endpoint's families: /metrics, /metrics/per-object and each detailed group."""

    def get(path: str) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(base + path, timeout=30) as response:
            return families(response.read().decode("utf-8"))

    plain = get("/metrics/detailed")
    return {
        "/metrics": get("/metrics"),
        "/metrics/per-object": get("/metrics/per-object"),
        "/metrics/detailed": plain,
        "detailed groups": {
            group: sorted(set(get(f"/metrics/detailed?family={group}")) - set(plain))
            for group in DETAILED_GROUPS
        },
    }


if __name__ == "__main__":
    json.dump(capture(sys.argv[1].rstrip("/")), sys.stdout, indent=1, sort_keys=True)
    print()
