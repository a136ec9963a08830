#!/usr/bin/env python3
"""topic-routing: a topic exchange with --bindings (10,000) bindings over --queues (100) queues.

The bindings are the seeds' topic mix (``bench/topicwords.py``): 3-7 words, the first a
literal from a --vocab (1000) word vocabulary, then a literal (p 0.7), ``*`` (0.2) or ``#``
(0.1), never ``#.#``; round-robin over the queues. --routing-keys (10,000) routing keys are
made from randomly chosen binding keys (``*`` -> one word, ``#`` -> 0-2 words). All seeded
(--seed), so every run and every broker gets the same workload.

1. bind phase: the bindings as Queue.Bind requests pipelined on one channel, at most
   --bind-window (256) unanswered (1 = one RPC at a time). Figure: ``bindings_per_s``
   (first Bind sent -> last Bind-Ok).
2. publish phase: -n (50,000) transient messages cycling through the pre-encoded routing
   keys, no consumers; after every --batch (250) messages a barrier on the same channel
   (Exchange.Declare passive), at most --depth (4) unanswered, so the rate is of messages
   the broker has routed, not merely written. Writing stops after --max-seconds (15) on a
   slow broker; the rate counts what was sent. Figure: ``publish_msgs_per_s`` (first write
   -> last barrier reply).

Afterwards the queue depths are summed and compared with what an independent reference
matcher (a trie, below) expects: ``routing_check`` is ``ok`` or ``MISMATCH got != expected``
(a broker correctness finding, reported, not a failed run).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import wire
from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from bench.topicwords import binding_words, vocabulary


class Trie:
    """A reference AMQP topic matcher: which queue indexes a routing key reaches."""

    def __init__(self) -> None:
        self.root: dict[str | None, Any] = {}

    def add(self, words: Sequence[str], queue: int) -> None:
        node = self.root
        for word in words:
            node = node.setdefault(word, {})
        node.setdefault(None, set()).add(queue)

    def match(self, key: Sequence[str]) -> set[int]:
        found: set[int] = set()
        seen: set[tuple[int, int]] = set()  # (node, position) pairs: '#' revisits them

        def walk(node: dict[str | None, Any], i: int) -> None:
            if (id(node), i) in seen:
                return
            seen.add((id(node), i))
            hash_node = node.get("#")
            if hash_node is not None:  # '#' takes zero or more of the remaining words
                for j in range(i, len(key) + 1):
                    walk(hash_node, j)
            if i == len(key):
                found.update(node.get(None, ()))
                return
            for word in (key[i], "*"):
                child = node.get(word)
                if child is not None:
                    walk(child, i + 1)

        walk(self.root, 0)
        return found


def routing_key_words(rng: random.Random, pattern: list[str], vocab: list[str]) -> list[str]:
    """A routing key the binding ``pattern`` matches: ``*`` -> one word, ``#`` -> 0-2."""
    words: list[str] = []
    for word in pattern:
        if word == "*":
            words.append(rng.choice(vocab))
        elif word == "#":
            words += [rng.choice(vocab) for _ in range(rng.randint(0, 2))]
        else:
            words.append(word)
    return words


