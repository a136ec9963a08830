#!/usr/bin/env python3
"""confirms-persistent: publisher confirms of persistent messages into a durable queue.

The same measurement as amqpbench ``confirms.py`` (Confirm.Select, at most --window (1000)
unconfirmed, into a queue without consumer, first publish write -> last Basic.Ack received)
but durable: the queue is declared ``durable=True`` and every message is published with
``delivery_mode=2``, so a broker may confirm it only once it is on disk (RabbitMQ: after the
message store's fsync; Leveret: after the group-commit fsync; Leveret must run with
--data-dir). Figure: ``confirmed_msgs_per_s``. Afterwards the queue depth is checked
(``queue_depth`` must equal -n: every confirmed message is there) and the queue is deleted.

Uses amqpwire from amqpbench: the directory in $AMQPBENCH, else the working directory if it
holds amqpwire.py (run.py runs scripts there), else ../shared/amqpbench from the repo root.
The last stdout line is one JSON object (ok, figures, harness/broker CPU), as amqpbench's.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from amqpbench_path import amqpwire
from pamqp import commands

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


class Confirms:
    """Counts confirmed publishes, whatever mix of single, multiple and out-of-order acks
    the broker sends (the same bookkeeping as amqpbench ``confirms.py``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.floor = 0  # every tag <= floor is confirmed
        self.above: set[int] = set()  # tags confirmed one by one above the floor
        self.confirmed = 0
        self.nacked = 0
        self.frames = 0
        self.last = 0.0
        self.wake = asyncio.Event()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_confirm(self, tag: int, multiple: int, nack: bool) -> None:
        self.frames += 1
        if nack:
            self.nacked += 1
        if multiple:
            if tag > self.floor:
                self.floor = tag
                if self.above:
                    self.above = {t for t in self.above if t > tag}
        elif tag == self.floor + 1:
            floor = tag
            while floor + 1 in self.above:
                floor += 1
                self.above.discard(floor)
            self.floor = floor
        elif tag > self.floor:
            self.above.add(tag)
        self.confirmed = self.floor + len(self.above)
        if self.confirmed >= self.n and not self.done.done():
            self.last = time.monotonic()
            self.done.set_result(None)
        self.wake.set()


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    n, window = args.messages, args.window
    q = amqpwire.unique("amqpbench.confirms-persistent")
    pub = await amqpwire.connect(args.url, name="amqpbench-confirms-persistent")
    declared = False
    try:
        await pub.channel(1)
        await pub.rpc(1, commands.Queue.Declare(queue=q, durable=True, auto_delete=False))
        declared = True
        await pub.rpc(1, commands.Confirm.Select())
        body = b"x" * args.body_size
        msg = amqpwire.encode_publish(
            "", q, body, 1, properties=PERSISTENT, frame_max=pub.frame_max
        )
        publisher = amqpwire.Publisher(pub, msg, batch=window)
        confirms = Confirms(n)
        pub.on_confirm = confirms.on_confirm
        meter = amqpwire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        deadline = t0 + args.timeout
        while publisher.sent < n:
            if pub.error:
                raise pub.error
            room = window - (publisher.sent - confirms.confirmed)
            if room > 0:
                publisher.write_now(min(room, n - publisher.sent))
                if pub._paused:
                    await pub.drain()
            confirms.wake.clear()
            if window - (publisher.sent - confirms.confirmed) <= 0:
                wait = max(1.0, deadline - time.monotonic())
                await asyncio.wait_for(confirms.wake.wait(), wait)
        await asyncio.wait_for(confirms.done, max(1.0, deadline - time.monotonic()))
        s.update(meter.stop())
        elapsed = confirms.last - t0
        ok = await pub.rpc(1, commands.Queue.Declare(queue=q, passive=True), timeout=30)
        s.update(
            {
                "messages": n,
                "body_size": args.body_size,
                "window": window,
                "delivery_mode": 2,
                "durable_queue": True,
                "elapsed_s": round(elapsed, 4),
                "confirmed_msgs_per_s": round(n / elapsed, 1),
                "nacked": confirms.nacked,
                "ack_frames": confirms.frames,
                "msgs_per_ack_frame": round(n / max(1, confirms.frames), 2),
                "queue_depth": int(ok.message_count),
            }
        )
        if confirms.nacked:
            s["error"] = f"{confirms.nacked} nacks"
        elif s["queue_depth"] != n:
            s["error"] = f"queue depth {s['queue_depth']} after {n} confirmed publishes"
    finally:
        if declared:
            error = await amqpwire.cleanup(pub, 1, queues=[q])
            if error:
                s["cleanup_error"] = error
        await pub.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    amqpwire.common_args(parser, n_default=200_000)
    parser.add_argument("--window", type=int, default=1000, help="max unconfirmed in flight")
    return parser.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    raise SystemExit(amqpwire.run_main(main, a, amqpwire.base_summary("confirms-persistent", a)))
