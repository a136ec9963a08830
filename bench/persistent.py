#!/usr/bin/env python3
"""confirms-persistent: publisher confirms of persistent messages into a durable queue.

The same measurement as ``loadgen/confirms.py`` (Confirm.Select, at most --window (1000)
unconfirmed, into a queue without consumer, first publish write -> last confirm received)
but durable: the queue is declared ``durable=True`` and every message is published with
``delivery_mode=2``, so a broker may confirm it only once it is on disk (RabbitMQ: after the
message store's fsync; Leveret: after the group-commit fsync; Leveret must run with
--data-dir). Figure: ``confirmed_msgs_per_s``. Afterwards the queue depth is checked
(``queue_depth`` must equal -n: every confirmed message is there) and the queue is deleted.

A workload script of the load generator (raw frames through ``loadgen/wire.py``); the last
stdout line is one JSON object (ok, figures, harness/broker CPU).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from loadgen import wire
from pamqp import commands

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    n, window = args.messages, args.window
    q = wire.unique("loadgen.confirms-persistent")
    pub = await wire.connect(args.url, name="loadgen-confirms-persistent")
    declared = False
    try:
        await pub.open_channel(1)
        await pub.rpc(1, commands.Queue.Declare(queue=q, durable=True, auto_delete=False))
        declared = True
        await pub.rpc(1, commands.Confirm.Select())
        body = b"x" * args.body_size
        msg = wire.encode_publish("", q, body, properties=PERSISTENT, frame_max=pub.frame_max)
        publisher = wire.Publisher(pub, msg, batch=window)
        pub.on_confirm = confirms = wire.ConfirmTracker(n)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        try:
            await wire.publish_confirmed(publisher, confirms, window, t0 + args.timeout)
        finally:
            s.update(meter.stop())
        ok = await pub.rpc(1, commands.Queue.Declare(queue=q, passive=True), wait_s=30)
        s.update(
            {
                "messages": n,
                "body_size": args.body_size,
                "window": window,
                "delivery_mode": 2,
                "durable_queue": True,
                **confirms.summary(t0),
                "queue_depth": int(ok.message_count),
            }
        )
        if confirms.nacked:
            s["error"] = f"{confirms.nacked} nacks"
        elif s["queue_depth"] != n:
            s["error"] = f"queue depth {s['queue_depth']} after {n} confirmed publishes"
    finally:
        if declared:
            error = await wire.cleanup(pub, 1, queues=[q])
            if error:
                s["cleanup_error"] = error
        await pub.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=200_000)
    parser.add_argument("--window", type=int, default=1000, help="max unconfirmed in flight")
    return parser.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    raise SystemExit(wire.run(main, a, wire.base_summary("confirms-persistent", a)))
