"""kombu and Celery through Leveret, with the plugin's fixtures.

kombu's ``pyamqp`` transport (the ``amqp`` package, what Celery uses with an ``amqp://``
broker URL) publishes and consumes; a Celery worker runs in a thread (solo pool) and a
task makes the round trip, its result coming back through the ``rpc://`` backend (a reply
queue per client, consumed with no-ack); remote control (``celery inspect``) and task
events reach the caller.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
from amqp.exceptions import PreconditionFailed
from celery import Celery
from celery.contrib.testing.worker import TestWorkController, start_worker

from leveret.inspect import Inspector


def test_kombu_producer_consumer_round_trip(amqp_url: str, leveret: Inspector) -> None:
    exchange = kombu.Exchange("orders", type="direct")
    queue = kombu.Queue("orders.created", exchange, routing_key="created")
    with kombu.Connection(amqp_url) as connection:
        with connection.Producer() as producer:
            for n in range(3):
                producer.publish(
                    {"order": n},
                    exchange=exchange,
                    routing_key="created",
                    declare=[queue],
                    serializer="json",
                    retry=True,
                )
        leveret.wait_for_messages("orders.created", 3)

        received: list[Any] = []

        def on_message(body: Any, message: kombu.Message) -> None:
            received.append(body)
            message.ack()

        with connection.Consumer(queue, callbacks=[on_message], prefetch_count=10):
            while len(received) < 3:
                connection.drain_events(timeout=5)
        stats = leveret.wait_until_acked("orders.created", 3)
    assert received == [{"order": 0}, {"order": 1}, {"order": 2}]
    assert (stats.messages, stats.published, stats.acked) == (0, 3, 3)


def test_kombu_simple_queue(amqp_url: str, leveret: Inspector) -> None:
    with kombu.Connection(amqp_url) as connection:
        simple = connection.SimpleQueue("simple")
        simple.put({"hello": "world"})
        leveret.wait_for_messages("simple", 1)
        message = simple.get(block=True, timeout=5)
        assert message.payload == {"hello": "world"}
        message.ack()
        leveret.wait_until_acked("simple", 1)
        simple.close()


@contextlib.contextmanager
def celery_worker(app: Celery) -> Iterator[TestWorkController]:
    """A Celery worker (solo pool) in a thread, ready when the block starts.

    ``start_worker`` pings the worker with the ``celery.ping`` task before returning. The
    repeating no-op timer keeps the worker's event loop (kombu's hub) from sleeping in
    ``epoll`` for up to 10 s: an ack scheduled with ``call_soon`` from the loop's own
    thread, or a stop request, would otherwise wait for that long (Celery 5.7 / kombu 5.7
    behaviour, the same against RabbitMQ).
    """
    app.loader.import_module("celery.contrib.testing.tasks")  # registers celery.ping
    with start_worker(app, pool="solo", loglevel="WARNING", shutdown_timeout=10) as worker:
        hub = worker.hub
        hub.call_soon(lambda: hub.call_repeatedly(0.02, lambda: None))
        yield worker


def test_celery_task_round_trip_with_rpc_backend(amqp_url: str, leveret: Inspector) -> None:
    app = Celery("leveret-test", broker=amqp_url, backend="rpc://", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = False

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    try:
        with celery_worker(app):
            assert add.delay(2, 3).get(timeout=10) == 5
            results = [add.delay(n, n) for n in range(5)]
            assert [r.get(timeout=10) for r in results] == [0, 2, 4, 6, 8]
            # 1 ping + 6 tasks went through the default queue, each acked by the worker.
            stats = leveret.wait_until_acked("celery", 7)
            assert (stats.published, stats.acked, stats.messages) == (7, 7, 0)
            assert stats.consumers == 1
    finally:
        app.close()


def test_celery_task_failure_travels_back(amqp_url: str) -> None:
    app = Celery("leveret-test", broker=amqp_url, backend="rpc://", set_as_current=False)

    @app.task
    def fail() -> None:
        raise ValueError("boom")

    try:
        with celery_worker(app), pytest.raises(ValueError, match="boom"):
            fail.delay().get(timeout=10)
    finally:
        app.close()


def test_celery_with_quorum_queues(amqp_url: str, leveret: Inspector) -> None:
    # Celery 5.5+ declares its queues as quorum queues when asked, and then turns global
    # qos off for its consumer (worker_detect_quorum_queues): a quorum queue refuses a
    # consumer on a channel with global qos (540), as RabbitMQ does.
    app = Celery("leveret-test", broker=amqp_url, backend="rpc://", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = False
    app.conf.task_default_queue = "celery-quorum"
    app.conf.task_default_queue_type = "quorum"
    app.conf.task_default_exchange_type = "topic"  # native delayed delivery needs topic

    @app.task
    def mul(x: int, y: int) -> int:
        return x * y

    try:
        with celery_worker(app):
            assert [mul.delay(n, 3).get(timeout=10) for n in range(3)] == [0, 3, 6]
            stats = leveret.wait_until_acked("celery-quorum", 4)  # 1 ping + 3 tasks
            assert (stats.acked, stats.messages) == (4, 0)
            # A countdown goes through Celery's native delayed delivery for quorum queues:
            # its own exchanges and queues (TTL, dead-lettering), declared with arguments
            # py-amqp encodes as 'L' (integers from 2^31 on).
            started = time.monotonic()
            assert mul.apply_async((2, 5), countdown=1).get(timeout=15) == 10
            assert time.monotonic() - started >= 0.9
            # Celery set its delay levels up (it falls back to holding ETA tasks in the
            # worker when the broker refuses them).
            delayed = [q for q in leveret.queues() if q.startswith("celery_delayed_")]
            assert len(delayed) == 28  # levels 0..27
    finally:
        app.close()
    # The queue is a quorum queue: declaring it without x-queue-type is refused.
    with kombu.Connection(amqp_url) as connection:
        channel = connection.channel()
        with pytest.raises(PreconditionFailed, match="current is the value 'quorum'"):
            channel.queue_declare("celery-quorum", durable=True, auto_delete=False)


def test_celery_remote_control_and_events(amqp_url: str) -> None:
    # Remote control (celery inspect / control) goes through kombu's pidbox: a fanout
    # exchange every worker's auto-delete queue is bound to, answers through a direct
    # reply exchange to a queue of the caller's; task events go to the celeryev topic
    # exchange, read here by an event receiver's own queue (x-message-ttl, x-expires).
    app = Celery("leveret-test", broker=amqp_url, backend="rpc://", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = False
    app.conf.worker_send_task_events = True
    app.conf.task_send_sent_event = True

    @app.task
    def echo(value: str) -> str:
        return value

    events: list[dict[str, Any]] = []
    try:
        with (
            celery_worker(app) as worker,
            app.connection_for_read() as connection,
            app.events.Receiver(connection, handlers={"*": events.append}).consumer_context(
                wakeup=False
            ) as (events_connection, _channel, _consumers),
        ):
            replies = app.control.ping(timeout=2)
            assert [set(reply) for reply in replies] == [{worker.hostname}]
            assert list(replies[0].values()) == [{"ok": "pong"}]
            registered = app.control.inspect(timeout=2).registered()
            assert registered is not None
            assert f"{__name__}.echo" in registered[worker.hostname]
            assert echo.delay("hi").get(timeout=10) == "hi"
            deadline = time.monotonic() + 10
            # task-sent comes from the caller's connection, the others from the worker's.
            wanted = {"task-sent", "task-received", "task-started", "task-succeeded"}
            while not wanted <= {e["type"] for e in events}:
                assert time.monotonic() < deadline, [e["type"] for e in events]
                with contextlib.suppress(TimeoutError, OSError):
                    events_connection.drain_events(timeout=0.5)
            succeeded = next(e for e in events if e["type"] == "task-succeeded")
            assert (succeeded["hostname"], succeeded["result"]) == (worker.hostname, "'hi'")
    finally:
        app.close()
