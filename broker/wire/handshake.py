"""A connection's handshake: protocol header to Connection.Open-Ok, login, tune, heartbeats.

The states a connection goes through (:class:`State`), Connection.Start with the server's
properties, the PLAIN and AMQPLAIN credentials and the login (``rabbit_reader`` and
``rabbit_auth_mechanism_*``), the tune negotiation and its limits, Connection.Open with the
vhost's, user's and node's connection limits, the handshake timeout and the heartbeat timer
that tune starts. It runs a few times per connection, never per frame of an open one, so
it is kept out of :mod:`leveret.wire.connection`, which handles the frames, writes and closing:
functions that take the connection, called from its channel-zero dispatch. They see it as
:class:`Connection`, which lists what they use, so this module does not import
:mod:`leveret.wire.connection`.
"""

from __future__ import annotations

import logging
import struct
from enum import Enum
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.config import FRAME_MIN
from leveret.exchanges.fields import check_table, table_fields
from leveret.node.auth import is_loopback
from leveret.node.errors import (
    ACCESS_REFUSED,
    COMMAND_INVALID,
    NOT_ALLOWED,
    SYNTAX_ERROR,
    AMQPConnectionError,
)
from leveret.node.limits import reached
from leveret.wire import codec, heldwrites

if TYPE_CHECKING:
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

log = logging.getLogger("leveret.wire.connection")  # the connection's log, as before the split

