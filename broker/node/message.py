"""Messages as the broker holds them: routing info, the raw content header, the body.

The content header is kept as the bytes the publisher sent, so a delivery re-sends it
without encoding anything; properties are decoded only when a feature reads them.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from pamqp import commands

from leveret.exchanges.fields import PROPERTY_LAYOUT, check_fields, decode_fields, table_fields
from leveret.node.arguments import MAX_EXPIRY
from leveret.node.fieldtable import decode_properties, encode_properties, marshal_content_header

_HEADER_FIXED: Final = struct.Struct(">HHQ")
# Where the property flags start in a content header payload (after class id, weight and
# body size): ``header[PROPERTIES_AT:]`` is a message's encoded properties.
PROPERTIES_AT: Final = _HEADER_FIXED.size
# Caches keyed by encoded properties (cached_by_properties) keep only properties up to this
# size: a cache of N entries then holds a few times N x 2 KiB at most, whatever clients send.
CACHED_PROPERTIES_MAX: Final = 2048

_P = ParamSpec("_P")
_R = TypeVar("_R")

# Property flag bits in the first flag word of a Basic content header (AMQP 0-9-1 spec).
FLAG_HEADERS: Final = 0x2000
FLAG_DELIVERY_MODE: Final = 0x1000
FLAG_PRIORITY: Final = 0x0800
FLAG_REPLY_TO: Final = 0x0200
FLAG_EXPIRATION: Final = 0x0100
FLAG_USER_ID: Final = 0x0010


@functools.lru_cache(maxsize=1024)  # a pure function of a short string; publishers repeat it
def expiration_error(expiration: str) -> str | None:
    """Why an ``expiration`` property is invalid, in RabbitMQ's terms, or None
    (rabbit_basic:parse_expiration/1 and rabbit_misc:check_expiry/1)."""
    digits = expiration.lstrip("+-")
    sign_len = len(expiration) - len(digits)
    end = sign_len
    while end < len(expiration) and expiration[end].isdigit():
        end += 1
    if end == sign_len or sign_len > 1:
        return "no_integer"
    if end < len(expiration):
        return f'{{leftover_string,"{expiration[end:]}"}}'
    value = int(expiration[:end])
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_EXPIRY:
        return f"{{value_too_large,{value}}}"
    return None


def unmarshal_properties(encoded: bytes) -> commands.Basic.Properties:
    """Basic properties from their encoding: a content header payload from the property
    flags on (``Message.header[PROPERTIES_AT:]``). Decoded as pamqp would, iteratively
    and with any 64-bit timestamp (leveret.node.fieldtable, leveret.exchanges.fields)."""
    return decode_properties(encoded)


def marshal_properties(properties: commands.Basic.Properties) -> bytes:
    """The encoding :func:`unmarshal_properties` reads (headers with RabbitMQ's types)."""
    return encode_properties(properties)


_INT_TAGS: Final = {"l": struct.Struct(">cq"), "I": struct.Struct(">ci")}


def with_header(content_header: bytes, name: str, value: int, tag: str = "l") -> bytes:
    """A content header whose headers table carries ``name`` = ``value``, an integer of
    field type ``tag`` (``l``: long, ``I``: signedint), any value the publisher put there
    replaced: a quorum queue's ``x-delivery-count`` (rabbit_fifo_client), a stream's
    ``x-stream-offset`` (rabbit_stream_queue), a released delayed message's ``x-delay``.

    The entry goes at the end of the publisher's table bytes and any earlier ``name`` entry
    is cut out of them, so every other header keeps its wire type, as RabbitMQ keeps them.
    """
    flags = int.from_bytes(content_header[PROPERTIES_AT : PROPERTIES_AT + 2], "big")
    start, end = _headers_span(content_header, flags)
    raw = name.encode()
    entry = bytes([len(raw)]) + raw + _INT_TAGS[tag].pack(tag.encode(), value)
    if flags & FLAG_HEADERS:
        table = _without_entry(content_header[start + 4 : end], name) + entry
    else:
        table = entry
        flags |= FLAG_HEADERS
    return (
        content_header[:PROPERTIES_AT]
        + flags.to_bytes(2, "big")
        + content_header[PROPERTIES_AT + 2 : start]
        + len(table).to_bytes(4, "big")
        + table
        + content_header[end:]
    )


def _without_entry(table: bytes, name: str) -> bytes:
    """A field table's entries (no length prefix) without those named ``name``."""
    wanted = name.encode()
    if wanted not in table:
        return table
    entries = table_fields(table, 0, len(table))
    return b"".join(table[start:end] for key, _, start, end in entries if key != wanted)


def cached_by_properties(
    maxsize: int,
) -> Callable[[Callable[Concatenate[bytes, _P], _R]], Callable[Concatenate[bytes, _P], _R]]:
    """Memoise a function whose first argument is encoded properties (``unmarshal_properties``)
    or a part of them (a headers table).

    Publishers that set no per-message property send the same bytes again and again, so
    decoding them once pays off wherever the broker reads or rewrites properties in bulk.
    Arguments over ``CACHED_PROPERTIES_MAX`` bytes bypass the cache (bounded memory).
    """

    def wrap(
        function: Callable[Concatenate[bytes, _P], _R],
    ) -> Callable[Concatenate[bytes, _P], _R]:
        cached = functools.lru_cache(maxsize=maxsize)(function)

        @functools.wraps(function)
        def call(encoded: bytes, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            if len(encoded) <= CACHED_PROPERTIES_MAX:
                return cached(encoded, *args, **kwargs)  # type: ignore[arg-type]
            return function(encoded, *args, **kwargs)

        return call

    return wrap


def _headers_span(header: bytes, flags: int) -> tuple[int, int]:
    """Where the headers table (length prefix included) starts and ends in a content header
    payload; start == end without one. The delivery mode, when set, is at the end."""
    offset = PROPERTIES_AT + 2
    # Spec order: content_type and content_encoding (short strings), headers, delivery_mode.
    if flags & 0x8000:
        offset += 1 + header[offset]
    if flags & 0x4000:
        offset += 1 + header[offset]
    if not flags & FLAG_HEADERS:
        return offset, offset
    return offset, offset + 4 + int.from_bytes(header[offset : offset + 4], "big")


def headers_and_mode(header: bytes) -> tuple[bytes | None, int | None]:
    """The encoded headers table (length prefix included, or None) and the delivery mode
    (or None) of a content header payload, read without decoding the other properties."""
    flags = int.from_bytes(header[PROPERTIES_AT : PROPERTIES_AT + 2], "big")
    start, end = _headers_span(header, flags)
    table = header[start:end] if flags & FLAG_HEADERS else None
    mode = header[end] if flags & FLAG_DELIVERY_MODE and end < len(header) else None
    return table, mode


@cached_by_properties(maxsize=1024)
def _shared_properties(encoded: bytes) -> commands.Basic.Properties:
    # Decoded once per distinct encoding and shared by every message that carries it: a
    # message never changes its properties (Message), and copy_properties decodes afresh
    # for the callers that do.
    return unmarshal_properties(encoded)


@functools.lru_cache(maxsize=256)
def _field_sizes(flags: int) -> tuple[int, ...]:
    """The sizes (as in fields.PROPERTY_LAYOUT) of the properties ``flags`` says are present."""
    return tuple(size for bit, _, size in PROPERTY_LAYOUT if flags & bit)


@cached_by_properties(maxsize=1024)
def decoded_table(table: bytes) -> dict[str, Any]:
    """A headers table (length prefix included) decoded as pamqp decodes it, without
    recursion (leveret.exchanges.fields); cached by its bytes and shared: read it, never change
    it. Raises ValueError when it does not decode."""
    if len(table) < 4:
        raise ValueError("field table cut short")
    end = 4 + int.from_bytes(table[:4], "big")
    if end > len(table):
        raise ValueError("field table longer than its data")
    result: dict[str, Any] = decode_fields(table, 4, end)
    return result


# Content header payloads already found well formed (the codec shares repeated ones, whose
# hash is then computed once): most publishers repeat their headers. Bounded: cleared when
# full, and payloads over CACHED_PROPERTIES_MAX bytes are not kept.
_WELL_FORMED: set[bytes] = set()
_WELL_FORMED_MAX: Final = 4096
# Headers tables already found well formed, by their bytes: publishers repeat their headers
# even when other properties (ids, timestamps) change. Checking a table walks every entry
# (a microsecond for a few, milliseconds for 100 KiB of small ones), hashing it costs a few
# tens of microseconds at most. Bounded: cleared when full; at most _LARGE_TABLES_MAX over
# CACHED_PROPERTIES_MAX bytes (a few MiB: a content header is one frame).
_SMALL_TABLES: set[bytes] = set()
_SMALL_TABLES_MAX: Final = 4096
_LARGE_TABLES: set[bytes] = set()
_LARGE_TABLES_MAX: Final = 32


def _table_decodes(header: bytes, start: int, end: int) -> bool:
    """Whether the headers table whose entries are ``header[start:end]`` decodes."""
    table = header[start:end]
    large = end - start > CACHED_PROPERTIES_MAX
    known = _LARGE_TABLES if large else _SMALL_TABLES
    if table in known:
        return True
    if not check_fields(table, 0, len(table)):
        return False
    if len(known) >= (_LARGE_TABLES_MAX if large else _SMALL_TABLES_MAX):
        known.clear()
    known.add(table)
    return True


def properties_decode(header: bytes) -> bool:
    """Whether a content header payload's properties decode.

    RabbitMQ decodes the properties of every publish and, when they do not decode (a value
    cut short, a table longer than the frame, an unknown field type, bytes left over),
    closes the connection with 541 (tested). Decoding every message's properties with
    pamqp would halve the publish rate of messages that carry their own ``message_id``, so
    this walks the property list instead and checks the headers table without building it
    (leveret.exchanges.fields.check_fields: iterative, so a table nested 15,000 deep passes as
    RabbitMQ's does; tables found well formed are remembered by their bytes). Timestamps
    are any 64-bit value, as in RabbitMQ. Short strings must be UTF-8: RabbitMQ keeps them
    as bytes, but pamqp cannot decode them, and later readers would fail.
    """
    if header in _WELL_FORMED:
        return True
    end = len(header)
    if end < PROPERTIES_AT + 2:  # no property flags: a header frame of 12 or 13 octets
        return False
    flags = header[PROPERTIES_AT] << 8 | header[PROPERTIES_AT + 1]
    offset = PROPERTIES_AT + 2
    for size in _field_sizes(flags):
        if size == 0:
            if offset >= end:
                return False
            length = header[offset]
            try:
                header[offset + 1 : offset + 1 + length].decode("utf-8")
            except UnicodeDecodeError:
                return False
            offset += 1 + length
        elif size < 0:
            start = offset + 4
            if start > end:
                return False
            offset = start + int.from_bytes(header[start - 4 : start], "big")
            # Cut short, too long, unknown types, names that are not UTF-8.
            if offset > end or not _table_decodes(header, start, offset):
                return False
        else:
            offset += size
    if offset != end:
        return False
    if end <= CACHED_PROPERTIES_MAX:
        if len(_WELL_FORMED) >= _WELL_FORMED_MAX:
            _WELL_FORMED.clear()
        _WELL_FORMED.add(header)
    return True


_M = TypeVar("_M", bound="Message")


class Message:
    """A published message. Shared by every queue it was routed to; never mutated
    after routing except through :meth:`with_properties`, which makes a copy."""

    __slots__ = (
        "_properties",
        "body",
        "body_size",
        "exchange",
        "header",
        "routing_key",
        "store_ids",
        "sync_gen",
        "ttl",
    )

    def __init__(self, exchange: str, routing_key: str, header_payload: bytes, body: bytes) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.header = header_payload
        self.body = body
        self.body_size = len(body)
        self._properties: commands.Basic.Properties | None = None
        # Per-message TTL in ms from a valid ``expiration`` property (set at publish).
        self.ttl: int | None = None
        # Persistent copies: durable queue name -> message store id; and the group-commit
        # generation whose fsync covers them (0: nothing to wait for).
        self.store_ids: dict[str, int] | None = None
        self.sync_gen = 0

    @property
    def persistent(self) -> bool:
        """delivery_mode == 2, read from the raw header without decoding the properties."""
        flags = self.flags
        if not flags & FLAG_DELIVERY_MODE:
            return False
        data = self.header
        offset = _headers_span(data, flags)[1]
        return offset < len(data) and data[offset] == 2

    @property
    def flags(self) -> int:
        """The first property-flags word, read without decoding the properties."""
        return int.from_bytes(self.header[12:14], "big") if len(self.header) >= 14 else 0

    @property
    def properties(self) -> commands.Basic.Properties:
        """The decoded Basic properties (decoded on first use, shared by the messages
        with the same property bytes: read them, never change them)."""
        if self._properties is None:
            self._properties = _shared_properties(self.header[PROPERTIES_AT:])
        return self._properties

    def copy_properties(self) -> commands.Basic.Properties:
        """A freshly decoded properties object that the caller may modify."""
        return unmarshal_properties(self.header[PROPERTIES_AT:])

    @property
    def headers(self) -> dict[str, Any] | None:
        """The ``headers`` table, or None (decoded alone, cached by its bytes: read it,
        never change it)."""
        table = headers_and_mode(self.header)[0]
        return None if table is None else decoded_table(table)

    @property
    def priority(self) -> int:
        """The ``priority`` property (0 when absent)."""
        if not self.flags & FLAG_PRIORITY:
            return 0
        return int(self.properties.priority or 0)

    def with_properties(
        self,
        properties: commands.Basic.Properties,
        exchange: str | None = None,
        routing_key: str | None = None,
    ) -> Message:
        """A copy of this message carrying ``properties`` (re-encoded header), optionally
        with another exchange and routing key (dead-lettering)."""
        return self._copy(Message, properties, exchange, routing_key)

    def _copy(
        self,
        kind: type[_M],
        properties: commands.Basic.Properties,
        exchange: str | None = None,
        routing_key: str | None = None,
    ) -> _M:
        payload = marshal_content_header(self.body_size, properties)
        copy = kind(
            self.exchange if exchange is None else exchange,
            self.routing_key if routing_key is None else routing_key,
            payload,
            self.body,
        )
        copy._properties = properties
        copy.ttl = self.ttl
        return copy


class BccMessage(Message):
    """A message whose ``BCC`` header was stripped at publish. It keeps the BCC keys,
    which RabbitMQ keeps among the message's routing keys (rabbit_basic:message/3) and
    shows in firehose traces of its deliveries; a subclass, so other messages pay no
    slot for them."""

    __slots__ = ("bcc",)
    bcc: list[bytes | str]

    @classmethod
    def stripped(cls, message: Message, properties: commands.Basic.Properties) -> BccMessage:
        """``message`` with ``properties`` (its headers without BCC) and the BCC keys."""
        bcc = (message.headers or {}).get("BCC")
        copy = message._copy(cls, properties)
        copy.bcc = [k for k in bcc if isinstance(k, str | bytes)] if isinstance(bcc, list) else []
        return copy
