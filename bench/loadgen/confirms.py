#!/usr/bin/env python3
"""confirms: publisher confirms, pipelined, at most --window (1000) messages unconfirmed.

Confirm.Select, then -n transient messages of --body-size bytes through the default exchange
into a non-durable queue without consumer (deleted afterwards); the clock runs from the
first publish write to the confirm of the n-th. Figure: ``confirmed_msgs_per_s``. The broker
may confirm one by one, several at once (multiple) or out of order: all are counted
(``msgs_per_ack_frame`` says which it did).

  --target queue       into the queue: the enqueue + confirm path
  --target unroutable  to a routing key no queue is bound to: the cheapest confirm
"""

from __future__ import annotations

import argparse
import time

import wire
from pamqp import commands


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    n, window = args.messages, args.window
    queue = wire.unique("loadgen.confirms")
    pub = await wire.connect(args.url, name="loadgen-confirms")
    declared = False
    try:
        await pub.open_channel(1)
        if args.target == "queue":
            await pub.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
            declared = True
        routing_key = queue if declared else f"{queue}.nobody"
        await pub.rpc(1, commands.Confirm.Select())
        body = b"x" * args.body_size
        message = wire.encode_publish("", routing_key, body, frame_max=pub.frame_max)
        publisher = wire.Publisher(pub, message, batch=window)
        pub.on_confirm = confirms = wire.ConfirmTracker(n)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        try:
            await wire.publish_confirmed(publisher, confirms, window, t0 + args.timeout)
        finally:
            summary.update(meter.stop())
        summary.update(
            {
                "messages": n,
                "body_size": args.body_size,
                "window": window,
                "target": args.target,
                **confirms.summary(t0),
            }
        )
        if confirms.nacked:
            summary["error"] = f"{confirms.nacked} of {n} publishes nacked"
    finally:
        if declared:
            error = await wire.cleanup(pub, 1, queues=[queue])
            if error:
                summary["cleanup_error"] = error
        await pub.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=200_000)
    parser.add_argument("--window", type=int, default=1000, help="max unconfirmed in flight")
    parser.add_argument("--target", choices=["queue", "unroutable"], default="queue")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("confirms", args)))