C = commands.Connection
CAPABILITIES = {
    # rabbit_reader:server_capabilities/1: all nine, all true.
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


class State(Enum):
    """Where a connection is: the handshake's four states, then open, closing, closed."""

    AWAIT_HEADER = 0
    AWAIT_START_OK = 1
    AWAIT_TUNE_OK = 2
    AWAIT_OPEN = 3
    OPEN = 4
    CLOSING = 5
    CLOSED = 6


# rabbit_reader's 'starting' and 'tuning': errors there close without a Connection.Close.
HANDSHAKE_STATES = (State.AWAIT_START_OK, State.AWAIT_TUNE_OK)

# RabbitMQ's names for the connection states, as its error texts print them.
STATE_NAMES = {
    State.AWAIT_HEADER: "pre_init",
    State.AWAIT_START_OK: "starting",
    State.AWAIT_TUNE_OK: "tuning",
    State.AWAIT_OPEN: "opening",
    State.OPEN: "running",
    State.CLOSING: "closing",
    State.CLOSED: "closed",
}


def server_properties() -> dict[str, Any]:
    """Connection.Start server properties, shaped like RabbitMQ's."""
    from leveret import __version__

    return {
        "capabilities": dict(CAPABILITIES),
        "cluster_name": "leveret@localhost",
        "copyright": "Copyright (c) Leveret developers",
        "information": "Leveret: an AMQP 0-9-1 broker on asyncio with RabbitMQ semantics",
        "platform": "Python/asyncio",
        "product": "Leveret",
        "version": __version__,
    }


def send_start(conn: Connection) -> None:
    """The protocol header arrived: Connection.Start, and wait for Start-Ok."""
    conn.state = State.AWAIT_START_OK
    conn.send_method(
        0,
        C.Start(
            version_major=0,
            version_minor=9,
            server_properties=server_properties(),
            mechanisms="PLAIN AMQPLAIN",
            locales="en_US",
        ),
    )


def credentials(mechanism: str, response: Any) -> tuple[str, str]:
    """(user, password) from Start-Ok's ``response`` for ``mechanism`` (PLAIN or AMQPLAIN),
    or the handshake's error as RabbitMQ's mechanisms raise it."""
    raw = response.encode("utf-8") if isinstance(response, str) else bytes(response or b"")
    if mechanism == "PLAIN":
        # rabbit_auth_mechanism_plain:extract_user_pass/1: NUL, user, NUL, password and
        # nothing else; any other response (an authorisation identity before the first
        # NUL included) is a syntax_error in the handshake, so the socket is closed
        # without a Close (observed on RabbitMQ 3.10.8).
        parts = raw.split(b"\x00")
        if len(parts) != 3 or parts[0]:
            raise AMQPConnectionError(SYNTAX_ERROR, f"response {raw!r} invalid", (10, 11))
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        # The response is a field table without its length prefix; the first LOGIN and
        # the first PASSWORD count (rabbit_auth_mechanism_amqplain:handle_response/2,
        # lists:keysearch/3). They are credentials when either is a long string (its
        # guard is an "or"), the other a long string or a byte array; both present but
        # neither a long string is a syntax_error, a missing one too, and another type
        # makes RabbitMQ's check crash: each closes the socket without a Close.
        if not check_table(struct.pack(">I", len(raw)) + raw):  # any depth, no recursion
            raise AMQPConnectionError(SYNTAX_ERROR, "AMQPLAIN auth info invalid", (10, 11))
        first: dict[bytes, tuple[int, bytes]] = {}
        for name, tag, start, end in table_fields(raw, 0, len(raw)):
            if name in (b"LOGIN", b"PASSWORD") and name not in first:
                # The key, its tag, 4 octets of length (for S and x), then the value.
                first[name] = (tag, raw[start + 2 + len(name) + 4 : end])
        if len(first) < 2:
            why = "is missing LOGIN or PASSWORD field"
        elif ord("S") not in (first[b"LOGIN"][0], first[b"PASSWORD"][0]):
            why = "uses unsupported type for LOGIN or PASSWORD field"
        elif not {first[b"LOGIN"][0], first[b"PASSWORD"][0]} <= {ord("S"), ord("x")}:
            why = "has a LOGIN or PASSWORD that is not a string"
        else:
            user, password = first[b"LOGIN"][1], first[b"PASSWORD"][1]
            return user.decode("utf-8", "replace"), password.decode("utf-8", "replace")
        raise AMQPConnectionError(SYNTAX_ERROR, f"AMQPLAIN auth info {why}", (10, 11))
    raise AMQPConnectionError(
        COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'", (10, 11)
    )


def on_start_ok(conn: Connection, frame: commands.Connection.StartOk) -> None:
    """Start-Ok: log in (a refused login closes as rabbit_reader:auth_fail/5), then Tune."""
    conn.client_properties = dict(frame.client_properties or {})
    mechanism = frame.mechanism or ""
    user, password = credentials(mechanism, frame.response)
    loopback = bool(conn.peer) and is_loopback(str(conn.peer[0]))
    if conn.server.access.authenticate(user, password) is None or (
        user in conn.config.loopback_users and not loopback
    ):
        conn.server.churn.login(succeeded=False)
        # rabbit_reader:auth_fail/5: a Close only for clients that advertise
        # authentication_failure_close; others just see the socket close.
        log.warning("login refused for user %r (%s)", user, mechanism)
        if conn.client_capability("authentication_failure_close"):
            conn._fail(
                AMQPConnectionError(
                    ACCESS_REFUSED,
                    f"Login was refused using authentication mechanism {mechanism}. "
                    "For details see the broker logfile.",
                ),
                0,
            )
        else:
            conn._flush()
            conn._abort()
        return
    conn.user = user
    conn.server.churn.login(succeeded=True)
    conn.state = State.AWAIT_TUNE_OK
    conn.send_method(
        0,
        C.Tune(
            channel_max=conn.config.channel_max,
            frame_max=conn.config.frame_max,
            heartbeat=conn.config.heartbeat,
        ),
    )


def on_tune_ok(conn: Connection, frame: commands.Connection.TuneOk) -> None:
    """Tune-Ok: take the client's channel_max, frame_max and heartbeat within ours."""
    problem = tune_problem(conn, frame)
    if problem is not None:
        # RabbitMQ raises this but, as the error carries 'connection.tune', its reader
        # only logs it and closes the socket without a Connection.Close
        # (rabbit_reader:handle_exception/3).
        log.warning("closing connection %s: %s", conn.peer, problem)
        conn._abort()
        return
    conn.channel_max = frame.channel_max
    conn.frame_max = frame.frame_max  # the reader took it when it decoded Tune-Ok
    conn.heartbeat = frame.heartbeat
    conn.state = State.AWAIT_OPEN
    if conn.heartbeat:
        schedule_heartbeat(conn)


def tune_problem(conn: Connection, frame: commands.Connection.TuneOk) -> str | None:
    """rabbit_reader:validate_negotiated_integer_value/3 and fail_negotiation/4."""
    for field, minimum, value, server_value in (
        ("channel_max", 0, frame.channel_max, conn.config.channel_max),
        ("frame_max", FRAME_MIN, frame.frame_max, conn.config.frame_max),
    ):
        detail = " (no limit)" if field == "channel_max" and value == 0 else ""
        if value != 0 and value < minimum:
            return (
                f"negotiated {field} = {value}{detail} is lower than the minimum allowed "
                f"value ({minimum})"
            )
        if server_value != 0 and (value == 0 or value > server_value):
            return (
                f"negotiated {field} = {value}{detail} is higher than the maximum allowed "
                f"value ({server_value})"
            )
    return None


def on_open(conn: Connection, frame: commands.Connection.Open) -> None:
    """Connection.Open: the vhost, its and the node's limits, the user's access; then Open-Ok."""
    vhost = conn.server.vhosts.get(frame.virtual_host)
    if vhost is None:
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"vhost {frame.virtual_host} not found",
            (10, 40),
        )
    check_connection_limits(conn, vhost)
    if not conn.server.access.can_access_vhost(conn.user, vhost.name):
        # rabbit_access_control:check_vhost_access/4
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"access to vhost '{vhost.name}' refused for user '{conn.user}'",
            (10, 40),
        )
    limit = conn.config.max_connections
    if limit and sum(c.state is State.OPEN for c in conn.server.connections) >= limit:
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"connection refused: node connection limit ({limit}) is reached",
            (10, 40),
        )
    conn.vhost = vhost
    if vhost.write_delay:  # an injected latency (broker/faults.py)
        heldwrites.delay_writes(conn, vhost.write_delay)
    conn.state = State.OPEN
    conn.server.churn.connections_opened += 1
    log.info(
        "connection opened peer=%s user=%s vhost=%s client=%s",
        conn._peer_text(),
        conn.user,
        vhost.name,
        conn._client_text(),
    )
    if conn._handshake_timer is not None:
        conn._handshake_timer.cancel()
    conn.send_method(0, C.OpenOk())


