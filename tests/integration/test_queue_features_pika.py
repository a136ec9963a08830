"""Queue features through pika's BlockingConnection: TTL, dead-lettering with ``x-death``,
length limits with publisher confirms, priorities, single active consumer, direct reply-to.

The aio-pika module (test_queue_features_aio.py) covers each feature in depth; this one proves
the same behaviours through a second client, plus what only pika can show easily: the AMQP
field types of the ``x-death`` header on the wire, and declaring the generated direct
reply-to name (pamqp refuses the ``+``, ``/`` and ``=`` it contains).

Every expectation was observed on a real RabbitMQ (3.10.8) with ``-m rabbitmq``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel

from .helpers import unique
from .wire import WireClient

pytestmark = pytest.mark.timeout(30)

REPLY_TO = "amq.rabbitmq.reply-to"


# -- helpers ----------------------------------------------------------------------------------


def connect(url: str) -> pika.BlockingConnection:
    p = pika.URLParameters(url)
    p.connection_attempts = 1
    p.socket_timeout = 5
    p.stack_timeout = 10
    p.blocked_connection_timeout = 10
    return pika.BlockingConnection(p)


def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll a check that does its own broker round trip until it holds."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def pump(conn: pika.BlockingConnection, done: Callable[[], bool], within: float = 5.0) -> None:
    """Process I/O until ``done()`` holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        conn.process_data_events(time_limit=0.02)


