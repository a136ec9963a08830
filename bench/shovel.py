"""How fast a dynamic shovel moves a backlog: N persistent messages waiting in a queue, then
a shovel (``ack-mode`` on-confirm, ``src-prefetch-count`` 1000) defined through the
management API to a queue on the same broker (``amqp://`` both ends); the time from the
PUT until the destination holds N (polled every 20 ms), and the broker's CPU meanwhile.

Leveret runs as ``leveret serve`` processes (each build asked for: ``--leveret-build
NAME=DIR``, ``pure=`` for the checkout), RabbitMQ (``--rabbitmq-management URL --rabbitmq
URL --rabbitmq-pid PID``) uses rabbitmq_shovel's own shovel. Interleaved, ``--reps`` times;
prints one JSON line per run and a table of medians.

    .venv/bin/python bench/shovel.py --messages 20000 --reps 3 \\
        --leveret-build pure= --leveret-build compiled=build/compiled \\
        --rabbitmq amqp://guest:guest@127.0.0.1:5711 --rabbitmq-management http://127.0.0.1:15711 \\
        --rabbitmq-pid "$(bench/rabbitmq_node.sh pid leveret-diff@localhost)"
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aio_pika
from workloads import LeveretProcess, free_port

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http(base: str, method: str, path: str, body: Any = None) -> int:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode() if body is not None else None, method=method
    )
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(answer.status)


class ManagedLeveret(LeveretProcess):
    """``leveret serve`` as bench/workloads.py starts it, with its management API on a free
    port (the shovel is defined through it)."""

    def __init__(self, log_path: Path, pythonpath: str) -> None:
        super().__init__(sys.executable, log_path, pythonpath)
        self.management_port = free_port()

    def command(self, scratch: Path) -> list[str]:
        cmd = super().command(scratch)
        cmd[cmd.index("--management-port") + 1] = str(self.management_port)
        return cmd


class Broker:
    """A broker to run the shovel on: its AMQP URL, management URL and process id."""

    def __init__(
        self, name: str, url: str, management: str, pid: int, child: ManagedLeveret | None = None
    ) -> None:
        self.name, self.url, self.management, self.pid = name, url, management, pid
        self.child = child

    @classmethod
    def leveret(cls, name: str, build: str, log_path: Path) -> Broker:
        child = ManagedLeveret(log_path, str((REPO / build).resolve()) if build else "")
        child.start()
        management = f"http://127.0.0.1:{child.management_port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                http(management, "GET", "/api/overview")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}'s management API did not answer") from None
                time.sleep(0.05)
        assert child.pid is not None
        return cls(name, child.url.rstrip("/"), management, child.pid, child)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


async def backlog(url: str, queue: str, count: int) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        body = b"x" * 100
        for start in range(0, count, 1000):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=queue,
                    )
                    for _ in range(start, min(start + 1000, count))
                )
            )


async def length(url: str, queue: str) -> int:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, durable=True, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def one_run(broker: Broker, count: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    src, dst, name = f"bench-src-{tag}", f"bench-dst-{tag}", f"bench-{tag}"
    await backlog(broker.url, src, count)
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(dst, durable=True)
    value = {
        "src-uri": "amqp://",
        "src-queue": src,
        "dest-uri": "amqp://",
        "dest-queue": dst,
        "ack-mode": "on-confirm",
        "src-prefetch-count": 1000,
    }
    cpu = cpu_seconds(broker.pid)
    started = time.monotonic()
    http(broker.management, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})
    while await length(broker.url, dst) < count:  # noqa: ASYNC110 - another process's queue
        await asyncio.sleep(0.02)
    seconds = time.monotonic() - started
    used = cpu_seconds(broker.pid) - cpu
    http(broker.management, "DELETE", f"/api/parameters/shovel/%2F/{name}")
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        for queue in (src, dst):
            await channel.queue_delete(queue)
    return {
        "broker": broker.name,
        "messages": count,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(count / seconds),
        "cpu_us_per_msg": round(used / count * 1e6, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--leveret-build", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--rabbitmq", help="AMQP URL of a RabbitMQ node with rabbitmq_shovel")
    parser.add_argument("--rabbitmq-management", help="its management URL")
    parser.add_argument("--rabbitmq-pid", type=int, help="its beam.smp PID (for CPU)")
    parser.add_argument("--out", type=Path, help="append the JSON lines here")
    args = parser.parse_args()
    brokers: list[Broker] = []
    scratch = Path(tempfile.mkdtemp(prefix="shovel-bench-"))
    for spec in args.leveret_build or ["pure="]:
        name, _, build = spec.partition("=")
        brokers.append(Broker.leveret(f"leveret-{name}", build, scratch / f"{name}.log"))
    if args.rabbitmq:
        brokers.append(
            Broker("rabbitmq", args.rabbitmq, args.rabbitmq_management, args.rabbitmq_pid)
        )
    results: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            order = brokers[rep % len(brokers) :] + brokers[: rep % len(brokers)]
            for broker in order:
                result = await one_run(broker, args.messages)
                print(json.dumps(result), flush=True)
                results.append(result)
                if args.out:
                    with args.out.open("a") as out:
                        out.write(json.dumps(result) + "\n")
    finally:
        for broker in brokers:
            broker.stop()
    print("\n| broker | msgs/s (median) | broker CPU µs/msg |\n|---|---:|---:|")
    for broker in brokers:
        mine = [r for r in results if r["broker"] == broker.name]
        rate = statistics.median(r["msgs_per_s"] for r in mine)
        cpu = statistics.median(r["cpu_us_per_msg"] for r in mine)
        print(f"| {broker.name} | {rate:,.0f} | {cpu} |")


if __name__ == "__main__":
    asyncio.run(main())
