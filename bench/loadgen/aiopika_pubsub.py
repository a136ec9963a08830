#!/usr/bin/env python3
"""aiopika-pubsub: the pubsub workload written as an application would with aio-pika.

Not a raw-frame client on purpose: this one shows what a typical Python application gets.
One connection publishes (a channel without publisher confirms, one awaited
``exchange.publish(Message(body))`` per message), one consumes with a callback
(``queue.consume``), both in this process on the stdlib asyncio loop (--uvloop to switch).
The clock runs from the first publish to the n-th message handled. Figure: ``msgs_per_s``;
expect the client, not the broker, to be the limit (``harness_cpu_frac_of_1_core`` near 1).

  --ack none    queue.consume(no_ack=True)
  --ack single  Basic.Qos prefetch --prefetch, ``await message.ack()`` per message
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aio_pika
import wire
from aio_pika.abc import AbstractIncomingMessage


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    n, no_ack = args.messages, args.ack == "none"
    name = wire.unique("loadgen.aiopika")
    summary["aio_pika_version"] = aio_pika.__version__
    consuming = await aio_pika.connect(args.url)
    publishing = await aio_pika.connect(args.url)
    try:
        consumer_channel = await consuming.channel()
        publisher_channel = await publishing.channel(publisher_confirms=False)
        queue = await consumer_channel.declare_queue(name, durable=False, auto_delete=False)
        if not no_ack:
            await consumer_channel.set_qos(prefetch_count=args.prefetch)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state = {"count": 0, "last": 0.0}

        async def on_message(message: AbstractIncomingMessage) -> None:
            if not no_ack:
                await message.ack()
            state["count"] += 1
            if state["count"] == n:
                state["last"] = time.monotonic()
                if not done.done():
                    done.set_result(None)

        tag = await queue.consume(on_message, no_ack=no_ack)
        exchange = publisher_channel.default_exchange
        body = b"x" * args.body_size
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        for _ in range(n):
            await exchange.publish(aio_pika.Message(body), routing_key=name)
        published = time.monotonic()
        try:
            await done
        finally:
            summary.update(meter.stop())
        elapsed = state["last"] - t0
        summary.update(
            {
                "messages": n,
                "body_size": args.body_size,
                "ack": args.ack,
                "prefetch": None if no_ack else args.prefetch,
                "elapsed_s": round(elapsed, 4),
                "msgs_per_s": round(n / elapsed, 1),
                "publish_phase_s": round(published - t0, 4),
                "publish_phase_msgs_per_s": round(n / (published - t0), 1),
            }
        )
        await queue.cancel(tag)
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await publishing.close()
        await consuming.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=50_000)
    parser.add_argument("--ack", choices=["none", "single"], default="none")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--uvloop", action="store_true", help="uvloop (default: stdlib asyncio)")
    args = parser.parse_args(argv)
    # what applications mostly run on: the stdlib loop unless asked
    args.no_uvloop = args.no_uvloop or not args.uvloop
    return args


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("aiopika-pubsub", args)))
