"""Hostile sessions: random client frames never crash Leveret, and everyone else is served.

The project's standard for bad input is a clear AMQP error, channel or connection level as
RabbitMQ gives it, while the broker keeps serving everyone else. The scenarios in
``test_wire_protocol.py`` pin the exact codes and texts case by case; this module throws
generated sessions at a broker with a data dir (so durable declares and persistent messages
take the storage paths too): every method a client may send, with arguments, argument tables
and message properties drawn from the values RabbitMQ checks (and values it refuses, with
pamqp's client-side validation turned off so that they reach the wire), mandatory and
unroutable publishes, bodies shorter or longer than their header said, unknown methods, and
frames with bytes flipped, cut or inserted. Besides what pamqp can encode, property values
and argument tables are also drawn over their whole wire range and written as raw octets:
timestamps over all 64 bits, integers of every width at their extremes, floats of any bit
pattern, long strings, text that is not UTF-8, tables and arrays nested up to 15,000 deep
(RabbitMQ takes all of them; pamqp, which this harness reads the broker's frames with, could
not decode some, so content frames are not decoded here).

What must hold after every session:

* the broker logged no error: an exception that escapes a handler is logged as
  ``internal error on connection`` and closes the connection with the bare 541 that
  RabbitMQ shows for a crashed channel process; Leveret must answer every input with the
  specific error instead (``broker/connection.py`` ``data_received``);
* the session ends as AMQP says: the client's ``connection.close`` is answered, or the broker
  closed the connection itself (with ``connection.close`` and a code from the spec's error
  table, or by dropping the socket after a bad protocol header);
* a new connection can still declare, publish and get.

The second and third run against a real RabbitMQ too (``-m rabbitmq``, in a vhost of the
module's own), which keeps this harness's idea of a correct answer honest: RabbitMQ 3.10.8
passes the same sessions. The first is Leveret's own log. Examples are derandomised so that
CI runs the same sessions every time; ``LEVERET_FUZZ_EXAMPLES=5000`` explores more.
"""

from __future__ import annotations

import datetime
import decimal
import logging
import os
import struct
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pframe
from pamqp.body import ContentBody
from pamqp.exceptions import UnmarshalingException
from pamqp.header import ContentHeader

from leveret.config import Config
from leveret.inspect import BrokerThread

from . import fieldbytes as fb
from .helpers import Http, unique
from .wire import FRAME_METHOD, PeerClosedError, WireClient, raw_method

EXAMPLES = int(os.environ.get("LEVERET_FUZZ_EXAMPLES", "200"))
CHANNELS = (1, 2)  # opened before the generated frames; others are drawn too

# Every code AMQP 0-9-1 lets a server close a connection or channel with (the spec's
# constants; RabbitMQ uses no others): 3xx for channels, 5xx for both.
CLOSE_CODES = {200, 311, 312, 313, 320, 402, 403, 404, 405, 406, 501, 502, 503, 504, 505, 506}
CLOSE_CODES |= {530, 540, 541}

