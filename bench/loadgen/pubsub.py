#!/usr/bin/env python3
"""pubsub: one publisher connection, one consumer connection, default exchange -> one queue.

Transient messages of --body-size bytes (default 100) into a non-durable queue; the clock
runs from the first publish write to the n-th delivery parsed. Figure: ``msgs_per_s``.

  --ack none      a no-ack consumer (the raw publish -> route -> deliver path)
  --ack single    one Basic.Ack per delivery (those of one socket read in one write),
                  Basic.Qos prefetch_count --prefetch (default 1000)
  --ack multiple  one Basic.Ack multiple per socket read

``publish_phase_msgs_per_s`` is how fast the publisher got its writes out (the broker reads
them as it can: a figure much above ``msgs_per_s`` means the broker queued a backlog).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import wire
from pamqp import commands

SETTLE = {"none": "none", "single": "ack", "multiple": "ack-multiple"}


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    n, queue = args.messages, wire.unique("loadgen.pubsub")
    cons = await wire.connect(args.url, name="loadgen-pubsub-consumer")
    pub = await wire.connect(args.url, name="loadgen-pubsub-publisher")
    try:
        await cons.open_channel(1)
        await pub.open_channel(1)
        await cons.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
        if args.ack != "none":
            await cons.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))
        consumer = wire.Consumer(cons, n, SETTLE[args.ack])
        consume = commands.Basic.Consume(queue=queue, consumer_tag="c1", no_ack=args.ack == "none")
        await cons.rpc(1, consume)

        message = wire.encode_publish("", queue, b"x" * args.body_size, frame_max=pub.frame_max)
        publisher = wire.Publisher(pub, message, batch=args.batch)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await publisher.run(n)
        published = time.monotonic()
        try:
            await consumer.done
        finally:
            summary.update(meter.stop())
        elapsed = consumer.last - t0
        summary.update(
            {
                "messages": n,
                "body_size": args.body_size,
                "ack": args.ack,
                "prefetch": args.prefetch if args.ack != "none" else None,
                "elapsed_s": round(elapsed, 4),
                "msgs_per_s": round(n / elapsed, 1),
                "publish_phase_s": round(published - t0, 4),
                "publish_phase_msgs_per_s": round(n / (published - t0), 1),
                "delivered": consumer.count,
            }
        )
        if pub.returns:
            summary["returns"] = pub.returns
    finally:
        error = await wire.cleanup(cons, 1, consumer_tags=["c1"], queues=[queue])
        if error:
            summary["cleanup_error"] = error
        await asyncio.gather(pub.close(), cons.close())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=200_000)
    parser.add_argument("--ack", choices=list(SETTLE), default="none")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000, help="messages per socket write")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("pubsub-direct", args)))
