"""Slow clients before and during the handshake are dropped at the handshake timeout.

RabbitMQ gives a connection ``handshake_timeout`` (10 s) from accept to connection.open:
rabbit_reader.erl arms one timer at start and cancels it only once the connection is open,
so a client that keeps the socket busy (one octet at a time, the slowloris attack) is
dropped as surely as a silent one. ``tests/test_connection_rules.py`` checks a silent
socket; here every stage of the handshake is stalled, and one client trickles its
start-ok. ``bench/faults.py slowloris`` measures the same clients against Leveret and
RabbitMQ at the default 10 s (RELIABILITY.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pamqp import commands, frame

from leveret.config import Config
from leveret.server import Server

HEADER = b"AMQP\x00\x00\x09\x01"
START_OK = frame.marshal(
    commands.Connection.StartOk(
        client_properties={"product": "slowloris"},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    ),
    0,
)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """A broker with a short handshake timeout (0.3 s)."""
    server = Server(Config(port=0, handshake_timeout=0.3))
    await server.start()
    yield server
    await server.stop()


async def read_frame(reader: asyncio.StreamReader) -> object:
    """One method frame from the broker."""
    header = await asyncio.wait_for(reader.readexactly(7), 5)
    size = int.from_bytes(header[3:7], "big")
    body = await asyncio.wait_for(reader.readexactly(size + 1), 5)
    return frame.unmarshal(header + body)[2]


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the broker still sends, up to its end of stream."""
    return await asyncio.wait_for(reader.read(), 10)


@pytest.mark.parametrize("stage", ["half header", "after start", "after tune"])
async def test_a_handshake_stalled_at_any_stage_is_dropped(server: Server, stage: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    if stage == "half header":
        writer.write(HEADER[:4])
    else:
        writer.write(HEADER)
        assert isinstance(await read_frame(reader), commands.Connection.Start)
        if stage == "after tune":
            writer.write(START_OK)
            assert isinstance(await read_frame(reader), commands.Connection.Tune)
    # then nothing: the broker gives up at the handshake timeout, without a word
    assert await until_closed(reader) == b""
    writer.close()


async def test_a_start_ok_trickled_one_octet_at_a_time_is_dropped(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(HEADER)
    assert isinstance(await read_frame(reader), commands.Connection.Start)
    closed = asyncio.ensure_future(until_closed(reader))
    sent = 0
    # The connection is never idle, so only the handshake deadline can end it: 50 ms an
    # octet is ~6 s for the frame, twenty times the timeout.
    while not closed.done() and sent < len(START_OK):
        try:
            writer.write(START_OK[sent : sent + 1])
            await writer.drain()
        except ConnectionError:
            break
        sent += 1
        await asyncio.wait([closed], timeout=0.05)
    assert await closed == b""
    assert sent < len(START_OK), "the broker waited for the whole trickled start-ok"
    writer.close()