NAMES = ["q1", "q2", "e1", "e2", "", "amq.direct", "amq.topic", "amq.fanout", "amq.headers"]
NAMES += ["amq.gen-x", "amq.rabbitmq.reply-to", "amq.rabbitmq.trace", "x" * 255, "ü", "a b"]
ROUTING_KEYS = ["", "a", "a.b", "a.*", "#", "*.b", "a.#.c", "q1", "q2", "..", "x" * 255]
EXCHANGE_TYPES = ["direct", "fanout", "topic", "headers", "x-rtopic", "x-consistent-hash"]
EXCHANGE_TYPES += ["x-delayed-message", "x-bogus", ""]
# Every argument and header RabbitMQ (or a plugin Leveret has) reads, and two it does not.
ARGUMENTS = [
    "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
    "x-max-priority", "x-queue-type", "x-queue-mode", "x-queue-version",
    "x-single-active-consumer", "x-consumer-timeout", "x-delivery-limit", "x-max-age",
    "x-stream-max-segment-size-bytes", "x-stream-offset", "x-stream-filter",
    "x-stream-filter-value", "x-stream-match-unfiltered", "x-priority", "x-credit",
    "x-cancel-on-ha-failover", "x-initial-cluster-size", "x-quorum-initial-group-size",
    "x-queue-leader-locator", "x-queue-master-locator", "x-match", "alternate-exchange",
    "x-delayed-type", "x-delay", "hash-header", "hash-property", "CC", "BCC", "x-death",
    "x-first-death-queue", "k", "",
]  # fmt: skip
TEXTS = ["", "classic", "quorum", "stream", "lazy", "default", "drop-head", "reject-publish"]
TEXTS += ["reject-publish-dlx", "all", "any", "all-with-x", "any-with-x", "first", "last"]
TEXTS += ["next", "1", "-1", "1000", "abc", "q1", "e1", "message_id", "at-least-once"]
TEXTS += ["at-most-once", "client-local", "balanced", "1D", "10s", "topic", "direct", "1.5"]
INTEGERS = [0, 1, -1, 2, 10, 255, 256, 1000, 65535, 2**31 - 1, -(2**31), 2**40]
INTEGERS += [2**63 - 1, -(2**63)]


def _unchecked(cls: type) -> type:
    """``cls`` without pamqp's client-side validation, so refused values reach the broker
    (what pamqp cannot encode at all, a short string over 255 bytes, is never drawn)."""
    return type(cls.__name__, (cls,), {"validate": lambda self: None})


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(INTEGERS),
        st.sampled_from(TEXTS),
        st.booleans(),
        st.sampled_from([0.5, -1.0, 3.0, 1e30, float("nan"), float("inf")]),
        st.none(),
        st.sampled_from([decimal.Decimal("1.5"), decimal.Decimal("-2"), decimal.Decimal(10)]),
        st.just(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)),
        st.sampled_from([b"", b"bin", b"\xff\x00"]).map(bytearray),
    )


def _tables(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(ARGUMENTS), values, max_size=4)


VALUES = st.recursive(
    _scalars(), lambda inner: st.one_of(st.lists(inner, max_size=3), _tables(inner)), max_leaves=6
)
TABLES = _tables(VALUES)
NAME = st.sampled_from(NAMES[:5] * 3 + NAMES)  # mostly the few that meet each other
KEY = st.sampled_from(ROUTING_KEYS + NAMES)
FLAG = st.booleans()
RARE = st.sampled_from([False] * 9 + [True])  # nowait, passive, internal: mostly off
# What RabbitMQ refuses with a connection error (immediate, a prefetch size): seldom.
SELDOM = st.sampled_from([False] * 39 + [True])
TAG = st.sampled_from([0, 1, 2, 5, 2**63 - 1])
CONSUMER_TAG = st.sampled_from(["", "t", "t2"])

Properties = _unchecked(commands.Basic.Properties)
PROPERTIES = st.builds(
    Properties,
    headers=st.none() | TABLES,
    delivery_mode=st.none() | st.sampled_from([0, 1, 2, 3, 255]),
    priority=st.none() | st.sampled_from([0, 1, 5, 9, 10, 255]),
    expiration=st.none() | st.sampled_from(["0", "1", "100", "-1", "abc", "", "1.5", " 1"]),
    reply_to=st.none() | st.sampled_from(["amq.rabbitmq.reply-to", "q1", ""]),
    user_id=st.none() | st.sampled_from(["guest", "other", ""]),
    message_id=st.none() | st.just("m"),
    timestamp=st.none() | st.just(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)),
)


# -- values over their whole wire range, as raw octets (pamqp cannot encode all of them) --

# Integer field types: tag, struct format, range.
_INTEGER_TYPES = [
    (b"b", ">b", -(2**7), 2**7 - 1), (b"B", ">B", 0, 2**8 - 1),
    (b"s", ">h", -(2**15), 2**15 - 1), (b"u", ">H", 0, 2**16 - 1),
    (b"I", ">i", -(2**31), 2**31 - 1), (b"i", ">I", 0, 2**32 - 1),
    (b"l", ">q", -(2**63), 2**63 - 1), (b"L", ">q", -(2**63), 2**63 - 1),
    (b"T", ">Q", 0, 2**64 - 1),
]  # fmt: skip


