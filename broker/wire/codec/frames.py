"""The frames the codec decodes to (the hot path's small objects), its constants and the
errors it raises; shared by :mod:`.reader` and :mod:`.writer`."""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import body, commands, frame, heartbeat

from leveret.node.errors import FRAME_ERROR, AMQPConnectionError

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = b"\xce"

_FRAME_HEAD: Final = struct.Struct(">BHI")
_METHOD_ID: Final = struct.Struct(">I")
_HEADER_FIXED: Final = struct.Struct(">HHQ")
_LONGLONG: Final = struct.Struct(">Q")
_SHORT: Final = struct.Struct(">H")
_LONG: Final = struct.Struct(">I")
# Size of a frame around its payload (7 header octets + the end octet), derived from
# the codec as aiormq does instead of a magic 8.
FRAME_OVERHEAD: Final = len(frame.marshal(body.ContentBody(b""), 0))

PUBLISH_INDEX: Final = commands.Basic.Publish.index
DELIVER_INDEX: Final = commands.Basic.Deliver.index
ACK_INDEX: Final = commands.Basic.Ack.index
HEARTBEAT_FRAME: Final = frame.marshal(heartbeat.Heartbeat(), 0)


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


class ProtocolHeaderError(Exception):
    """The client did not start with ``AMQP 0 0 9 1``."""