def check_connection_limits(conn: Connection, vhost: VHost) -> None:
    """The vhost's, then the user's ``max-connections`` (rabbit_reader:handle_method0
    for connection.open: both before the vhost access check; texts as RabbitMQ 3.10.8
    sends them)."""
    opened = [c for c in conn.server.connections if c.state is State.OPEN]
    limit = reached(vhost.limits, "max-connections", sum(c.vhost is vhost for c in opened))
    if limit is not None:
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"access to vhost '{vhost.name}' refused for user '{conn.user}': connection "
            f"limit ({limit}) is reached",
            (10, 40),
        )
    user = conn.server.access.users.get(conn.user)
    mine = sum(c.user == conn.user for c in opened)
    limit = reached(user.limits, "max-connections", mine) if user is not None else None
    if limit is not None:
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"connection refused for user '{conn.user}': user connection limit ({limit}) "
            "is reached",
            (10, 40),
        )


def check_channel_limit(conn: Connection) -> None:
    """The user's ``max-channels``, counted over all its connections (after the
    connection's negotiated channel_max, as rabbit_reader:create_channel/2)."""
    user = conn.server.access.users.get(conn.user)
    if user is None or not user.limits:
        return
    opened = sum(len(c.channels) for c in conn.server.connections if c.user == conn.user)
    limit = reached(user.limits, "max-channels", opened)
    if limit is not None:
        raise AMQPConnectionError(
            NOT_ALLOWED,
            f"number of channels opened for user '{conn.user}' has reached the maximum "
            f"allowed user limit of ({limit})",
            (0, 0),
        )


def handshake_timeout(conn: Connection) -> None:
    """The handshake took longer than ``handshake_timeout``: drop the socket."""
    if conn.state in (
        State.AWAIT_HEADER,
        State.AWAIT_START_OK,
        State.AWAIT_TUNE_OK,
        State.AWAIT_OPEN,
    ):
        log.info("handshake timeout from %s", conn.peer)
        conn._abort()


def schedule_heartbeat(conn: Connection) -> None:
    """Start the negotiated heartbeat: checked twice per interval, a heartbeat is sent when
    we have been silent for an interval, and a peer silent for two is dropped
    (docs/heartbeats.md)."""
    interval = conn.heartbeat
    conn._last_recv = conn._last_send = conn.loop.time()

    def tick() -> None:
        if conn.state is State.CLOSED:
            return
        now = conn.loop.time()
        if now - conn._last_recv > 2 * interval:
            log.warning("missed heartbeats from client %s, timeout: %ss", conn.peer, interval)
            conn._abort()
            return
        if now - conn._last_send >= interval / 2:
            conn.write(codec.HEARTBEAT_FRAME)
        conn._heartbeat_timer = conn.loop.call_later(interval / 2, tick)

    conn._heartbeat_timer = conn.loop.call_later(interval / 2, tick)
