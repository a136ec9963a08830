#!/usr/bin/env python3
"""latency: a paced publisher at --rate msgs/s, default exchange -> one queue -> one consumer.

For --warmup seconds (not counted), then --seconds, the publisher wakes about every
millisecond (--tick) and writes the messages due by then; each body carries the
``time.monotonic_ns()`` of its write and a sequence number in its first 16 bytes. The
consumer (no-ack unless --ack single) takes the latency at parse time. Publisher and
consumer share this process, hence one clock. Figures: ``p50_us``, ``p99_us`` (also p90,
p99.9, max, mean, min), ``achieved_rate`` and ``max_schedule_lag_ms`` (how late the
publisher's writes were: a large value means the client, not the broker, was late).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import struct
import time

import wire
from pamqp import commands

STAMP = struct.Struct(">QQ")  # write time (monotonic ns), sequence number


def percentile(ordered: list[int], p: float) -> int | None:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(latencies_ns: list[int]) -> wire.Summary:
    ordered = sorted(latencies_ns)

    def us(ns: float | None) -> float | None:
        return None if ns is None else round(ns / 1000, 1)

    return {
        "count": len(ordered),
        "p50_us": us(percentile(ordered, 50)),
        "p90_us": us(percentile(ordered, 90)),
        "p99_us": us(percentile(ordered, 99)),
        "p999_us": us(percentile(ordered, 99.9)),
        "max_us": us(ordered[-1] if ordered else None),
        "mean_us": us(sum(ordered) / len(ordered) if ordered else None),
        "min_us": us(ordered[0] if ordered else None),
    }


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    queue = wire.unique("loadgen.latency")
    rate = args.rate
    warmup_n = int(args.warmup * rate)
    total = warmup_n + int(args.seconds * rate)
    no_ack = args.ack == "none"
    cons = await wire.connect(args.url, name="loadgen-latency-consumer")
    pub = await wire.connect(args.url, name="loadgen-latency-publisher")
    try:
        await cons.open_channel(1)
        await pub.open_channel(1)
        await cons.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))
        if not no_ack:
            await cons.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))

        # wire.Consumer counts and settles; the latency is taken in front of it.
        consumer = wire.Consumer(cons, total, "none" if no_ack else "ack")
        settle = cons.on_deliver
        assert settle is not None
        latencies: list[int] = []
        clock, unstamp = time.monotonic_ns, STAMP.unpack_from

        def on_deliver(channel: int, tag: int, body: bytes | None) -> None:
            now = clock()
            assert body is not None
            written, seq = unstamp(body)
            if seq >= warmup_n:
                latencies.append(now - written)
            settle(channel, tag, body)

        cons.want_body = True
        cons.on_deliver = on_deliver
        consume = commands.Basic.Consume(queue=queue, consumer_tag="lat", no_ack=no_ack)
        await cons.rpc(1, consume)

        body = bytes(max(STAMP.size, args.body_size))
        template = wire.encode_publish("", queue, body, frame_max=pub.frame_max)
        # the body starts after the method and header frames and the body frame's header
        stamp_at = len(wire.encode_publish("", queue, b"", frame_max=pub.frame_max)) + 7
        size = len(template)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        sent, max_lag = 0, 0.0
        while sent < total:
            now = time.monotonic()
            due = min(total, int((now - t0) * rate) + 1)
            if due > sent:
                lag = now - (t0 + sent / rate)
                if sent >= warmup_n and lag > max_lag:
                    max_lag = lag
                batch = bytearray(template * (due - sent))
                stamp = clock()
                for i in range(due - sent):
                    STAMP.pack_into(batch, i * size + stamp_at, stamp, sent + i)
                pub.write(batch)
                sent = due
            # Sleep until the next message is due, but at least --tick: the loop's timers
            # have about 1 ms resolution, and shorter sleeps would spin the harness.
            await asyncio.sleep(max(t0 + sent / rate - time.monotonic(), args.tick))
        published = time.monotonic()
        try:
            await asyncio.wait_for(consumer.done, args.grace)
        except TimeoutError:
            raise RuntimeError(f"{consumer.count}/{total} delivered in the grace time") from None
        finally:
            summary.update(meter.stop())
        measured_s = published - t0 - args.warmup
        summary.update(
            {
                "rate": rate,
                "seconds": args.seconds,
                "warmup_s": args.warmup,
                "ack": args.ack,
                "body_size": len(body),
                "sent": sent,
                "received": consumer.count,
                "achieved_rate": round((sent - warmup_n) / measured_s, 1)
                if measured_s > 0
                else None,
                "max_schedule_lag_ms": round(max_lag * 1000, 3),
            }
        )
        summary.update(latency_summary(latencies))
    finally:
        error = await wire.cleanup(cons, 1, consumer_tags=["lat"], queues=[queue])
        if error:
            summary["cleanup_error"] = error
        await asyncio.gather(pub.close(), cons.close())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser)
    parser.add_argument("--rate", type=float, default=5000.0, help="messages per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds sent first, not counted")
    parser.add_argument("--grace", type=float, default=30.0, help="wait for stragglers (s)")
    parser.add_argument("--tick", type=float, default=0.001, help="min publisher sleep (s)")
    parser.add_argument("--ack", choices=["none", "single"], default="none")
    parser.add_argument("--prefetch", type=int, default=1000)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("latency", args)))