def _wide_integer(low: int, high: int) -> st.SearchStrategy[int]:
    """Mostly the extremes and their neighbours, sometimes anything in between."""
    edges = [low, low + 1, -1, 0, 1, high - 1, high, 2**32, 2**32 - 1, 253402300800000, 2**62]
    return st.sampled_from([e for e in edges if low <= e <= high]) | st.integers(low, high)


def _tagged_integer(tag: bytes, fmt: str, low: int, high: int) -> st.SearchStrategy[bytes]:
    return _wide_integer(low, high).map(lambda v: tag + struct.pack(fmt, v))


_LONG_TEXTS = st.sampled_from([0, 1, 255, 256, 4096, 65536]).map(lambda n: "é" * (n // 2))
WIRE_SCALARS = st.one_of(
    *[_tagged_integer(*spec) for spec in _INTEGER_TYPES],
    st.binary(min_size=4, max_size=4).map(lambda b: b"f" + b),  # any bit pattern: NaNs too
    st.binary(min_size=8, max_size=8).map(lambda b: b"d" + b),
    st.tuples(st.integers(0, 255), _wide_integer(-(2**31), 2**31 - 1)).map(
        lambda d: b"D" + struct.pack(">Bi", *d)
    ),
    st.integers(0, 255).map(lambda b: b"t" + bytes([b])),
    (st.text(max_size=20) | _LONG_TEXTS).map(fb.string),
    st.binary(max_size=20).map(fb.string),  # long strings that are not UTF-8
    st.binary(max_size=20).map(lambda b: b"x" + fb.longstr(b)),
    st.just(b"V"),
)
WIRE_NAMES = st.sampled_from(ARGUMENTS) | st.text(max_size=10).filter(
    lambda t: len(t.encode()) < 256
)


def _wire_table_body(values: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.lists(st.tuples(WIRE_NAMES, values), max_size=4).map(
        lambda entries: b"".join(fb.entry(name, value) for name, value in entries)
    )


def _framed(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack(">I", len(body)) + body


# Deep nesting: a chain of tables or arrays, mostly beyond pamqp's recursion limit (about
# 500 levels), up to RabbitMQ's tested 15,000 (105,000 octets, within a 131,072-octet frame).
def _deep(depths: list[int]) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda depth, arrays, leaf: (fb.nested_arrays if arrays else fb.nested)(depth, leaf),
        st.sampled_from(depths),
        st.booleans(),
        WIRE_SCALARS,
    )


def _wire_tables(depths: list[int]) -> st.SearchStrategy[bytes]:
    values = st.recursive(
        WIRE_SCALARS | _deep(depths),
        lambda inner: st.one_of(
            _wire_table_body(inner).map(lambda body: _framed(b"F", body)),
            st.lists(inner, max_size=3).map(lambda values: _framed(b"A", b"".join(values))),
        ),
        max_leaves=6,
    )
    return _wire_table_body(values).map(lambda body: struct.pack(">I", len(body)) + body)


WIRE_TABLES = _wire_tables([2, 100, 600, 1200, 5000, 15000])
_SHORT_TEXTS = st.sampled_from(["", "guest", "amq.rabbitmq.reply-to", "q1", "0", "100", "-1"])
WIRE_SHORTSTRS = _SHORT_TEXTS | st.text(max_size=30).filter(lambda t: len(t.encode()) < 256)


@st.composite
def wire_properties(draw: st.DrawFn, body_size: int) -> bytes:
    """A content header payload: any set of properties (flags drawn), octets over their
    whole range, timestamps over all 64 bits, a headers table from :data:`WIRE_TABLES`."""
    flags = draw(st.integers(0, 0xFFFF)) & 0xFFFC  # the two low bits are not properties
    out = struct.pack(">HHQH", 60, 0, body_size, flags)
    for bit, size in [(1 << (15 - i), s) for i, s in enumerate([0, 0, -1, 1, 1, 0, 0, 0, 0, 8])]:
        if flags & bit:
            if size == 0:
                out += fb.shortstr(draw(WIRE_SHORTSTRS))
            elif size < 0:
                out += draw(WIRE_TABLES)
            elif size == 1:
                out += bytes([draw(_wide_integer(0, 255))])
            else:
                out += struct.pack(">Q", draw(_wide_integer(0, 2**64 - 1)))
    for bit in (0x20, 0x10, 0x08, 0x04):  # type, user_id, app_id, cluster_id
        if flags & bit:
            out += fb.shortstr(draw(WIRE_SHORTSTRS))
    return out


def _method(cls: type, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(_unchecked(cls), **fields)


METHODS = st.one_of(
    _method(
        commands.Exchange.Declare,
        exchange=NAME, exchange_type=st.sampled_from(EXCHANGE_TYPES), passive=RARE,
        durable=FLAG, auto_delete=FLAG, internal=RARE, nowait=RARE, arguments=TABLES,
    ),
    _method(commands.Exchange.Delete, exchange=NAME, if_unused=FLAG, nowait=RARE),
    _method(
        commands.Exchange.Bind,
        destination=NAME, source=NAME, routing_key=KEY, nowait=RARE, arguments=TABLES,
    ),
    _method(
        commands.Exchange.Unbind,
        destination=NAME, source=NAME, routing_key=KEY, nowait=RARE, arguments=TABLES,
    ),
    _method(
        commands.Queue.Declare,
        queue=NAME, passive=RARE, durable=FLAG, exclusive=FLAG, auto_delete=FLAG, nowait=RARE,
        arguments=TABLES,
    ),
    _method(
        commands.Queue.Bind,
        queue=NAME, exchange=NAME, routing_key=KEY, nowait=RARE, arguments=TABLES,
    ),
    _method(commands.Queue.Unbind, queue=NAME, exchange=NAME, routing_key=KEY, arguments=TABLES),
    _method(commands.Queue.Purge, queue=NAME, nowait=RARE),
    _method(commands.Queue.Delete, queue=NAME, if_unused=FLAG, if_empty=FLAG, nowait=RARE),
    _method(
        commands.Basic.Consume,
        queue=NAME, consumer_tag=CONSUMER_TAG, no_local=RARE, no_ack=FLAG, exclusive=FLAG,
        nowait=RARE, arguments=TABLES,
    ),
    _method(commands.Basic.Cancel, consumer_tag=CONSUMER_TAG, nowait=RARE),
    _method(commands.Basic.Get, queue=NAME, no_ack=FLAG),
    _method(commands.Basic.Ack, delivery_tag=TAG, multiple=FLAG),
    _method(commands.Basic.Nack, delivery_tag=TAG, multiple=FLAG, requeue=FLAG),
    _method(commands.Basic.Reject, delivery_tag=TAG, requeue=FLAG),
    _method(
        commands.Basic.Qos,
        prefetch_size=SELDOM.map(int),
        prefetch_count=st.sampled_from([0, 1, 10, 65535]),
        global_=FLAG,
    ),
    _method(commands.Basic.Recover, requeue=FLAG),
    _method(commands.Basic.RecoverAsync, requeue=FLAG),
    _method(commands.Confirm.Select, nowait=RARE),
    st.sampled_from([commands.Tx.Select(), commands.Tx.Commit(), commands.Tx.Rollback()]),
    st.sampled_from(
        [
            commands.Channel.Open(),
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0),
            commands.Channel.CloseOk(),
            commands.Channel.Flow(active=True),
            commands.Channel.Flow(active=False),
        ]
    ),
)  # fmt: skip

# Mostly the open channels: a frame on another is a connection error that ends the session.
CHANNEL = st.sampled_from([*CHANNELS * 8, 3, 65535])


@dataclass(frozen=True)
class Step:
    """Octets to send; ``answered``: a synchronous method the broker answers on ``channel``
    (its ``-ok``, or the error that closes the channel or the connection), which the session
    waits for, as a client does. ``mutated``: octets were changed, so frame sizes may no
    longer add up and the broker may rightly wait for octets that never come (RabbitMQ's
    reader waits for a whole frame too)."""

    data: bytes
    channel: int = 0
    answered: bool = False
    mutated: bool = False


@st.composite
def method_frames(draw: st.DrawFn) -> Step:
    """One method frame from :data:`METHODS` on a drawn channel."""
    method, channel = draw(METHODS), draw(CHANNEL)
    answered = method.synchronous and not getattr(method, "nowait", False)
    return Step(bytes(pframe.marshal(method, channel)), channel, answered)


@st.composite
def publishes(draw: st.DrawFn) -> Step:
    """``basic.publish``, its content header and body frames; now and then the header's
    body size is off by a few octets, so that the body is short or too long."""
    channel = draw(CHANNEL)
    method = _unchecked(commands.Basic.Publish)(
        exchange=draw(NAME), routing_key=draw(KEY), mandatory=draw(FLAG), immediate=draw(SELDOM)
    )
    body = b"x" * draw(st.sampled_from([0, 1, 10, 140_000]))
    size = max(0, len(body) + draw(st.sampled_from([0] * 9 + [-1, 1, 5])))
    out = [
        pframe.marshal(method, channel),
        pframe.marshal(ContentHeader(0, size, draw(PROPERTIES)), channel),
    ]
    step = 131_072 - 8  # frame_max as Leveret tunes it, less the frame's own octets
    out += [
        pframe.marshal(ContentBody(body[i : i + step]), channel) for i in range(0, len(body), step)
    ]
    return Step(b"".join(out), channel)


@st.composite
def wire_publishes(draw: st.DrawFn) -> Step:
    """``basic.publish`` with properties written as raw octets (:func:`wire_properties`)."""
    channel = draw(CHANNEL)
    body = b"x" * draw(st.sampled_from([0, 1, 10]))
    header = draw(wire_properties(len(body)))
    exchange, key = draw(NAME), draw(KEY)
    return Step(fb.publish(channel, header, body, exchange=exchange, routing_key=key), channel)


@st.composite
def wire_argument_methods(draw: st.DrawFn) -> Step:
    """A declare, bind or consume whose arguments table is written as raw octets
    (:data:`WIRE_TABLES`, deep nesting included)."""
    channel, name, other = draw(CHANNEL), draw(NAME), draw(NAME)
    kind = draw(st.sampled_from(["queue", "exchange", "bind", "consume"]))
    durable = kind in ("queue", "exchange") and draw(FLAG)
    arguments = draw(WIRE_TABLES)
    if kind == "queue":
        data = fb.queue_declare(channel, name, arguments, durable=durable, exclusive=draw(FLAG))
    elif kind == "exchange":
        kind_drawn = draw(st.sampled_from(EXCHANGE_TYPES))
        data = fb.exchange_declare(channel, name, kind_drawn, arguments, durable=durable)
    elif kind == "bind":
        data = fb.queue_bind(channel, name, other, draw(KEY), arguments)
    else:
        data = fb.basic_consume(channel, name, draw(CONSUMER_TAG), arguments)
    return Step(data, channel, answered=True)


@st.composite
def unknown_methods(draw: st.DrawFn) -> Step:
    """A method frame of a class or method id the broker may not know, with random arguments."""
    class_id = draw(st.sampled_from([0, 10, 20, 40, 50, 60, 85, 90, 999]))
    method_id = draw(st.sampled_from([0, 10, 11, 20, 21, 30, 40, 50, 60, 70, 80, 90, 120]))
    channel = draw(CHANNEL)
    return Step(raw_method(channel, class_id, method_id, draw(st.binary(max_size=24))), channel)


@st.composite
def mutated(draw: st.DrawFn, steps: st.SearchStrategy[Step]) -> Step:
    """A step with a few octets overwritten, removed or inserted."""
    data = bytearray(draw(steps).data)
    for _ in range(draw(st.integers(1, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        edit = draw(st.sampled_from(["set", "cut", "add"]))
        if edit == "cut":
            del data[at]
        else:
            octet = draw(st.integers(0, 255))
            if edit == "set":
                data[at] = octet
            else:
                data.insert(at, octet)
    return Step(bytes(data), mutated=True)


FRAMES = st.one_of(method_frames(), publishes(), wire_publishes(), wire_argument_methods())
# Unknown methods and changed octets mostly end the connection: they come less often.
STEPS = st.one_of(
    *[FRAMES] * 8,
    unknown_methods(),
    mutated(FRAMES),
    st.sampled_from([0.0, 0.005, 0.02]),  # a pause
)


class _Errors(logging.Handler):
    """Collects the error records the broker (or its event loop) logs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def fuzz_broker(
    broker_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, _Errors | None]]:
    """(URL, error log): a Leveret of the module's own, with a data dir, and a handler that
    sees its errors; or a vhost of the module's own on RabbitMQ (no log to see)."""
    if broker_kind == "rabbitmq":
        yield from _rabbitmq_vhost()
        return
    data_dir: Path = tmp_path_factory.mktemp("fuzz-data")
    errors = _Errors()
    loggers = [logging.getLogger("leveret"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(errors)
    broker = BrokerThread(Config(host="127.0.0.1", port=0, data_dir=data_dir)).start()
    try:
        yield broker.url, errors
    finally:
        broker.stop()
        for logger in loggers:
            logger.removeHandler(errors)


def _rabbitmq_vhost() -> Iterator[tuple[str, None]]:
    url = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
    api = Http(os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672"))
    vhost = urllib.parse.quote(unique("fuzz"), safe="")
    assert api("PUT", f"/api/vhosts/{vhost}", {})[0] == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api("PUT", f"/api/permissions/{vhost}/guest", everything)[0] in (201, 204)
    try:
        yield urllib.parse.urlunsplit((*urllib.parse.urlsplit(url)[:2], "/" + vhost, "", "")), None
    finally:
        api("DELETE", f"/api/vhosts/{vhost}")


def _session(url: str, steps: list[Step | float]) -> None:
    """Send the steps on an open connection, answering the broker as a client would, then
    close it; check every close the broker sends and how the session ended."""
    with WireClient(url, timeout=5) as client:
        client.connect()
        for channel in CHANNELS:
            client.open_channel(channel)
        in_step = True  # frames still line up (no step with changed octets sent yet)
        for step in steps:
            if isinstance(step, float):
                time.sleep(step)
                continue
            in_step = in_step and not step.mutated
            try:
                client.send_raw(step.data)
            except OSError:  # the broker has closed the connection already
                return
            if _answer(client, step.channel if step.answered and in_step else None):
                return
        if _send(client, _CLOSE):
            return
        try:
            while not _answer(client, 0, timeout=2 if in_step else 0.3):
                pass  # a frame on channel 0 that is not the end (none is expected)
        except TimeoutError:
            # Only a frame whose size was changed leaves the broker waiting for more.
            if in_step:
                raise


_CLOSE = commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)


def _answer(client: WireClient, channel: int | None, timeout: float = 2) -> bool:
    """Handle what the broker has sent; with a ``channel``, wait (up to ``timeout``) for a
    frame on it first. True when the connection has ended: the broker closed it (its
    ``connection.close`` is answered) or answered ours.

    A closed channel is acknowledged and opened again, so that the session goes on.
    """
    waiting = channel
    while True:
        try:
            got, frame = _read(client, timeout=timeout if waiting is not None else 0.001)
        except TimeoutError:
            if waiting is not None:
                raise TimeoutError(f"no answer on channel {waiting}") from None
            return False
        except PeerClosedError:
            return True  # also after a malformed frame the broker drops the socket for
        if isinstance(frame, commands.Connection.CloseOk):
            return True
        if isinstance(frame, commands.Connection.Close):
            assert frame.reply_code in CLOSE_CODES, frame
            _send(client, commands.Connection.CloseOk())
            return True
        if isinstance(frame, commands.Channel.Close):
            assert frame.reply_code in CLOSE_CODES, frame
            if _send(client, commands.Channel.CloseOk(), got):
                return True
            if _send(client, commands.Channel.Open(), got):
                return True
        if got == waiting:
            return False


def _read(client: WireClient, timeout: float) -> tuple[int, Any]:
    """The next frame but heartbeats: a method decoded, content as None (a content header
    may carry what pamqp cannot decode: tables thousands deep, any 64-bit timestamp)."""
    while True:
        kind, channel, payload = client.read_raw_frame(timeout)
        if kind == FRAME_METHOD:
            raw = struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"
            try:
                return channel, pframe.unmarshal(raw)[2]
            except UnmarshalingException:
                return channel, _close_quoting_octets(payload)
        if channel or kind != 8:
            return channel, None


# A close's reply text may quote a name the client sent as it came, octets that are not
# UTF-8 included: RabbitMQ's "NOT_FOUND - no exchange '\x801' ..." (rabbit_misc:format with
# ~ts of the name's binary). pamqp cannot decode that text; the code is what is checked.
_CLOSES = {(10, 50): commands.Connection.Close, (20, 40): commands.Channel.Close}


def _close_quoting_octets(payload: bytes) -> Any:
    """A connection.close or channel.close whose reply text is not UTF-8, decoded by hand;
    any other method pamqp cannot decode is an error of the broker."""
    class_id, method_id, reply_code, length = struct.unpack_from(">HHHB", payload)
    close = _CLOSES.get((class_id, method_id))
    if close is None:
        raise AssertionError(f"undecodable method {class_id}.{method_id}: {payload!r}")
    closed_class, closed_method = struct.unpack_from(">HH", payload, 7 + length)
    text = payload[7 : 7 + length].decode(errors="replace")
    return close(reply_code, text, closed_class, closed_method)


def _send(client: WireClient, method: Any, channel: int = 0) -> bool:
    """Send ``method``; True when the broker has already closed the socket."""
    try:
        client.send(method, channel)
    except OSError:
        return True
    return False


def _serves(url: str) -> None:
    """Declare, publish and get on a new connection."""
    with WireClient(url) as client:
        client.connect()
        client.open_channel(1)
        client.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        queue = client.expect(commands.Queue.DeclareOk, channel=1).queue
        client.publish(1, b"still here", routing_key=queue)
        client.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
        client.expect(commands.Basic.GetOk, channel=1)
        assert client.content(1)[1] == b"still here"
        client.close_connection()


_DECLARE_Q1 = (
    b"\x01\x00\x01\x00\x00\x00\x15\x00(\x00\n\x00\x00\x02q1\x06direct\x00\x00\x00\x00\x00\xce"
)


@pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")  # recover-async
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(STEPS, min_size=4, max_size=30))
# Found against RabbitMQ 3.10.8: a publish to the exchange named b"\x801" (not UTF-8) is
# closed with 404 and a reply text that quotes those octets (_close_quoting_octets).
@example(
    steps=[
        Step(_DECLARE_Q1, channel=1, answered=True),
        Step(
            b"\x01\x00\x01\x00\x00\x00\x0b\x00<\x00(\x00\x00\x02\x801\x00\x00\xce"
            b"\x02\x00\x01\x00\x00\x00\x0e\x00<\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xce",
            mutated=True,
        ),
        Step(
            b"\x01\x00\x01\x00\x00\x00\n\x00(\x00\x14\x00\x00\x02q1\x00\xce",
            channel=1,
            answered=True,
        ),
        Step(_DECLARE_Q1, channel=1, answered=True),
    ]
)
def test_random_sessions_get_amqp_errors_and_the_broker_serves_on(
    fuzz_broker: tuple[str, _Errors | None], steps: list[Step | float]
) -> None:
    url, errors = fuzz_broker
    if errors is not None:
        errors.records.clear()
    _session(url, steps)
    _serves(url)
    if errors is not None:
        logged = [errors.format(record) for record in errors.records]
        assert logged == [], "\n".join(logged)
