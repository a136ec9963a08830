"""Writes the fuzzer's seed corpus (tests/fuzz/corpus/): a few inputs in the format of
tests/fuzz/target.py, each a small valid or nearly valid conversation, so the fuzzer starts
past the frame reader. Run ``python -m tests.fuzz.make_corpus`` after changing it; the
files are committed (the inputs the fuzzer found later go into the corpus beside them)."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

from pamqp import body, commands, frame, header
from pamqp.commands import Basic

from tests.fuzz.target import CHANNEL_OPEN, HANDSHAKE

CORPUS = Path(__file__).parent / "corpus"


def m(channel: int, method: Any) -> bytes:
    """One method frame."""
    return bytes(frame.marshal(method, channel))


def publish(channel: int, payload: bytes, pieces: int = 1, **properties: Any) -> bytes:
    """Basic.Publish, its content header, and the body in ``pieces`` frames."""
    out = m(channel, Basic.Publish(exchange="", routing_key="q", mandatory=True))
    out += bytes(
        frame.marshal(
            header.ContentHeader(0, len(payload), Basic.Properties(**properties)), channel
        )
    )
    step = max(1, -(-len(payload) // pieces))
    for i in range(0, len(payload), step):
        out += bytes(frame.marshal(body.ContentBody(payload[i : i + step]), channel))
    return out


def seed(mode: int, chunk: int, payload: bytes) -> bytes:
    """An input: mode, chunk size, payload (tests/fuzz/target.py)."""
    return bytes([mode, chunk]) + payload


SEEDS = {
    "handshake_whole": seed(
        0, 0, HANDSHAKE + CHANNEL_OPEN + m(1, commands.Channel.Close(200, "bye", 0, 0))
    ),
    "handshake_bytewise": seed(0, 1, HANDSHAKE),
    "bad_protocol_header": seed(0, 0, b"AMQP\x00\x00\x09\x00"),
    "http_request": seed(0, 0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    "amqp_1_0_header": seed(0, 0, b"AMQP\x03\x01\x00\x00"),
    "bad_login": seed(
        0,
        0,
        HANDSHAKE[:8]
        + m(
            0,
            commands.Connection.StartOk(
                client_properties={}, mechanism="AMQPLAIN", response="\0nobody\0x"
            ),
        ),
    ),
    "topology": seed(
        2,
        0,
        m(1, commands.Exchange.Declare(exchange="x", exchange_type="topic", durable=True))
        + m(
            1,
            commands.Queue.Declare(queue="q", arguments={"x-max-length": 3, "x-message-ttl": 1000}),
        )
        + m(1, commands.Queue.Bind(queue="q", exchange="x", routing_key="a.#"))
        + m(1, commands.Exchange.Bind(destination="amq.fanout", source="x", routing_key="#"))
        + m(1, commands.Queue.Purge(queue="q"))
        + m(1, commands.Queue.Unbind(queue="q", exchange="x", routing_key="a.#"))
        + m(1, commands.Queue.Delete(queue="q"))
        + m(1, commands.Exchange.Delete(exchange="x")),
    ),
    "publish_consume": seed(
        2,
        0,
        m(1, commands.Queue.Declare(queue="q"))
        + m(1, commands.Confirm.Select())
        + publish(1, b"0123456789" * 20, pieces=3, delivery_mode=2, priority=3)
        + m(1, Basic.Qos(prefetch_count=1))
        + m(1, Basic.Consume(queue="q", consumer_tag="c"))
        + m(1, Basic.Ack(delivery_tag=1))
        + m(1, Basic.Cancel(consumer_tag="c"))
        + m(1, Basic.Get(queue="q"))
        + m(1, Basic.Nack(delivery_tag=1, requeue=True))
        + m(1, Basic.Reject(delivery_tag=2, requeue=False))
        + m(1, Basic.Recover(requeue=True)),
    ),
    "publish_odd_chunks": seed(
        2,
        7,
        m(1, commands.Queue.Declare(queue="q"))
        + publish(1, b"x" * 900, pieces=4)
        + publish(1, b"", pieces=1)
        + publish(1, b"x" * 4100, pieces=1),  # a body frame over the 4096 frame_max
    ),
    "publish_headers": seed(
        2,
        0,
        publish(
            1,
            b"{}",
            headers={
                "a": [1, "two", 3.5, True, None, {"n": -1}],
                "d": decimal.Decimal("1.25"),
                "t": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
            },
            content_type="application/json",
            expiration="60000",
            correlation_id="c",
            reply_to="r",
            message_id="m",
            user_id="guest",
        ),
    ),
    "transactions": seed(
        2,
        0,
        m(1, commands.Tx.Select())
        + publish(1, b"t")
        + m(1, commands.Tx.Rollback())
        + publish(1, b"t")
        + m(1, commands.Tx.Commit()),
    ),
    "channels": seed(
        1,
        3,
        m(3, commands.Channel.Open())
        + m(3, commands.Channel.Open())
        + m(5, commands.Queue.Declare(queue=""))
        + m(3, commands.Channel.Flow(active=False))
        + m(3, commands.Channel.Close(200, "bye", 0, 0))
        + m(3, commands.Channel.CloseOk())
        + m(0, commands.Connection.Close(200, "bye", 0, 0)),
    ),
    "bad_frames": seed(
        2,
        0,
        b"\x08\x00\x00\x00\x00\x00\x00\xce"  # a heartbeat
        + b"\x08\x00\x01\x00\x00\x00\x00\xce"  # a heartbeat on a channel
        + b"\x03\x00\x01\x00\x00\x00\x02ab\xce"  # a body without a publish
        + b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x28\x00",  # a bad frame end
    ),
}


def main() -> None:
    """Write every seed to the corpus directory."""
    CORPUS.mkdir(exist_ok=True)
    for name, data in SEEDS.items():
        (CORPUS / f"seed_{name}").write_bytes(data)
    print(f"{len(SEEDS)} seeds, {sum(map(len, SEEDS.values()))} bytes in {CORPUS}")


if __name__ == "__main__":
    main()
