"""Requeueing 20,000 unacknowledged messages at once does not freeze the broker.

A consumer without basic.qos takes every message of a queue and acks none; its channel is
then closed, which hands all of them back to the queue at once (RabbitMQ:
rabbit_amqqueue:requeue/3 from the channel's terminate; Leveret: the queue's settle path,
one merge back into place, leveret.prioritydeque.merge_by_seq). Meanwhile another
connection publishes with confirms, a full round trip through the broker's loop each time.

What must hold: the messages come back in their original order, every one flagged
``redelivered``, and the other client is served while the requeue runs (its longest round
trip stays under a bound that only a stall of the loop would break: generous, since this
two-core machine is shared). ``bench/faults.py requeue`` prints the figures (the other
client's p50/p99/max and the time until the queue is whole again) against Leveret and
RabbitMQ; this module runs the same function against the session broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
import pytest

from .helpers import unique

pytestmark = pytest.mark.timeout(120)

MESSAGES = 20_000
# A stall would be the whole requeue (seconds); the scheduler of a shared two-core machine
# alone adds spikes of a few hundred milliseconds.
ROUND_TRIP_MAX = 2.0


class RoundTrips(threading.Thread):
    """Publishes with confirms on a connection of its own until stopped, timing each."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.times: list[tuple[float, float]] = []  # (start, duration)
        self.warm = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            channel = connection.channel()
            queue = channel.queue_declare("", exclusive=True, arguments={"x-max-length": 10})
            channel.confirm_delivery()
            while not self.stop.is_set():
                began = time.perf_counter()
                channel.basic_publish("", queue.method.queue, b"fair")
                self.times.append((began, time.perf_counter() - began))
                if len(self.times) == 20:
                    self.warm.set()
            connection.close()
        except BaseException as exc:  # reported by the caller
            self.error = exc
            self.warm.set()


def requeue_while_measured(url: str, messages: int = MESSAGES) -> dict[str, Any]:
    """Run the scenario; return ``round_trips`` (s, those that overlapped the requeue),
    ``requeue_s`` (channel close sent -> the queue whole again), ``in_order`` and
    ``redelivered`` (every message came back flagged)."""
    queue = unique("requeue-many")
    admin = pika.BlockingConnection(pika.URLParameters(url))
    ch = admin.channel()
    ch.queue_declare(queue)
    for n in range(messages):
        ch.basic_publish("", queue, b"%06d" % n)
    while ch.queue_declare(queue, passive=True).method.message_count < messages:
        admin.process_data_events(0.05)

    consumer = pika.BlockingConnection(pika.URLParameters(url))
    cch = consumer.channel()
    delivered = 0

    def count(*_: Any) -> None:
        nonlocal delivered
        delivered += 1

    cch.basic_consume(queue, count)  # manual ack, no qos: everything is delivered
    while delivered < messages:
        consumer.process_data_events(0.1)

    probe = RoundTrips(url)
    probe.start()
    probe.warm.wait(30)
    assert probe.error is None, probe.error
    began = time.perf_counter()
    cch.close()  # every delivery goes back to the queue
    while ch.queue_declare(queue, passive=True).method.message_count < messages:
        admin.process_data_events(0.01)
    ended = time.perf_counter()
    probe.stop.set()
    probe.join(30)
    consumer.close()
    assert probe.error is None, probe.error
    # every round trip that overlapped the requeue, including one it may have held up
    during = [d for start, d in probe.times if start <= ended and start + d >= began]

    got: list[tuple[bytes, bool]] = []
    for method, _props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=10):
        if method is None:
            break
        got.append((body, method.redelivered))
        if len(got) == messages:
            break
    ch.cancel()
    ch.queue_delete(queue)
    admin.close()
    return {
        "messages": messages,
        "requeue_s": round(ended - began, 3),
        "round_trips": during or [d for _, d in probe.times[-1:]],
        "round_trips_during": len(during),
        "in_order": [b for b, _ in got] == [b"%06d" % n for n in range(messages)],
        "redelivered": len(got) == messages and all(r for _, r in got),
    }


def test_twenty_thousand_unacked_are_requeued_in_order_without_a_freeze(amqp_url: str) -> None:
    figures = requeue_while_measured(amqp_url)
    assert figures["in_order"], "requeued messages came back out of order (or some missing)"
    assert figures["redelivered"], "a requeued message came back without redelivered"
    longest = max(figures["round_trips"])
    assert longest < ROUND_TRIP_MAX, (
        f"another client waited {longest:.2f} s during the requeue ({figures['requeue_s']} s)"
    )
