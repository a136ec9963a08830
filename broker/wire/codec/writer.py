"""Frames in, bytes out: :func:`method_frame` through pamqp, deliveries and other hot
frames assembled with ``struct``."""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import commands, frame

from leveret.wire.codec.frames import (
    _FRAME_HEAD,
    _LONG,
    _LONGLONG,
    _METHOD_ID,
    _SHORT,
    DELIVER_INDEX,
    FRAME_BODY,
    FRAME_END_BYTE,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    Ack,
    Body,
    Frame,
    FullPublish,
    Header,
    Heartbeat,
    Publish,
)


def frame_octets(decoded: Frame) -> tuple[int, bytes]:
    """The frame type and payload a decoded frame came from, for RabbitMQ's
    ``type 1, all octets = <<...>>`` texts. A method the reader decoded keeps its payload
    (``wire_payload``); the fast paths' Publish and Ack are encoded again, which gives the
    bytes the client sent (their fields have one encoding). Only error paths call this."""
    wire_payload = getattr(decoded, "wire_payload", None)
    if isinstance(wire_payload, bytes):
        return FRAME_METHOD, wire_payload
    if isinstance(decoded, Header):
        return FRAME_HEADER, decoded.payload
    if isinstance(decoded, Body):
        return FRAME_BODY, decoded.data
    if isinstance(decoded, Heartbeat):
        return FRAME_HEARTBEAT, b""
    if isinstance(decoded, FullPublish):
        decoded = decoded.publish
    if isinstance(decoded, Publish):
        # Built unchecked: pamqp's constructor refuses exchange names it would not send,
        # which a client may send all the same (tests/fuzz/ found the ValueError escaping
        # this error path as an internal error).
        decoded = _unchecked(
            commands.Basic.Publish,
            ticket=0,
            exchange=decoded.exchange,
            routing_key=decoded.routing_key,
            mandatory=decoded.mandatory,
            immediate=decoded.immediate,
        )
    elif isinstance(decoded, Ack):
        decoded = commands.Basic.Ack(decoded.delivery_tag, decoded.multiple)
    return FRAME_METHOD, _METHOD_ID.pack(decoded.index) + decoded.marshal()


# pamqp method classes with their validate() turned off, by class (made when first needed).
_UNCHECKED: dict[type[Any], type[Any]] = {}


def _unchecked(cls: type[Any], **fields: Any) -> Any:
    """A ``cls`` method with ``fields`` that pamqp encodes without validating them."""
    unchecked = _UNCHECKED.get(cls)
    if unchecked is None:
        # No __slots__ of its own: marshal() iterates the method class's __slots__.
        # A static method: a compiled function does not bind as a method would.
        unchecked = _UNCHECKED[cls] = type(
            cls.__name__, (cls,), {"validate": staticmethod(_no_check)}
        )
    method = object.__new__(unchecked)
    for name, value in fields.items():
        setattr(method, name, value)
    return method


def _no_check() -> None:
    """Accept every value (see :func:`_unchecked`)."""


def method_frame(channel: int, method: Any) -> bytes:
    """Encode a pamqp method on ``channel``."""
    return frame.marshal(method, channel)


def shortstr(value: str) -> bytes:
    """A short string as on the wire: length octet + UTF-8."""
    raw = value.encode("utf-8")
    return bytes((len(raw),)) + raw


