#!/usr/bin/env python3
"""fanout: one publisher -> a fanout exchange -> --queues (10) queues, one consumer
connection per queue (no-ack unless --ack single).

Every message is delivered --queues times; the clock runs from the first publish write to
the last of the n x queues deliveries, on whichever consumer gets it. Figure:
``deliveries_per_s`` (``published_msgs_per_s`` is the same divided by the queue count).
The consumers share this process with the publisher, as in every workload here: one socket
per queue is the point (the broker writes each message to --queues sockets).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import wire
from pamqp import commands


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    n = args.messages
    exchange = wire.unique("loadgen.fanout")
    queues = [f"{exchange}.q{i}" for i in range(args.queues)]
    pub = await wire.connect(args.url, name="loadgen-fanout-publisher")
    conns: list[wire.Connection] = []
    consumers: list[wire.Consumer] = []
    try:
        await pub.open_channel(1)
        declare = commands.Exchange.Declare(
            exchange=exchange, exchange_type="fanout", durable=False
        )
        await pub.rpc(1, declare)
        for queue in queues:
            await pub.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
            await pub.rpc(1, commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=""))
        no_ack = args.ack == "none"
        for i, queue in enumerate(queues):
            conn = await wire.connect(args.url, name=f"loadgen-fanout-consumer-{i}")
            conns.append(conn)
            await conn.open_channel(1)
            if not no_ack:
                await conn.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))
            consumer = wire.Consumer(conn, n, "none" if no_ack else "ack")
            consumers.append(consumer)
            consume = commands.Basic.Consume(queue=queue, consumer_tag=f"c{i}", no_ack=no_ack)
            await conn.rpc(1, consume)

        message = wire.encode_publish(exchange, "", b"x" * args.body_size, frame_max=pub.frame_max)
        publisher = wire.Publisher(pub, message, batch=args.batch)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await publisher.run(n)
        published = time.monotonic()
        try:
            # every queue gets every message: done when each consumer has its n
            await asyncio.gather(*(c.done for c in consumers))
        finally:
            summary.update(meter.stop())
            summary["delivered_per_queue_min"] = min(c.count for c in consumers)
        elapsed = max(c.last for c in consumers) - t0
        deliveries = n * len(queues)
        summary.update(
            {
                "messages": n,
                "queues": len(queues),
                "deliveries": deliveries,
                "ack": args.ack,
                "body_size": args.body_size,
                "elapsed_s": round(elapsed, 4),
                "deliveries_per_s": round(deliveries / elapsed, 1),
                "published_msgs_per_s": round(n / elapsed, 1),
                "publish_phase_s": round(published - t0, 4),
            }
        )
    finally:
        for i, conn in enumerate(conns):
            error = await wire.cleanup(conn, 1, consumer_tags=[f"c{i}"])
            if error:
                summary.setdefault("cleanup_error", error)
        error = await wire.cleanup(pub, 1, queues=queues, exchanges=[exchange])
        if error:
            summary.setdefault("cleanup_error", error)
        await asyncio.gather(pub.close(), *(conn.close() for conn in conns))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=50_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--ack", choices=["none", "single"], default="none")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000, help="messages per socket write")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("fanout", args)))
