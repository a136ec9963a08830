"""One AMQP connection: frames, channel table, writes, errors and closing.

Theory of operation
-------------------
Each client socket gets one :class:`Connection` (an ``asyncio.Protocol``). Frames are
handled synchronously in :meth:`Connection.data_received`, in order, with no task per
frame; everything written while handling one read is sent with a single
``transport.write`` at its end. Writes caused by other connections (a publish that
reaches this connection's consumer) are coalesced with ``loop.call_soon``.

Connection states::

    AWAIT_HEADER -> AWAIT_START_OK -> AWAIT_TUNE_OK -> AWAIT_OPEN -> OPEN -> CLOSING

:meth:`Connection._fail` is the single place where an :class:`leveret.node.errors.AMQPError`
becomes a ``Channel.Close`` (channel-level codes on a non-zero channel) or a
``Connection.Close`` (hard codes, or anything on channel 0), as RabbitMQ's
``rabbit_binary_generator:map_exception/3`` does. After a ``Channel.Close`` from us,
frames on that channel are dropped until the client's ``Channel.CloseOk``.

The handshake (login, tune, Connection.Open, heartbeats; the states) is
:mod:`leveret.wire.handshake`; it and the channel name the connection as a type only
(type-only imports inside the wire), so neither imports this module at run time. What
stops a connection reading (write back-pressure, resource alarms, the read budget) is the
connection's own (its ``_paused`` reasons, "flow control" below).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from pamqp import commands

from leveret.config import FRAME_MIN
from leveret.node.churn import SocketCounters
from leveret.node.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    AMQPChannelError,
    AMQPConnectionError,
    AMQPError,
    close_method,
    method_id_of,
    reply_text,
)
from leveret.wire import codec, handshake
from leveret.wire.channel import Channel
from leveret.wire.handshake import HANDSHAKE_STATES, STATE_NAMES, State
from leveret.wire.listen import address_pair

if TYPE_CHECKING:
    from leveret.node.peers import ChannelPeer
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost

log = logging.getLogger(__name__)

C = commands.Connection
# How long we wait for Connection.CloseOk before dropping the socket.
CLOSE_OK_TIMEOUT: Final = 3.0
# After answering a client's Close: how long its socket may stay open while what it still
# sends is dropped (rabbit_reader's ?CLOSING_TIMEOUT, seconds).
CLOSING_TIMEOUT: Final = 30
# Seconds of event-loop time one connection may take for its input before it lets the
# others run (Connection._yield): a client flooding large frames must not stall the rest.
# Measured on two cores, a client next to one publishing 120 KB header tables as fast as it
# can waits p50 2.5 ms, p99 11 ms with 1 ms; 6 and 23 ms with 2 ms; 7 and 29 ms with 4 ms.
# Not Final: tests/fuzz sets it to infinity, for runs that do not depend on timing.
READ_BUDGET = 0.001
# Frames handled between two looks at the clock (the clock costs about as much as a cheap
# frame; a chunk of the heaviest frames, 120 KiB header tables, is still a few ms).
_FRAMES_PER_CHECK: Final = 8


# Frames on an open channel the connection handles itself rather than the channel (a
# heartbeat there is an error of the connection's).
_CHANNEL_CONTROL: Final = frozenset(
    {commands.Channel.Close, commands.Channel.CloseOk, codec.Heartbeat}
)


class LoopHandle(Protocol):
    """What a connection keeps of the event loop's callbacks and timers: a way to cancel
    them. uvloop's handles are not asyncio.Handle subclasses, and a compiled build
    (setup.py) checks an attribute's declared class on every assignment."""

    def cancel(self) -> None:
        """Cancel the callback or timer (nothing happens if it already ran)."""


