"""Bytes in, frames out: :class:`FrameReader` and the method decoders (pamqp, and the
``struct`` fast path for ``Basic.Publish`` and ``Basic.Ack``)."""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import commands

from leveret.exchanges.fields import FIELD_TYPES, decode_table, table_fields
from leveret.node.errors import FRAME_ERROR, AMQPConnectionError
from leveret.node.fieldtable import TypedTable
from leveret.wire.codec.frames import (
    _FRAME_HEAD,
    _HEADER_FIXED,
    _LONG,
    _LONGLONG,
    _METHOD_ID,
    _SHORT,
    ACK_INDEX,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    HEARTBEAT,
    PROTOCOL_HEADER,
    PUBLISH_INDEX,
    Ack,
    Body,
    DropConnectionError,
    Frame,
    FramesThenError,
    FullPublish,
    Header,
    ProtocolHeaderError,
    Publish,
    _frame_error,
    erl_binary,
)


def decode_method(payload: bytes) -> Frame:
    """Decode a method frame's payload, through the fast path when it applies.

    Raises :class:`AMQPConnectionError` (501, RabbitMQ's "cannot decode") for bad fields
    and :class:`DropConnectionError` for an unknown method id.
    """
    if len(payload) < 4:
        # rabbit_command_assembler:analyze_frame/3 matches no method frame: unknown_frame.
        raise _unknown_frame(FRAME_METHOD, payload)
    (index,) = _METHOD_ID.unpack_from(payload)
    try:
        if index == PUBLISH_INDEX:
            return _decode_publish(payload, 0, len(payload))
        if index == ACK_INDEX:
            (tag,) = _LONGLONG.unpack_from(payload, 4)
            return Ack(tag, bool(payload[12] & 1))
    except (IndexError, ValueError, struct.error) as exc:
        raise AMQPConnectionError(
            FRAME_ERROR, f"cannot decode {erl_binary(payload[4:])}", (index >> 16, index & 0xFFFF)
        ) from exc
    method_cls = commands.INDEX_MAPPING.get(index)
    if method_cls is None:
        raise DropConnectionError(f"unknown method id {index >> 16}.{index & 0xFFFF}")
    method = method_cls()
    try:
        fields = _TABLE_METHODS.get(index)
        if fields is None:
            method.unmarshal(payload[4:])
            # Its octets as sent, for error texts (frame_octets): pamqp cannot always
            # encode what it decoded (a longstr that is not UTF-8 decodes to bytes; found
            # by tests/fuzz/).
            method.wire_payload = payload
        else:
            _unmarshal_with_table(method, fields, payload)
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        # rabbit_framing: "cannot decode ~w" with the argument bytes.
        raise AMQPConnectionError(
            FRAME_ERROR, f"cannot decode {erl_binary(payload[4:])}", (index >> 16, index & 0xFFFF)
        ) from exc
    return method


def _fields(cls: Any) -> tuple[tuple[str, str], ...]:
    """A pamqp method class's fields in wire order, with pamqp's type names."""
    return tuple((name, cls.amqp_type(name)) for name in cls.__slots__)


# Methods that carry a field table (arguments, client or server properties): decoded by
# _unmarshal_with_table instead of pamqp, whose recursive table decoder fails on tables
# nested a few hundred deep (RabbitMQ takes 15,000) and copies the rest of the payload for
# every value.
_TABLE_METHODS: dict[int, tuple[tuple[str, str], ...]] = {
    index: _fields(cls)
    for index, cls in commands.INDEX_MAPPING.items()
    if any(kind == "table" for _, kind in _fields(cls))
}
_SIGNED_LONGLONG: Final = struct.Struct(">q")


