"""A small blocking raw-socket AMQP 0-9-1 client for protocol-level tests.

It speaks just enough of the protocol to drive a broker into corners that real client
libraries refuse to reach (wrong headers, oversized or malformed frames, ``immediate=true``,
frames on channels that were never opened, ...). Frames are encoded and decoded with
``pamqp.frame.marshal`` / ``pamqp.frame.unmarshal``; anything pamqp cannot express is sent as
raw bytes with :meth:`WireClient.send_raw` and the helpers :func:`raw_frame` and
:func:`raw_method`.

Every read has a deadline, so a broker that stays silent fails a test quickly instead of
hanging it.
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, TypeVar

from pamqp import commands
from pamqp import frame as pframe
from pamqp.body import ContentBody
from pamqp.constants import FRAME_END, FRAME_HEADER_SIZE, FRAME_HEARTBEAT
from pamqp.exceptions import UnmarshalingException
from pamqp.header import ContentHeader, ProtocolHeader
from pamqp.heartbeat import Heartbeat

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_END_BYTE = bytes([FRAME_END])

DEFAULT_TIMEOUT = 5.0

F = TypeVar("F")


@dataclass(frozen=True)
class Url:
    """The parts of an ``amqp://user:password@host:port/vhost`` URL."""

    host: str
    port: int
    user: str
    password: str
    vhost: str


def parse_url(url: str) -> Url:
    """Split an AMQP URL the way pika and aio-pika do (empty path means vhost ``/``)."""
    parts = urllib.parse.urlparse(url)
    path = parts.path or ""
    vhost = "/" if path in ("", "/") else urllib.parse.unquote(path[1:])
    return Url(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        user=urllib.parse.unquote(parts.username or "guest"),
        password=urllib.parse.unquote(parts.password or "guest"),
        vhost=vhost,
    )


class PeerClosedError(Exception):
    """The broker closed the TCP connection."""