class Connection(asyncio.Protocol):
    """Server side of one AMQP 0-9-1 connection.

    ``server`` is the shared state (:class:`leveret.node.state.ServerState`: vhosts, access
    control, counters, the other connections), not the ``Server`` that listens.
    """

    def __init__(self, server: ServerState[Connection]) -> None:
        self.server = server
        self.config = server.config
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        # Until Tune-Ok, frames are held to the protocol minimum, as rabbit_reader starts
        # with frame_max = ?FRAME_MIN_SIZE (a bigger Start-Ok is frame_too_large).
        self.reader = codec.FrameReader(FRAME_MIN)
        self.state = State.AWAIT_HEADER
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self.frame_max = self.config.frame_max
        self.channel_max = self.config.channel_max
        self.heartbeat = 0
        self.user = ""
        self.vhost: VHost = None  # type: ignore[assignment]  # set at Connection.Open
        self.client_properties: dict[str, Any] = {}
        self.exclusive_queues: set[Queue] = set()
        self.writable = True
        self.published = False  # has this connection published (memory alarm blocks it)
        self.blocked = False
        self._paused: set[str] = set()  # why reading is paused: "write", "memory"
        self._out: list[bytes | memoryview] = []
        self._out_views = False  # _out holds views of a large body: writelines, no join
        self._in_read = False
        self._flush_handle: LoopHandle | None = None
        # Input fairness (data_received): loop time used since this connection last let the
        # others run, frames decoded but not yet handled (with the read's decoding error,
        # if any) and reads that came while they waited.
        self._spent = 0.0
        self._backlog: tuple[list[tuple[int, Any]], int, Any] | None = None
        self._held: deque[bytes] = deque()
        self._yield_handle: LoopHandle | None = None
        self._confirms: set[Channel] = set()
        self._to_drain: set[Queue] = set()
        self._handshake_timer: LoopHandle | None = None
        self._heartbeat_timer: LoopHandle | None = None
        self._close_timer: LoopHandle | None = None
        self._last_recv = 0.0
        self._last_send = 0.0
        self.io = SocketCounters()  # bytes and reads, writes (broker/churn.py)
        self.peer: tuple[Any, ...] = ()
        self.closed = asyncio.Event()
        self._close_reason = ""

    def endpoints(self) -> tuple[str, int, str, int]:
        """(peer host, peer port, local host, local port)."""
        sockname = self.transport.get_extra_info("sockname") if self.transport else None
        return (*address_pair(self.peer), *address_pair(sockname))

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: ``peer_host:peer_port -> host:port``."""
        peer_host, peer_port, host, port = self.endpoints()
        return f"{peer_host}:{peer_port} -> {host}:{port}"

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = transport.get_extra_info("peername") or ()
        self.server.connections.add(self)
        self._handshake_timer = self.loop.call_later(
            self.config.handshake_timeout, handshake.handshake_timeout, self
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not State.AWAIT_HEADER:
            log.info(
                "connection closed peer=%s user=%s vhost=%s reason=%s",
                self._peer_text(),
                self.user or "-",
                self.vhost.name if self.vhost is not None else "-",
                self._close_reason or (exc.__class__.__name__ if exc else "client closed"),
            )
        self.state = State.CLOSED
        for timer in (self._handshake_timer, self._heartbeat_timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._release()
        self.server.connections.discard(self)
        self.server.churn.connections_closed += 1
        self.closed.set()

    # -- flow control and read fairness ---------------------------------------------------

    def _pause(self, reason: str) -> None:
        """Stop reading for ``reason`` ("write", "memory", "budget"); reading stops once."""
        if not self._paused and self.transport is not None:
            self.transport.pause_reading()
        self._paused.add(reason)

    def _resume(self, reason: str) -> None:
        """``reason`` no longer holds: read again once no reason is left."""
        self._paused.discard(reason)
        if not self._paused and self.transport is not None and self.state is not State.CLOSED:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        """asyncio.Protocol: the client reads slower than we write. Stop delivering to it and
        stop reading from it until its socket drains (no unbounded buffers)."""
        self.writable = False
        self._pause("write")

    def resume_writing(self) -> None:
        """asyncio.Protocol: the socket drained; read again and deliver what waited."""
        self.writable = True
        self._resume("write")
        for channel in list(self.channels.values()):
            for consumer in list(channel.consumers.values()):
                consumer.queue.drain()

    def _alarm(self) -> bool:
        """Whether the memory or the disk alarm is set."""
        return self.server.memory.alarm or self.server.disk.alarm

    def memory_alarm(self, alarm: bool) -> None:
        """A resource alarm (memory or disk) changed: block publishers, or let them go again
        once neither is set."""
        if alarm and self.published and not self.blocked:
            self._block()
        elif not alarm and self.blocked and not self._alarm():
            self.blocked = False
            if self.client_capability("connection.blocked"):
                self.send_method(0, C.Unblocked())
            self._resume("memory")

    def _block(self) -> None:
        """docs/connection-blocked.md: a publishing connection is told (when it can hear it)
        and is no longer read from until the alarm clears; consumers keep draining."""
        self.blocked = True
        if self.client_capability("connection.blocked") and self.state is State.OPEN:
            # rabbit_reader:blocked_by_message/1: "low on memory", "low on disk", both.
            alarms = (("memory", self.server.memory.alarm), ("disk", self.server.disk.alarm))
            reason = "low on " + " & ".join(name for name, on in alarms if on)
            self.send_method(0, C.Blocked(reason=reason))
        self._pause("memory")

    def _yield(self) -> None:
        """The read budget ran out (Connection._run): stop reading until the next loop
        iteration, so other connections are served."""
        self._spent = 0.0
        if self.state is State.CLOSED:
            self._backlog = None
            self._held.clear()
            return
        self._pause("budget")
        self._yield_handle = self.loop.call_soon(self._resume_after_yield)

    def _resume_after_yield(self) -> None:
        """The next loop iteration after a yield: handle what waited, then read again."""
        self._yield_handle = None
        if self.state is State.CLOSED:
            self._backlog = None
            self._held.clear()
            return
        if self._backlog is not None or self._held:
            self._run(None)
            if self._yielding():
                return  # still more than one budget's worth: later again
        self._resume("budget")

    def _yielding(self) -> bool:
        # A method, not an inline test: after ``self._yield_handle = None`` above, mypy
        # takes the attribute for None until the end of the function, even across
        # ``_run`` (which sets it again), and a compiled build enforces what mypy takes.
        # ``warn_unreachable`` (pyproject's mypy settings) flags any such test.
        return self._yield_handle is not None

    def _continue(self, deadline: float) -> None:
        """Handle the frames and reads left over when the budget ran out."""
        if self._backlog is not None:
            frames, index, error = self._backlog
            self._backlog = None
            if not self._handle(frames, index, error, deadline):
                return
        while self._held:
            if not self._process(self._held.popleft(), deadline):
                return

    def disk_alarm(self, alarm: bool) -> None:
        """The disk alarm changed: the same rule as :meth:`memory_alarm`."""
        self.memory_alarm(alarm)

    def drop(self) -> None:
        """A network failure (an injected fault, broker/faults.py): abort the socket (a TCP
        reset, no Connection.Close)."""
        self._close_reason = "dropped by an injected fault"
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self._last_recv = self.loop.time()
        self.io.received(len(data))
        if self._yield_handle is not None:
            # Frames of an earlier read still wait for their turn (reading is paused, but a
            # TLS transport may hand over what it had decrypted): they go first.
            self._held.append(data)
            return
        self._run(data)

    def _run(self, data: bytes | None) -> None:
        """Handle ``data`` (or, with None, the frames left from earlier reads), then drain,
        confirm and write what that caused, as one read.

        Fairness: the frames of a read are handled until this connection has used
        :data:`READ_BUDGET` of loop time since it last let others run (checked every
        :data:`_FRAMES_PER_CHECK` frames and after each read); it then stops reading,
        keeps the frames not yet handled, and goes on in a later loop iteration
        (:meth:`_yield`), so that one client flooding large publishes, or many reads in a
        row (uvloop takes up to 32 per readable socket), cannot keep the loop from the
        others. Order is kept: frames wait in order and later reads wait behind them.
        """
        start = time.monotonic()
        deadline = start + READ_BUDGET - self._spent
        self._in_read = True
        try:
            try:
                if data is None:
                    self._continue(deadline)
                else:
                    self._process(data, deadline)
            except Exception:
                # A bug, not a protocol error: log it, and close this connection the way
                # RabbitMQ's reader does when a channel process crashes (541 and the bare
                # constant), instead of dropping the socket. Other connections go on.
                log.exception("internal error on connection %s", self._peer_text())
                self._backlog = None  # the connection closes: what it sent after is dropped
                self._held.clear()
                self._fail(AMQPConnectionError(INTERNAL_ERROR, "", (0, 0)), 0)
            if self._to_drain:
                queues, self._to_drain = self._to_drain, set()
                for queue in queues:
                    queue.drain()
            for channel in self._confirms:
                channel.flush_confirms()
            self._confirms.clear()
            if self.published and not self.blocked and self._alarm():
                self._block()
        finally:
            self._in_read = False
            self._flush()
        if self._yield_handle is None:  # else the budget ran out mid-read: _yield reset it
            self._spent += time.monotonic() - start
            if self._spent >= READ_BUDGET:
                self._yield()

    # -- writing ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue bytes for the socket; flushed at the end of the current read or on the
        next loop iteration."""
        self._out.append(data)
        if not self._in_read and self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Queue several buffers (views of a large body) for the socket: they go to the
        transport's ``writelines`` as they are, without being joined into one copy."""
        self._out.extend(parts)
        self._out_views = True
        if not self._in_read and self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.io.sent(self._out)
            if self._out_views:
                self.transport.writelines(self._out)
            else:
                self.transport.write(b"".join(self._out))
            self._last_send = self.loop.time()
        self._out.clear()
        self._out_views = False

    def send_method(self, channel: int, method: Any) -> None:
        """Send a pamqp method frame."""
        self.write(codec.method_frame(channel, method))

    def confirm_pending(self, channel: Channel) -> None:
        """``channel`` has publisher confirms to send at the end of this read."""
        self._confirms.add(channel)
        if not self._in_read:
            channel.flush_confirms()

    def drain_later(self, queues: set[Queue]) -> None:
        """Deliver from ``queues`` once the current read is processed (acks free
        prefetch capacity; draining once per read instead of once per ack)."""
        if self._in_read:
            self._to_drain |= queues
        else:
            for queue in queues:
                queue.drain()

    def drain_later_one(self, queue: Queue) -> None:
        """:meth:`drain_later` for a single queue."""
        if self._in_read:
            self._to_drain.add(queue)
        else:
            queue.drain()

    def _peer_text(self) -> str:
        return ":".join(str(p) for p in self.peer[:2]) if self.peer else "-"

    def _client_text(self) -> str:
        props = self.client_properties
        parts = [str(props.get(k, "")) for k in ("product", "version")]
        name = props.get("connection_name")
        text = "/".join(p for p in parts if p) or "-"
        return f"{text} ({name})" if name else text

    def client_capability(self, name: str) -> bool:
        """Whether the client advertised capability ``name`` in Start-Ok."""
        caps = self.client_properties.get("capabilities")
        return bool(isinstance(caps, dict) and caps.get(name))

    # -- frame processing -------------------------------------------------------------

    def _process(self, data: bytes, deadline: float) -> bool:
        """Decode a read and handle its frames; False when the budget ran out first (the
        rest are kept in ``_backlog``)."""
        awaiting_header = self.reader.need_header
        error: AMQPError | codec.DropConnectionError | None = None
        try:
            frames = self.reader.feed(data)
        except codec.ProtocolHeaderError:
            # A wrong header gets the header we speak, then the socket closes
            # (AMQP 0-9-1 section 4.2.2).
            self.write(codec.PROTOCOL_HEADER)
            self._flush()
            self._abort()
            return True
        except codec.FramesThenError as exc:
            # The frames before the malformed one are handled first, then the error.
            frames, error = exc.frames, exc.error
        if awaiting_header and not self.reader.need_header:
            handshake.send_start(self)
        return self._handle(frames, 0, error, deadline)

    def _handle(
        self,
        frames: list[tuple[int, Any]],
        index: int,
        error: AMQPError | codec.DropConnectionError | None,
        deadline: float,
    ) -> bool:
        """Handle ``frames[index:]`` in order, then the read's decoding ``error``; False
        when ``deadline`` passed first: the rest wait in ``_backlog`` (see :meth:`_run`)."""
        channels = self.channels
        count = len(frames)
        batch = frames if index == 0 and count <= _FRAMES_PER_CHECK else None
        first = True
        while index < count:
            if not first and time.monotonic() > deadline:
                self._backlog = (frames, index, error)
                self._yield()
                return False
            first = False
            if batch is None:
                batch = frames[index : index + _FRAMES_PER_CHECK]
            index += len(batch)
            for channel_id, frame in batch:
                # Fast path: a frame for an open channel of an open connection.
                channel = channels.get(channel_id)
                if channel is not None and type(frame) not in _CHANNEL_CONTROL:
                    try:
                        channel.handle(frame)
                    except AMQPError as exc:
                        if exc.method is None:
                            exc.method = method_id_of(frame)
                        self._fail(exc, channel_id)
                    continue
                if self.state is State.CLOSING:
                    self._while_closing(channel_id, frame)
                    continue
                if self.state is State.CLOSED:
                    return True
                try:
                    if channel_id == 0:
                        self._on_channel_zero(frame)
                    else:
                        self._on_channel_frame(channel_id, frame)
                except AMQPError as exc:
                    if exc.method is None:
                        exc.method = method_id_of(frame)
                    self._fail(exc, channel_id)
            batch = None
        if error is None or self.state in (State.CLOSING, State.CLOSED):
            return True
        if isinstance(error, codec.DropConnectionError):
            log.warning("closing connection %s: %s", self.peer, error)
            self._abort()
        else:
            self._fail(error, 0)
        return True

    def _on_channel_frame(self, channel_id: int, frame: Any) -> None:
        if self.state is not State.OPEN or isinstance(frame, codec.Heartbeat):
            # rabbit_reader:handle_frame/4: before the connection runs every channel frame,
            # and a heartbeat on any channel but 0, is an unexpected frame.
            sent_type, payload = codec.frame_octets(frame)
            raise AMQPConnectionError(
                UNEXPECTED_FRAME,
                f"type {sent_type}, all octets = {codec.erl_binary(payload)}",
                (0, 0),
            )
        channel = self.channels.get(channel_id)
        if channel is not None:
            frame_type = type(frame)
            if frame_type is commands.Channel.Close:
                self._close_channel(channel)
                self.send_method(channel_id, commands.Channel.CloseOk())
            elif frame_type is commands.Channel.CloseOk:
                raise AMQPConnectionError(COMMAND_INVALID, "unimplemented method")
            else:
                channel.handle(frame)
            return
        if channel_id in self.closing_channels:
            # Everything is dropped until Close-Ok (a crossing Close is answered, but the
            # number stays taken until our Close is acknowledged); only a Channel.Open is
            # an error, as in RabbitMQ.
            if isinstance(frame, commands.Channel.CloseOk):
                self.closing_channels.discard(channel_id)
            elif isinstance(frame, commands.Channel.Close):
                self.send_method(channel_id, commands.Channel.CloseOk())
            elif isinstance(frame, commands.Channel.Open):
                raise AMQPConnectionError(CHANNEL_ERROR, "second 'channel.open' seen")
            return
        if isinstance(frame, codec.Header | codec.Body):
            raise AMQPConnectionError(
                UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        if not isinstance(frame, commands.Channel.Open):
            raise AMQPConnectionError(CHANNEL_ERROR, "expected 'channel.open'")
        if self.channel_max and len(self.channels) >= self.channel_max:
            raise AMQPConnectionError(
                NOT_ALLOWED,
                f"number of channels opened ({len(self.channels)}) has reached the "
                f"negotiated channel_max ({self.channel_max})",
                (0, 0),
            )
        handshake.check_channel_limit(self)
        self.channels[channel_id] = Channel(self, channel_id)
        self.server.churn.channels_opened += 1
        # RabbitMQ sends the reserved channel_id empty (observed on 3.10.8).
        self.write(codec.simple_method(channel_id, commands.Channel.OpenOk, ("longstr", "")))

    def _close_channel(self, channel: Channel) -> None:
        self.channels.pop(channel.id, None)
        self.server.churn.channel_closed(channel)
        self._confirms.discard(channel)
        channel.close()

    def _while_closing(self, channel_id: int, frame: Any) -> None:
        if channel_id != 0:
            return
        if isinstance(frame, C.CloseOk):
            self._abort()
        elif isinstance(frame, C.Close):
            self.send_method(0, C.CloseOk())
            self._flush()
            self._abort()

    # -- channel zero: handshake and connection methods -------------------------------

    def _on_channel_zero(self, frame: Any) -> None:
        if isinstance(frame, codec.Heartbeat):
            return
        state = self.state
        if state is State.AWAIT_START_OK and isinstance(frame, C.StartOk):
            handshake.on_start_ok(self, frame)
        elif state is State.AWAIT_TUNE_OK and isinstance(frame, C.TuneOk):
            handshake.on_tune_ok(self, frame)
        elif state is State.AWAIT_OPEN and isinstance(frame, C.Open):
            handshake.on_open(self, frame)
        elif isinstance(frame, C.Close):
            self._closed_by_client()
        elif state is State.OPEN and isinstance(frame, C.UpdateSecret):
            # Credential rotation (aio-pika/pika update_secret, for OAuth 2 tokens):
            # rabbit_reader takes it when running; RabbitMQ 3.10.8's internal auth backend
            # accepts any new secret and keeps the connection as it is (observed), and so
            # does Leveret, whose only backend is internal.
            self.send_method(0, C.UpdateSecretOk())
        elif isinstance(frame, codec.Header):
            raise AMQPConnectionError(
                UNEXPECTED_FRAME, f"type 2, all octets = {codec.erl_binary(frame.payload)}"
            )
        elif isinstance(frame, codec.Body):
            raise AMQPConnectionError(
                UNEXPECTED_FRAME, f"type 3, all octets = {codec.erl_binary(frame.data)}"
            )
        else:
            # rabbit_reader:handle_method0/2's catch-all.
            raise AMQPConnectionError(
                CHANNEL_ERROR, f"unexpected method in connection state {STATE_NAMES[state]}"
            )

    # -- errors and closing -----------------------------------------------------------

    def fail_channel(self, channel: ChannelPeer, explanation: str) -> None:
        """Close ``channel`` with 406 PRECONDITION_FAILED from outside a read (the
        consumer timeout); its unacknowledged deliveries are requeued."""
        if self.channels.get(channel.id) is channel and self.state is State.OPEN:
            self._fail(AMQPChannelError(PRECONDITION_FAILED, explanation, (0, 0)), channel.id)

    def _fail(self, exc: AMQPError, channel_id: int) -> None:
        """Convert ``exc`` into the Close it calls for (the one conversion point)."""
        if self.state in HANDSHAKE_STATES and exc.code != ACCESS_REFUSED:
            # rabbit_reader:handle_exception/3: before Tune-Ok, only a refused login is
            # answered with a Close (to clients with authentication_failure_close); any
            # other error closes the socket without one (after 3 s there, at once here).
            log.warning("closing connection %s in handshake: %s", self._peer_text(), exc.text)
            self._abort()
            return
        close = close_method(exc)
        log.info(
            "%s error peer=%s user=%s channel=%d code=%d method=%s text=%r",
            "channel" if isinstance(close, commands.Channel.Close) else "connection",
            self._peer_text(),
            self.user or "-",
            channel_id,
            exc.code,
            "{}.{}".format(*(exc.method or (0, 0))),
            exc.text,
        )
        if isinstance(close, commands.Channel.Close) and channel_id != 0:
            channel = self.channels.get(channel_id)
            if channel is not None:
                self._close_channel(channel)
            self.closing_channels.add(channel_id)
            self.write(codec.method_frame(channel_id, close))
            return
        if isinstance(close, commands.Channel.Close):
            close = commands.Connection.Close(
                close.reply_code, close.reply_text, close.class_id, close.method_id
            )
        self.close(close)

    def close(self, close: commands.Connection.Close) -> None:
        """Send ``Connection.Close``, release resources, and wait for Close-Ok."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self._close_reason = close.reply_text
        self.state = State.CLOSING
        self._release()
        self.write(codec.method_frame(0, close))
        self._close_timer = self.loop.call_later(CLOSE_OK_TIMEOUT, self._abort)

    def shutdown(self) -> None:
        """Broker shutdown: Connection.Close 320 CONNECTION_FORCED to the client."""
        self.force_close("broker forced connection closure with reason 'shutdown'")

    def force_close(self, explanation: str) -> None:
        """Close the connection from the broker's side with 320 CONNECTION_FORCED."""
        self.close(C.Close(CONNECTION_FORCED, reply_text(CONNECTION_FORCED, explanation), 0, 0))
        self._flush()

    def _closed_by_client(self) -> None:
        """Connection.Close from the client: release everything, answer Close-Ok, then keep
        reading and dropping what the client still sends until it closes the socket.

        A client that wrote a burst of publishes before its Close is still writing when the
        Close-Ok leaves; closing the socket at once would make its writes fail (amqplib got
        EPIPE and never saw its close callback). rabbit_reader does the same: after
        close-ok the connection is 'closed', frames are ignored, and the socket is closed
        after ?CLOSING_TIMEOUT (30 s), or the heartbeat interval when that is shorter.
        """
        self._release()
        self.send_method(0, C.CloseOk())
        self._flush()
        self.state = State.CLOSED
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        if self.transport is not None and self._paused:
            # Paused by flow control: read on, or a blocked client could never finish.
            self._paused.clear()
            self.transport.resume_reading()
        timeout = self.heartbeat if 0 < self.heartbeat < CLOSING_TIMEOUT else CLOSING_TIMEOUT
        self._close_timer = self.loop.call_later(timeout, self._abort)

    def _release(self) -> None:
        for channel in list(self.channels.values()):
            self._close_channel(channel)
        for queue in list(self.exclusive_queues):
            queue.vhost.delete_queue(queue)
        self.exclusive_queues.clear()

    def _abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()
