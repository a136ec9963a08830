#!/usr/bin/env python3
"""backlog: what a queued message costs the broker in memory.

One connection declares a transient queue with no consumer, publishes ``-n`` messages of
``--body-size`` bytes (default 100; transient; ``--properties pika``: the same properties on
every message, as pika sends them; ``message-id``: each with its own ``message_id`` too, as
aio-pika and RPC clients send them) and polls a passive declare until the queue holds them
all. The broker's process-tree RSS (``--broker-pid``, required for the figure) is read
before publishing and, after ``--settle`` seconds, with the backlog in place:

    rss_per_message_bytes = (RSS with the backlog - RSS before) / n     (lower is better)

Then the queue is deleted and the RSS read once more (``rss_after_delete_kb``: what the
broker gives back to the OS; Python and Erlang both keep some of their heaps).

A workload script of the load generator (raw frames through ``loadgen/wire.py``); the last
stdout line is one JSON object (ok, figures, harness/broker CPU and RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from loadgen import wire
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
        return [wire.encode_publish("", queue, body, properties=properties, frame_max=frame_max)]
    return [
        wire.encode_publish(
            "",
            queue,
            body,
            properties=commands.Basic.Properties(
                content_type="text/plain", delivery_mode=1, message_id=f"id-{i:08d}"
            ),
            frame_max=frame_max,
        )
        for i in range(DISTINCT_IDS)
    ]


async def depth(conn: wire.Connection, queue: str) -> int:
    ok = await conn.rpc(1, commands.Queue.Declare(queue=queue, passive=True), wait_s=30)
    return int(ok.message_count)


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    n = args.messages
    queue = wire.unique("loadgen.backlog")
    conn = await wire.connect(args.url, name="loadgen-backlog")
    declared = False
    try:
        await conn.open_channel(1)
        await conn.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
        declared = True
        await asyncio.sleep(args.settle)
        before = wire.tree_rss_kb(args.broker_pid)
        msg = messages(args, queue, conn.frame_max)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await wire.Publisher(conn, msg, batch=args.batch).run(n)
        queued = await depth(conn, queue)
        while queued < n:  # the last publishes may still be in the broker's buffers
            await asyncio.sleep(0.05)
            queued = await depth(conn, queue)
        elapsed = time.monotonic() - t0
        s.update(meter.stop())
        await asyncio.sleep(args.settle)
        after = wire.tree_rss_kb(args.broker_pid)
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
        s["rss_after_delete_kb"] = wire.tree_rss_kb(args.broker_pid)
    finally:
        if declared:
            error = await wire.cleanup(conn, 1, queues=[queue])
            if error:
                s["cleanup_error"] = error
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=1_000_000)
    parser.add_argument("--properties", choices=[*PROPERTIES, "message-id"], default="pika")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before each RSS read")
    parser.add_argument("--batch", type=int, default=1000, help="messages per socket write")
    return parser.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    raise SystemExit(wire.run(main, a, wire.base_summary("backlog", a)))
