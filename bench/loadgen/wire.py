"""Raw AMQP 0-9-1 over asyncio: the client core of the project's load generator.

The load generator measures the broker, so it has to cost as little as possible per message,
or the figures would be the client's. Hence:

* one :class:`asyncio.Protocol` per connection, TCP_NODELAY, no stream reader and no objects
  per frame on the hot path;
* a message is encoded once (:func:`encode_publish`) and written many times, a batch of
  copies per ``transport.write`` (:class:`Publisher`), honouring ``pause_writing``;
* the receive path parses the frames that come once per message (Basic.Deliver, content
  header and body, Basic.Return, publisher-confirm Basic.Ack / Basic.Nack) itself with
  ``struct.unpack_from`` on one buffer, and settles deliveries (Basic.Ack / Reject / Nack)
  with one precompiled ``struct`` each; only the rare synchronous replies (Queue.Declare-Ok,
  ...) are decoded by pamqp.

pamqp (already a dependency of the broker) encodes the methods and content headers that are
written once per run. Nothing here imports Leveret: the client must not share a codec bug
with the broker it measures.

Every workload script prints one JSON object on its last stdout line (:func:`run`): ``ok``,
its figures, and the CPU of this process (``harness_cpu_frac_of_1_core``: near 1.0 means the
client limits the figure) and of the broker's process tree (``--broker-pid``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import struct
import sys
import time
import urllib.parse
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from pamqp import commands, frame, header
from pamqp.base import Frame

Summary = dict[str, Any]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
# Frame header (type, channel, payload size) + the frame-end octet around every payload.
FRAME_OVERHEAD = 8
# Basic class (60) method ids the receive path handles without pamqp.
BASIC = 60
DELIVER, RETURN, ACK, REJECT, NACK = 60, 50, 80, 90, 120

_FRAME_HEADER = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">HH")
_U64 = struct.Struct(">Q")
_TAG_BITS = struct.Struct(">QB")
# A whole settle frame: type 1, channel, size 13, class 60, method, delivery tag, bits, end.
_SETTLE = struct.Struct(">BHIHHQBB")
_PUBLISH_HEAD = struct.Struct(">BHIHHH")

# Writes above this many buffered bytes pause the writer (``pause_writing``); a batch of
# small messages is far below it, so only large bodies or a slow broker ever wait.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 1 << 18
# A publish batch is capped at this many bytes: beyond it a bigger write saves no syscalls,
# and 1000 copies of a 1 MiB message would take a gigabyte of memory.
MAX_BATCH_BYTES = 1 << 20


# --------------------------------------------------------------------------------------------
# URLs and frames
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Url:
    """The parts of an ``amqp://user:pass@host:port/vhost`` URL."""

    host: str
    port: int
    user: str
    password: str
    vhost: str

    def redacted(self) -> str:
        """The URL without the password (it goes into the JSON output)."""
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{self.user}@{self.host}:{self.port}/{vhost}"