def _unmarshal_with_table(method: Any, fields: tuple[tuple[str, str], ...], payload: bytes) -> None:
    """Set ``method``'s fields from its payload (method id included) as pamqp's
    ``unmarshal`` would, the table with leveret.exchanges.fields. An ``arguments`` table keeps
    the wire types of its values (RabbitMQ's error texts name them), and the method keeps
    its payload as :attr:`wire_payload` (:func:`frame_octets`). Raises IndexError,
    ValueError or struct.error when a field does not decode."""
    pos = 4
    bits = 8  # bits of ``octet`` taken: a bit field after 8 (or after another field) reads one
    octet = 0
    for name, kind in fields:
        value: Any
        if kind == "bit":
            if bits == 8:
                octet = payload[pos]
                pos += 1
                bits = 0
            value = bool(octet >> bits & 1)
            bits += 1
            setattr(method, name, value)
            continue
        bits = 8
        if kind == "shortstr":
            start = pos + 1
            pos = start + payload[pos]
            if pos > len(payload):
                raise ValueError(f"{name} cut short")
            value = payload[start:pos].decode("utf-8")
        elif kind == "table":
            taken, value = decode_table(payload, pos)
            if name == "arguments":
                value = TypedTable(value, table_types(payload, pos))
            pos += taken
        elif kind == "longstr":
            start = pos + 4
            pos = start + _LONG.unpack_from(payload, pos)[0]
            if pos > len(payload):
                raise ValueError(f"{name} cut short")
            raw = payload[start:pos]
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = raw  # as pamqp's decode.long_str
        elif kind == "octet":
            value = payload[pos]
            pos += 1
        elif kind == "short":
            (value,) = _SHORT.unpack_from(payload, pos)
            pos += 2
        elif kind == "long":
            (value,) = _LONG.unpack_from(payload, pos)
            pos += 4
        elif kind == "longlong":
            (value,) = _SIGNED_LONGLONG.unpack_from(payload, pos)
            pos += 8
        else:  # pragma: no cover - no table method has another field type
            raise ValueError(f"field type {kind}")
        setattr(method, name, value)
    method.wire_payload = payload


def _other_frame(frame_type: int, payload: bytes) -> Frame:
    """Content header or heartbeat frame (methods and bodies are handled inline)."""
    # rabbit_command_assembler:analyze_frame/3: a header frame is class, weight and body
    # size (12 octets) and whatever follows, a heartbeat frame is empty; anything else is
    # an unknown frame. A header whose properties do not decode fails later, as there.
    if frame_type == FRAME_HEADER and len(payload) >= 12:
        class_id, _weight, body_size = _HEADER_FIXED.unpack_from(payload)
        return Header(class_id, body_size, _header_payload(payload))
    if frame_type == FRAME_HEARTBEAT and not payload:
        return HEARTBEAT
    raise _unknown_frame(frame_type, payload)


def _unknown_frame(frame_type: int, payload: bytes) -> AMQPConnectionError:
    return _frame_error(f"type {frame_type}, all octets = {erl_binary(payload)}: unknown_frame")


def table_types(data: bytes, offset: int) -> dict[str, str]:
    """Type names of the top-level values of the field table at ``offset``."""
    (length,) = _LONG.unpack_from(data, offset)
    return {
        key.decode("utf-8", "replace"): FIELD_TYPES.get(tag, ("unknown", 0))[0]
        for key, tag, _, _ in table_fields(data, offset + 4, offset + 4 + length)
    }


