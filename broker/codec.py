"""Frame codec: bytes in, frames out; frames in, bytes out. Sans-IO (no asyncio).

Theory of operation
-------------------
An AMQP 0-9-1 frame is ``type:u8 channel:u16 size:u32 payload[size] 0xCE``.
:class:`FrameReader` buffers what the socket gives it and returns every complete frame
in order; a partial frame stays buffered. pamqp is the codec of record: every method
frame is decoded by ``pamqp.frame`` except the two that dominate traffic,
``Basic.Publish`` and ``Basic.Ack``, which a ``struct`` fast path decodes into small
objects (:class:`Publish`, :class:`Ack`) because pamqp costs several microseconds per
frame (see DESIGN.md, "The hot path"); ``tests/test_codec.py`` checks the fast path
against pamqp byte for byte.

Content headers are not decoded here: :class:`Header` keeps the raw payload so it can
be re-sent to consumers as it is; properties are decoded lazily by
:class:`leveret.message.Message` when a feature needs them.

On the way out, :func:`method_frame` uses pamqp, while deliveries (the other hot path)
are assembled with ``struct`` by :func:`deliver_frames`.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import body, commands, frame, heartbeat

from leveret.errors import FRAME_ERROR, AMQPConnectionError
from leveret.exchanges.fields import FIELD_TYPES, decode_table, table_fields

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"

_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_ID = struct.Struct(">I")
_HEADER_FIXED = struct.Struct(">HHQ")
_LONGLONG = struct.Struct(">Q")
# Size of a frame around its payload (7 header octets + the end octet), derived from
# the codec as aiormq does instead of a magic 8.
FRAME_OVERHEAD = len(frame.marshal(body.ContentBody(b""), 0))

PUBLISH_INDEX = commands.Basic.Publish.index
DELIVER_INDEX = commands.Basic.Deliver.index
ACK_INDEX = commands.Basic.Ack.index
HEARTBEAT_FRAME = frame.marshal(heartbeat.Heartbeat(), 0)


class Publish:
    """``Basic.Publish`` decoded by the fast path."""

    __slots__ = ("exchange", "immediate", "mandatory", "routing_key")
    index = PUBLISH_INDEX

    def __init__(self, exchange: str, routing_key: str, mandatory: bool, immediate: bool) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate


class Ack:
    """``Basic.Ack`` decoded by the fast path."""

    __slots__ = ("delivery_tag", "multiple")
    index = ACK_INDEX

    def __init__(self, delivery_tag: int, multiple: bool) -> None:
        self.delivery_tag = delivery_tag
        self.multiple = multiple


class Header:
    """A content header frame: ``body_size`` plus the raw payload (properties undecoded)."""

    __slots__ = ("body_size", "class_id", "payload")

    def __init__(self, class_id: int, body_size: int, payload: bytes) -> None:
        self.class_id = class_id
        self.body_size = body_size
        self.payload = payload


class Body:
    """A content body frame."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class FullPublish:
    """``Basic.Publish`` with its content header and whole body, when all three arrived
    in one read on one channel (the common case): one dispatch instead of three."""

    __slots__ = ("body", "header", "publish")
    index = PUBLISH_INDEX

    def __init__(self, publish: Publish, header: Header, body: bytes) -> None:
        self.publish = publish
        self.header = header
        self.body = body


class Heartbeat:
    """A heartbeat frame."""

    __slots__ = ()


HEARTBEAT = Heartbeat()

Frame = Any  # pamqp method | Publish | Ack | Header | Body | Heartbeat


def _frame_error(explanation: str) -> AMQPConnectionError:
    return AMQPConnectionError(FRAME_ERROR, explanation)


def erl_binary(data: bytes) -> str:
    """A binary as Erlang's ``~p`` prints it in RabbitMQ's texts: ``<<"abc">>`` when
    printable, else ``<<0,60,0,10>>``."""
    if data and all(32 <= b < 127 for b in data):
        return '<<"' + data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"') + '">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


class DropConnectionError(Exception):
    """Input after which RabbitMQ closes the socket without a Connection.Close (an unknown
    method id makes its reader exit: rabbit_framing_amqp_0_9_1:lookup_method_name/1)."""


class FramesThenError(Exception):
    """A malformed frame (``error``) and the frames decoded before it in the same read."""

    def __init__(
        self, frames: list[tuple[int, Frame]], error: AMQPConnectionError | DropConnectionError
    ) -> None:
        super().__init__(str(error))
        self.frames = frames
        self.error = error


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
_SIGNED_LONGLONG = struct.Struct(">q")


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


class TypedTable(dict[str, Any]):
    """A decoded field table that remembers the AMQP type of each top-level value
    (``types``: key -> RabbitMQ's type name, e.g. ``short``, ``longstr``)."""

    types: dict[str, str]

    def __init__(self, values: dict[str, Any], types: dict[str, str]) -> None:
        super().__init__(values)
        self.types = types


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


_PUBLISH_ID = _METHOD_ID.pack(PUBLISH_INDEX)


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
_SHARED_MAX = 16384
_SHARED_HEADER_MAX = 128
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


class ProtocolHeaderError(Exception):
    """The client did not start with ``AMQP 0 0 9 1``."""


def frame_octets(decoded: Frame) -> tuple[int, bytes]:
    """The frame type and payload a decoded frame came from, for RabbitMQ's
    ``type 1, all octets = <<...>>`` texts. A method with a field table kept its payload;
    others are encoded again (the decoder keeps no copy of their bytes), which gives the
    bytes a client sent for every well-formed method; only error paths call this."""
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
        decoded = commands.Basic.Publish(
            0, decoded.exchange, decoded.routing_key, decoded.mandatory, decoded.immediate
        )
    elif isinstance(decoded, Ack):
        decoded = commands.Basic.Ack(decoded.delivery_tag, decoded.multiple)
    return FRAME_METHOD, _METHOD_ID.pack(decoded.index) + decoded.marshal()


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


_DELIVER_ID = _METHOD_ID.pack(commands.Basic.Deliver.index)
_GET_OK_ID = _METHOD_ID.pack(commands.Basic.GetOk.index)
_RETURN_ID = _METHOD_ID.pack(commands.Basic.Return.index)
_SHORT = struct.Struct(">H")
_LONG = struct.Struct(">I")


_DELIVER_HEAD = struct.Struct(">BHII")
_TAG_REDELIVERED = struct.Struct(">QB")
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


__all__ = [
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "Ack",
    "Body",
    "DropConnectionError",
    "FrameReader",
    "FullPublish",
    "Header",
    "Heartbeat",
    "ProtocolHeaderError",
    "Publish",
    "TypedTable",
    "content_frames",
    "decode_method",
    "deliver_frames",
    "erl_binary",
    "get_ok_method",
    "method_frame",
    "return_method",
    "route_shortstrs",
    "shortstr",
    "simple_method",
    "table_types",
]
