"""The fuzz target: bytes from the fuzzer go into a real :class:`leveret.wire.connection.Connection`
through a fake transport, in-process (no socket), and what the broker does is checked.

An input is ``mode:u8 chunk:u8 payload``:

* ``mode % 3`` says where the payload starts: 0 from nothing (the protocol header, the
  frame reader and the handshake), 1 after a valid handshake (Connection.Open-Ok done), 2
  after the handshake and Channel.Open on channel 1 (the session: declares, publishes with
  content frames of odd sizes, consumes, acks).
* ``chunk`` is how the payload is cut into ``data_received`` calls (0: in one; else
  pieces of ``chunk`` bytes), so frames split across reads are exercised too.

The invariants (:func:`run` raises :class:`InvariantError`, or lets the exception escape):

* nothing raises out of ``data_received`` or ``connection_lost``;
* the broker never hits an internal error: a bug it catches is logged with its exception
  and answered with 541 (a 541 without one is RabbitMQ's own answer to content properties
  that do not decode, broker/session/publish.py, and is fine);
* everything it writes is well-formed: an optional AMQP protocol header (its answer to a
  bad one), then frames pamqp decodes;
* every Connection.Close and Channel.Close it sends has a reply code in 3xx-5xx (the
  connection goes on, closes properly, or is aborted: all three are fine).

Each input gets a fresh broker state and a fresh event loop, so an input does the same
thing whenever it is replayed (a crash found is reproducible). The read budget
(connection.READ_BUDGET) is lifted for the same reason: it hands the rest of a long read
to a later loop iteration depending on wall-clock time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import traceback
from collections.abc import Iterator
from typing import Any

from pamqp import commands, frame, header

import leveret.wire.connection
from leveret.config import Config
from leveret.server import Server
from leveret.wire import codec
from leveret.wire.connection import Connection

MODES = 3
PEER = ("127.0.0.1", 40000)  # loopback: guest may log in


class InvariantError(AssertionError):
    """The broker broke an invariant of the fuzz target."""


class FakeTransport(asyncio.Transport):
    """Collects what the broker writes; no socket."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": PEER}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class _Crashes(logging.Handler):
    """Keeps every log record that carries an exception (the broker's internal errors)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@contextlib.contextmanager
def _fuzzing() -> Iterator[_Crashes]:
    """For one input: the broker's log records with an exception kept (and the rest kept
    off stderr), and no read budget; both as they were afterwards (pytest runs other tests
    in the same process)."""
    crashes = _Crashes()
    log = logging.getLogger("leveret")
    saved = (log.propagate, log.level, leveret.wire.connection.READ_BUDGET)
    log.addHandler(crashes)
    log.propagate = False  # the fuzzer's output stays readable
    log.setLevel(logging.ERROR)
    leveret.wire.connection.READ_BUDGET = float("inf")  # deterministic: see the module docstring
    try:
        yield crashes
    finally:
        log.removeHandler(crashes)
        log.propagate, level, leveret.wire.connection.READ_BUDGET = saved
        log.setLevel(level)


def _method(channel: int, method: Any) -> bytes:
    return bytes(frame.marshal(method, channel))


HANDSHAKE = (
    codec.PROTOCOL_HEADER
    + _method(
        0,
        commands.Connection.StartOk(
            client_properties={"product": "fuzz", "capabilities": {"publisher_confirms": True}},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
    )
    + _method(0, commands.Connection.TuneOk(channel_max=16, frame_max=4096, heartbeat=0))
    + _method(0, commands.Connection.Open(virtual_host="/"))
)
CHANNEL_OPEN = _method(1, commands.Channel.Open())
PREFIXES = (b"", HANDSHAKE, HANDSHAKE + CHANNEL_OPEN)


def split(data: bytes) -> tuple[bytes, list[bytes]]:
    """An input as (prefix, reads): the handshake the mode asks for, the payload in pieces."""
    if len(data) < 2:
        return b"", [data] if data else []
    mode, chunk, payload = data[0] % MODES, data[1], data[2:]
    if chunk == 0:
        return PREFIXES[mode], [payload] if payload else []
    return PREFIXES[mode], [payload[i : i + chunk] for i in range(0, len(payload), chunk)]


def check_output(written: bytes) -> list[Any]:
    """The frames the broker wrote, checked (:class:`InvariantError` when one is not right)."""
    if written.startswith(b"AMQP"):
        written = written[len(codec.PROTOCOL_HEADER) :]
    out = []
    while written:
        if written[0] == codec.FRAME_HEADER:
            # A content header goes out as the publisher sent it (RabbitMQ relays the
            # properties too): only its framing is the broker's. pamqp's decoder would refuse
            # valid ones (a timestamp past year 9999).
            used, channel, value = _content_header(written)
            out.append((channel, value))
            written = written[used:]
            continue
        try:
            used, channel, value = frame.unmarshal(written)
        except Exception as exc:
            raise InvariantError(f"the broker wrote a frame pamqp cannot read: {exc!r}") from exc
        if isinstance(value, commands.Connection.Close | commands.Channel.Close):
            code = value.reply_code
            if not 300 <= code < 600:
                raise InvariantError(f"{value.name} with reply code {code}: {value.reply_text!r}")
        out.append((channel, value))
        written = written[used:]
    return out


def _content_header(written: bytes) -> tuple[int, int, header.ContentHeader]:
    """The framing of a content header frame at the start of ``written``: its length, its
    channel, and a ContentHeader with the body size (the properties are not decoded)."""
    if len(written) < 7 + 12 + 1:
        raise InvariantError(f"a content header frame cut short: {written[:32]!r}")
    _, channel, size = struct.unpack_from(">BHI", written)
    end = 7 + size
    if size < 14 or len(written) <= end or written[end] != codec.FRAME_END:
        raise InvariantError(f"a content header frame badly framed: {written[: end + 1]!r}")
    _, _, body_size = struct.unpack_from(">HHQ", written, 7)
    return end + 1, channel, header.ContentHeader(body_size=body_size)


async def _drive(prefix: bytes, reads: list[bytes]) -> bytes:
    server = Server(Config(port=0))
    connection = Connection(server.state)
    transport = FakeTransport()
    connection.connection_made(transport)
    if prefix:
        connection.data_received(prefix)
    for read in reads:
        if transport.closed:
            break  # a closed socket reads nothing more
        connection.data_received(read)
        await asyncio.sleep(0)  # the writes and deliveries put off with call_soon
    connection.connection_lost(None)
    await asyncio.sleep(0)
    return bytes(transport.buffer)


def run(data: bytes) -> list[Any]:
    """Feed one input to a fresh broker and check the invariants; the frames it wrote."""
    prefix, reads = split(data)
    with _fuzzing() as crashes, asyncio.Runner() as runner:
        written = runner.run(_drive(prefix, reads))
    if crashes.records:
        record = crashes.records[0]
        cause = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""
        raise InvariantError(f"internal error: {record.getMessage()}\n{cause}")
    return check_output(written)
