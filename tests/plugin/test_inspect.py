"""The inspector (broker/inspect.py) with real clients: counts, waits, timeouts.

These tests use the plugin's fixtures directly (see conftest.py): ``amqp_url`` is a fresh
vhost, ``leveret`` its inspector, ``pika_connection`` / ``aio_pika_connection`` clients.
No test sleeps: every wait is the inspector's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import aio_pika
import pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread, Inspector, QueueNotFoundError, QueueStats
from leveret.server import Server


def test_counts_follow_publish_get_and_ack(pika_connection: Any, leveret: Inspector) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("orders")
    for n in range(3):
        channel.basic_publish("", "orders", f"order {n}".encode())
    stats = leveret.wait_for_messages("orders", 3)
    assert stats == QueueStats(leveret.vhost, "orders", 3, 0, 0, 3, 0, 0)
    assert stats.messages == 3

    method, _props, body = channel.basic_get("orders")
    assert body == b"order 0"
    assert leveret.messages_ready("orders") == 2
    assert leveret.messages_unacked("orders") == 1
    assert leveret.queue_depth("orders") == 3  # ready + unacked, as rabbitmq_queue_messages
    assert leveret.delivered("orders") == 1
    assert leveret.acked("orders") == 0

    channel.basic_ack(method.delivery_tag)
    stats = leveret.wait_until_acked("orders", 1)
    assert (stats.messages_ready, stats.messages_unacknowledged, stats.acked) == (2, 0, 1)
    assert leveret.published("orders") == 3
    assert leveret.queue_depth("orders") == 2
    assert leveret.queues() == ["orders"]
    assert leveret.queue_exists("orders")
    assert not leveret.queue_exists("nothing")


def test_wait_until_acked_by_a_consumer_in_another_thread(
    amqp_url: str, pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("work")
    done = threading.Event()

    def worker() -> None:
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        ch = connection.channel()
        ch.basic_qos(prefetch_count=1)

        def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume("work", on_message)
        while not done.is_set():
            connection.process_data_events(time_limit=0.05)
        connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        leveret.wait_for_consumers("work", 1)
        for n in range(20):
            channel.basic_publish("", "work", str(n).encode())
        stats = leveret.wait_until_acked("work", 20)
        assert (stats.acked, stats.delivered, stats.messages) == (20, 20, 0)
        assert stats.consumers == 1
    finally:
        done.set()
        thread.join(5)
    leveret.wait_for_consumers("work", 0)  # n=0: until the consumer has gone


async def test_async_waits_with_aio_pika(
    aio_pika_connection: aio_pika.abc.AbstractConnection, leveret: Inspector
) -> None:
    channel = await aio_pika_connection.channel()
    queue = await channel.declare_queue("events")
    received: list[bytes] = []

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        received.append(message.body)
        await message.ack()

    tag = await queue.consume(on_message)
    await leveret.wait_for_consumers_async("events", 1)
    for n in range(5):
        await channel.default_exchange.publish(aio_pika.Message(str(n).encode()), "events")
    stats = await leveret.wait_until_acked_async("events", 5)
    assert stats.acked == 5
    assert received == [b"0", b"1", b"2", b"3", b"4"]
    await queue.cancel(tag)
    await leveret.wait_for_consumers_async("events", 0)

    await channel.default_exchange.publish(aio_pika.Message(b"late"), "events")
    stats = await leveret.wait_for_messages_async("events", 1)
    assert (await leveret.stats_async("events")) == stats
    # The blocking reads work from a coroutine too (the broker runs in another thread).
    assert leveret.messages_ready("events") == 1
    await leveret.wait_for_queue_async("events")
    stats = await leveret.wait_until_async("events", lambda s: s.published == 6)
    assert stats.published == 6


def test_wait_for_messages_zero_waits_until_drained(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("drain")
    channel.basic_publish("", "drain", b"x")
    leveret.wait_for_messages("drain", 1)
    with pytest.raises(TimeoutError):
        leveret.wait_for_messages("drain", 0, timeout=0.05)
    channel.basic_get("drain", auto_ack=True)
    stats = leveret.wait_for_messages("drain", 0)
    assert stats.messages_ready == 0
    assert stats.acked == 0  # automatic acknowledgement is not an ack


def test_timeouts_say_what_was_expected_and_what_was_seen(
    pika_connection: Any, leveret: Inspector
) -> None:
    channel = pika_connection.channel()
    channel.queue_declare("slow")
    channel.basic_publish("", "slow", b"x")
    leveret.wait_for_messages("slow", 1)

    started = time.monotonic()
    with pytest.raises(TimeoutError) as missing:
        leveret.wait_for_messages("absent", 1, timeout=0.1)
    assert 0.1 <= time.monotonic() - started < 2
    assert str(missing.value) == (
        f"timed out after 0.1 s waiting for queue 'absent' in vhost '{leveret.vhost}' to have "
        "at least 1 ready message; the queue does not exist (queues in the vhost: 'slow')"
    )
    with pytest.raises(TimeoutError) as acked:
        leveret.wait_until_acked("slow", 2, timeout=0.05)
    assert str(acked.value) == (
        f"timed out after 0.05 s waiting for queue 'slow' in vhost '{leveret.vhost}' to have "
        "at least 2 acknowledged messages; last seen: ready=1 unacked=0 consumers=0 "
        "published=1 delivered=0 acked=0"
    )
    with pytest.raises(TimeoutError, match="to have at least 3 consumers; last seen"):
        leveret.wait_for_consumers("slow", 3, timeout=0.05)
    with pytest.raises(TimeoutError, match="to be empty"):
        leveret.wait_until("slow", lambda s: s.messages == 0, 0.05, description="to be empty")
    with pytest.raises(QueueNotFoundError, match="no queue 'absent' in vhost"):
        leveret.stats("absent")


async def test_async_timeout(leveret: Inspector) -> None:
    with pytest.raises(TimeoutError, match="waiting for queue 'never' in vhost"):
        await leveret.wait_for_queue_async("never", timeout=0.05)


def test_waits_from_several_threads(pika_connection: Any, leveret: Inspector) -> None:
    results: list[QueueStats] = []

    def waiter(n: int) -> None:
        results.append(leveret.wait_for_messages("fan", n))

    threads = [threading.Thread(target=waiter, args=(n,)) for n in (1, 2, 3)]
    for thread in threads:
        thread.start()
    channel = pika_connection.channel()
    channel.queue_declare("fan")
    for _ in range(3):
        channel.basic_publish("", "fan", b"x")
    for thread in threads:
        thread.join(10)
    assert sorted(s.messages_ready for s in results)[-1] == 3
    assert len(results) == 3


def test_inspector_of_another_vhost(pika_connection: Any, leveret: Inspector) -> None:
    pika_connection.channel().queue_declare("mine")
    other = leveret.for_vhost("/")
    assert not other.queue_exists("mine")
    assert leveret.queue_exists("mine", vhost=leveret.vhost)
    assert not leveret.queue_exists("mine", vhost="/")
    assert "via in-process Leveret" in repr(leveret)


def test_without_pytest_fixtures() -> None:
    """A unittest suite or a script: a BrokerThread and an Inspector, nothing else."""
    with BrokerThread() as broker:
        url = broker.add_vhost("plain/tests")
        assert url.endswith("/plain%2Ftests")
        inspector = Inspector(broker, vhost="plain/tests", timeout=2)
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"x")
        assert inspector.wait_for_messages("q", 1).published == 1
        connection.close()
        assert broker.delete_vhost("plain/tests")
        assert not inspector.queue_exists("q")
    assert not broker.running
    with pytest.raises(RuntimeError, match="loop is closed"):
        inspector.queue_exists("q")


async def test_inspector_on_the_brokers_own_loop() -> None:
    """``Inspector(server, loop=...)`` for a Server running on the test's own loop: reads
    and async waits run inline; a blocking wait would deadlock, so it refuses."""
    server = Server(Config(host="127.0.0.1", port=0))
    await server.start()
    try:
        inspector = Inspector(server, loop=asyncio.get_running_loop())
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.port}/")
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue("local")
            await channel.default_exchange.publish(aio_pika.Message(b"x"), "local")
            stats = await inspector.wait_for_messages_async("local", 1)
            assert stats.messages_ready == 1
            assert inspector.messages_ready("local") == 1
            with pytest.raises(RuntimeError, match="would deadlock"):
                inspector.wait_for_messages("local", 1)
    finally:
        await server.stop()
    with pytest.raises(TypeError, match="loop="):
        Inspector(server)