def generate(
    args: argparse.Namespace,
) -> tuple[list[tuple[int, str]], list[tuple[str, int]], wire.Summary]:
    """The bindings ``(queue index, key)``, the routing keys ``(key, queues reached)`` and a
    description of the mix for the JSON output."""
    rng = random.Random(f"leveret-loadgen-topic/{args.seed}/{args.bindings}/{args.vocab}")
    vocab = vocabulary(args.vocab)
    trie = Trie()
    patterns, bindings = [], []
    for i in range(args.bindings):
        words = binding_words(rng, vocab)
        patterns.append(words)
        bindings.append((i % args.queues, ".".join(words)))
        trie.add(words, i % args.queues)
    keys = []
    for _ in range(args.routing_keys):
        words = routing_key_words(rng, rng.choice(patterns), vocab)
        keys.append((".".join(words), len(trie.match(words))))
    reached = sorted(count for _, count in keys)
    meta = {
        "bindings": args.bindings,
        "unique_bindings": len(set(bindings)),
        "queues": args.queues,
        "vocab": args.vocab,
        "routing_keys": args.routing_keys,
        "seed": args.seed,
        "matched_queues_mean": round(sum(reached) / len(reached), 3),
        "matched_queues_p50": reached[len(reached) // 2],
        "matched_queues_max": reached[-1],
    }
    return bindings, keys, meta


async def bind_all(
    conn: wire.Connection,
    exchange: str,
    queues: list[str],
    bindings: list[tuple[int, str]],
    window: int,
) -> None:
    """Queue.Bind every binding, at most ``window`` unanswered."""
    unanswered: deque[asyncio.Future[Any]] = deque()
    for queue, key in bindings:
        bind = commands.Queue.Bind(queue=queues[queue], exchange=exchange, routing_key=key)
        unanswered.append(conn.request(1, bind))
        if len(unanswered) >= window:
            # replies come in order: wait for the oldest, collect the others already in
            await asyncio.wait_for(unanswered.popleft(), 120)
            while unanswered and unanswered[0].done():
                unanswered.popleft().result()  # raises if the broker refused the bind
    for future in unanswered:
        await asyncio.wait_for(future, 120)


async def publish_routed(
    conn: wire.Connection, exchange: str, keys: list[tuple[str, int]], args: argparse.Namespace
) -> tuple[int, float]:
    """Publish, with a barrier RPC every --batch messages; returns (messages sent, the
    seconds it took until the last barrier reply) ."""
    body = b"x" * args.body_size
    messages = [
        wire.encode_publish(exchange, key, body, frame_max=conn.frame_max) for key, _ in keys
    ]
    publisher = wire.Publisher(conn, messages, batch=args.batch)
    barrier = commands.Exchange.Declare(exchange=exchange, exchange_type="topic", passive=True)
    barriers: list[asyncio.Future[Any]] = []
    t0 = time.monotonic()
    stop_at = t0 + args.max_seconds
    while publisher.sent < args.messages and time.monotonic() < stop_at:
        publisher.write_now(min(args.batch, args.messages - publisher.sent))
        barriers.append(conn.request(1, barrier))
        if len(barriers) >= args.depth:
            await asyncio.wait_for(barriers.pop(0), 300)
    for future in barriers:
        await asyncio.wait_for(future, 300)
    return publisher.sent, time.monotonic() - t0


async def main(args: argparse.Namespace, summary: wire.Summary) -> None:
    bindings, keys, meta = generate(args)
    summary["workload_meta"] = meta
    exchange = wire.unique("loadgen.topic")
    queues = [f"{exchange}.q{i}" for i in range(args.queues)]
    conn = await wire.connect(args.url, name="loadgen-topic")
    try:
        await conn.open_channel(1)
        declare = commands.Exchange.Declare(exchange=exchange, exchange_type="topic")
        await conn.rpc(1, declare)
        for queue in queues:
            await conn.rpc(1, commands.Queue.Declare(queue=queue, durable=False, auto_delete=False))

        meter = wire.CpuMeter(args.broker_pid)
        meter.start()
        t0 = time.monotonic()
        await bind_all(conn, exchange, queues, bindings, max(1, args.bind_window))
        bind_s = time.monotonic() - t0
        bind_cpu = meter.stop()
        summary.update(
            {
                "bind_window": max(1, args.bind_window),
                "bind_s": round(bind_s, 4),
                "bindings_per_s": round(len(bindings) / bind_s, 1),
                "bind_harness_cpu_frac": bind_cpu["harness_cpu_frac_of_1_core"],
                "bind_broker_cpu_frac": bind_cpu.get("broker_cpu_frac_of_1_core"),
            }
        )

        meter.start()
        sent, publish_s = await publish_routed(conn, exchange, keys, args)
        summary.update(meter.stop())
        expected = sum(keys[i % len(keys)][1] for i in range(sent))
        summary.update(
            {
                "messages": sent,
                "messages_requested": args.messages,
                "body_size": args.body_size,
                "publish_s": round(publish_s, 4),
                "publish_msgs_per_s": round(sent / publish_s, 1),
                "expected_enqueued": expected,
                "enqueues_per_s": round(expected / publish_s, 1),
            }
        )
        if args.check:
            # a broker may enqueue after its barrier reply: give the depths time to settle
            total, deadline = -1, time.monotonic() + 30
            while time.monotonic() < deadline:
                total = 0
                for queue in queues:
                    ok = await conn.rpc(1, commands.Queue.Declare(queue=queue, passive=True))
                    total += ok.message_count
                if total >= expected:
                    break
                await asyncio.sleep(0.5)
            summary["enqueued_total"] = total
            check = "ok" if total == expected else f"MISMATCH {total} != {expected}"
            summary["routing_check"] = check
    finally:
        t = time.monotonic()
        error = await wire.cleanup(conn, 1, queues=queues, exchanges=[exchange], wait_s=120)
        summary["cleanup_s"] = round(time.monotonic() - t, 3)
        if error:
            summary["cleanup_error"] = error
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    wire.common_args(parser, n_default=50_000)
    parser.add_argument("--bindings", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--vocab", type=int, default=1000, help="words in the vocabulary")
    parser.add_argument("--routing-keys", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bind-window", type=int, default=256, help="max unanswered binds")
    parser.add_argument("--batch", type=int, default=250, help="messages between barriers")
    parser.add_argument("--depth", type=int, default=4, help="max unanswered barriers")
    parser.add_argument(
        "--max-seconds", type=float, default=15.0, help="stop writing after this long (s)"
    )
    parser.add_argument(
        "--no-check", dest="check", action="store_false", help="skip the queue-depth check"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(wire.run(main, args, wire.base_summary("topic-routing", args)))