def ready_count(ch: BlockingChannel, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def wait_ready(ch: BlockingChannel, queue: str, count: int) -> None:
    eventually(lambda: ready_count(ch, queue) == count)


def get_body(ch: BlockingChannel, queue: str) -> bytes | None:
    return ch.basic_get(queue, auto_ack=True)[2]


def channel_error(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[int, str]:
    exc = excinfo.value
    assert isinstance(exc, pika.exceptions.ChannelClosedByBroker), repr(exc)
    return exc.reply_code, exc.reply_text


def death(queue: str, reason: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    entry = {"count": count, "reason": reason, "queue": queue, "exchange": ""}
    entry["routing-keys"] = [queue]
    entry.update(extra)
    return entry


def deaths(headers: dict[str, Any]) -> list[dict[str, Any]]:
    """``x-death`` without the ``time`` fields, which are checked to be recent timestamps."""
    entries = headers["x-death"]
    for entry in entries:
        stamp = entry["time"]
        assert isinstance(stamp, datetime)
        assert abs((datetime.now(UTC) - stamp).total_seconds()) < 120
    return [{k: v for k, v in entry.items() if k != "time"} for entry in entries]


# -- raw field types --------------------------------------------------------------------------

_FIXED = {"t": 1, "b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "f": 4, "d": 8}
_FIXED |= {"D": 5, "T": 8, "V": 0}


def _field(data: bytes, pos: int) -> tuple[Any, int]:
    """The type of one field value: a tag, or ("A", [...]) / ("F", {...})."""
    tag = chr(data[pos])
    pos += 1
    if tag in _FIXED:
        return tag, pos + _FIXED[tag]
    (size,) = struct.unpack_from(">I", data, pos)
    pos += 4
    end = pos + size
    if tag in "Sx":
        return tag, end
    if tag == "F":
        return ("F", _table(data[pos:end])), end
    assert tag == "A", f"unknown field type {tag!r}"
    items = []
    while pos < end:
        item, pos = _field(data, pos)
        items.append(item)
    return ("A", items), end


def _table(data: bytes) -> dict[str, Any]:
    types: dict[str, Any] = {}
    pos = 0
    while pos < len(data):
        size = data[pos]
        key = data[pos + 1 : pos + 1 + size].decode()
        types[key], pos = _field(data, pos + 1 + size)
    return types


def header_field_types(url: str, queue: str) -> dict[str, Any]:
    """basic.get one message over a raw socket; the AMQP types of its ``headers`` table."""
    with WireClient(url) as client:
        client.connect()
        client.open_channel(1)
        client.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
        client.expect(commands.Basic.GetOk, channel=1)
        frame_type, _channel, size = struct.unpack(">BHI", client.read_raw(7))
        payload = client.read_raw(size + 1)[:-1]
        assert frame_type == 2  # content header
        (flags,) = struct.unpack_from(">H", payload, 12)
        pos = 14
        for bit in (15, 14):  # content-type, content-encoding: short strings
            if flags & (1 << bit):
                pos += 1 + payload[pos]
        assert flags & (1 << 13), "no headers"
        (size,) = struct.unpack_from(">I", payload, pos)
        return _table(payload[pos + 4 : pos + 4 + size])


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def conn(amqp_url: str) -> Iterator[pika.BlockingConnection]:
    connection = connect(amqp_url)
    yield connection
    if connection.is_open:
        connection.close()


@pytest.fixture
def ch(conn: pika.BlockingConnection) -> BlockingChannel:
    return conn.channel()


@pytest.fixture
def cleanup(amqp_url: str) -> Iterator[list[tuple[str, str]]]:
    """Register ("queue"|"exchange", name) pairs to delete after the test."""
    items: list[tuple[str, str]] = []
    yield items
    if items:
        connection = connect(amqp_url)
        channel = connection.channel()
        for kind, name in items:
            if kind == "queue":
                channel.queue_delete(name)
            else:
                channel.exchange_delete(name)
        connection.close()


@pytest.fixture
def declare(ch: BlockingChannel, cleanup: list[tuple[str, str]]) -> Callable[..., str]:
    """``declare(prefix, name=None, **arguments)``: a queue deleted after the test."""

    def make(prefix: str = "q", name: str | None = None, **arguments: Any) -> str:
        queue = name or unique(prefix)
        ch.queue_declare(queue, arguments=arguments or None)
        cleanup.append(("queue", queue))
        return queue

    return make


# -- TTL and queue expiry ---------------------------------------------------------------------


def test_queue_ttl_expires_messages_without_consumer(ch: BlockingChannel, declare) -> None:
    queue = declare("ttl", **{"x-message-ttl": 300})
    ch.confirm_delivery()
    for body in (b"0", b"1", b"2"):
        ch.basic_publish("", queue, body)
    assert ready_count(ch, queue) == 3
    wait_ready(ch, queue, 0)
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)


def test_lower_of_queue_and_message_ttl_wins(ch: BlockingChannel, declare) -> None:
    ch.confirm_delivery()
    long_queue = declare("ttl-long", **{"x-message-ttl": 60000})
    ch.basic_publish("", long_queue, b"short", pika.BasicProperties(expiration="100"))
    ch.basic_publish("", long_queue, b"kept")
    wait_ready(ch, long_queue, 1)
    _method, props, body = ch.basic_get(long_queue, auto_ack=True)
    assert (body, props.expiration) == (b"kept", None)

    short_queue = declare("ttl-short", **{"x-message-ttl": 100})
    ch.basic_publish("", short_queue, b"m", pika.BasicProperties(expiration="60000"))
    wait_ready(ch, short_queue, 0)


def test_ttl_zero_drops_without_a_consumer(ch: BlockingChannel, declare) -> None:
    ch.confirm_delivery()
    queue = declare("ttl0", **{"x-message-ttl": 0})
    ch.basic_publish("", queue, b"dropped")
    assert ready_count(ch, queue) == 0
    got: list[bytes] = []
    ch.basic_consume(queue, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", queue, b"delivered")
    pump(ch.connection, lambda: bool(got))
    assert got == [b"delivered"]


def test_x_expires_deletes_an_unused_queue(conn: pika.BlockingConnection, declare) -> None:
    queue = declare("expires", **{"x-expires": 200})
    channel = conn.channel()
    channel.confirm_delivery()

    def gone() -> bool:
        # A mandatory publish does not count as use (a passive declare would).
        try:
            channel.basic_publish("", queue, b"probe", mandatory=True)
        except pika.exceptions.UnroutableError:
            return True
        return False

    eventually(gone)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().queue_declare(queue, passive=True)
    assert channel_error(excinfo) == (404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")


def test_invalid_ttl_argument_and_expiration(conn: pika.BlockingConnection) -> None:
    queue = unique("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().queue_declare(queue, arguments={"x-message-ttl": "100"})
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{queue}' in vhost '/': "
        '"expected integer, got longstr"',
    )
    channel = conn.channel()
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_publish("", queue, b"x", pika.BasicProperties(expiration="soon"))
    assert channel_error(excinfo) == (
        406,
        "PRECONDITION_FAILED - invalid expiration 'soon': no_integer",
    )
    assert conn.is_open


def test_redeclare_with_a_long_argument_is_406(conn: pika.BlockingConnection, declare) -> None:
    # pika sends ints that fit 32 bits as signedint ('I'), larger ones as long ('l').
    queue = declare("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().queue_declare(queue, arguments={"x-max-length-bytes": 2**40})
    assert channel_error(excinfo) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length-bytes' for queue '{queue}' in "
        "vhost '/': received the value '1099511627776' of type 'long' but current is none",
    )


# -- dead-lettering ---------------------------------------------------------------------------


def _dlx(ch: BlockingChannel, declare, cleanup: list[tuple[str, str]]) -> tuple[str, str]:
    dlx = unique("dlx")
    ch.exchange_declare(dlx, "fanout")
    cleanup.append(("exchange", dlx))
    dlq = declare("dlq")
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def test_dead_letter_on_reject_with_x_death(ch: BlockingChannel, declare, cleanup) -> None:
    dlx, dlq = _dlx(ch, declare, cleanup)
    queue = declare("src", **{"x-dead-letter-exchange": dlx})
    ch.confirm_delivery()
    ch.basic_publish(
        "", queue, b"m", pika.BasicProperties(expiration="60000", headers={"app": "kept"})
    )
    method, _props, _body = ch.basic_get(queue)
    ch.basic_reject(method.delivery_tag, requeue=False)
    wait_ready(ch, dlq, 1)
    method, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"m"
    assert (method.exchange, method.routing_key) == (dlx, queue)
    assert props.expiration is None
    assert deaths(props.headers) == [death(queue, "rejected", **{"original-expiration": "60000"})]
    others = {k: v for k, v in props.headers.items() if k != "x-death"}
    # RabbitMQ 3.13 adds x-last-death-* (here equal to the first death); 3.10 does not.
    last = {k: others.pop(k) for k in list(others) if k.startswith("x-last-death-")}
    assert last in (
        {},
        {
            "x-last-death-queue": queue,
            "x-last-death-reason": "rejected",
            "x-last-death-exchange": "",
        },
    )
    assert others == {
        "app": "kept",
        "x-first-death-queue": queue,
        "x-first-death-reason": "rejected",
        "x-first-death-exchange": "",
    }


def test_x_death_field_types_on_the_wire(amqp_url: str, ch: BlockingChannel, declare) -> None:
    dlq = declare("dlq")
    queue = declare("src", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"m", pika.BasicProperties(expiration="60000"))
    method, _props, _body = ch.basic_get(queue)
    ch.basic_nack(method.delivery_tag, requeue=False)
    wait_ready(ch, dlq, 1)
    types = header_field_types(amqp_url, dlq)
    # RabbitMQ 3.13 adds x-last-death-queue/-reason/-exchange, long strings too; 3.10 does not.
    last = {k: types.pop(k) for k in list(types) if k.startswith("x-last-death-")}
    assert last in ({}, {f"x-last-death-{k}": "S" for k in ("queue", "reason", "exchange")})
    assert types == {
        "x-death": (
            "A",
            [
                (
                    "F",
                    {
                        "count": "l",  # long (signed 64-bit)
                        "reason": "S",
                        "queue": "S",
                        "time": "T",  # timestamp, seconds
                        "exchange": "S",
                        "routing-keys": ("A", ["S"]),
                        "original-expiration": "S",
                    },
                )
            ],
        ),
        "x-first-death-exchange": "S",
        "x-first-death-queue": "S",
        "x-first-death-reason": "S",
    }


def test_retry_through_a_delay_queue(ch: BlockingChannel, declare) -> None:
    work, delay = unique("work"), unique("delay")
    declare(name=work, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": delay})
    declare(
        name=delay,
        **{
            "x-message-ttl": 100,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": work,
        },
    )
    deliveries: list[tuple[Any, Any, bytes]] = []
    ch.basic_consume(work, lambda c, m, p, b: deliveries.append((m, p, b)))
    ch.basic_publish("", work, b"job")
    pump(ch.connection, lambda: len(deliveries) == 1)
    ch.basic_reject(deliveries[0][0].delivery_tag, requeue=False)
    pump(ch.connection, lambda: len(deliveries) == 2)
    method, props, body = deliveries[1]
    assert (body, method.routing_key, method.redelivered) == (b"job", work, False)
    assert deaths(props.headers) == [death(delay, "expired"), death(work, "rejected")]
    ch.basic_ack(method.delivery_tag)


def test_dead_letter_on_max_length(ch: BlockingChannel, declare) -> None:
    dlq = declare("dlq")
    queue = declare(
        "src",
        **{"x-max-length": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )
    ch.confirm_delivery()
    for body in (b"0", b"1", b"2"):
        ch.basic_publish("", queue, body)
    wait_ready(ch, dlq, 1)
    _method, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"0"
    assert deaths(props.headers) == [death(queue, "maxlen")]
    assert [get_body(ch, queue), get_body(ch, queue)] == [b"1", b"2"]


# -- length limits with confirms --------------------------------------------------------------


def test_reject_publish_nacks(ch: BlockingChannel, declare) -> None:
    queue = declare("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"1")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", queue, b"2")
    assert ch.is_open
    assert ready_count(ch, queue) == 1
    assert get_body(ch, queue) == b"1"
    ch.basic_publish("", queue, b"3")
    assert get_body(ch, queue) == b"3"


def test_reject_publish_dlx_nacks_and_dead_letters(ch: BlockingChannel, declare) -> None:
    dlq = declare("dlq")
    queue = declare(
        "full",
        **{
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dlq,
        },
    )
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", queue, b"refused")
    wait_ready(ch, dlq, 1)
    method, props, body = ch.basic_get(dlq, auto_ack=True)
    assert (body, method.routing_key) == (b"refused", dlq)
    assert deaths(props.headers) == [death(queue, "maxlen")]
    assert ready_count(ch, queue) == 1


def test_max_length_drop_head(ch: BlockingChannel, declare) -> None:
    queue = declare("maxlen", **{"x-max-length": 2})
    ch.confirm_delivery()
    for body in (b"0", b"1", b"2", b"3"):
        ch.basic_publish("", queue, body)
    assert ready_count(ch, queue) == 2
    assert [get_body(ch, queue), get_body(ch, queue)] == [b"2", b"3"]


# -- priorities -------------------------------------------------------------------------------


def test_priority_queue(ch: BlockingChannel, declare) -> None:
    queue = declare("prio", **{"x-max-priority": 3})
    ch.confirm_delivery()
    for body, priority in [(b"a", 0), (b"b", 3), (b"c", 7), (b"d", 1), (b"e", None)]:
        ch.basic_publish("", queue, body, pika.BasicProperties(priority=priority))
    got = [ch.basic_get(queue) for _ in range(5)]
    assert [b for _m, _p, b in got] == [b"b", b"c", b"d", b"a", b"e"]
    assert [p.priority for _m, p, _b in got] == [3, 7, 1, 0, None]
    # Requeue everything (multiple): the order is kept.
    ch.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
    assert [get_body(ch, queue) for _ in range(5)] == [b"b", b"c", b"d", b"a", b"e"]


def test_consumer_priority(conn: pika.BlockingConnection, ch: BlockingChannel, declare) -> None:
    queue = declare("cp")
    low_channel, high_channel = conn.channel(), conn.channel()
    high_channel.basic_qos(prefetch_count=1)
    low: list[bytes] = []
    high: list[tuple[int, bytes]] = []
    low_channel.basic_consume(queue, lambda c, m, p, b: low.append(b), auto_ack=True)
    high_channel.basic_consume(
        queue, lambda c, m, p, b: high.append((m.delivery_tag, b)), arguments={"x-priority": 5}
    )
    for body in (b"0", b"1", b"2"):
        ch.basic_publish("", queue, body)
    pump(conn, lambda: len(high) == 1 and len(low) == 2)
    assert (high, low) == ([(1, b"0")], [b"1", b"2"])


def test_single_active_consumer(
    conn: pika.BlockingConnection, ch: BlockingChannel, declare
) -> None:
    queue = declare("sac", **{"x-single-active-consumer": True})
    first_channel, second_channel = conn.channel(), conn.channel()
    first: list[bytes] = []
    second: list[bytes] = []
    tag = first_channel.basic_consume(queue, lambda c, m, p, b: first.append(b), auto_ack=True)
    second_channel.basic_consume(queue, lambda c, m, p, b: second.append(b), auto_ack=True)
    for body in (b"0", b"1", b"2"):
        ch.basic_publish("", queue, body)
    pump(conn, lambda: len(first) == 3)
    first_channel.basic_cancel(tag)
    for body in (b"3", b"4"):
        ch.basic_publish("", queue, body)
    pump(conn, lambda: len(second) == 2)
    assert (first, second) == ([b"0", b"1", b"2"], [b"3", b"4"])


# -- direct reply-to --------------------------------------------------------------------------


def test_direct_reply_to_rpc(amqp_url: str, conn: pika.BlockingConnection, declare) -> None:
    requests = declare("rpc")
    client = conn.channel()
    replies: list[tuple[Any, Any, bytes]] = []
    client.basic_consume(REPLY_TO, lambda c, m, p, b: replies.append((m, p, b)), auto_ack=True)
    client.basic_publish(
        "", requests, b"ping", pika.BasicProperties(reply_to=REPLY_TO, correlation_id="c-1")
    )

    responder = connect(amqp_url)
    try:
        server = responder.channel()
        eventually(lambda: ready_count(server, requests) == 1)
        method, props, body = server.basic_get(requests, auto_ack=True)
        reply_to = props.reply_to
        assert reply_to.startswith(REPLY_TO + ".")
        # The generated name answers a (passive or active) declare while its channel lives.
        ok = server.queue_declare(reply_to, passive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (reply_to, 0, 1)
        server.basic_publish(
            "", reply_to, b"pong", pika.BasicProperties(correlation_id=props.correlation_id)
        )
        pump(conn, lambda: bool(replies))
        method, props, body = replies[0]
        assert (body, props.correlation_id) == (b"pong", "c-1")
        assert (method.exchange, method.routing_key, method.redelivered) == ("", reply_to, False)

        # Once the requester's connection is gone the name is unknown and replies are dropped.
        conn.close()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            server.queue_declare(reply_to, passive=True)
        assert channel_error(excinfo) == (404, f"NOT_FOUND - no queue '{reply_to}' in vhost '/'")
        late = responder.channel()
        late.confirm_delivery()
        late.basic_publish("", reply_to, b"too late")  # confirmed, silently dropped
        with pytest.raises(pika.exceptions.UnroutableError):
            late.basic_publish("", reply_to, b"too late", mandatory=True)
    finally:
        responder.close()


def test_direct_reply_to_errors(conn: pika.BlockingConnection, declare) -> None:
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_consume(REPLY_TO, lambda c, m, p, b: None, auto_ack=False)
    assert channel_error(excinfo) == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )

    channel = conn.channel()
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_publish("", declare("rpc"), b"q", pika.BasicProperties(reply_to=REPLY_TO))
    assert channel_error(excinfo) == (
        406,
        "PRECONDITION_FAILED - fast reply consumer does not exist",
    )
    assert conn.is_open
