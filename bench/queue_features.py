#!/usr/bin/env python3
"""queue-features: what queue TTL, dead-lettering and property-driven features cost, in the
amqpbench style.

Every mode declares a fanout dead-letter exchange (DLX) bound to a dead-letter queue (DLQ),
so that all run the same code; ttl-dlx, dead-letter and expire name it in the work queue's
x-dead-letter-exchange. Separate publisher and consumer connections (one process), default
exchange -> work queue (headers: a headers exchange), transient --body-size byte bodies
(default 100).

  --mode ttl-dlx      pubsub_direct.py --ack single --prefetch 1000, but the work queue has
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

Uses amqpwire from amqpbench: the directory in $AMQPBENCH, else the working directory if it
holds amqpwire.py (run.py and profile.py run scripts there), else ../shared/amqpbench from
the repo root. The last stdout line is one JSON object (ok, figures, harness/broker CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
from typing import Any

from amqpbench_path import amqpwire
from pamqp import commands

# Modes whose work queue has a manual-ack consumer (pubsub_direct --ack single).
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
# Basic.Reject (60, 90) / Basic.Nack (60, 120): delivery-tag, bits (multiple=1, requeue=2).
_REJECT = struct.Struct(">BHIHHQB")


def reject_frame(channel: int, tag: int) -> bytes:
    """Basic.Reject requeue=false."""
    return _REJECT.pack(1, channel, 13, 60, 90, tag, 0) + b"\xce"


def nack_multiple_frame(channel: int, tag: int) -> bytes:
    """Basic.Nack multiple=true requeue=false."""
    return _REJECT.pack(1, channel, 13, 60, 120, tag, 1) + b"\xce"


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


class Counter:
    """Counts deliveries on one connection; resolves ``done`` once ``n`` have arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.last = 0.0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


def no_ack_sink(conn: amqpwire.AMQPConnection, n: int) -> Counter:
    """A no-ack consumer's callbacks on ``conn``: count, stop the clock at the n-th."""
    counter = Counter(n)

    def on_deliver(ch: int, tag: int, body: bytes | None) -> None:
        c = counter.count + 1
        counter.count = c
        if c == n:
            counter.last = time.monotonic()
            if not counter.done.done():
                counter.done.set_result(None)

    conn.on_deliver = on_deliver
    conn.on_batch_end = None
    return counter


def settling_consumer(conn: amqpwire.AMQPConnection, n: int, how: str) -> Counter:
    """A manual-ack consumer on ``conn`` (channel 1) that settles each read chunk in one
    write: ``ack`` = one Basic.Ack per delivery (as pubsub_direct --ack single),
    ``reject`` = one Basic.Reject requeue=false per delivery, ``nack-multiple`` = one
    Basic.Nack multiple requeue=false per chunk."""
    counter = Counter(n)
    pending: list[bytes] = []
    state = {"maxtag": 0, "settled": 0}
    frame = amqpwire.ack_frame if how == "ack" else reject_frame
    per_delivery = how != "nack-multiple"

    def on_deliver(ch: int, tag: int, body: bytes | None) -> None:
        c = counter.count + 1
        counter.count = c
        if per_delivery:
            pending.append(frame(1, tag))
        else:
            state["maxtag"] = tag
        if c == n:
            counter.last = time.monotonic()

    def on_batch_end() -> None:
        if pending:
            conn.transport.write(b"".join(pending))
            pending.clear()
        elif not per_delivery and state["maxtag"] > state["settled"]:
            conn.transport.write(nack_multiple_frame(1, state["maxtag"]))
            state["settled"] = state["maxtag"]
        if counter.count >= n and not counter.done.done():
            counter.done.set_result(None)

    conn.on_deliver = on_deliver
    conn.on_batch_end = on_batch_end
    return counter


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


async def passive_depth(conn: amqpwire.AMQPConnection, queue: str) -> int | None:
    try:
        ok = await conn.rpc(1, commands.Queue.Declare(queue=queue, passive=True), timeout=10)
    except Exception:
        return None
    return int(ok.message_count)


async def main(args: argparse.Namespace, s: dict[str, Any]) -> None:
    mode, n = args.mode, args.messages
    q = amqpwire.unique("amqpbench.features")
    dlx, dlq = f"{q}.dlx", f"{q}.dlq"
    arguments = queue_arguments(args, dlx)
    cons = await amqpwire.connect(args.url, name="amqpbench-consumer")
    pub = await amqpwire.connect(args.url, name="amqpbench-publisher")
    sink = None
    if mode == "dead-letter":
        sink = await amqpwire.connect(args.url, name="amqpbench-dlq-consumer")
    declared_q = declared_dlq = declared_dlx = False
    declared_exchanges: list[str] = []
    tags: list[str] = []
    try:
        await cons.channel(1)
        await pub.channel(1)
        if sink is not None:
            await sink.channel(1)
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
            clock = settling_consumer(cons, n, "ack")
            start = {"x-stream-offset": "first"} if mode == "stream" else {}
            await cons.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="c1", arguments=start))
            tags.append("c1")
            rejecter = None
        elif mode == "dead-letter":
            await cons.rpc(1, commands.Basic.Qos(prefetch_count=args.prefetch))
            how = "reject" if args.reject == "single" else "nack-multiple"
            rejecter = settling_consumer(cons, n, how)
            await cons.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="c1"))
            tags.append("c1")
            assert sink is not None
            clock = no_ack_sink(sink, n)
            await sink.rpc(1, commands.Basic.Consume(queue=dlq, consumer_tag="d1", no_ack=True))
        else:  # expire: nobody consumes the work queue
            rejecter = None
            clock = no_ack_sink(cons, n)
            await cons.rpc(1, commands.Basic.Consume(queue=dlq, consumer_tag="d1", no_ack=True))
            tags.append("d1")

        msg = amqpwire.encode_publish(
            exchange,
            q,
            b"x" * args.body_size,
            1,
            properties=message_properties(mode, args.delay_ms),
            frame_max=pub.frame_max,
        )
        publisher = amqpwire.Publisher(pub, msg, batch=args.batch)
        meter = amqpwire.CpuMeter(args.broker_pid)
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
            errors.append(await amqpwire.cleanup(sink, 1, consumer_tags=["d1"]))
        errors.append(
            await amqpwire.cleanup(
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
    amqpwire.common_args(parser, n_default=200_000)
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
    raise SystemExit(amqpwire.run_main(main, a, amqpwire.base_summary(f"queue-{a.mode}", a)))