def raw_frame(frame_type: int, channel: int, payload: bytes, end: bytes = FRAME_END_BYTE) -> bytes:
    """One frame built by hand: type, channel, size, payload and (optionally wrong) end byte."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def raw_method(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    """A method frame with an arbitrary (possibly unknown) class and method id."""
    return raw_frame(FRAME_METHOD, channel, struct.pack(">HH", class_id, method_id) + args)


def plain_response(user: str, password: str) -> str:
    """The SASL PLAIN response: ``\\0user\\0password``."""
    return f"\0{user}\0{password}"


def amqplain_response(user: str, password: str) -> bytes:
    """The AMQPLAIN response: a field table without its leading 4-byte length."""
    out = b""
    for key, value in (("LOGIN", user), ("PASSWORD", password)):
        raw_key = key.encode()
        raw_value = value.encode()
        out += (
            bytes([len(raw_key)]) + raw_key + b"S" + struct.pack(">I", len(raw_value)) + raw_value
        )
    return out


class WireClient:
    """One blocking TCP connection to a broker, read frame by frame."""

    def __init__(
        self, url: str, timeout: float = DEFAULT_TIMEOUT, source_address: str | None = None
    ) -> None:
        self.url = parse_url(url)
        self.timeout = timeout
        self.sock = socket.create_connection(
            (self.url.host, self.url.port),
            timeout=timeout,
            source_address=None if source_address is None else (source_address, 0),
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._eof = False
        self.heartbeats = 0
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None
        self.frame_max = 131072

    # -- plumbing ------------------------------------------------------------------------

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, value: Any, channel: int = 0) -> None:
        """Marshal one pamqp frame object (method, header, body, heartbeat) and send it."""
        self.sock.sendall(pframe.marshal(value, channel))

    def _fill(self, deadline: float) -> None:
        """Read more into the buffer; PeerClosedError on EOF, TimeoutError at the deadline."""
        if self._eof:
            raise PeerClosedError("connection closed by broker")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError("no frame from the broker in time") from None
        except ConnectionResetError:
            data = b""
        if not data:
            self._eof = True
            raise PeerClosedError("connection closed by broker")
        self._buffer += data

    def read_raw(self, count: int, timeout: float | None = None) -> bytes:
        """Exactly ``count`` raw bytes (for the protocol-header reply)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self._buffer) < count:
            self._fill(deadline)
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def read_until_closed(self, timeout: float | None = None) -> bytes:
        """Every byte the broker sends until it closes the socket (TimeoutError if it does not)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                self._fill(deadline)
            except PeerClosedError:
                data = bytes(self._buffer)
                self._buffer.clear()
                return data

    def read_raw_frame(self, timeout: float | None = None) -> tuple[int, int, bytes]:
        """The next frame undecoded, as ``(frame type, channel, payload)``: for asserting
        the exact bytes a broker wrote (field-table type tags, which decoding loses)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self._buffer) < FRAME_HEADER_SIZE:
            self._fill(deadline)
        frame_type, channel, size = struct.unpack_from(">BHI", self._buffer)
        while len(self._buffer) < FRAME_HEADER_SIZE + size + 1:
            self._fill(deadline)
        payload = bytes(self._buffer[FRAME_HEADER_SIZE : FRAME_HEADER_SIZE + size])
        del self._buffer[: FRAME_HEADER_SIZE + size + 1]
        return frame_type, channel, payload

    def read_frame(
        self, timeout: float | None = None, skip_heartbeats: bool = True
    ) -> tuple[int, Any]:
        """The next frame as ``(channel, frame object)``; heartbeats are counted and skipped."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            while len(self._buffer) < FRAME_HEADER_SIZE:
                self._fill(deadline)
            if self._buffer[:4] == b"AMQP":
                while len(self._buffer) < 8:
                    self._fill(deadline)
            else:
                size = struct.unpack_from(">I", self._buffer, 3)[0]
                while len(self._buffer) < FRAME_HEADER_SIZE + size + 1:
                    self._fill(deadline)
            try:
                consumed, channel, value = pframe.unmarshal(bytes(self._buffer))
            except UnmarshalingException as exc:  # pragma: no cover - a broker bug
                raise AssertionError(f"broker sent an undecodable frame: {exc}") from exc
            del self._buffer[:consumed]
            if isinstance(value, Heartbeat):
                self.heartbeats += 1
                if skip_heartbeats:
                    continue
            return channel, value

    def expect(self, kind: type[F], channel: int | None = None, timeout: float | None = None) -> F:
        """Read the next frame and assert its type (and channel)."""
        got_channel, value = self.read_frame(timeout)
        assert isinstance(value, kind), (
            f"expected {kind.__name__}, got {value!r} on channel {got_channel}"
        )
        if channel is not None:
            assert got_channel == channel, f"{kind.__name__} on channel {got_channel} not {channel}"
        return value

    def wait_closed(self, timeout: float | None = None) -> list[tuple[int, Any]]:
        """Read frames until the broker closes the socket; return the frames seen.

        A Connection.Close from the broker is answered with Close-Ok, as a client must.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        frames: list[tuple[int, Any]] = []
        while True:
            try:
                channel, value = self.read_frame(max(deadline - time.monotonic(), 0.001))
            except PeerClosedError:
                return frames
            frames.append((channel, value))
            if isinstance(value, commands.Connection.Close):
                try:
                    self.send(commands.Connection.CloseOk())
                except OSError:
                    pass

    # -- connection ----------------------------------------------------------------------

    def negotiate(
        self,
        *,
        mechanism: str = "PLAIN",
        user: str | None = None,
        password: str | None = None,
        frame_max: int | None = None,
        channel_max: int | None = None,
        heartbeat: int = 0,
    ) -> commands.Connection.Tune:
        """Header, Start, Start-Ok, Tune, Tune-Ok (echoing the server's limits by default)."""
        user = self.url.user if user is None else user
        password = self.url.password if password is None else password
        self.send_raw(PROTOCOL_HEADER)
        self.start = self.expect(commands.Connection.Start, channel=0)
        if mechanism == "AMQPLAIN":
            raw = amqplain_response(user, password)
            # pamqp encodes the response as UTF-8 text; keep to ASCII so the bytes go out as-is.
            assert raw.isascii(), "AMQPLAIN helper supports ASCII-only credentials"
            response = raw.decode("ascii")
        else:
            response = plain_response(user, password)
        self.send(
            commands.Connection.StartOk(
                client_properties={
                    "product": "leveret-wire-tests",
                    "capabilities": {"authentication_failure_close": True},
                },
                mechanism=mechanism,
                response=response,
                locale="en_US",
            )
        )
        self.tune = self.expect(commands.Connection.Tune, channel=0)
        self.frame_max = self.tune.frame_max if frame_max is None else frame_max
        self.send(
            commands.Connection.TuneOk(
                channel_max=self.tune.channel_max if channel_max is None else channel_max,
                frame_max=self.frame_max,
                heartbeat=heartbeat,
            )
        )
        return self.tune

    def open(self, vhost: str | None = None) -> commands.Connection.OpenOk:
        self.send(commands.Connection.Open(virtual_host=self.url.vhost if vhost is None else vhost))
        return self.expect(commands.Connection.OpenOk, channel=0)

    def connect(self, **negotiate: Any) -> WireClient:
        """A fully open connection (negotiate + Connection.Open on the URL's vhost)."""
        self.negotiate(**negotiate)
        self.open()
        return self

    def open_channel(self, channel: int) -> None:
        self.send(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel=channel)

    def close_connection(self) -> None:
        """A clean client-initiated close: Close, then Close-Ok from the broker."""
        self.send(
            commands.Connection.Close(reply_code=200, reply_text="Goodbye", class_id=0, method_id=0)
        )
        self.expect(commands.Connection.CloseOk, channel=0)

    def expect_connection_close(
        self, code: int, text: str, class_id: int | None = None, method_id: int | None = None
    ) -> commands.Connection.Close:
        """Assert the next frame is Connection.Close(code, text), answer Close-Ok, await EOF."""
        close = self.expect(commands.Connection.Close, channel=0)
        assert (close.reply_code, close.reply_text) == (code, text)
        if class_id is not None:
            assert (close.class_id, close.method_id) == (class_id, method_id)
        try:
            self.send(commands.Connection.CloseOk())
        except OSError:
            pass
        assert self.wait_closed() == [], "frames after Connection.Close"
        return close

    def expect_channel_close(
        self,
        channel: int,
        code: int,
        text: str,
        class_id: int | None = None,
        method_id: int | None = None,
    ) -> commands.Channel.Close:
        """Assert the next frame is Channel.Close(code, text) on ``channel``; answer Close-Ok."""
        close = self.expect(commands.Channel.Close, channel=channel)
        assert (close.reply_code, close.reply_text) == (code, text)
        if class_id is not None:
            assert (close.class_id, close.method_id) == (class_id, method_id)
        self.send(commands.Channel.CloseOk(), channel)
        return close

    # -- content ---------------------------------------------------------------------------

    def publish(
        self,
        channel: int,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        properties: commands.Basic.Properties | None = None,
    ) -> None:
        """Basic.Publish + content header + body frames split to the negotiated frame_max."""
        data = pframe.marshal(
            commands.Basic.Publish(
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                immediate=immediate,
            ),
            channel,
        )
        data += pframe.marshal(
            ContentHeader(0, len(body), properties or commands.Basic.Properties()), channel
        )
        chunk = self.frame_max - 8
        for offset in range(0, len(body), chunk):
            data += pframe.marshal(ContentBody(body[offset : offset + chunk]), channel)
        self.send_raw(data)

    def heartbeat(self) -> None:
        self.send_raw(raw_frame(FRAME_HEARTBEAT, 0, b""))

    def get_eventually(
        self, queue: str, channel: int = 1, no_ack: bool = True, timeout: float = 10.0
    ) -> commands.Basic.GetOk:
        """``basic.get`` until a message is there. RabbitMQ moves a message between queues
        (dead-lettering) or into a queue (a publish whose headers it parses) asynchronously,
        so an immediate get may be empty there; Leveret answers the first time."""
        deadline = time.monotonic() + timeout
        while True:
            self.send(commands.Basic.Get(queue=queue, no_ack=no_ack), channel)
            got_channel, answer = self.read_frame()
            assert got_channel == channel, f"{answer!r} on channel {got_channel}"
            if isinstance(answer, commands.Basic.GetOk):
                return answer
            assert isinstance(answer, commands.Basic.GetEmpty), f"got {answer!r}"
            assert time.monotonic() < deadline, f"no message in {queue!r} after {timeout} s"
            time.sleep(0.05)

    def message_count_eventually(
        self, queue: str, count: int, channel: int = 1, timeout: float = 10.0
    ) -> None:
        """Passive ``queue.declare`` until the queue holds ``count`` messages (see
        :meth:`get_eventually` for why RabbitMQ may need a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            self.send(commands.Queue.Declare(queue=queue, passive=True), channel)
            got = self.expect(commands.Queue.DeclareOk, channel).message_count
            if got == count:
                return
            assert time.monotonic() < deadline, f"{queue!r} holds {got}, not {count}"
            time.sleep(0.05)

    def content(self, channel: int, timeout: float | None = None) -> tuple[Any, bytes]:
        """Read a content header and its body frames on ``channel``."""
        header = self.expect(ContentHeader, channel=channel, timeout=timeout)
        body = b""
        while len(body) < header.body_size:
            body += self.expect(ContentBody, channel=channel, timeout=timeout).value
        return header, body


__all__ = [
    "FRAME_BODY",
    "FRAME_HEADER",
    "FRAME_METHOD",
    "PROTOCOL_HEADER",
    "PeerClosedError",
    "ProtocolHeader",
    "WireClient",
    "amqplain_response",
    "parse_url",
    "raw_frame",
    "raw_method",
]
