#!/usr/bin/env python3
"""queue-features: what queue TTL, dead-lettering and property-driven features cost.

Every mode declares a fanout dead-letter exchange (DLX) bound to a dead-letter queue (DLQ),
so that all run the same code; ttl-dlx, dead-letter and expire name it in the work queue's
x-dead-letter-exchange. Separate publisher and consumer connections (one process), default
exchange -> work queue (headers: a headers exchange), transient --body-size byte bodies
(default 100).

  --mode ttl-dlx      loadgen/pubsub.py --ack single --prefetch 1000, but the work queue has
                      x-message-ttl=--ttl-ms (60000) and the DLX: the features are configured,
                      never triggered. Clock: first publish write -> last delivery parsed.
                      Figure: msgs_per_s (compare with pubsub_direct --ack single).
  --mode dead-letter  the work queue has only the DLX; its consumer (prefetch --prefetch)
                      rejects every delivery without requeue (--reject single: one
                      Basic.Reject per delivery, written per read chunk; --reject multiple:
                      one Basic.Nack multiple per read chunk); a no-ack consumer on a third
                      connection drains the DLQ. Clock: first publish write -> N-th message
                      parsed from the DLQ. Figure: dead_lettered_per_s.
  --mode expire       the work queue has x-message-ttl=--ttl-ms (1) and the DLX and no
                      consumer; a no-ack consumer drains the DLQ. Clock: first publish write
                      -> N-th expired message parsed from the DLQ.
                      Figure: expired_dead_lettered_per_s.
  --mode plain        control for ttl-dlx: the same code with a work queue without arguments.
  --mode stream       the work queue is a stream (x-queue-type stream, durable, so every
                      message is written to disk), consumed from x-stream-offset "first"
                      with the same acking consumer: compare with plain.

Three more controls-with-a-feature run the same consumer as plain, each with one feature the
broker has to read message properties for (figure: msgs_per_s, compare with plain):

  --mode priority     the work queue has x-max-priority=10, every message priority 5.
  --mode message-ttl  every message has the expiration property "60000" (never triggered).
  --mode headers      messages go through a headers exchange (x-match all on two headers,
                      bound to the work queue) and carry those two headers.
  --mode delayed      messages go through an x-delayed-message exchange (x-delayed-type
                      direct, bound to the work queue) with x-delay --delay-ms (default 1):
                      every message is kept back, then released. Needs the delayed-message
                      plugin on RabbitMQ.
  --mode delayed-none the same exchange, messages without x-delay: its cost as a proxy.

A workload script of the load generator (raw frames through ``loadgen/wire.py``, the same
options as ``loadgen/pubsub.py``); the last stdout line is one JSON object (ok, figures,
harness/broker CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from loadgen import wire
from pamqp import commands

# Modes whose work queue has a manual-ack consumer (loadgen/pubsub.py --ack single).
CONSUMED = (
    "ttl-dlx",
    "plain",
    "priority",
    "message-ttl",
    "headers",
    "stream",
    "delayed",
    "delayed-none",
)
MODES = (*CONSUMED, "dead-letter", "expire")
FIGURE = {
    **{mode: "msgs_per_s" for mode in CONSUMED},
    "dead-letter": "dead_lettered_per_s",
    "expire": "expired_dead_lettered_per_s",
}
DEFAULT_TTL_MS = {"ttl-dlx": 60_000, "expire": 1}
# --mode headers: the headers every message carries and the binding matches on.
HEADERS = {"type": "order", "region": "eu"}


def queue_arguments(args: argparse.Namespace, dlx: str) -> dict[str, Any]:
    if args.mode == "priority":
        return {"x-max-priority": 10}
    if args.mode == "stream":
        return {"x-queue-type": "stream"}
    if args.mode in ("plain", "message-ttl", "headers", "delayed", "delayed-none"):
        return {}
    arguments: dict[str, Any] = {"x-dead-letter-exchange": dlx}
    if args.mode in ("ttl-dlx", "expire"):
        arguments["x-message-ttl"] = args.ttl_ms
    return arguments


def message_properties(mode: str, delay_ms: int = 1) -> commands.Basic.Properties | None:
    """The properties every published message carries (None: none at all)."""
    if mode == "delayed":
        return commands.Basic.Properties(headers={"x-delay": delay_ms})
    if mode == "priority":
        return commands.Basic.Properties(priority=5)
    if mode == "message-ttl":
        return commands.Basic.Properties(expiration="60000")
    if mode == "headers":
        return commands.Basic.Properties(headers=dict(HEADERS))
    return None


async def passive_depth(conn: wire.Connection, queue: str) -> int | None:
    try:
        ok = await conn.rpc(1, commands.Queue.Declare(queue=queue, passive=True), wait_s=10)
    except Exception:
        return None
    return int(ok.message_count)


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    mode, n = args.mode, args.messages
    q = wire.unique("loadgen.features")
    dlx, dlq = f"{q}.dlx", f"{q}.dlq"
    arguments = queue_arguments(args, dlx)
    cons = await wire.connect(args.url, name="loadgen-features-consumer")
    pub = await wire.connect(args.url, name="loadgen-features-publisher")
    sink = None
    if mode == "dead-letter":
        sink = await wire.connect(args.url, name="loadgen-features-dlq-consumer")
    declared_q = declared_dlq = declared_dlx = False
    declared_exchanges: list[str] = []
    tags: list[str] = []
    try:
        await cons.open_channel(1)
        await pub.open_channel(1)
        if sink is not None:
            await sink.open_channel(1)
        await cons.rpc(
            1,
            commands.Exchange.Declare(
                exchange=dlx, exchange_type="fanout", durable=False, auto_delete=False
            ),
        )
        declared_dlx = True
        await cons.rpc(1, commands.Queue.Declare(queue=dlq, durable=False, auto_delete=False))
        declared_dlq = True
        await cons.rpc(1, commands.Queue.Bind(queue=dlq, exchange=dlx, routing_key=""))
        await cons.rpc(
            1,
            commands.Queue.Declare(
                queue=q, durable=mode == "stream", auto_delete=False, arguments=arguments
            ),
        )
        declared_q = True
        exchange = ""
        if mode == "headers":
            exchange = f"{q}.headers"
            await cons.rpc(
                1,
                commands.Exchange.Declare(
                    exchange=exchange, exchange_type="headers", durable=False, auto_delete=False
                ),
            )
            declared_exchanges.append(exchange)
            binding = {"x-match": "all", **HEADERS}
            await cons.rpc(
                1,
                commands.Queue.Bind(queue=q, exchange=exchange, routing_key="", arguments=binding),
            )
        elif mode in ("delayed", "delayed-none"):
            exchange = f"{q}.delayed"
            await cons.rpc(
                1,
                commands.Exchange.Declare(
                    exchange=exchange,
                    exchange_type="x-delayed-message",
                    durable=False,
                    auto_delete=False,
                    arguments={"x-delayed-type": "direct"},
                ),
            )
            declared_exchanges.append(exchange)
            await cons.rpc(1, commands.Queue.Bind(queue=q, exchange=exchange, routing_key=q))

        # The counter whose n-th message stops the clock, and what consumes what.
        if mode in CONSUMED:
            await cons.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))
            clock = wire.Consumer(cons, n, "ack")
            start = {"x-stream-offset": "first"} if mode == "stream" else {}
            await cons.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="c1", arguments=start))
            tags.append("c1")
            rejecter = None
        elif mode == "dead-letter":
            await cons.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))
            how = "reject" if args.reject == "single" else "nack-multiple"
            rejecter = wire.Consumer(cons, n, how)
            await cons.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="c1"))
            tags.append("c1")
            assert sink is not None
            clock = wire.Consumer(sink, n, "none")
            await sink.rpc(1, commands.Basic.Consume(queue=dlq, consumer_tag="d1", no_ack=True))
        else:  # expire: nobody consumes the work queue
            rejecter = None
            clock = wire.Consumer(cons, n, "none")
            await cons.rpc(1, commands.Basic.Consume(queue=dlq, consumer_tag="d1", no_ack=True))
            tags.append("d1")

        msg = wire.encode_publish(
            exchange,
            q,
            b"x" * args.body_size,
            properties=message_properties(mode, args.delay_ms),
            frame_max=pub.frame_max,
        )
        publisher = wire.Publisher(pub, msg, batch=args.batch)
        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await publisher.run(n)
        t_pub = time.monotonic()
        try:
            await asyncio.wait_for(clock.done, max(1.0, args.timeout - (t_pub - t0) - 10))
        except TimeoutError:
            got = f"{clock.count}/{n} at the clock"
            if rejecter is not None:
                got += f", {rejecter.count}/{n} delivered to the rejecting consumer"
            raise RuntimeError(f"timed out waiting: {got}") from None
        finally:
            s.update(meter.stop())
        el = clock.last - t0
        s.update(
            {
                "mode": mode,
                "messages": n,
                "body_size": args.body_size,
                "queue_arguments": arguments,
                "prefetch": args.prefetch if mode != "expire" else None,
                "reject": args.reject if mode == "dead-letter" else None,
                "elapsed_s": round(el, 4),
                FIGURE[mode]: round(n / el, 1),
                "publish_phase_s": round(t_pub - t0, 4),
                "publish_phase_msgs_per_s": round(n / (t_pub - t0), 1),
            }
        )
        if mode in CONSUMED:
            s["delivered"] = clock.count
            if mode == "ttl-dlx":
                # configured, not triggered: nothing may have reached the dead-letter queue
                s["dead_letter_queue_depth"] = await passive_depth(cons, dlq)
        else:
            s["dead_lettered"] = clock.count
            if rejecter is not None:
                s["rejected"] = rejecter.count
        if pub.returns:
            s["returns"] = pub.returns
    finally:
        errors = []
        if sink is not None:
            errors.append(await wire.cleanup(sink, 1, consumer_tags=["d1"]))
        errors.append(
            await wire.cleanup(
                cons,
                1,
                consumer_tags=tags,
                queues=[name for name, ok in ((q, declared_q), (dlq, declared_dlq)) if ok],
                exchanges=declared_exchanges + ([dlx] if declared_dlx else []),
            )
        )
        if any(errors):
            s["cleanup_error"] = "; ".join(e for e in errors if e)
        for conn in (sink, pub, cons):
            if conn is not None:
                await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=200_000)
    parser.add_argument("--mode", choices=MODES, default="ttl-dlx")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--delay-ms", type=int, default=1, help="x-delay of --mode delayed")
    parser.add_argument(
        "--ttl-ms",
        type=int,
        default=None,
        help="x-message-ttl of the work queue (default: 60000 for ttl-dlx, 1 for expire)",
    )
    parser.add_argument(
        "--reject",
        choices=["single", "multiple"],
        default="single",
        help="dead-letter mode: Basic.Reject per delivery, or one Basic.Nack multiple per read",
    )
    parser.add_argument("--batch", type=int, default=1000, help="messages per socket write")
    args = parser.parse_args(argv)
    if args.ttl_ms is None:
        args.ttl_ms = DEFAULT_TTL_MS.get(args.mode)
    return args


if __name__ == "__main__":
    a = parse_args()
    raise SystemExit(wire.run(main, a, wire.base_summary(f"queue-{a.mode}", a)))
