"""What the trace recorder costs per message: the columnar writer against the JSON-lines one.

    .venv/bin/python bench/trace_bench.py                # every case, 500,000 records each
    .venv/bin/python bench/trace_bench.py -n 200000 --reps 5 --cases same-properties

The writer thread shares the interpreter with the broker's event loop, so its cost per
message is CPU the broker does not have for publishing while tracing is on. Each case turns
``-n`` publish records (1,000 routing keys, one queue each) into files in a temporary
directory, end to end:

* ``parquet`` (schema version 3, today's recorder): ``leveret.trace.Segment.take``, the
  writer thread's own function (headers and delivery mode read from the raw content header,
  dictionary look-ups, Arrow columns, zstd Parquet row groups), then ``close`` (the
  dictionary file);
* ``json`` (schema version 2, the recorder before it, kept below as it was): one JSON line
  per message with its key index, written as the writer thread wrote them.

The figures are microseconds per message: wall clock, and CPU time of the whole process
(Arrow may use threads of its own), best of ``--reps``. The content headers are built with
pamqp as a client would send them:

* ``same-properties``: every message the same properties (delivery mode 2 only);
* ``message-id``: a fresh ``message_id`` per message, as aio-pika sets by default;
* ``message-id-headers``: the same, plus a four-entry headers table (Celery-like);
* ``unique-headers``: a headers table whose values differ on every message (every message
  a new key: the worst case for both formats).

Prints a JSON object per case and format, and a summary line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path

from pamqp import commands, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leveret.fieldtable import amqp_json
from leveret.message import decoded_table, headers_and_mode
from leveret.trace import Record, Segment

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


# -- schema version 2: the JSON-lines recorder as it was (broker/trace.py before version 3) ----


def _cache(function: Callable[[bytes], str]) -> Callable[[bytes], str]:
    import functools

    return functools.lru_cache(maxsize=4096)(function)


@_cache
def _v2_headers_json(table: bytes) -> str:
    return json.dumps(amqp_json(decoded_table(table)), separators=(",", ":"))


class _V2KeyIndex:
    __slots__ = ("_keys", "pending")

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str, str, str | None, tuple[str, ...]], tuple[int, str]] = {}
        self.pending: list[str] = []

    def lookup(self, fields: tuple[str, str, str, str | None, tuple[str, ...]]) -> tuple[int, str]:
        known = self._keys.get(fields)
        if known is None:
            vhost, exchange, routing_key, headers_json, queues = fields
            dumps = json.dumps
            headers = f',"headers":{headers_json}' if headers_json is not None else ""
            fragment = (
                f'"vhost":{dumps(vhost)},"exchange":{dumps(exchange)},"key":{dumps(routing_key)}'
                f'{headers},"queues":{dumps(sorted(queues))}'
            )
            digest = hashlib.blake2b(fragment.encode(), digest_size=8).digest()
            known = self._keys[fields] = (int.from_bytes(digest, "big") >> 11, fragment)
            self.pending.append(f'{{"v":2,"id":{known[0]},{fragment}}}')
        return known


def _v2_line(record: Record, index: _V2KeyIndex) -> str:
    ts, vhost, exchange, routing_key, raw_header, body_size, queues = record
    table, mode = headers_and_mode(raw_header)
    headers_json = _v2_headers_json(table) if table is not None else None
    if len(queues) > 1:
        queues = tuple(sorted(queues))
    ident, fragment = index.lookup((vhost, exchange, routing_key, headers_json, queues))
    mode_part = f',"mode":{mode}' if mode is not None else ""
    return f'{{"v":2,"ts":{ts:.6f},"id":{ident},"size":{body_size}{mode_part},{fragment}}}'


def json_lines(batch: list[Record], directory: Path) -> int:
    """The version 2 writer: lines in batches of 10,000 (a 0.2 s drain at 50k messages/s),
    the index before the lines, both flushed."""
    index = _V2KeyIndex()
    with (directory / "trace.jsonl").open("ab") as out, (directory / "keys.jsonl").open("ab") as k:
        for start in range(0, len(batch), 10_000):
            lines = [_v2_line(record, index) for record in batch[start : start + 10_000]]
            if index.pending:
                k.write(("\n".join(index.pending) + "\n").encode())
                k.flush()
                index.pending.clear()
            out.write(("\n".join(lines) + "\n").encode())
            out.flush()
    return sum(f.stat().st_size for f in directory.iterdir())


def parquet(batch: list[Record], directory: Path) -> int:
    """The version 3 writer: ``Segment.take`` in drains of 10,000, then ``close``."""
    segment = Segment(directory / "trace-20251122T000000-0001.parquet")
    buffer = deque(batch)
    while buffer:
        segment.take(buffer, 10_000, 1 << 30)
    segment.close()
    return sum(f.stat().st_size for f in directory.iterdir())


FORMATS: dict[str, Callable[[list[Record], Path], int]] = {"parquet": parquet, "json": json_lines}


def measure(
    write: Callable[[list[Record], Path], int], batch: list[Record]
) -> tuple[float, float, int]:
    """(wall µs, CPU µs) per message and bytes written."""
    with tempfile.TemporaryDirectory(prefix="leveret-trace-bench-") as directory:
        wall, cpu = time.perf_counter(), time.process_time()
        size = write(batch, Path(directory))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall * 1e6 / len(batch), cpu * 1e6 / len(batch), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=500_000, help="records per case")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--formats", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    args = parser.parse_args(argv)
    summary: dict[str, dict[str, float]] = {}
    for case in args.cases:
        batch = records(case, args.n)
        summary[case] = {}
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in args.formats}
        for _ in range(args.reps):  # interleaved: every rep runs both formats
            for name in args.formats:
                runs[name].append(measure(FORMATS[name], batch))
        for name, results in runs.items():
            best_wall = min(r[0] for r in results)
            best_cpu = min(r[1] for r in results)
            summary[case][name] = round(best_cpu, 3)
            print(
                json.dumps(
                    {
                        "case": case,
                        "format": name,
                        "records": args.n,
                        "wall_us_per_message": [round(r[0], 3) for r in results],
                        "cpu_us_per_message": [round(r[1], 3) for r in results],
                        "bytes_per_message": round(results[0][2] / args.n, 2),
                        "best_wall_us": round(best_wall, 3),
                        "best_cpu_us": round(best_cpu, 3),
                    }
                )
            )
    print(json.dumps({"best_cpu_us_per_message": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