class FrameReader:
    """Incremental frame parser. ``feed(data)`` returns ``[(channel, frame), ...]``."""

    __slots__ = ("_need", "_pending", "_pending_len", "frame_max", "need_header")

    def __init__(self, frame_max: int) -> None:
        # Bytes of an incomplete frame, kept as chunks and joined once the frame is
        # complete (a 128 KiB frame arriving in small reads is not copied per read).
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 0
        self.frame_max = frame_max
        # The 8-octet protocol header comes first, before any frame.
        self.need_header = True

    def feed(self, data: bytes) -> list[tuple[int, Frame]]:
        """Add ``data`` and return every frame now complete.

        Raises :class:`ProtocolHeaderError` for a wrong protocol header and
        :class:`FramesThenError` for a malformed frame: the frames before it still count
        (RabbitMQ's reader handles one frame at a time, so they took effect there).
        """
        out: list[tuple[int, Frame]] = []
        try:
            self._feed(data, out)
        except (AMQPConnectionError, DropConnectionError) as exc:
            raise FramesThenError(out, exc) from exc
        return out

    def _feed(self, data: bytes, out: list[tuple[int, Frame]]) -> None:
        if self._pending:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._pending_len < self._need:
                return
            data = b"".join(self._pending)
            self._pending = []
        pos = 0
        if self.need_header:
            pos = self._protocol_header(data)
            if not pos:
                self._keep(data, 0, 8)
                return
        reported_limit, size_limit = _size_limits(self.frame_max)
        end_of_data = len(data)
        unpack_head = _FRAME_HEAD.unpack_from
        # The size is checked as soon as the 7-octet header is complete, whatever the read
        # boundaries: a header arriving alone must not make the reader wait for (and buffer)
        # the up to 4 GiB it announces, before login as after (frame_max is 4096 until
        # Tune-Ok, so an unauthenticated connection holds at most one 4 KiB frame).
        while end_of_data - pos >= 7:
            frame_type, channel, size = unpack_head(data, pos)
            if size > size_limit:
                raise _frame_error(
                    f"type {frame_type}, all octets = <<>>: "
                    f"{{frame_too_large,{size},{reported_limit}}}"
                )
            end = pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != FRAME_END:
                octets = erl_binary(data[pos + 7 : end])
                raise _frame_error(
                    f"type {frame_type}, all octets = {octets}: "
                    f"{{invalid_frame_end_marker,{data[end]}}}"
                )
            if frame_type == FRAME_BODY:
                out.append((channel, Body(data[pos + 7 : end])))
            elif frame_type != FRAME_METHOD:
                out.append((channel, _other_frame(frame_type, data[pos + 7 : end])))
            elif data.startswith(_PUBLISH_ID, pos + 7):
                publish = _decode_publish(data, pos + 7, end)
                taken = _take_content(data, end + 1, end_of_data, channel, size_limit)
                if taken is not None:
                    header, body, pos = taken
                    out.append((channel, FullPublish(publish, header, body)))
                    continue
                out.append((channel, publish))
            else:
                method = decode_method(data[pos + 7 : end])
                out.append((channel, method))
                if not channel and type(method) is commands.Connection.TuneOk:
                    # The frames after Tune-Ok in this read are held to the limit it
                    # negotiates, as they would be by a reader taking one frame at a time
                    # (the connection closes anyway if the value is out of range).
                    self.frame_max = method.frame_max
                    reported_limit, size_limit = _size_limits(self.frame_max)
            pos = end + 1
        if pos < end_of_data:
            # A partial header is kept until its 7 octets are there, then checked above.
            self._keep(
                data, pos, 7 + unpack_head(data, pos)[2] + 1 if end_of_data - pos >= 7 else 7
            )

    def _keep(self, data: bytes, pos: int, frame_len: int) -> None:
        """Keep the incomplete frame starting at ``pos`` until ``frame_len`` bytes."""
        rest = data[pos:] if pos else data
        self._pending = [rest]
        self._pending_len = len(rest)
        self._need = frame_len

    def _protocol_header(self, data: bytes) -> int:
        """Check the 8-octet protocol header; 8 once it is complete, 0 while partial."""
        if len(data) < 8:
            if PROTOCOL_HEADER[: len(data)] != data:
                raise ProtocolHeaderError(data)
            return 0
        if data[:8] != PROTOCOL_HEADER:
            raise ProtocolHeaderError(data[:8])
        self.need_header = False
        return 8


_PUBLISH_ID: Final = _METHOD_ID.pack(PUBLISH_INDEX)


