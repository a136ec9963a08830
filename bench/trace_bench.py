"""What the trace recorder costs: per message in process, and end to end at full publish speed.

    .venv/bin/python bench/trace_bench.py                # every case, 500,000 records each
    .venv/bin/python bench/trace_bench.py -n 200000 --reps 5 --cases same-properties
    .venv/bin/python bench/trace_bench.py --end-to-end --reps 5    # pubsub no-ack, A/B

**In process** (the default): each case makes ``-n`` publish records (1,000 routing keys, one
queue each, content headers shared as the broker's codec shares them) and records them, end
to end into files in a temporary directory, with:

* ``columnar`` (schema version 3, today's recorder): ``TraceWriter.record`` for every
  message on this thread's event loop, 250 per turn as from a socket read, its writer
  thread meanwhile, then ``close``;
* ``json`` (schema version 2, the recorder before version 3, kept below as it was): the
  publish path appended a tuple to a deque, the writer thread made one JSON line per message
  with its key index.

Figures in microseconds per message, best of ``--reps`` (interleaved): ``publish_us``, the
CPU time of the recording thread (what the event loop pays per publish); ``cpu_us``, the CPU
time of the whole process from the first record to the files closed (publish path, writer
thread, Arrow's threads); and wall clock. Cases, content headers built with pamqp as a
client sends them:

* ``same-properties``: every message the same properties (delivery mode 2 only);
* ``message-id``: a fresh ``message_id`` per message, as aio-pika sets by default;
* ``message-id-headers``: the same, plus a four-entry headers table (Celery-like);
* ``unique-headers``: a headers table whose values differ on every message (every message
  a new key: the worst case for both formats).

**End to end** (``--end-to-end``): ``bench/loadgen/pubsub.py --ack none`` (``-n`` messages,
default 200,000 there) against a fresh ``leveret serve`` without and with ``--trace-dir``,
interleaved (round 1: without then with, round 2: with then without, ...); prints each run,
then the median and range of msgs/s and of the broker's CPU µs per message (all, the event
loop's thread, the other threads) for both, and the ratio of the medians. ``--compare
PYTHON`` adds the same two runs per round with another checkout's broker (its venv's
interpreter), for before / after.

Prints a JSON object per case and format (per run end to end), and a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pamqp import commands, header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import PUBSUB, REPO_ROOT, accepts_tcp, default_python, free_port, run_script

from leveret.node.fieldtable import amqp_json
from leveret.node.message import decoded_table, headers_and_mode
from leveret.trace import TraceWriter

# What the broker's publish path gives the recorder: vhost, exchange, routing key, the raw
# content header, the body size and the routed queue names.
Record = tuple[str, str, str, bytes, int, frozenset[str]]

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
    """``count`` publish records of one case (built before the clock starts). Content headers
    of up to 128 bytes are shared, and each queue's name set is one object, as in the broker
    (``leveret.wire.codec`` shares repeated headers; routing returns a binding index's own set)."""
    make = CASES[case]
    shared: dict[bytes, bytes] = {}
    queues = [frozenset({f"q{i}"}) for i in range(10)]
    out: list[Record] = []
    for i in range(count):
        raw = content_header(make(i))
        if len(raw) <= 128:
            raw = shared.setdefault(raw, raw)
        out.append(("/", "orders", KEYS[i % len(KEYS)], raw, 100, queues[i % 10]))
    return out


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


# What the version 2 publish path queued: (ts, vhost, exchange, routing key, raw content
# header, body size, queue names).
_V2Record = tuple[float, str, str, str, bytes, int, tuple[str, ...]]


def _v2_line(record: _V2Record, index: _V2KeyIndex) -> str:
    ts, vhost, exchange, routing_key, raw_header, body_size, queues = record
    table, mode = headers_and_mode(raw_header)
    headers_json = _v2_headers_json(table) if table is not None else None
    if len(queues) > 1:
        queues = tuple(sorted(queues))
    ident, fragment = index.lookup((vhost, exchange, routing_key, headers_json, queues))
    mode_part = f',"mode":{mode}' if mode is not None else ""
    return f'{{"v":2,"ts":{ts:.6f},"id":{ident},"size":{body_size}{mode_part},{fragment}}}'


def json_lines(batch: list[Record], directory: Path) -> float:
    """The version 2 recorder: the publish path queued a tuple per message (timed here, as
    the publish path's cost), a writer thread wrote lines in batches of 10,000 (a 0.2 s drain
    at 50k messages/s), the index before the lines, both flushed. Returns the publish path's
    CPU seconds."""
    buffer: deque[_V2Record] = deque()
    done = threading.Event()

    def write() -> None:
        index = _V2KeyIndex()
        with (
            (directory / "trace.jsonl").open("ab") as out,
            (directory / "keys.jsonl").open("ab") as keys,
        ):
            while buffer or not done.is_set():
                if not buffer:
                    time.sleep(0.2)
                    continue
                count = min(len(buffer), 10_000)
                lines = [_v2_line(buffer.popleft(), index) for _ in range(count)]
                if index.pending:
                    keys.write(("\n".join(index.pending) + "\n").encode())
                    keys.flush()
                    index.pending.clear()
                out.write(("\n".join(lines) + "\n").encode())
                out.flush()

    writer = threading.Thread(target=write)
    writer.start()
    started = time.thread_time()
    append, now = buffer.append, time.time
    for vhost, exchange, routing_key, raw, size, queues in batch:
        append((now(), vhost, exchange, routing_key, raw, size, tuple(queues)))
    publish = time.thread_time() - started
    done.set()
    writer.join()
    return publish


# Records per event-loop turn in the in-process columnar case: about what one 64 KiB socket
# read of ~250-byte publishes gives the broker (the recorder reads the clock once per turn).
TURN = 250


def columnar(batch: list[Record], directory: Path) -> float:
    """The version 3 recorder: ``TraceWriter.record`` per message on an event loop, in turns
    of ``TURN`` records (timed here, as the publish path's cost), while its writer thread
    writes, then ``close``. Returns the publish path's CPU seconds."""

    async def publish() -> float:
        writer = TraceWriter(directory)
        record = writer.record
        spent = 0.0
        for start in range(0, len(batch), TURN):
            started = time.thread_time()
            for vhost, exchange, routing_key, raw, size, queues in batch[start : start + TURN]:
                record(vhost, exchange, routing_key, raw, size, queues)
            spent += time.thread_time() - started
            await asyncio.sleep(0)  # the next turn
        writer.close(timeout=None)  # every row in the files before the clock stops
        if writer.dropped:
            raise RuntimeError(f"the recorder dropped {writer.dropped} records")
        return spent

    try:
        import uvloop  # the broker's loop where it builds
    except ImportError:
        return asyncio.run(publish())
    return uvloop.run(publish())


FORMATS: dict[str, Callable[[list[Record], Path], float]] = {
    "columnar": columnar,
    "json": json_lines,
}


def measure(record: Callable[[list[Record], Path], float], batch: list[Record]) -> dict[str, float]:
    """Per message: publish path CPU µs, whole process CPU µs, wall µs; bytes written."""
    with tempfile.TemporaryDirectory(prefix="leveret-trace-bench-") as directory:
        wall, cpu = time.perf_counter(), time.process_time()
        publish = record(batch, Path(directory))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        size = sum(f.stat().st_size for f in Path(directory).iterdir())
    n = len(batch)
    return {
        "publish_us": publish * 1e6 / n,
        "cpu_us": cpu * 1e6 / n,
        "wall_us": wall * 1e6 / n,
        "bytes_per_message": size / n,
    }


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    """Every case and format, interleaved; the best of ``--reps`` of each figure."""
    summary: dict[str, Any] = {}
    for case in args.cases:
        batch = records(case, args.n)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.formats}
        for _ in range(args.reps):  # interleaved: every rep runs both formats
            for name in args.formats:
                runs[name].append(measure(FORMATS[name], batch))
        summary[case] = {}
        for name, results in runs.items():
            best = {k: round(min(r[k] for r in results), 3) for k in results[0]}
            summary[case][name] = {k: best[k] for k in ("publish_us", "cpu_us")}
            line = {"case": case, "format": name, "records": args.n, **best}
            print(json.dumps({**line, "runs": results}), flush=True)
    return {"best_us_per_message": summary}


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of a process's main thread (the event loop) and of its other threads
    (the trace writer, Arrow's pools), from ``/proc/PID/task``."""
    tick = os.sysconf("SC_CLK_TCK")
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread has ended
            continue
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if task.name == str(pid):
            main += seconds
        else:
            other += seconds
    return main, other


def pubsub(python: str, traced: bool, messages: int | None) -> dict[str, Any]:
    """One pubsub no-ack run against a fresh broker (with ``--trace-dir`` if ``traced``)."""
    port = free_port()
    scratch = Path(tempfile.mkdtemp(prefix="leveret-trace-e2e-"))
    serve = [python, "-m", "leveret", "serve", "--port", str(port), "--management-port", "-1"]
    serve += ["--log-level", "warning"]
    if traced:
        serve += ["--trace-dir", str(scratch / "trace")]
    log = scratch / "broker.log"
    # Another checkout's broker (--compare) must not get bytecode files written into it.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    with log.open("w") as out:
        broker = subprocess.Popen(
            serve, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not accepts_tcp("127.0.0.1", port):
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start: {log.read_text()[-500:]}")
            time.sleep(0.05)
        load = [python, PUBSUB, "--url", f"amqp://guest:guest@127.0.0.1:{port}/"]
        load += ["--broker-pid", str(broker.pid), "--ack", "none"]
        cpu_before = thread_cpu(broker.pid)
        result = run_script(load + (["-n", str(messages)] if messages else []), timeout=300)
        cpu_after = thread_cpu(broker.pid)
    finally:
        broker.terminate()
        broker.wait(30)
        text = log.read_text()
        shutil.rmtree(scratch, ignore_errors=True)
    if not result.get("msgs_per_s"):
        raise RuntimeError(f"pubsub failed: {result.get('error')}")
    if "dropped" in text:  # the writer logs dropped records
        raise RuntimeError(f"the recorder dropped records: {text[-300:]}")
    per_message = 1e6 / result["messages"]
    return {
        "traced": traced,
        "msgs_per_s": result["msgs_per_s"],
        "broker_cpu_us_per_message": round(result["broker_cpu_s"] * per_message, 3),
        # From before the load generator starts to after it ends (connections included).
        "loop_cpu_us_per_message": round((cpu_after[0] - cpu_before[0]) * per_message, 3),
        "other_threads_cpu_us_per_message": round((cpu_after[1] - cpu_before[1]) * per_message, 3),
    }


def end_to_end(args: argparse.Namespace) -> dict[str, Any]:
    """pubsub no-ack without and with the trace, interleaved (and the same for the broker of
    ``--compare``, another checkout's venv); medians and ranges."""
    pythons = {"this": default_python()}
    if args.compare:
        pythons["compare"] = args.compare
    configurations = [(name, traced) for name in pythons for traced in (False, True)]
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {c: [] for c in configurations}
    for rep in range(args.reps):
        for name, traced in configurations if rep % 2 == 0 else configurations[::-1]:
            run = pubsub(pythons[name], traced, args.n if args.n_given else None)
            runs[name, traced].append(run)
            print(json.dumps({"round": rep + 1, "broker": name, **run}), flush=True)
    summary: dict[str, Any] = {}
    fields = ("msgs_per_s", "broker_cpu_us_per_message", "loop_cpu_us_per_message")
    for name in pythons:
        prefix = "" if name == "this" else f"{name}_"
        for field in (*fields, "other_threads_cpu_us_per_message"):
            medians = []
            for traced in (False, True):
                values = [run[field] for run in runs[name, traced]]
                medians.append(round(statistics.median(values), 3))
                summary[f"{prefix}{field}_{'with' if traced else 'without'}_trace"] = {
                    "median": medians[-1],
                    "range": [min(values), max(values)],
                }
            if field in fields:  # the untraced broker's other threads do next to nothing
                summary[f"{prefix}{field}_ratio"] = round(medians[1] / medians[0], 3)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, help="records per case (500,000); messages end to end")
    parser.add_argument("--reps", type=int, default=3, help="repetitions, interleaved")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--formats", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    parser.add_argument("--end-to-end", action="store_true", help="pubsub no-ack, A/B")
    parser.add_argument(
        "--compare", metavar="PYTHON", help="end to end: also the broker of this interpreter"
    )
    args = parser.parse_args(argv)
    args.n_given = args.n is not None
    if args.n is None:
        args.n = 500_000
    print(json.dumps(end_to_end(args) if args.end_to_end else in_process(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
