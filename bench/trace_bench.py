"""How fast the trace writer turns publish records into trace lines (``broker/trace.py``).

    .venv/bin/python bench/trace_bench.py                # every case, 200,000 records each
    .venv/bin/python bench/trace_bench.py -n 50000 --reps 5

The writer thread shares the interpreter with the broker's event loop, so its cost per line
is CPU the broker does not have for publishing while tracing is on. Each case encodes ``-n``
records (1,000 routing keys, one queue each, a fresh ``KeyIndex``) with
``leveret.trace.encode_record``, the writer's own function; the figure is lines per second
(best of ``--reps``). The content headers are built with pamqp as a client would send them:

* ``same-properties``: every message the same properties (delivery mode 2 only);
* ``message-id``: a fresh ``message_id`` per message, as aio-pika sets by default;
* ``message-id-headers``: the same, plus a four-entry headers table (Celery-like);
* ``unique-headers``: a headers table whose values differ on every message.

Prints a JSON object per case and a summary line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pamqp import commands, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leveret.trace import KeyIndex, Record, encode_record

KEYS = [f"orders.{i % 37}.created.{i}" for i in range(1000)]


def content_header(properties: commands.Basic.Properties) -> bytes:
    """A content header payload (100-byte body) as a client sends it."""
    return header.ContentHeader(0, 100, properties).marshal()


CELERY_HEADERS = {"lang": "py", "task": "tasks.add", "retries": 0, "origin": "gen1@host"}
CASES: dict[str, Callable[[int], commands.Basic.Properties]] = {
    "same-properties": lambda i: commands.Basic.Properties(delivery_mode=2),
    "message-id": lambda i: commands.Basic.Properties(delivery_mode=1, message_id=uuid.uuid4().hex),
    "message-id-headers": lambda i: commands.Basic.Properties(
        delivery_mode=2,
        content_type="application/json",
        message_id=uuid.uuid4().hex,
        headers=CELERY_HEADERS,
    ),
    "unique-headers": lambda i: commands.Basic.Properties(
        delivery_mode=2, headers={"id": i, "task": "tasks.add"}
    ),
}


def records(case: str, count: int) -> list[Record]:
    """``count`` publish records of one case (built before the clock starts)."""
    make = CASES[case]
    return [
        (
            1_763_779_980.0 + i / 1000,
            "/",
            "orders",
            KEYS[i % len(KEYS)],
            content_header(make(i)),
            100,
            (f"q{i % 10}",),
        )
        for i in range(count)
    ]


def lines_per_second(batch: list[Record]) -> float:
    """Encode ``batch`` into a fresh index, as one trace file would."""
    index = KeyIndex()
    started = time.perf_counter()
    for record in batch:
        encode_record(record, index)
    return len(batch) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200_000, help="records per case")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args(argv)
    summary: dict[str, int] = {}
    for case in args.cases:
        batch = records(case, args.n)
        rates = [lines_per_second(batch) for _ in range(args.reps)]
        summary[case] = round(max(rates))
        print(
            json.dumps({"case": case, "records": args.n, "lines_per_s": [round(r) for r in rates]})
        )
    print(json.dumps({"best_lines_per_s": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
