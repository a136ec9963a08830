#!/usr/bin/env python3
"""What routing through a consistent-hash exchange costs, in process.

``leveret.exchanges.routing.route`` against an ``x-consistent-hash`` exchange whose queues are bound
with weights 1-3, for 10 and 1,000 bindings:

* ``repeating``: 1,000 routing keys cycled, so the ring's memo answers after the first pass
  (what a broker sees when keys repeat: tenants, order ids of a working set);
* ``distinct``: every call a new routing key, so every call runs ``erlang:phash2`` and the
  jump hash in Python (the worst case);
* ``header``: ``hash-header`` on a longstr header, distinct values, read from the raw
  content header each time;
* ``direct``: a direct exchange with one binding per key, for scale.

Prints one line per case and a JSON object last (calls per second, best of 3).

  .venv/bin/python bench/chash_bench.py
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pamqp import commands, header

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    DestKind,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route

CALLS = 100_000


def projection(bindings: int, kind: ExchangeType, **arguments: str) -> Projection:
    proj = Projection()
    proj.apply(ExchangeDeclared(Exchange("x", kind, arguments=arguments)))
    for i in range(bindings):
        proj.apply(QueueDeclared(Queue(f"q{i}")))
        key = str(1 + i % 3) if kind is ExchangeType.CONSISTENT_HASH else f"k{i}"
        proj.apply(BindingAdded(Binding("x", f"q{i}", DestKind.QUEUE, key)))
    return proj


def best_rate(route_all: Callable[[list[Any]], None], inputs: Callable[[int], list[Any]]) -> float:
    """Calls per second, best of 3; each run gets inputs of its own (made before the clock
    starts), so a distinct-input case never meets a value the memo has seen."""
    best = float("inf")
    for run in range(3):
        batch = inputs(run)
        start = time.perf_counter()
        route_all(batch)
        best = min(best, time.perf_counter() - start)
    return CALLS / best


def by_key(p: Projection) -> Callable[[list[Any]], None]:
    def route_all(keys: list[Any]) -> None:
        for key in keys:
            route(p, "x", key)

    return route_all


def by_content(p: Projection) -> Callable[[list[Any]], None]:
    def route_all(contents: list[Any]) -> None:
        for content in contents:
            route(p, "x", "", None, content)

    return route_all


def repeating_keys(run: int) -> list[Any]:
    return [f"key-{i % 1000}" for i in range(CALLS)]


def distinct_keys(run: int) -> list[Any]:
    return [f"key-{run}-{i}" for i in range(CALLS)]


def distinct_headers(run: int) -> list[Any]:
    return [
        header.ContentHeader(
            0, 100, commands.Basic.Properties(headers={"t": f"tenant-{run}-{i}"})
        ).marshal()
        for i in range(CALLS)
    ]


def main() -> None:
    results = {}
    for bindings in (10, 1000):
        chash = ExchangeType.CONSISTENT_HASH
        cases = {
            "repeating": (by_key(projection(bindings, chash)), repeating_keys),
            "distinct": (by_key(projection(bindings, chash)), distinct_keys),
            "header": (
                by_content(projection(bindings, chash, **{"hash-header": "t"})),
                distinct_headers,
            ),
            "direct": (
                by_key(projection(bindings, ExchangeType.DIRECT)),
                lambda run, n=bindings: [f"k{i % n}" for i in range(CALLS)],
            ),
        }
        for name, (route_all, inputs) in cases.items():
            rate = best_rate(route_all, inputs)
            results[f"{name}-{bindings}"] = round(rate)
            print(f"{name:>10} {bindings:>5} bindings: {rate:>12,.0f} route() calls/s", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
