"""Connection rules that need a broker configured differently from the session one:
guest only from loopback (a protocol-level test with a fake transport, since the tests
only talk to 127.0.0.1), handshake timeout, users other than guest."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aio_pika
import pytest
from pamqp import commands, frame

from leveret.config import Config
from leveret.server import Server
from leveret.wire import codec
from leveret.wire.connection import Connection


class FakeTransport(asyncio.Transport):
    """Collects what the broker writes; reports a chosen peer address."""

    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__()
        self.peer = peer
        self.buffer = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peer}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def frames(data: bytes) -> list[Any]:
    out = []
    while data:
        used, _channel, value = frame.unmarshal(data)
        out.append(value)
        data = data[used:]
    return out


async def login(peer: str, user: str, password: str, config: Config | None = None) -> list[Any]:
    server = Server(config or Config(port=0))
    connection = Connection(server.state)
    transport = FakeTransport((peer, 40000))
    connection.connection_made(transport)
    start_ok = commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}},
        mechanism="PLAIN",
        response=f"\0{user}\0{password}",
    )
    connection.data_received(codec.PROTOCOL_HEADER + frame.marshal(start_ok, 0))
    connection.connection_lost(None)
    return frames(bytes(transport.buffer))


async def test_guest_is_refused_from_a_remote_address() -> None:
    start, close = await login("10.1.2.3", "guest", "guest")
    assert isinstance(start, commands.Connection.Start)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 403
    assert close.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )


async def test_guest_is_accepted_from_loopback() -> None:
    _start, tune = await login("127.0.0.1", "guest", "guest")
    assert isinstance(tune, commands.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


async def test_other_users_may_connect_from_anywhere() -> None:
    config = Config(port=0, users={"guest": "guest", "app": "s3cret"})
    _start, tune = await login("10.1.2.3", "app", "s3cret", config)
    assert isinstance(tune, commands.Connection.Tune)


async def test_loopback_users_can_be_cleared() -> None:
    config = Config(port=0, loopback_users=())
    _start, tune = await login("10.1.2.3", "guest", "guest", config)
    assert isinstance(tune, commands.Connection.Tune)


async def test_configured_user_logs_in_over_a_socket() -> None:
    server = Server(Config(port=0, users={"app": "s3cret"}))
    await server.start()
    try:
        connection = await aio_pika.connect(f"amqp://app:s3cret@127.0.0.1:{server.port}/")
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        await channel.default_exchange.publish(aio_pika.Message(b"hi"), queue.name)
        message = await queue.get(timeout=5)
        assert message.body == b"hi"
        await connection.close()
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(f"amqp://app:wrong@127.0.0.1:{server.port}/")
    finally:
        await server.stop()


async def test_handshake_timeout_closes_a_silent_socket() -> None:
    server = Server(Config(port=0, handshake_timeout=0.2))
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        # Say nothing: the broker gives up after the handshake timeout.
        data = await asyncio.wait_for(reader.read(100), timeout=5)
        assert data == b""
        writer.close()
    finally:
        await server.stop()


async def test_port_zero_picks_a_free_port() -> None:
    server = Server(Config(port=0))
    await server.start()
    try:
        assert server.port > 0
        with socket.create_connection(("127.0.0.1", server.port), timeout=2):
            pass
    finally:
        await server.stop()