def _wrap(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def _content(
    parts: list[bytes | memoryview], channel: int, header_payload: bytes, body: bytes, fmax: int
) -> list[bytes | memoryview]:
    """Append a content header frame and the body frames, the body split by ``fmax``."""
    parts += (_FRAME_HEAD.pack(FRAME_HEADER, channel, len(header_payload)), header_payload)
    parts.append(FRAME_END_BYTE)
    length = len(body)
    chunk = fmax - FRAME_OVERHEAD
    if length <= chunk:
        if length:
            parts += (_FRAME_HEAD.pack(FRAME_BODY, channel, length), body, FRAME_END_BYTE)
    else:
        view = memoryview(body)
        for start in range(0, length, chunk):
            piece = view[start : start + chunk]
            parts += (_FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece, FRAME_END_BYTE)
    return parts


def content_frames(channel: int, header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """Content header frame plus body frames, the body split by ``frame_max``."""
    return b"".join(_content([], channel, header_payload, body, frame_max))


_DELIVER_ID: Final = _METHOD_ID.pack(commands.Basic.Deliver.index)
_GET_OK_ID: Final = _METHOD_ID.pack(commands.Basic.GetOk.index)
_RETURN_ID: Final = _METHOD_ID.pack(commands.Basic.Return.index)


_DELIVER_HEAD: Final = struct.Struct(">BHII")
_TAG_REDELIVERED: Final = struct.Struct(">QB")
_SHORTSTR_CACHE: dict[tuple[str, str], bytes] = {}


def route_shortstrs(exchange: str, routing_key: str) -> bytes:
    """Exchange and routing key as two encoded short strings (cached: traffic repeats
    the same few pairs, and encoding them per delivery shows up in profiles)."""
    key = (exchange, routing_key)
    cached = _SHORTSTR_CACHE.get(key)
    if cached is None:
        if len(_SHORTSTR_CACHE) > 4096:
            _SHORTSTR_CACHE.clear()
        cached = _SHORTSTR_CACHE[key] = shortstr(exchange) + shortstr(routing_key)
    return cached


def deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: int,  # a bool, or 0/1
    route: bytes,
    header_payload: bytes,
    body: bytes,
    frame_max: int,
) -> list[bytes | memoryview]:
    """``Basic.Deliver`` + content header + body frames as a list of buffers (the
    delivery hot path), the body frames views of ``body``: joined into one write for a
    small body, handed to the transport's ``writelines`` as they are for a large one.
    ``consumer_tag`` and ``route`` are pre-encoded short strings."""
    size = 4 + len(consumer_tag) + 9 + len(route)
    parts: list[bytes | memoryview] = [
        _DELIVER_HEAD.pack(FRAME_METHOD, channel, size, DELIVER_INDEX),
        consumer_tag,
        _TAG_REDELIVERED.pack(delivery_tag, redelivered),
        route,
        FRAME_END_BYTE,
    ]
    return _content(parts, channel, header_payload, body, frame_max)


def get_ok_method(
    channel: int,
    delivery_tag: int,
    redelivered: int,  # a bool, or 0/1
    exchange: str,
    routing_key: str,
    message_count: int,
) -> bytes:
    """``Basic.GetOk``."""
    payload = b"".join(
        (
            _GET_OK_ID,
            _LONGLONG.pack(delivery_tag),
            b"\x01" if redelivered else b"\x00",
            shortstr(exchange),
            shortstr(routing_key),
            _LONG.pack(message_count),
        )
    )
    return _wrap(FRAME_METHOD, channel, payload)


def return_method(
    channel: int, reply_code: int, reply_text: str, exchange: str, routing_key: str
) -> bytes:
    """``Basic.Return``."""
    payload = b"".join(
        (
            _RETURN_ID,
            _SHORT.pack(reply_code),
            shortstr(reply_text),
            shortstr(exchange),
            shortstr(routing_key),
        )
    )
    return _wrap(FRAME_METHOD, channel, payload)


def simple_method(channel: int, method_cls: Any, *fields: tuple[str, Any]) -> bytes:
    """Encode a method whose fields must bypass pamqp's validation (queue and consumer
    names are any UTF-8 in RabbitMQ, pamqp only accepts a subset; pamqp insists on the
    ``"0"`` RabbitMQ does not send as ``Channel.OpenOk``'s reserved ``channel_id``).

    ``fields`` are ``(amqp_type, value)`` pairs in wire order.
    """
    parts = [_METHOD_ID.pack(method_cls.index)]
    for amqp_type, value in fields:
        if amqp_type == "shortstr":
            parts.append(shortstr(value))
        elif amqp_type == "long":
            parts.append(_LONG.pack(value))
        elif amqp_type == "longstr":
            data = value.encode("utf-8")
            parts.append(_LONG.pack(len(data)) + data)
        elif amqp_type == "bit":
            parts.append(b"\x01" if value else b"\x00")
        else:  # pragma: no cover - programming error
            raise ValueError(amqp_type)
    return _wrap(FRAME_METHOD, channel, b"".join(parts))
