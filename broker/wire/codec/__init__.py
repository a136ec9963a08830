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
:class:`leveret.node.message.Message` when a feature needs them.

On the way out, :func:`method_frame` uses pamqp, while deliveries (the other hot path)
are assembled with ``struct`` by :func:`deliver_frames`.
"""

from leveret.node.fieldtable import TypedTable
from leveret.wire.codec.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Ack,
    Body,
    DropConnectionError,
    FramesThenError,
    FullPublish,
    Header,
    Heartbeat,
    ProtocolHeaderError,
    Publish,
    erl_binary,
)
from leveret.wire.codec.reader import FrameReader, decode_method, table_types
from leveret.wire.codec.writer import (
    content_frames,
    deliver_frames,
    frame_octets,
    get_ok_method,
    method_frame,
    return_method,
    route_shortstrs,
    shortstr,
    simple_method,
)

__all__ = [
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "FRAME_OVERHEAD",
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "Ack",
    "Body",
    "DropConnectionError",
    "FrameReader",
    "FramesThenError",
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
    "frame_octets",
    "get_ok_method",
    "method_frame",
    "return_method",
    "route_shortstrs",
    "shortstr",
    "simple_method",
    "table_types",
]
