#!/usr/bin/env python3
"""Crash test: SIGKILL the broker at a random moment, restart it, check nothing confirmed is lost.

    .venv/bin/python bench/crash_test.py                    # 50 iterations, both scenarios
    .venv/bin/python bench/crash_test.py -n 20 --mode publish --seed 7
    .venv/bin/python bench/crash_test.py --keep-data         # keep the data dir and broker log

Leveret runs as a subprocess (``python -m leveret serve --data-dir DIR``). One data directory
is used for all iterations, so every restart also recovers what the earlier crashes left.
Each iteration uses a new durable queue (deleted once checked) and is one of:

* ``publish``: an aio-pika publisher with publisher confirms (``--window`` unconfirmed at most)
  sends persistent messages whose body and ``message_id`` are a sequence number, and records
  every id the broker confirmed. The broker gets SIGKILL a random ``--min-ms`` .. ``--max-ms``
  after the first publish. After a restart on the same directory everything in the queue is
  consumed. ``lost`` (confirmed, not recovered) must be 0. ``duplicates`` counts recovered
  messages that were never confirmed: a client that republishes its unconfirmed messages
  would see those twice (allowed: at-least-once). ``repeated`` (an id recovered twice),
  ``phantoms`` (an id never sent) and ``out_of_order`` (recovered ids not ascending) must be 0.
* ``consume``: ``--consume-messages`` persistent messages are published and all confirmed,
  then a manual-ack consumer (prefetch ``--prefetch``) acks each delivery as it arrives; the
  broker gets SIGKILL a random moment after consuming starts. After the restart: every
  confirmed message whose ack was not sent must be back (``lost`` must be 0); acked ones may
  be back only because their ack had not been made durable (``acked_returned``: allowed,
  at-least-once). ``redelivered_missing`` counts messages delivered (unacked) before the kill
  that came back without the ``redelivered`` flag (reported, not a failure).

The last stdout line is one JSON object: totals per scenario, ``lost`` and ``ok``. Exit
status 1 if anything was lost (or another must-be-0 count is not 0). ``tests/test_crash.py``
imports :func:`publish_iteration` and :func:`consume_iteration` from here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aio_pika
from aio_pika import DeliveryMode, Message
from aio_pika.exceptions import DeliveryError

REPO = Path(__file__).resolve().parents[1]
# tests/test_crash.py loads this file by path, and bench/ is then not on sys.path; appended,
# not put first, so that bench/profile.py never shadows the standard library's in a test run
if str(REPO / "bench") not in sys.path:
    sys.path.append(str(REPO / "bench"))

from workloads import accepts_tcp, free_port  # noqa: E402


class BrokerProcess:
    """``python -m leveret serve --data-dir DIR`` on a free port; output appended to a log."""

    def __init__(self, data_dir: Path, log_path: Path, python: str = sys.executable) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.python = python
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: TextIO | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait until it accepts TCP (it listens once recovery is done); returns
        the seconds from launch to listening."""
        self.port = free_port()
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in wait()
        self._log.write(f"--- start on port {self.port} ---\n")
        self._log.flush()
        cmd = [self.python, "-m", "leveret", "serve", "--port", str(self.port)]
        cmd += [
            "--management-port",
            "-1",
            "--prometheus-port",
            "-1",
        ]  # never collide on 15672/15692
        cmd += ["--data-dir", str(self.data_dir), "--log-level", "warning"]
        started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        while not accepts_tcp("127.0.0.1", self.port, timeout=0.2):
            if self.proc.poll() is not None:
                self.wait()
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() - started > timeout:
                self.kill()
                self.wait()
                raise RuntimeError(f"broker did not listen within {timeout}s: {self.log_tail()}")
            time.sleep(0.01)
        return time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL, without waiting (safe to call from an event loop callback)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def wait(self) -> None:
        if self.proc is not None:
            self.proc.wait(30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """SIGTERM (clean shutdown), SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.wait()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


# ------------------------------------------------------------------------------------------
# client side


async def connect(url: str) -> aio_pika.abc.AbstractConnection:
    return await aio_pika.connect(url, timeout=10)


async def close_quietly(conn: aio_pika.abc.AbstractConnection | None) -> None:
    if conn is None:
        return
    with contextlib.suppress(Exception):
        await asyncio.wait_for(conn.close(), 5)


def persistent_message(msg_id: int) -> Message:
    text = str(msg_id)
    return Message(text.encode(), message_id=text, delivery_mode=DeliveryMode.PERSISTENT)


async def publish_all(url: str, queue: str, ids: list[int], window: int = 500) -> set[int]:
    """Publish ``ids`` with confirms (no kill); returns the confirmed ones."""
    confirmed: set[int] = set()
    conn = await connect(url)
    try:
        channel = await conn.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True)
        exchange = channel.default_exchange
        for start in range(0, len(ids), window):
            batch = ids[start : start + window]
            results = await asyncio.gather(
                *(exchange.publish(persistent_message(i), queue) for i in batch),
                return_exceptions=True,
            )
            confirmed.update(
                i for i, r in zip(batch, results, strict=True) if not isinstance(r, BaseException)
            )
    finally:
        await close_quietly(conn)
    return confirmed


async def drain(url: str, queue: str, within: float = 60.0) -> list[tuple[int, bool]]:
    """Consume (no-ack) everything in ``queue``: (id, redelivered) in delivery order."""
    got: list[tuple[int, bool]] = []
    conn = await connect(url)
    try:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=2000)
        declared = await channel.declare_queue(queue, durable=True)
        expected = declared.declaration_result.message_count or 0
        if expected:
            done = asyncio.get_running_loop().create_future()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got.append((int(message.body), bool(message.redelivered)))
                if len(got) >= expected and not done.done():
                    done.set_result(None)

            tag = await declared.consume(on_message, no_ack=True)
            await asyncio.wait_for(done, within)
            await declared.cancel(tag)
        left = await channel.declare_queue(queue, passive=True)
        if left.declaration_result.message_count:
            raise AssertionError(f"{queue}: messages left after draining {expected}")
        await declared.delete(if_unused=False, if_empty=False)
    finally:
        await close_quietly(conn)
    return got


@dataclass
class Iteration:
    """What one crash iteration saw. The must-be-0 fields are listed in :data:`MUST_BE_ZERO`."""

    mode: str
    queue: str
    kill_ms: int
    sent: int = 0  # publish: messages written before the kill
    confirmed: int = 0
    acked: int = 0  # consume: acks sent before the kill
    recovered: int = 0
    lost: int = 0
    duplicates: int = 0  # publish: recovered but never confirmed
    acked_returned: int = 0  # consume: acked before the kill, back after it
    redelivered_missing: int = 0  # consume: delivered-unacked, back without the flag
    repeated: int = 0
    phantoms: int = 0
    out_of_order: int = 0
    restart_s: float = 0.0
    lost_ids: list[int] = field(default_factory=list)

    def failed(self) -> bool:
        return any(getattr(self, name) for name in MUST_BE_ZERO)


MUST_BE_ZERO = ("lost", "repeated", "phantoms", "out_of_order")


def check_recovered(result: Iteration, sent: set[int], recovered: list[tuple[int, bool]]) -> None:
    """Fill the fields every mode shares from what came back after the restart."""
    ids = [msg_id for msg_id, _ in recovered]
    counts = Counter(ids)
    result.recovered = len(ids)
    result.repeated = sum(n - 1 for n in counts.values() if n > 1)
    result.phantoms = sum(1 for msg_id in counts if msg_id not in sent)
    result.out_of_order = sum(1 for a, b in itertools.pairwise(ids) if b <= a)


async def publish_iteration(
    broker: BrokerProcess, queue: str, kill_ms: int, window: int = 500
) -> Iteration:
    """Publish with confirms until SIGKILL ``kill_ms`` after the first publish; restart;
    consume. ``broker`` must be running; it is running again afterwards."""
    result = Iteration("publish", queue, kill_ms)
    sent: list[int] = []
    confirmed: set[int] = set()
    nacked: set[int] = set()
    conn = await connect(broker.url)
    try:
        channel = await conn.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True)
        exchange = channel.default_exchange
        loop = asyncio.get_running_loop()
        dead = asyncio.Event()
        room = asyncio.Semaphore(window)
        tasks: set[asyncio.Task[None]] = set()

        async def publish_one(msg_id: int) -> None:
            try:
                await exchange.publish(persistent_message(msg_id), queue)
            except DeliveryError:
                nacked.add(msg_id)
            except Exception:
                dead.set()  # the broker is gone: its pending confirms never come
            else:
                confirmed.add(msg_id)
            finally:
                room.release()

        killer = loop.call_later(kill_ms / 1000, broker.kill)
        try:
            msg_id = 0
            while not dead.is_set() and not conn.is_closed:
                await room.acquire()
                if dead.is_set():
                    break
                sent.append(msg_id)
                task = loop.create_task(publish_one(msg_id))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                msg_id += 1
            if tasks:
                await asyncio.wait(list(tasks), timeout=15)
        finally:
            killer.cancel()
            broker.kill()
            for task in tasks:
                task.cancel()
    finally:
        await close_quietly(conn)
    broker.wait()
    result.restart_s = round(broker.start(), 3)
    recovered = await drain(broker.url, queue)
    check_recovered(result, set(sent), recovered)
    ids = {msg_id for msg_id, _ in recovered}
    result.sent, result.confirmed = len(sent), len(confirmed)
    lost = sorted(confirmed - ids)
    result.lost, result.lost_ids = len(lost), lost[:20]
    result.duplicates = len(ids - confirmed)
    return result


async def consume_iteration(
    broker: BrokerProcess, queue: str, kill_ms: int, messages: int = 5000, prefetch: int = 200
) -> Iteration:
    """Publish ``messages`` (all confirmed), consume with acks until SIGKILL ``kill_ms`` after
    consuming starts; restart; consume the rest."""
    result = Iteration("consume", queue, kill_ms)
    ids = list(range(messages))
    confirmed = await publish_all(broker.url, queue, ids)
    delivered: dict[int, bool] = {}
    acked: set[int] = set()
    conn = await connect(broker.url)
    try:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=prefetch)
        declared = await channel.declare_queue(queue, durable=True)
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            msg_id = int(message.body)
            delivered.setdefault(msg_id, bool(message.redelivered))
            try:
                await message.ack()
            except Exception:
                gone.set()
            else:
                acked.add(msg_id)
                if len(acked) == messages:
                    gone.set()

        conn.close_callbacks.add(lambda *_: gone.set())
        killer = loop.call_later(kill_ms / 1000, broker.kill)
        try:
            await declared.consume(on_message)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), 30)
        finally:
            killer.cancel()
            broker.kill()
    finally:
        await close_quietly(conn)
    broker.wait()
    result.restart_s = round(broker.start(), 3)
    recovered = await drain(broker.url, queue)
    check_recovered(result, set(ids), recovered)
    back = {msg_id for msg_id, _ in recovered}
    result.sent, result.confirmed, result.acked = messages, len(confirmed), len(acked)
    lost = sorted(confirmed - acked - back)
    result.lost, result.lost_ids = len(lost), lost[:20]
    result.acked_returned = len(back & acked)
    result.redelivered_missing = sum(
        1
        for msg_id, redelivered in recovered
        if msg_id in delivered and msg_id not in acked and not redelivered
    )
    return result


# ------------------------------------------------------------------------------------------
# the benchmark-style driver


def totals(results: list[Iteration]) -> dict[str, Any]:
    keys = ("sent", "confirmed", "acked", "recovered", "lost", "duplicates", "acked_returned")
    keys += ("redelivered_missing", "repeated", "phantoms", "out_of_order")
    out: dict[str, Any] = {"iterations": len(results)}
    out.update({key: sum(getattr(r, key) for r in results) for key in keys})
    if results:
        out["kill_ms_min"] = min(r.kill_ms for r in results)
        out["kill_ms_max"] = max(r.kill_ms for r in results)
        out["restart_s_median"] = round(statistics.median(r.restart_s for r in results), 3)
        out["restart_s_max"] = max(r.restart_s for r in results)
    return out


async def run(args: argparse.Namespace, data_dir: Path, log_path: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    modes = ["publish", "consume"] if args.mode == "both" else [args.mode]
    broker = BrokerProcess(data_dir, log_path)
    broker.start()
    results: list[Iteration] = []
    try:
        for i in range(args.iterations):
            mode = modes[i % len(modes)]
            kill_ms = rng.randint(args.min_ms, args.max_ms)
            queue = f"crash.{mode}.{i}"
            if mode == "publish":
                result = await publish_iteration(broker, queue, kill_ms, args.window)
            else:
                result = await consume_iteration(
                    broker, queue, kill_ms, args.consume_messages, args.prefetch
                )
            results.append(result)
            brief = {k: v for k, v in asdict(result).items() if v or k == "lost"}
            print(json.dumps(brief), file=sys.stderr, flush=True)
    finally:
        broker.stop()
    failures = [asdict(r) for r in results if r.failed()]
    log_text = broker.log_tail(1 << 30)
    summary: dict[str, Any] = {
        "workload": "crash-test",
        "seed": args.seed,
        "iterations": len(results),
        "mode": args.mode,
        "window": args.window,
        "kill_window_ms": [args.min_ms, args.max_ms],
    }
    summary.update({m: totals([r for r in results if r.mode == m]) for m in modes})
    for key in ("confirmed", "recovered", "lost", "duplicates"):
        summary[key] = sum(getattr(r, key) for r in results)
    summary["broker_tracebacks"] = log_text.count("Traceback")
    summary["broker_errors"] = log_text.count(" ERROR ")
    summary["failures"] = failures
    summary["ok"] = not failures and summary["broker_tracebacks"] == 0
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=50)
    parser.add_argument("--mode", choices=["publish", "consume", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None, help="default: random (reported)")
    parser.add_argument("--min-ms", type=int, default=50, help="earliest kill (ms)")
    parser.add_argument("--max-ms", type=int, default=400, help="latest kill (ms)")
    parser.add_argument("--window", type=int, default=500, help="unconfirmed publishes at most")
    parser.add_argument("--consume-messages", type=int, default=5000)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, help="default: a temp dir, removed afterwards")
    parser.add_argument("--keep-data", action="store_true", help="keep the data dir and log")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # aiormq logs every connection the SIGKILL resets, with a traceback: expected here.
    for name in ("aiormq", "aio_pika"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    work = Path(tempfile.mkdtemp(prefix="leveret-crash-"))
    data_dir = args.data_dir or work / "data"
    log_path = work / "broker.log"
    started = time.monotonic()
    summary: dict[str, Any] = {"ok": False}
    try:
        summary = asyncio.run(run(args, data_dir, log_path))
    finally:
        # Evidence stays when something went wrong.
        if args.keep_data or not summary["ok"]:
            summary["kept"] = str(work)
            print(f"data dir and broker log kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
