"""The memory high watermark bounds the memory the broker really holds (leveret.node.memory).

What counts against the mark is every message held, at what it costs the process: body,
content header and a measured per-message overhead, for ready messages and unacknowledged
deliveries alike, plus uncommitted transactions and bodies being assembled; the process's
RSS is a safety net. The proof is end to end: a broker subprocess (``python -m leveret
serve --memory-high-watermark 256MiB``), a raw-socket publisher of small messages with
~14 KiB header tables of distinct values, and a consumer that reads every delivery and never
acks (prefetch unlimited), so everything piles up as unacknowledged. The publisher must get
``connection.blocked`` and stall while the broker's RSS (``/proc/PID/status`` VmRSS, the
whole process, interpreter baseline included) stays under 1.2 x the watermark. Before the
fix the broker counted ready bodies only: it never blocked, and its RSS grew without bound
(the test stops it at 1.6 x the mark).

The unit tests drive :class:`leveret.node.memory.MemoryMonitor` with a fake RSS, and the
in-process tests check that every holder gives back exactly what it took (an accounting
that drifts would leave the alarm stuck on, or never set).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pamqp import commands

from leveret.config import Config
from leveret.inspect import BrokerThread
from leveret.node import memory as memory_module
from leveret.node.memory import (
    DELIVERY_OVERHEAD,
    MESSAGE_OVERHEAD,
    UNACKED_OVERHEAD,
    MemoryMonitor,
    message_bytes,
)
from leveret.node.message import Message
from tests.integration.helpers import unique
from tests.integration.wire import WireClient, plain_response, raw_frame

MIB = 1024 * 1024

# -- MemoryMonitor, with a fake RSS -------------------------------------------------------------


class FakeProcess:
    """The RSS a monitor samples, and how often it trimmed the heap."""

    def __init__(self, rss: int | None) -> None:
        self.rss = rss
        self.samples = 0
        self.trims = 0

    def sample(self) -> int | None:
        self.samples += 1
        return self.rss

    def trim(self) -> None:
        self.trims += 1


def monitor(limit: int, rss: int | None) -> tuple[MemoryMonitor, FakeProcess, list[bool]]:
    """A monitor of ``limit`` bytes in a process of ``rss`` bytes (None: unreadable)."""
    process = FakeProcess(rss)
    changes: list[bool] = []
    memory = MemoryMonitor(limit, changes.append, sample_rss=process.sample, trim=process.trim)
    process.samples = 0  # the footprint read at start
    return memory, process, changes


def test_the_accounting_alone_sets_and_clears_the_alarm_at_the_mark() -> None:
    memory, process, changes = monitor(1000, None)
    memory.add(1000)
    assert changes == []
    memory.add(1)
    assert changes == [True]
    memory.add(5000)
    memory.remove(5000)
    assert changes == [True]
    memory.remove(1)
    assert changes == [True, False]
    assert memory.used == 1000
    assert process.samples == 0  # unreadable at start: never asked again


def test_a_low_rss_does_not_hold_back_the_accounting() -> None:
    memory, process, changes = monitor(32_000, 10_000)
    memory.add(4_000)
    assert process.samples == 0  # nothing read until messages hold an eighth of the mark
    memory.add(1)
    assert process.samples == 1
    for _ in range(27):
        memory.add(1_001)
    memory.add(32_000 - memory.used)
    assert changes == []
    assert process.samples == 28  # one read every 1/32 of the mark
    memory.add(1)
    assert changes == [True]
    memory.remove(1)  # back at the mark, and RSS under it: cleared at once
    assert changes == [True, False]


def test_usage_going_to_and_fro_reads_rss_once_a_step() -> None:
    memory, process, changes = monitor(32_000, 10_000)  # a step: 1_000
    memory.add(4_001)
    assert process.samples == 1
    for _ in range(100):
        memory.remove(2)
        memory.add(2)
    assert process.samples == 1
    memory.remove(1_001)  # a step below where the reads start: the next crossing is read
    memory.add(1_001)
    assert process.samples == 2
    assert changes == []


def test_an_rss_over_the_mark_sets_the_alarm_once_messages_hold_an_eighth() -> None:
    memory, process, changes = monitor(32_000, 10_000)
    process.rss = 50_000  # something the accounting does not see grew
    memory.add(4_000)
    assert changes == []
    memory.add(1)
    assert changes == [True]
    # Cleared once a read after a trim finds the RSS under the mark again.
    memory.remove(500)
    assert changes == [True]  # not a step down yet
    memory.remove(600)
    assert changes == [True] and process.trims == 1
    process.rss = 20_000
    memory.remove(1_000)
    assert changes == [True, False]
    assert process.trims == 1  # at most one trim a second


def test_an_rss_that_never_falls_clears_once_messages_drain_to_a_sixteenth() -> None:
    # Python keeps freed memory: the RSS can stay over the mark after the queues drain.
    memory, process, changes = monitor(32_000, 10_000)
    process.rss = 50_000
    memory.add(20_000)
    assert changes == [True]
    memory.remove(17_999)
    assert changes == [True]
    memory.remove(1)  # 2_000: a sixteenth of the mark
    assert changes == [True, False]
    # Set again only once messages hold an eighth of the mark, not on the next publish.
    memory.add(2_000)
    assert changes == [True, False]
    memory.add(1)
    assert changes == [True, False, True]
    memory.remove(memory.used)
    assert changes == [True, False, True, False]
    assert memory.used == 0


def test_a_process_over_the_mark_from_the_start_leaves_it_to_the_accounting() -> None:
    # A watermark under the broker's own footprint (the 64 KiB of the flow control tests
    # in a pytest process): RSS would say nothing about messages.
    memory, process, changes = monitor(64 * 1024, 100 * MIB)
    memory.add(64 * 1024)
    memory.remove(64 * 1024)
    memory.add(64 * 1024 + 1)
    assert changes == [True]
    memory.remove(1)
    assert changes == [True, False]
    assert process.samples == 0


async def test_an_alarm_kept_on_by_rss_is_checked_again_without_more_releases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory_module, "RECHECK_S", 0.05)
    memory, process, changes = monitor(32_000, 10_000)
    process.rss = 50_000
    memory.add(20_000)
    memory.remove(10_000)
    await asyncio.sleep(0.01)  # checked once the loop comes round: RSS keeps it on
    assert changes == [True]
    assert process.trims == 1
    process.rss = 20_000  # memory went back to the OS; nothing is released any more
    deadline = time.monotonic() + 5
    while changes == [True]:
        assert time.monotonic() < deadline, "never checked again"
        await asyncio.sleep(0.01)
    assert changes == [True, False]
    assert process.trims == 2


async def test_rss_is_watched_while_messages_hold_an_eighth_of_the_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # RSS can grow with no message count crossing a step (write buffers, caches).
    monkeypatch.setattr(memory_module, "RECHECK_S", 0.05)
    memory, process, changes = monitor(32_000, 10_000)
    memory.add(5_000)
    process.rss = 50_000
    deadline = time.monotonic() + 5
    while not changes:
        assert time.monotonic() < deadline, "RSS never looked at again"
        await asyncio.sleep(0.01)
    assert changes == [True]
    # Under an eighth of the mark nothing is watched.
    memory.remove(5_000)
    await asyncio.sleep(0.02)
    assert changes == [True, False]
    memory.add(4_000)
    samples = process.samples
    await asyncio.sleep(0.2)
    assert process.samples == samples


async def test_draining_the_queues_clears_at_once_even_with_a_recheck_due_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory_module, "RECHECK_S", 30.0)
    memory, process, changes = monitor(32_000, 10_000)
    process.rss = 50_000
    memory.add(20_000)
    memory.remove(10_000)
    await asyncio.sleep(0.01)
    assert changes == [True]  # RSS over the mark: looked at again in 30 s
    memory.remove(10_000)  # everything acked
    await asyncio.sleep(0.01)
    assert changes == [True, False]


def test_a_message_counts_its_header_and_the_measured_overhead() -> None:
    message = Message("", "q", b"h" * 14_000, b"b" * 100)
    assert message_bytes(message) == 14_100 + MESSAGE_OVERHEAD
    assert DELIVERY_OVERHEAD == MESSAGE_OVERHEAD + UNACKED_OVERHEAD


# -- every holder gives back what it took (in-process broker) --------------------------------


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread(Config(host="127.0.0.1", port=0)) as running:
        yield running


def held(broker: BrokerThread) -> int:
    return broker.server.state.memory.used


def big_headers(index: int) -> pika.BasicProperties:
    return pika.BasicProperties(headers={f"k{j}": f"{index:06d}-{j:03d}" * 4 for j in range(100)})


def test_unacked_deliveries_count_until_acked_and_everything_is_given_back(
    broker: BrokerThread,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        queue = channel.queue_declare(unique("mem"), auto_delete=False).method.queue
        for index in range(20):
            channel.basic_publish("", queue, b"x" * 100, big_headers(index))
        channel.queue_declare(queue, passive=True)
        ready = held(broker)
        assert ready >= 20 * (100 + 2_000 + MESSAGE_OVERHEAD)

        # Delivered and unacked: still held, with the record on top.
        tags = []
        for _ in range(20):
            method, _props, _body = channel.basic_get(queue)
            tags.append(method.delivery_tag)
        assert held(broker) == ready + 20 * UNACKED_OVERHEAD

        # Requeued, rejected, acked: back to nothing.
        channel.basic_nack(tags[-1], multiple=True, requeue=True)
        channel.queue_declare(queue, passive=True)
        assert held(broker) == ready
        received: list[int] = []
        tag = channel.basic_consume(queue, lambda ch, m, _p, _b: received.append(m.delivery_tag))
        while len(received) < 20:
            connection.process_data_events(time_limit=0.05)
        assert held(broker) == ready + 20 * UNACKED_OVERHEAD
        channel.basic_reject(received[0], requeue=False)
        channel.basic_ack(received[5])
        channel.basic_ack(received[-1], multiple=True)
        channel.basic_cancel(tag)
        assert held(broker) == 0

        # A transaction holds its messages until commit; its queue takes them over.
        channel.tx_select()
        channel.basic_publish("", queue, b"y" * 1000)
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
        assert 1000 + MESSAGE_OVERHEAD < held(broker) < 1100 + MESSAGE_OVERHEAD
        channel.tx_rollback()
        assert held(broker) == 0
        channel.basic_publish("", queue, b"y" * 1000)
        channel.tx_commit()
        assert channel.queue_declare(queue, passive=True).method.message_count == 1
        assert held(broker) > 1000 + MESSAGE_OVERHEAD

        # Unacked deliveries go back to their queue when the channel closes; the queue's
        # deletion releases the rest.
        other = connection.channel()
        other.basic_publish("", queue, b"z" * 10)
        assert other.basic_get(queue)[0] is not None
        other.close()
        assert channel.queue_declare(queue, passive=True).method.message_count == 2
        channel.queue_delete(queue)
        assert held(broker) == 0
    finally:
        connection.close()


def test_ttl_expiry_length_limits_and_streams_give_back_what_they_took(
    broker: BrokerThread,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        ttl = channel.queue_declare(unique("ttl"), arguments={"x-message-ttl": 50}).method.queue
        capped = channel.queue_declare(unique("cap"), arguments={"x-max-length": 2}).method.queue
        for index in range(5):
            channel.basic_publish("", ttl, b"t" * 500, big_headers(index))
            channel.basic_publish("", capped, b"c" * 500, big_headers(index))
        channel.queue_declare(capped, passive=True)
        assert held(broker) > 0
        time.sleep(0.3)
        channel.queue_purge(capped)
        channel.queue_declare(ttl, passive=True)
        assert held(broker) == 0

        stream = channel.queue_declare(
            unique("stream"), durable=True, arguments={"x-queue-type": "stream"}
        ).method.queue
        for index in range(5):
            channel.basic_publish("", stream, b"s" * 500, big_headers(index))
        channel.queue_declare(stream, passive=True)
        logged = held(broker)
        assert logged > 5 * (500 + 2_000 + MESSAGE_OVERHEAD)
        channel.basic_qos(prefetch_count=10)
        received: list[int] = []
        channel.basic_consume(
            stream,
            lambda ch, m, _p, _b: received.append(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        while len(received) < 5:
            connection.process_data_events(time_limit=0.05)
        # The log holds the messages; a delivery adds only its record.
        assert held(broker) == logged + 5 * UNACKED_OVERHEAD
        channel.basic_ack(received[-1], multiple=True)
        channel.queue_declare(stream, passive=True)
        assert held(broker) == logged
        channel.queue_delete(stream)
        assert held(broker) == 0
    finally:
        connection.close()


def test_a_body_being_assembled_counts_until_its_channel_goes(broker: BrokerThread) -> None:
    with WireClient(broker.url) as client:
        client.connect()
        client.open_channel(1)
        client.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        queue = client.expect(commands.Queue.DeclareOk, channel=1).queue
        body_size = 3 * 100_000
        client.send_raw(
            raw_frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x00" + short(queue) + b"\x00")
            + raw_frame(2, 1, struct.pack(">HHQH", 60, 0, body_size, 0))
            + raw_frame(3, 1, b"a" * 100_000)
            + raw_frame(3, 1, b"b" * 100_000)
        )
        deadline = time.monotonic() + 5
        while held(broker) < 200_000:
            assert time.monotonic() < deadline, f"partial body not counted: {held(broker)}"
            time.sleep(0.01)
        assert held(broker) == 200_000
        client.send_raw(raw_frame(3, 1, b"c" * 100_000))
        client.send(commands.Queue.Declare(queue=queue, passive=True), 1)
        assert client.expect(commands.Queue.DeclareOk, channel=1).message_count == 1
        complete = held(broker)
        assert complete > body_size + MESSAGE_OVERHEAD
        # Another one cut short by the connection going away.
        client.send_raw(
            raw_frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x00" + short(queue) + b"\x00")
            + raw_frame(2, 1, struct.pack(">HHQH", 60, 0, body_size, 0))
            + raw_frame(3, 1, b"d" * 100_000)
        )
        deadline = time.monotonic() + 5
        while held(broker) < complete + 100_000:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    deadline = time.monotonic() + 5
    while held(broker) != 0:  # the exclusive queue goes with its connection
        assert time.monotonic() < deadline, f"still held: {held(broker)}"
        time.sleep(0.01)


def short(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


# -- end to end: a broker subprocess, RSS against the watermark --------------------------------

WATERMARK = 256 * MIB
# RSS allowed over the watermark (the whole process, interpreter included).
RSS_FACTOR = 1.2
# Where an unbounded broker is stopped (the test then fails): well past the bound.
RSS_CAP = 1.6
HEADER_ENTRIES = 300  # x ~47 octets: a 14 KiB headers table per message
BODY = b"m" * 64
STALL_S = 2.0  # after connection.blocked: the publisher must make no progress


def vmrss(pid: int) -> int:
    """VmRSS of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def broker_process(watermark: int, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``python -m leveret serve`` with this watermark, on a port of its own."""
    port = free_port()
    log = (tmp_path / "broker.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            str(port),
            "--memory-high-watermark",
            str(watermark),
            "--management-port",
            "-1",
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, (tmp_path / "broker.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the broker did not listen in time"
                time.sleep(0.05)
        yield process, port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


def open_client(port: int, channel: int = 1) -> WireClient:
    """A raw connection that, like pika and aio-pika, can hear connection.blocked."""
    client = WireClient(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=10)
    client.send_raw(b"AMQP\x00\x00\x09\x01")
    client.expect(commands.Connection.Start, channel=0)
    client.send(
        commands.Connection.StartOk(
            client_properties={"capabilities": {"connection.blocked": True}},
            mechanism="PLAIN",
            response=plain_response("guest", "guest"),
            locale="en_US",
        )
    )
    tune = client.expect(commands.Connection.Tune, channel=0)
    client.send(
        commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
        )
    )
    client.open()
    client.open_channel(channel)
    return client


class Messages:
    """Publishes of a 64-octet body with a ~14 KiB headers table whose values differ from
    message to message (nothing for the broker to share), encoded fast."""

    def __init__(self, queue: str) -> None:
        entries = []
        for j in range(HEADER_ENTRIES):
            key = b"h%03d" % j
            value = b"@@@@@@@@-%03d-" % j + b"v" * 24
            entries.append(bytes([len(key)]) + key + b"S" + struct.pack(">I", len(value)) + value)
        table = b"".join(entries)
        header = struct.pack(">HHQH", 60, 0, len(BODY), 0x2000) + struct.pack(">I", len(table))
        method = struct.pack(">HHH", 60, 40, 0) + b"\x00" + short(queue) + b"\x00"
        self.template = (
            raw_frame(1, 1, method) + raw_frame(2, 1, header + table) + raw_frame(3, 1, BODY)
        )
        self.count = 0

    def batch(self, n: int) -> bytes:
        out = []
        for _ in range(n):
            out.append(self.template.replace(b"@@@@@@@@", b"%08d" % self.count))
            self.count += 1
        return b"".join(out)


class Reader(threading.Thread):
    """Reads everything the broker sends a consumer connection: counts the deliveries and
    remembers the last delivery tag; never acks (unless told to)."""

    def __init__(self, client: WireClient) -> None:
        super().__init__(daemon=True)
        self.sock = client.sock
        self.buffer = bytearray(client._buffer)
        self.deliveries = 0
        self.last_tag = 0
        self.acked_tag = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stopped.is_set():
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            self.buffer += data
            self._parse()

    def _parse(self) -> None:
        buffer, pos = self.buffer, 0
        while len(buffer) - pos >= 7:
            kind, _channel, size = struct.unpack_from(">BHI", buffer, pos)
            if len(buffer) - pos < size + 8:
                break
            if kind == 1 and buffer[pos + 7 : pos + 11] == b"\x00\x3c\x00\x3c":  # deliver
                tag_at = pos + 12 + buffer[pos + 11]
                self.last_tag = struct.unpack_from(">Q", buffer, tag_at)[0]
                self.deliveries += 1
            pos += size + 8
        del buffer[:pos]

    def ack_all(self) -> None:
        """Ack (multiple) every delivery so far that is not acked yet."""
        tag = self.last_tag
        if tag > self.acked_tag:
            self.sock.sendall(raw_frame(1, 1, struct.pack(">HHQB", 60, 80, tag, 1)))
            self.acked_tag = tag


CONNECTION_BLOCKED = b"\x00\x0a\x00\x3c"
CONNECTION_UNBLOCKED = b"\x00\x0a\x00\x3d"


class Publisher:
    """Publishes as fast as the broker reads, without ever blocking the test: what the
    socket does not take waits in ``pending``. Watches for connection.(un)blocked."""

    def __init__(self, client: WireClient, messages: Messages) -> None:
        self.sock = client.sock
        self.sock.setblocking(False)
        self.messages = messages
        self.pending = bytearray()
        self.sent = 0  # octets the socket took
        self.inbox = bytearray()
        self.events: list[tuple[str, float]] = []

    def step(self, keep_publishing: bool = True) -> None:
        if keep_publishing and len(self.pending) < 1 << 20:
            self.pending += self.messages.batch(32)
        want = [self.sock] if self.pending else []
        readable, writable, _ = select.select([self.sock], want, [], 0.01)
        if writable:
            try:
                n = self.sock.send(self.pending[: 1 << 18])
            except BlockingIOError:
                n = 0
            del self.pending[:n]
            self.sent += n
        if readable:
            data = self.sock.recv(65536)
            assert data, "the broker closed the publisher's connection"
            self.inbox += data
            self._parse()

    def _parse(self) -> None:
        inbox, pos = self.inbox, 0
        while len(inbox) - pos >= 7:
            kind, _channel, size = struct.unpack_from(">BHI", inbox, pos)
            if len(inbox) - pos < size + 8:
                break
            method = bytes(inbox[pos + 7 : pos + 11])
            if kind == 1 and method == CONNECTION_BLOCKED:
                self.events.append(("blocked", time.monotonic()))
            elif kind == 1 and method == CONNECTION_UNBLOCKED:
                self.events.append(("unblocked", time.monotonic()))
            pos += size + 8
        del inbox[:pos]

    def saw(self, event: str) -> bool:
        return any(name == event for name, _ in self.events)


class Scenario:
    """A broker subprocess, a consumer that never acks, a publisher of big-header messages."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.pid = process.pid
        self.baseline = vmrss(self.pid)
        self.max_rss = self.baseline
        consumer = open_client(port)
        queue = unique("watermark")
        consumer.send(commands.Queue.Declare(queue=queue), 1)
        consumer.expect(commands.Queue.DeclareOk, channel=1)
        # No basic.qos: prefetch unlimited, every message is delivered and stays unacked.
        consumer.send(commands.Basic.Consume(queue=queue, consumer_tag="slow"), 1)
        consumer.expect(commands.Basic.ConsumeOk, channel=1)
        self.consumer = consumer
        self.reader = Reader(consumer)
        self.reader.start()
        self.publisher_client = open_client(port)
        self.publisher = Publisher(self.publisher_client, Messages(queue))
        self._sampled = 0.0

    def sample(self) -> int:
        rss = vmrss(self.pid)
        self.max_rss = max(self.max_rss, rss)
        self._sampled = time.monotonic()
        return rss

    def publish_until_blocked(self, within: float) -> float | None:
        """Publish until connection.blocked (its time), the deadline, or the RSS cap (None)."""
        deadline = time.monotonic() + within
        while not self.publisher.saw("blocked"):
            if time.monotonic() - self._sampled > 0.02:
                self.sample()
            if self.max_rss > RSS_CAP * WATERMARK or time.monotonic() > deadline:
                return None
            self.publisher.step()
        return self.publisher.events[0][1]

    def close(self) -> None:
        self.reader.stopped.set()
        self.reader.join(2)
        for client in (self.consumer, self.publisher_client):
            client.close()


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_watermark_bounds_the_broker_rss_with_big_headers_and_unacked_messages(
    tmp_path: Path,
) -> None:
    with broker_process(WATERMARK, tmp_path) as (process, port):
        scenario = Scenario(process, port)
        try:
            blocked_at = scenario.publish_until_blocked(within=40)
            held_messages = scenario.reader.deliveries
            assert blocked_at is not None, (
                f"publisher never blocked: broker RSS reached {scenario.max_rss / MIB:.0f} MiB "
                f"(watermark {WATERMARK / MIB:.0f} MiB, idle {scenario.baseline / MIB:.0f} MiB) "
                f"with {held_messages} unacked messages"
            )
            # Blocked: the broker stops reading the publisher, whose socket soon takes
            # nothing more; the RSS stays under the bound all along.
            publisher = scenario.publisher
            sent_at: dict[float, int] = {}
            while time.monotonic() - blocked_at < STALL_S:
                publisher.step()
                scenario.sample()
                elapsed = time.monotonic() - blocked_at
                sent_at.setdefault(round(elapsed, 1), publisher.sent)
            stalled = publisher.sent - sent_at[min(sent_at, key=lambda t: abs(t - 1.0))]
            rss = scenario.sample()
            print(
                f"\nidle RSS {scenario.baseline / MIB:.1f} MiB, max RSS "
                f"{scenario.max_rss / MIB:.1f} MiB ({scenario.max_rss / WATERMARK:.3f} x the "
                f"watermark), RSS at the end {rss / MIB:.1f} MiB, "
                f"{scenario.reader.deliveries} messages unacked, "
                f"{publisher.messages.count} encoded"
            )
            assert scenario.max_rss <= RSS_FACTOR * WATERMARK, (
                f"broker RSS {scenario.max_rss / MIB:.0f} MiB over {RSS_FACTOR} x the "
                f"{WATERMARK / MIB:.0f} MiB watermark"
            )
            assert stalled == 0, f"the publisher still got {stalled} octets through"
            assert publisher.events == [("blocked", blocked_at)]
            assert scenario.reader.deliveries > 10_000  # they were unacked messages
        finally:
            scenario.close()


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_alarm_clears_and_publishing_resumes_once_the_consumer_acks(tmp_path: Path) -> None:
    with broker_process(WATERMARK, tmp_path) as (process, port):
        scenario = Scenario(process, port)
        try:
            assert scenario.publish_until_blocked(within=40) is not None
            publisher, reader = scenario.publisher, scenario.reader
            # The consumer acks everything it got, again as more arrives (what was stuck
            # in the publisher's socket is read once the alarm clears).
            deadline = time.monotonic() + 15
            while not publisher.saw("unblocked"):
                assert time.monotonic() < deadline, "no connection.unblocked after the acks"
                reader.ack_all()
                publisher.step(keep_publishing=False)
            # Publishing resumes: everything published arrives, and new messages too.
            total = publisher.messages.count
            publisher.pending += publisher.messages.batch(100)
            deadline = time.monotonic() + 15
            while reader.deliveries < total + 100:
                assert time.monotonic() < deadline, (
                    f"{reader.deliveries} of {total + 100} messages delivered after unblocked; "
                    f"{publisher.events}, {len(publisher.pending)} octets unsent; broker log: "
                    + (tmp_path / "broker.log").read_text()
                )
                publisher.step(keep_publishing=False)
                reader.ack_all()
            assert [name for name, _ in publisher.events] == ["blocked", "unblocked"]
            print(
                f"\nRSS after everything was acked: {scenario.sample() / MIB:.1f} MiB "
                f"(max {scenario.max_rss / MIB:.1f} MiB)"
            )
        finally:
            scenario.close()


def test_the_publishes_carry_distinct_14_kib_header_tables() -> None:
    messages = Messages("q")
    first, second = messages.batch(1), messages.batch(1)
    assert len(first) == len(second) and first != second
    assert 13_000 < len(first) < 16_000
