#!/usr/bin/env python3
"""backlog: what a queued message costs the broker in memory, in the amqpbench style.

One connection declares a transient queue with no consumer, publishes ``-n`` messages of
``--body-size`` bytes (default 100; transient; ``--properties pika``: the same properties on
every message, as pika sends them; ``message-id``: each with its own ``message_id`` too, as
aio-pika and RPC clients send them) and polls a passive declare until the queue holds them
all. The broker's process-tree RSS (``--broker-pid``, required for the figure) is read
before publishing and, after ``--settle`` seconds, with the backlog in place:

    rss_per_message_bytes = (RSS with the backlog - RSS before) / n     (lower is better)

Then the queue is deleted and the RSS read once more (``rss_after_delete_kb``: what the
broker gives back to the OS; Python and Erlang both keep some of their heaps).

Uses amqpwire from amqpbench (see ``amqpbench_path.py``). The last stdout line is one JSON
object (ok, figures, harness/broker CPU and RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from amqpbench_path import amqpwire
from pamqp import commands

PROPERTIES = {
    # pika's BlockingChannel.basic_publish with a content type and delivery mode 1
    "pika": commands.Basic.Properties(content_type="text/plain", delivery_mode=1),
}
# --properties message-id: the pika properties plus a message_id of its own on each of
# this many pre-encoded messages (cycled): more than the broker's caches hold.
DISTINCT_IDS = 5000


def messages(args: argparse.Namespace, queue: str, frame_max: int) -> list[bytes]:
    """The pre-encoded publishes the run cycles through."""
    body = b"x" * args.body_size
    if args.properties != "message-id":
        properties = PROPERTIES[args.properties]
        return [amqpwire.encode_publish("", queue, body, 1, properties, frame_max)]
    return [
        amqpwire.encode_publish(
            "",
            queue,
            body,
            1,
            commands.Basic.Properties(
                content_type="text/plain", delivery_mode=1, message_id=f"id-{i:08d}"
            ),
            frame_max,
        )
        for i in range(DISTINCT_IDS)
    ]


def tree_rss_kb(pid: int | None) -> int | None:
    return None if pid is None else int(amqpwire.proc_tree_rss_kb(pid)["total_kb"])


async def depth(conn: amqpwire.AMQPConnection, queue: str) -> int:
    ok = await conn.rpc(1, commands.Queue.Declare(queue=queue, passive=True), timeout=30)
    return int(ok.message_count)


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    n = args.messages
    queue = amqpwire.unique("amqpbench.backlog")
    conn = await amqpwire.connect(args.url, name="amqpbench-backlog")
    declared = False
    try:
        await conn.channel(1)
        await conn.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
        declared = True
        await asyncio.sleep(args.settle)
        before = tree_rss_kb(args.broker_pid)
        msg = messages(args, queue, conn.frame_max)
        meter = amqpwire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await amqpwire.Publisher(conn, msg, batch=args.batch).run(n)
        queued = await depth(conn, queue)
        while queued < n:  # the last publishes may still be in the broker's buffers
            await asyncio.sleep(0.05)
            queued = await depth(conn, queue)
        elapsed = time.monotonic() - t0
        s.update(meter.stop())
        await asyncio.sleep(args.settle)
        after = tree_rss_kb(args.broker_pid)
        s.update(
            {
                "messages": n,
                "queued": queued,
                "body_size": args.body_size,
                "properties": args.properties,
                "fill_s": round(elapsed, 3),
                "fill_msgs_per_s": round(n / elapsed, 1),
                "rss_before_kb": before,
                "rss_backlog_kb": after,
            }
        )
        if before is not None and after is not None:
            s["rss_per_message_bytes"] = round((after - before) * 1024 / n, 1)
        await conn.rpc(1, commands.Queue.Delete(queue=queue))
        declared = False
        await asyncio.sleep(args.settle)
        s["rss_after_delete_kb"] = tree_rss_kb(args.broker_pid)
    finally:
        if declared:
            error = await amqpwire.cleanup(conn, 1, queues=[queue])
            if error:
                s["cleanup_error"] = error
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    amqpwire.common_args(parser, n_default=1_000_000)
    parser.add_argument("--properties", choices=[*PROPERTIES, "message-id"], default="pika")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before each RSS read")
    parser.add_argument("--batch", type=int, default=1000, help="messages per socket write")
    return parser.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    raise SystemExit(amqpwire.run_main(main, a, amqpwire.base_summary("backlog", a)))