def parse_url(url: str) -> Url:
    """Parse an ``amqp://`` URL; the defaults are RabbitMQ's (guest/guest, vhost ``/``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("amqp", ""):
        raise ValueError(f"only amqp:// URLs are supported, got {url!r}")
    path = parts.path
    vhost = "/" if path in ("", "/") else urllib.parse.unquote(path[1:])
    return Url(
        parts.hostname or "127.0.0.1",
        parts.port or 5672,
        urllib.parse.unquote(parts.username or "guest"),
        urllib.parse.unquote(parts.password or "guest"),
        vhost,
    )


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(kind, channel, len(payload)) + payload + b"\xce"


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return bytes([len(raw)]) + raw


def encode_publish(
    exchange: str,
    routing_key: str,
    body: bytes,
    channel: int = 1,
    properties: commands.Basic.Properties | None = None,
    frame_max: int = 131072,
    mandatory: bool = False,
) -> bytes:
    """One message as it goes on the wire: Basic.Publish, content header, body frame(s).

    The body is split into frames of at most ``frame_max`` bytes (frame overhead
    included), as the broker negotiated it."""
    args = _shortstr(exchange) + _shortstr(routing_key) + bytes([1 if mandatory else 0])
    # reserved-1 (the old ticket) is a zero short before the exchange name
    method = _PUBLISH_HEAD.pack(FRAME_METHOD, channel, 6 + len(args), BASIC, 40, 0)
    parts = [method + args + b"\xce"]
    props = properties or commands.Basic.Properties()
    parts.append(_frame(FRAME_HEADER, channel, header.ContentHeader(0, len(body), props).marshal()))
    step = frame_max - FRAME_OVERHEAD
    parts += [_frame(FRAME_BODY, channel, body[i : i + step]) for i in range(0, len(body), step)]
    return b"".join(parts)


def ack_frame(channel: int, tag: int, multiple: bool = False) -> bytes:
    """Basic.Ack of ``tag`` (and every tag below it if ``multiple``)."""
    return _SETTLE.pack(FRAME_METHOD, channel, 13, BASIC, ACK, tag, multiple, FRAME_END)


def reject_frame(channel: int, tag: int, requeue: bool = False) -> bytes:
    """Basic.Reject of ``tag``: dead-lettered (or dropped) unless ``requeue``."""
    return _SETTLE.pack(FRAME_METHOD, channel, 13, BASIC, REJECT, tag, requeue, FRAME_END)


def nack_frame(channel: int, tag: int, multiple: bool = True, requeue: bool = False) -> bytes:
    """Basic.Nack (RabbitMQ's extension): bit 0 multiple, bit 1 requeue."""
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _SETTLE.pack(FRAME_METHOD, channel, 13, BASIC, NACK, tag, bits, FRAME_END)


# --------------------------------------------------------------------------------------------
# The connection
# --------------------------------------------------------------------------------------------
class AMQPError(Exception):
    """The broker closed the connection or a channel, or sent something unexpected."""


DeliverCallback = Callable[[int, int, bytes | None], None]
ConfirmCallback = Callable[[int, bool, bool], None]


class Connection(asyncio.Protocol):
    """One AMQP connection; channels are plain numbers, opened with :meth:`open_channel`.

    Callbacks (all optional, set by the workload):

    * ``on_deliver(channel, delivery_tag, body)`` once a delivery's content is complete;
      ``body`` is None unless ``want_body`` is set (counting needs no copy of the body);
    * ``on_confirm(delivery_tag, multiple, nack)`` for a publisher confirm;
    * ``on_read_end()`` after each socket read has been parsed: the place to write the
      settles of the deliveries of that read in one write.
    """

    def __init__(self, url: Url, name: str, frame_max: int) -> None:
        self.url = url
        self.name = name
        self.frame_max = frame_max
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.error: Exception | None = None
        self.server_properties: dict[str, Any] = {}
        self.blocked = False
        self.returns = 0
        self.on_deliver: DeliverCallback | None = None
        self.on_confirm: ConfirmCallback | None = None
        self.on_read_end: Callable[[], None] | None = None
        self.want_body = False
        self._buf = bytearray()
        # Replies to synchronous methods come back in order per channel: a FIFO of futures.
        self._waiting: defaultdict[int, deque[asyncio.Future[Any]]] = defaultdict(deque)
        # Content being received, per channel: [delivery tag, body bytes still due, body
        # chunks or None]; tag -1 marks a Basic.Return, whose content is skipped.
        self._content: dict[int, list[Any]] = {}
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closing = False  # we sent Connection.Close: losing the socket is no error
        self.open_channels: set[int] = set()
        self.closed_channels: set[int] = set()  # closed by the broker (Channel.Close)

    # ---- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not TCP (a Unix socket): nothing to disable
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        transport.write(PROTOCOL_HEADER)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None and not self._closing:
            self.error = exc or AMQPError("connection closed by the broker")
        error = self.error or AMQPError("connection closed")
        for waiting in self._waiting.values():
            while waiting:
                future = waiting.popleft()
                if not future.done():
                    future.set_exception(error)
        if not self.opened.done():
            self.opened.set_exception(error)
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake_drain()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    def data_received(self, data: bytes) -> None:  # the hot path: flat on purpose
        buf = self._buf
        buf += data
        end_of_data = len(buf)
        pos = 0
        unpack_header = _FRAME_HEADER.unpack_from
        unpack_u64 = _U64.unpack_from
        content = self._content
        on_deliver = self.on_deliver
        while end_of_data - pos >= FRAME_OVERHEAD:
            kind, channel, size = unpack_header(buf, pos)
            end = pos + 7 + size  # the frame-end octet
            if end >= end_of_data:
                break  # the rest of this frame is still on its way
            if buf[end] != FRAME_END:
                self._fail(AMQPError(f"frame without frame-end octet at byte {end}"))
                return
            if kind == FRAME_BODY:
                state = content[channel]
                state[1] -= size
                chunks = state[2]
                if chunks is not None:
                    chunks.append(bytes(buf[pos + 7 : end]))
                # the last body frame: inlined _content_done (once per message)
                if state[1] <= 0 and state[0] >= 0 and on_deliver is not None:
                    on_deliver(channel, state[0], None if chunks is None else b"".join(chunks))
            elif kind == FRAME_HEADER:
                # class id (2), weight (2), then the body size
                state = content[channel]
                state[1] = unpack_u64(buf, pos + 11)[0]
                if state[1] == 0:
                    self._content_done(channel, state)
            elif kind == FRAME_METHOD:
                class_id, method_id = _CLASS_METHOD.unpack_from(buf, pos + 7)
                if class_id == BASIC and method_id == DELIVER:
                    # consumer-tag (short string), then the delivery tag
                    tag = unpack_u64(buf, pos + 12 + buf[pos + 11])[0]
                    content[channel] = [tag, -1, [] if self.want_body else None]
                elif class_id == BASIC and method_id in (ACK, NACK):
                    tag, bits = _TAG_BITS.unpack_from(buf, pos + 11)
                    if self.on_confirm is not None:
                        self.on_confirm(tag, bool(bits & 1), method_id == NACK)
                elif class_id == BASIC and method_id == RETURN:
                    self.returns += 1
                    content[channel] = [-1, -1, None]
                else:
                    try:
                        method = frame.unmarshal(bytes(buf[pos : end + 1]))[2]
                    except Exception as exc:
                        self._fail(AMQPError(f"cannot decode method {class_id}.{method_id}: {exc}"))
                        return
                    assert isinstance(method, Frame)
                    self._on_method(channel, method)
            # FRAME_HEARTBEAT: none are negotiated (heartbeat 0); a stray one needs nothing
            pos = end + 1
        if pos:
            del buf[:pos]
        if self.on_read_end is not None:
            self.on_read_end()

    def _content_done(self, channel: int, state: list[Any]) -> None:
        tag, _, chunks = state
        if tag >= 0 and self.on_deliver is not None:
            self.on_deliver(channel, tag, b"".join(chunks) if chunks is not None else None)

    # ---- the synchronous methods ------------------------------------------------------------
    def _on_method(self, channel: int, method: Frame) -> None:
        name = method.name
        if name == "Connection.Start":
            assert isinstance(method, commands.Connection.Start)
            self.server_properties = dict(method.server_properties or {})
            if b"PLAIN" not in (method.mechanisms or "").encode().split():
                self._fail(AMQPError(f"broker offers no PLAIN login: {method.mechanisms!r}"))
                return
            self.send(
                0,
                commands.Connection.StartOk(
                    client_properties={
                        "product": self.name,
                        "platform": "Python (Leveret bench/loadgen)",
                        "capabilities": {
                            "publisher_confirms": True,
                            "consumer_cancel_notify": True,
                            "basic.nack": True,
                            "connection.blocked": True,
                        },
                    },
                    mechanism="PLAIN",
                    response=f"\0{self.url.user}\0{self.url.password}",
                    locale="en_US",
                ),
            )
        elif name == "Connection.Tune":
            assert isinstance(method, commands.Connection.Tune)
            # 0 means "no limit" from the broker: keep ours then
            if method.frame_max:
                self.frame_max = min(self.frame_max, method.frame_max)
            channel_max = method.channel_max or 2047
            tune_ok = commands.Connection.TuneOk(
                channel_max=channel_max, frame_max=self.frame_max, heartbeat=0
            )
            self.send(0, tune_ok)
            self.send(0, commands.Connection.Open(virtual_host=self.url.vhost))
        elif name == "Connection.OpenOk":
            if not self.opened.done():
                self.opened.set_result(None)
        elif name == "Connection.Close":
            assert isinstance(method, commands.Connection.Close)
            self.send(0, commands.Connection.CloseOk())
            self._fail(AMQPError(f"connection closed by the broker: {_reason(method)}"))
        elif name == "Connection.CloseOk":
            assert self.transport is not None
            self.transport.close()
        elif name == "Connection.Blocked":
            self.blocked = True
        elif name == "Connection.Unblocked":
            self.blocked = False
        elif name == "Channel.Close":
            assert isinstance(method, commands.Channel.Close)
            self.send(channel, commands.Channel.CloseOk())
            self.open_channels.discard(channel)
            self.closed_channels.add(channel)
            error = AMQPError(f"channel {channel} closed by the broker: {_reason(method)}")
            waiting = self._waiting.get(channel)
            if waiting:
                while waiting:
                    future = waiting.popleft()
                    if not future.done():
                        future.set_exception(error)
            else:  # nobody waits on this channel: fail the run
                self.error = error
                self._wake_drain()
        elif name == "Basic.Cancel":  # the broker cancelled a consumer (queue deleted, ...)
            self.error = AMQPError(f"consumer cancelled by the broker on channel {channel}")
        else:
            waiting = self._waiting.get(channel)
            if not waiting:
                self._fail(AMQPError(f"unexpected {name} on channel {channel}"))
                return
            future = waiting.popleft()
            if not future.done():
                future.set_result(method)

    def _fail(self, error: Exception) -> None:
        self.error = error
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # ---- sending ----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise the connection's error, if it has one."""
        if self.error is not None:
            raise self.error

    def write(self, data: bytes | memoryview) -> None:
        """Raw bytes (pre-encoded frames) to the socket."""
        assert self.transport is not None
        if self.transport.is_closing():
            raise self.error or AMQPError("connection closed")
        self.transport.write(data)

    def send(self, channel: int, method: Frame) -> None:
        """A method that expects no reply (or whose reply nobody awaits)."""
        self.write(frame.marshal(method, channel))

    def request(self, channel: int, method: Frame) -> asyncio.Future[Any]:
        """Send a synchronous method; the future resolves to its reply. Requests may be
        pipelined: replies come back in order per channel."""
        future: asyncio.Future[Any] = self.loop.create_future()
        self._waiting[channel].append(future)
        self.write(frame.marshal(method, channel))
        return future

    async def rpc(self, channel: int, method: Frame, wait_s: float = 60.0) -> Any:
        """Send a synchronous method and await its reply (at most ``wait_s`` seconds)."""
        self.check()
        return await asyncio.wait_for(self.request(channel, method), wait_s)

    async def open_channel(self, channel: int | None = None) -> int:
        """Open ``channel`` (default: the lowest number never used on this connection)."""
        if channel is None:
            used = self.open_channels | self.closed_channels
            channel = next(c for c in range(1, len(used) + 2) if c not in used)
        await self.rpc(channel, commands.Channel.Open())
        self.open_channels.add(channel)
        self.closed_channels.discard(channel)
        return channel

    @property
    def paused(self) -> bool:
        """True while the socket's write buffer is above the high-water mark."""
        return self._paused

    async def drain(self) -> None:
        """Wait until the write buffer is below the low-water mark again."""
        assert self.transport is not None
        if self._paused and not self.transport.is_closing():
            waiter: asyncio.Future[None] = self.loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter
        self.check()

    def _wake_drain(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def close(self, wait_s: float = 5.0) -> None:
        """Connection.Close, wait for Close-Ok (bounded), then drop the socket."""
        if self.transport is None or self.transport.is_closing():
            return
        self._closing = True
        try:
            self.send(0, commands.Connection.Close(200, "bye", 0, 0))
            await asyncio.wait_for(asyncio.shield(self.closed), wait_s)
        except (TimeoutError, AMQPError, OSError):
            pass  # closing anyway
        finally:
            if not self.transport.is_closing():
                self.transport.close()


def _reason(method: commands.Connection.Close | commands.Channel.Close) -> str:
    return (
        f"{method.reply_code} {method.reply_text} "
        f"(class {method.class_id} method {method.method_id})"
    )


async def connect(
    url: str | Url, name: str = "leveret-loadgen", frame_max: int = 131072, wait_s: float = 15.0
) -> Connection:
    """Open a connection (handshake up to Connection.Open-Ok, heartbeats off), within
    ``wait_s`` seconds for the TCP connect and as much again for the handshake."""
    parsed = parse_url(url) if isinstance(url, str) else url
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(
        loop.create_connection(
            lambda: Connection(parsed, name, frame_max), parsed.host, parsed.port
        ),
        wait_s,
    )
    try:
        await asyncio.wait_for(conn.opened, wait_s)
    except TimeoutError:
        error = AMQPError(f"no Connection.Open-Ok from {parsed.redacted()} in {wait_s:g}s")
        conn._fail(error)
        raise error from None
    return conn


async def cleanup(
    conn: Connection,
    channel: int = 1,
    consumer_tags: Iterable[str] = (),
    queues: Iterable[str] = (),
    exchanges: Iterable[str] = (),
    wait_s: float = 30.0,
) -> str | None:
    """Cancel consumers, then delete queues, then exchanges; returns what failed, or None
    (never raises: it runs in ``finally`` blocks, where it must not hide the run's error).

    Consumers go first so that deleting their queue does not cancel them from the broker's
    side (a Basic.Cancel the connection would report as an error). If the broker closed
    ``channel`` (the run failed on it), the deletes go through a new channel."""
    if conn.error is not None or conn.transport is None or conn.transport.is_closing():
        return "connection already closed"
    errors = []
    try:
        if channel in conn.closed_channels:
            channel = await conn.open_channel()
            consumer_tags = ()  # the broker cancelled them with the channel
        for tag in consumer_tags:
            try:
                await conn.rpc(channel, commands.Basic.Cancel(consumer_tag=tag), wait_s)
            except AMQPError as exc:
                errors.append(f"cancel {tag}: {exc}")
        for queue in queues:
            try:
                await conn.rpc(channel, commands.Queue.Delete(queue=queue), wait_s)
            except AMQPError as exc:
                errors.append(f"delete queue {queue}: {exc}")
        for exchange in exchanges:
            # nowait: nothing to wait for, and a broker that never answers cannot hang the run
            conn.send(channel, commands.Exchange.Delete(exchange=exchange, nowait=True))
    except Exception as exc:  # the connection went away meanwhile, a timeout, ...
        errors.append(f"{type(exc).__name__}: {exc}")
    return "; ".join(errors) or None


def unique(prefix: str) -> str:
    """A queue or exchange name no other run uses (pid + milliseconds)."""
    return f"{prefix}.{os.getpid()}.{int(time.time() * 1000) % 10_000_000}"


# --------------------------------------------------------------------------------------------
# Publishing
# --------------------------------------------------------------------------------------------
class Publisher:
    """Writes pre-encoded messages, cycling through ``messages``, a batch per write.

    All the bytes any batch can need are laid out once: ``batch + len(messages)`` messages
    in cycle order, so the batch starting at any message is one contiguous slice (a
    memoryview: no copy per write)."""

    def __init__(self, conn: Connection, messages: bytes | list[bytes], batch: int = 1000):
        self.conn = conn
        cycle = [messages] if isinstance(messages, bytes) else list(messages)
        if not cycle:
            raise ValueError("nothing to publish")
        largest = max(len(m) for m in cycle)
        self.batch = max(1, min(batch, MAX_BATCH_BYTES // largest))
        laid_out = [cycle[i % len(cycle)] for i in range(self.batch + len(cycle))]
        self._cycle_len = len(cycle)
        self._offsets = [0]
        for message in laid_out:
            self._offsets.append(self._offsets[-1] + len(message))
        self._view = memoryview(b"".join(laid_out))
        self.sent = 0

    def write_now(self, count: int) -> None:
        """Write the next ``count`` messages without waiting."""
        offsets, write = self._offsets, self.conn.write
        while count > 0:
            take = min(count, self.batch)
            first = self.sent % self._cycle_len
            write(self._view[offsets[first] : offsets[first + take]])
            self.sent += take
            count -= take

    async def run(self, n: int, max_seconds: float | None = None) -> int:
        """Write messages until ``n`` are sent (or ``max_seconds`` passed); returns how
        many were. Yields to the loop after every batch, so that the consumers of the same
        process keep reading, and waits while the socket is paused."""
        conn = self.conn
        stop_at = None if max_seconds is None else time.monotonic() + max_seconds
        while self.sent < n:
            conn.check()
            if stop_at is not None and time.monotonic() > stop_at:
                break
            self.write_now(min(self.batch, n - self.sent))
            if conn.paused:
                await conn.drain()
            else:
                await asyncio.sleep(0)
        await conn.drain()
        return self.sent


class ConfirmTracker:
    """Counts confirmed publishes (delivery tags 1..n on one channel) whatever mix of
    single, multiple and out-of-order Basic.Ack / Basic.Nack the broker sends; use it as the
    connection's ``on_confirm``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.floor = 0  # every tag <= floor is confirmed
        self.above: set[int] = set()  # tags confirmed one by one above the floor
        self.confirmed = 0
        self.nacked = 0
        self.frames = 0
        self.last = 0.0  # monotonic time of the n-th confirm
        self.wake = asyncio.Event()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __call__(self, tag: int, multiple: bool, nack: bool) -> None:
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

    def summary(self, started: float) -> dict[str, Any]:
        """The figures every confirm workload reports, timed from ``started`` (monotonic)
        to the n-th confirm."""
        elapsed = self.last - started
        return {
            "elapsed_s": round(elapsed, 4),
            "confirmed_msgs_per_s": round(self.n / elapsed, 1),
            "nacked": self.nacked,
            "ack_frames": self.frames,
            "msgs_per_ack_frame": round(self.n / max(1, self.frames), 2),
        }


async def publish_confirmed(
    publisher: Publisher, tracker: ConfirmTracker, window: int, deadline: float
) -> None:
    """Publish ``tracker.n`` messages with at most ``window`` unconfirmed, then wait for the
    last confirm (``deadline``: a ``time.monotonic()`` bound)."""
    conn, n = publisher.conn, tracker.n
    while publisher.sent < n:
        conn.check()
        room = window - (publisher.sent - tracker.confirmed)
        if room > 0:
            publisher.write_now(min(room, n - publisher.sent))
            if conn.paused:
                await conn.drain()
        # Confirms only arrive while this coroutine waits, so clearing here loses none.
        tracker.wake.clear()
        if publisher.sent < n and publisher.sent - tracker.confirmed >= window:
            await asyncio.wait_for(tracker.wake.wait(), max(1.0, deadline - time.monotonic()))
    await asyncio.wait_for(tracker.done, max(1.0, deadline - time.monotonic()))


# --------------------------------------------------------------------------------------------
# Consuming
# --------------------------------------------------------------------------------------------
class Consumer:
    """Counts the deliveries of one connection and settles them per socket read.

    ``settle``:

    * ``none``: a no-ack consumer; nothing is written back;
    * ``ack``: one Basic.Ack per delivery (those of one read in one write);
    * ``ack-multiple``: one Basic.Ack multiple per read;
    * ``reject``: one Basic.Reject requeue=false per delivery (dead-lettering);
    * ``nack-multiple``: one Basic.Nack multiple requeue=false per read.

    ``last`` is the monotonic time the ``n``-th delivery was parsed (the clock of the
    workloads); ``done`` resolves once it has been, and settled.
    """

    SETTLES = ("none", "ack", "ack-multiple", "reject", "nack-multiple")

    def __init__(self, conn: Connection, n: int, settle: str = "none", channel: int = 1):
        if settle not in self.SETTLES:
            raise ValueError(f"settle must be one of {self.SETTLES}, not {settle!r}")
        self.conn = conn
        self.n = n
        self.channel = channel
        self.count = 0
        self.last = 0.0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._frames: list[bytes] = []
        self._max_tag = 0
        self._settled_tag = 0
        if settle == "none":
            conn.on_deliver, conn.on_read_end = self._deliver_no_ack, None
        elif settle in ("ack", "reject"):
            self._settle_frame = ack_frame if settle == "ack" else reject_frame
            conn.on_deliver, conn.on_read_end = self._deliver_each, self._write_frames
        else:
            self._multiple_frame = ack_frame if settle == "ack-multiple" else nack_frame
            conn.on_deliver, conn.on_read_end = self._deliver_multiple, self._write_multiple

    def _deliver_no_ack(self, channel: int, tag: int, body: bytes | None) -> None:
        count = self.count = self.count + 1
        if count == self.n:
            self.last = time.monotonic()
            if not self.done.done():
                self.done.set_result(None)

    def _deliver_each(self, channel: int, tag: int, body: bytes | None) -> None:
        self._frames.append(self._settle_frame(channel, tag))
        count = self.count = self.count + 1
        if count == self.n:
            self.last = time.monotonic()

    def _deliver_multiple(self, channel: int, tag: int, body: bytes | None) -> None:
        self._max_tag = tag
        count = self.count = self.count + 1
        if count == self.n:
            self.last = time.monotonic()

    def _write_frames(self) -> None:
        if self._frames:
            self.conn.write(b"".join(self._frames))
            self._frames.clear()
        self._check_done()

    def _write_multiple(self) -> None:
        if self._max_tag > self._settled_tag:
            self.conn.write(self._multiple_frame(self.channel, self._max_tag, True))
            self._settled_tag = self._max_tag
        self._check_done()

    def _check_done(self) -> None:
        if self.count >= self.n and not self.done.done():
            self.done.set_result(None)


# --------------------------------------------------------------------------------------------
# CPU and memory of this process and of the broker (Linux /proc)
# --------------------------------------------------------------------------------------------
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat after the command name (which may contain spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (a broker may run helper processes)."""
    children: defaultdict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            children[int(fields[1])].append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def tree_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid``'s process tree."""
    if not pid:
        return None
    ticks = 0
    for member in process_tree(pid):
        fields = _stat_fields(member)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _CLOCK_TICKS


def tree_rss_kb(pid: int | None) -> int | None:
    """Resident memory (VmRSS) summed over ``pid``'s process tree."""
    if not pid:
        return None
    total = 0
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/status") as f:
                total += next((int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")), 0)
        except OSError:
            continue  # exited meanwhile
    return total


class CpuMeter:
    """CPU of this process (the harness) and of the broker's tree over one interval."""

    def __init__(self, broker_pid: int | None = None) -> None:
        self.broker_pid = broker_pid
        self._t0 = self._cpu0 = 0.0
        self._broker0: float | None = None

    def start(self) -> None:
        self._t0, self._cpu0 = time.monotonic(), time.process_time()
        self._broker0 = tree_cpu_s(self.broker_pid)

    def stop(self) -> Summary:
        wall = time.monotonic() - self._t0
        cpu = time.process_time() - self._cpu0
        out: Summary = {
            "harness_cpu_s": round(cpu, 3),
            "harness_cpu_frac_of_1_core": round(cpu / wall, 3) if wall > 0 else None,
        }
        broker1 = tree_cpu_s(self.broker_pid)
        if broker1 is not None and self._broker0 is not None:
            out["broker_cpu_s"] = round(broker1 - self._broker0, 3)
            out["broker_cpu_frac_of_1_core"] = (
                round((broker1 - self._broker0) / wall, 3) if wall > 0 else None
            )
        return out


# --------------------------------------------------------------------------------------------
# The command line and the JSON line every script ends with
# --------------------------------------------------------------------------------------------
def common_args(
    parser: argparse.ArgumentParser, n_default: int | None = None
) -> argparse.ArgumentParser:
    """The options every workload script takes (``bench/workloads.py`` passes them)."""
    parser.add_argument(
        "--url",
        default="amqp://guest:guest@127.0.0.1:5672/",
        help="broker URL (amqp://user:pass@host:port/vhost)",
    )
    parser.add_argument("--label", default="", help="free-form label copied into the JSON")
    parser.add_argument(
        "--broker-pid", type=int, help="PID of a local broker: its process-tree CPU is reported"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="hard bound for the whole run (s)"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="the stdlib event loop")
    if n_default is not None:
        parser.add_argument("-n", "--messages", type=int, default=n_default)
    parser.add_argument("--body-size", type=int, default=100, help="bytes per message body")
    return parser


def base_summary(workload: str, args: argparse.Namespace) -> Summary:
    """The fields every result starts with; ``ok`` becomes true when the run succeeds."""
    return {
        "workload": workload,
        "label": args.label,
        "url": parse_url(args.url).redacted(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client": "bench/loadgen",
        "ok": False,
    }


WorkloadMain = Callable[[argparse.Namespace, Summary], Awaitable[None]]


def run(main: WorkloadMain, args: argparse.Namespace, summary: Summary) -> int:
    """Run ``main(args, summary)`` (on uvloop unless --no-uvloop) within ``--timeout``, then
    print ``summary`` as the last stdout line; returns the exit status (0 when ok).

    A failed run still prints its JSON line, with ``ok: false`` and an ``error``."""

    async def bounded() -> None:
        scope = asyncio.timeout(args.timeout)
        try:
            async with scope:
                await main(args, summary)
        except TimeoutError:
            if scope.expired():  # ours, not a reply or delivery that did not come in time
                summary.setdefault("error", f"timed out after {args.timeout:g}s")
            raise

    uvloop: Any = None
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass  # the stdlib loop: slower, still correct
    summary["loop"] = "asyncio" if uvloop is None else "uvloop"
    try:
        if uvloop is None:
            asyncio.run(bounded())
        else:
            uvloop.run(bounded())
    except TimeoutError:
        summary.setdefault("error", "TimeoutError: a broker reply or delivery did not come")
    except Exception as exc:
        summary.setdefault("error", f"{type(exc).__name__}: {exc}")
    summary["ok"] = "error" not in summary
    summary["harness_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    return 0 if summary["ok"] else 1