def _size_limits(frame_max: int) -> tuple[int, int]:
    """(the limit a frame_too_large text reports, the largest payload accepted).

    RabbitMQ accepts payloads up to frame_max itself (an 8-octet "fudge" for clients that
    forget the frame overhead) but reports the limit as frame_max - 8
    (rabbit_reader:handle_input/3, ?FRAME_SIZE_FUDGE); 0 means no limit.
    """
    reported = frame_max - FRAME_OVERHEAD if frame_max else 1 << 32
    return reported, reported + FRAME_OVERHEAD


# Exchange names, routing keys and content headers repeat from message to message: queued
# messages share one object per distinct value instead of holding a copy each (about 140 of
# the ~520 bytes a queued 100-byte message costs, bench/backlog.py). Bounded: a table is
# emptied when it reaches _SHARED_MAX entries, and headers over _SHARED_HEADER_MAX bytes
# are not shared.
_SHARED_MAX: Final = 16384
_SHARED_HEADER_MAX: Final = 128
_names: dict[bytes, str] = {}
_headers: dict[bytes, bytes] = {}


def _name(raw: bytes) -> str:
    """A short string from the wire (UTF-8), shared with earlier frames that sent it."""
    text = _names.get(raw)
    if text is None:
        if len(_names) >= _SHARED_MAX:
            _names.clear()
        text = _names[raw] = raw.decode("utf-8")
    return text


def _header_payload(payload: bytes) -> bytes:
    """A content header payload, shared with earlier frames that sent the same bytes."""
    if len(payload) > _SHARED_HEADER_MAX:
        return payload
    shared = _headers.get(payload)
    if shared is None:
        if len(_headers) >= _SHARED_MAX:
            _headers.clear()
        shared = _headers[payload] = payload
    return shared


def _decode_publish(data: bytes, start: int, end: int) -> Publish:
    """``Basic.Publish`` from ``data[start:end]`` (method id, ticket, exchange,
    routing key, bits), without copying the payload first."""
    try:
        offset = start + 6
        length = data[offset]
        exchange = _name(data[offset + 1 : offset + 1 + length])
        offset += 1 + length
        length = data[offset]
        routing_key = _name(data[offset + 1 : offset + 1 + length])
        offset += 1 + length
        if offset >= end:
            raise ValueError("truncated Basic.Publish")
        bits = data[offset]
    except (IndexError, ValueError) as exc:
        raise AMQPConnectionError(
            FRAME_ERROR, f"cannot decode {erl_binary(data[start + 4 : end])}", (60, 40)
        ) from exc
    return Publish(exchange, routing_key, bool(bits & 1), bool(bits & 2))


def _take_content(
    data: bytes, pos: int, end_of_data: int, channel: int, size_limit: int
) -> tuple[Header, bytes, int] | None:
    """The header and single body frame following a publish at ``pos``, when both are
    complete, well-formed and on ``channel``; else None (the frames then go through the
    general path, which reports any error)."""
    if end_of_data - pos < 7 + 14 + 1:
        return None
    frame_type, frame_channel, size = _FRAME_HEAD.unpack_from(data, pos)
    end = pos + 7 + size
    if (
        frame_type != FRAME_HEADER
        or frame_channel != channel
        or size < 14
        or size > size_limit
        or end >= end_of_data
        or data[end] != FRAME_END
    ):
        return None
    class_id, _weight, body_size = _HEADER_FIXED.unpack_from(data, pos + 7)
    header = Header(class_id, body_size, _header_payload(data[pos + 7 : end]))
    pos = end + 1
    if body_size == 0:
        return header, b"", pos
    if end_of_data - pos < 8:
        return None
    frame_type, frame_channel, size = _FRAME_HEAD.unpack_from(data, pos)
    end = pos + 7 + size
    if (
        frame_type != FRAME_BODY
        or frame_channel != channel
        or size != body_size
        or size > size_limit
        or end >= end_of_data
        or data[end] != FRAME_END
    ):
        return None
    return header, data[pos + 7 : end], end + 1
