"""AMQP errors: raised anywhere in the broker, converted to a Close frame in one place.

Handlers raise :class:`AMQPChannelError` or :class:`AMQPConnectionError` with RabbitMQ's reply
code and explanation; :func:`close_method` is the only place that turns one into a
``Channel.Close`` or ``Connection.Close`` (RabbitMQ's
``rabbit_binary_generator:map_exception/3``): connection-level codes, and any error on
channel 0, close the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pamqp is imported where a Close is built: leveret.session raises these
    from pamqp import commands

# Reply codes (AMQP 0-9-1 spec; names as RabbitMQ prints them in reply texts).
CONNECTION_FORCED = 320
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

NAMES = {
    200: "OK",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}

# Codes whose errors close the whole connection
# (rabbit_framing_amqp_0_9_1:lookup_amqp_exception/1).
HARD_CODES = frozenset(
    {
        CONNECTION_FORCED,
        402,
        FRAME_ERROR,
        SYNTAX_ERROR,
        COMMAND_INVALID,
        CHANNEL_ERROR,
        UNEXPECTED_FRAME,
        RESOURCE_ERROR,
        NOT_ALLOWED,
        NOT_IMPLEMENTED,
        INTERNAL_ERROR,
    }
)


def reply_text(code: int, explanation: str) -> str:
    """RabbitMQ's ``"<CONSTANT> - <explanation>"``, cut to 255 characters
    (rabbit_binary_generator:amqp_exception_explanation/2). Without an explanation, the bare
    constant: what RabbitMQ's reader sends when a channel crashes (``INTERNAL_ERROR``)."""
    if not explanation:
        return NAMES.get(code, "UNKNOWN")
    text = f"{NAMES.get(code, 'UNKNOWN')} - {explanation}"
    encoded = text.encode("utf-8")
    if len(encoded) > 255:
        text = encoded[:255].decode("utf-8", "ignore")
    return text


class AMQPError(Exception):
    """An error with an AMQP reply code; ``method`` is the failing method's class and id
    (None: the method being handled, filled in by the connection)."""

    def __init__(self, code: int, explanation: str, method: tuple[int, int] | None = None) -> None:
        super().__init__(explanation)
        self.code = code
        self.explanation = explanation
        self.method = method

    @property
    def text(self) -> str:
        """The reply text as sent on the wire."""
        return reply_text(self.code, self.explanation)

    @property
    def closes_connection(self) -> bool:
        """Whether RabbitMQ would close the connection for this code."""
        return self.code in HARD_CODES


class AMQPChannelError(AMQPError):
    """Raised for errors that close only the channel (unless the code is hard)."""


class AMQPConnectionError(AMQPError):
    """Raised for errors that close the connection."""

    @property
    def closes_connection(self) -> bool:
        return True


def close_method(exc: AMQPError) -> commands.Connection.Close | commands.Channel.Close:
    """The Close method to send for ``exc``; the caller sends it on channel 0 for a
    ``Connection.Close`` and on the failing channel otherwise."""
    from pamqp import commands  # the wire's, imported on the error path only

    class_id, method_id = exc.method or (0, 0)
    if exc.closes_connection:
        return commands.Connection.Close(exc.code, exc.text, class_id, method_id)
    return commands.Channel.Close(exc.code, exc.text, class_id, method_id)


def method_id_of(method: object) -> tuple[int, int]:
    """(class_id, method_id) of a pamqp method object, from its ``index``."""
    index = getattr(method, "index", 0)
    return index >> 16, index & 0xFFFF


class ChannelCrashError(AMQPConnectionError):
    """Input that crashes RabbitMQ's channel process: its reader then closes the connection
    with the bare ``INTERNAL_ERROR`` (541, class and method 0). Raised where Leveret meets
    input RabbitMQ does not handle, so that clients see the same outcome."""

    def __init__(self) -> None:
        super().__init__(INTERNAL_ERROR, "", (0, 0))
