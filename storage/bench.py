"""Storage benchmarks:
``python -m leveret.storage.bench [--messages N] [--body BYTES] [--dir DIR]``.

Kept out of the unit tests (a million messages take a while). Measures, on the file system of
``--dir`` (default: a temp directory):

* message store: appends/s without sync; group commit (one thread appending, one calling
  ``sync()`` in a loop, as the broker does) with durable messages/s and sync latency;
  ``open()`` + ``recover()`` time for N stored messages, all unacked and half acked;
* definitions log: fsynced appends/s one by one, and open + replay of 100k bindings (plus
  ``Projection.replay`` of them, which is what start-up does next).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from leveret.storage.log import DefinitionLog
from leveret.storage.messages import MessageStore

HEADER = bytes(14)  # a content header payload: class, weight, body size, no properties
QUEUES = [("/", f"bench-{i}") for i in range(10)]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def fill(directory: Path, messages: int, body: bytes) -> float:
    """Append ``messages`` and sync once; returns the appends/s."""
    store = MessageStore.open(directory)
    append = store.append
    start = time.perf_counter()
    for i in range(messages):
        append(QUEUES[i % 10], "amq.direct", "bench", HEADER, body)
    elapsed = time.perf_counter() - start
    store.close()
    return messages / elapsed


def group_commit(directory: Path, seconds: float, body: bytes) -> dict[str, float]:
    """One thread appends flat out while another syncs in a loop, like the broker."""
    store = MessageStore.open(directory)
    stop = threading.Event()
    latencies: list[float] = []
    durable = [0]

    batches: list[int] = []

    def syncer() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            watermark = store.sync()
            if watermark == durable[0]:
                time.sleep(0.0001)  # nothing was pending: do not spin on the GIL
                continue
            latencies.append(time.perf_counter() - start)
            batches.append(watermark - durable[0])
            durable[0] = watermark

    thread = threading.Thread(target=syncer)
    thread.start()
    start = time.perf_counter()
    appended = 0
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            store.append(QUEUES[appended % 10], "amq.direct", "bench", HEADER, body)
            appended += 1
    stop.set()
    thread.join()
    elapsed = time.perf_counter() - start
    store.close()
    return {
        "appended_per_s": appended / elapsed,
        "durable_per_s": durable[0] / elapsed,
        "syncs": len(latencies),
        "messages_per_sync": statistics.mean(batches),
        "sync_median_ms": statistics.median(latencies) * 1000,
        "sync_p99_ms": statistics.quantiles(latencies, n=100)[98] * 1000,
    }


def sync_latency(directory: Path, batch: int, rounds: int = 200) -> dict[str, float]:
    """Append ``batch`` messages then sync, ``rounds`` times: the latency of one fsync."""
    store = MessageStore.open(directory)
    latencies = []
    for _ in range(rounds):
        for i in range(batch):
            store.append(QUEUES[i % 10], "amq.direct", "bench", HEADER, b"x" * 100)
        start = time.perf_counter()
        store.sync()
        latencies.append(time.perf_counter() - start)
    store.close()
    return {
        "median_ms": statistics.median(latencies) * 1000,
        "p99_ms": statistics.quantiles(latencies, n=100)[98] * 1000,
    }


def recovery(directory: Path) -> tuple[float, int]:
    def load() -> int:
        store = MessageStore.open(directory)
        count = sum(len(v) for v in store.recover().values())
        store.close()
        return count

    gc.collect()
    elapsed, count = timed(load)
    return elapsed, count


def ack_half(directory: Path) -> None:
    store = MessageStore.open(directory)
    for queue, messages in store.recover().items():
        for message in messages[::2]:
            store.ack(queue, message.msg_id)
    store.close()


def definitions(directory: Path, bindings: int) -> dict[str, float]:
    path = directory / "definitions.log"
    log = DefinitionLog.open(path)
    n_single = 200
    start = time.perf_counter()
    for i in range(n_single):
        log.append("/", QueueDeclared(Queue(f"q{i}", durable=True)))
    elapsed = time.perf_counter() - start
    log.append("/", ExchangeDeclared(Exchange("x", ExchangeType.TOPIC)))
    log.append_many(
        ("/", BindingAdded(Binding("x", f"q{i % n_single}", DestKind.QUEUE, f"a.{i}.#")))
        for i in range(bindings)
    )
    log.close()
    gc.collect()
    open_s, log = timed(lambda: DefinitionLog.open(path))
    replay_s, records = timed(log.replay)
    log.close()
    project_s, _ = timed(lambda: Projection.replay(e for _, e in records))
    gc.disable()
    try:
        project_nogc_s, _ = timed(lambda: Projection.replay(e for _, e in records))
    finally:
        gc.enable()
    return {
        "fsynced_appends_per_s": n_single / elapsed,
        "records": len(records),
        "open_s": open_s,
        "replay_s": replay_s,
        "projection_replay_s": project_s,
        "projection_replay_gc_off_s": project_nogc_s,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print one line per measure (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m leveret.storage.bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=100, help="body size in bytes")
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="group-commit run time")
    parser.add_argument("--dir", type=Path, help="where to write (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    body = b"x" * args.body
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        results: dict[str, Any] = {"messages": args.messages, "body": args.body}
        results["append_per_s"] = fill(root / "fill", args.messages, body)
        results["recover_s"], results["recovered"] = recovery(root / "fill")
        ack_half(root / "fill")
        results["recover_half_acked_s"], results["recovered_half"] = recovery(root / "fill")
        results["sync_1"] = sync_latency(root / "s1", 1)
        results["sync_100"] = sync_latency(root / "s100", 100)
        results["group_commit"] = group_commit(root / "gc", args.seconds, body)
        results["definitions"] = definitions(root, args.bindings)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for key, value in results.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                print(f"{key}.{sub}: {v:,.3f}" if isinstance(v, float) else f"{key}.{sub}: {v}")
        else:
            print(f"{key}: {value:,.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
