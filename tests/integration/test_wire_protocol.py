"""Protocol-level behaviour over a raw socket (see ``wire.py``).

These drive the broker where client libraries will not go: bad protocol headers, tune values
out of range, oversized or malformed frames, methods on channels that were never opened,
``immediate=true``. The expected codes, texts and class/method ids were observed on a real
RabbitMQ (3.10.8 from Debian) and checked against the RabbitMQ sources for 3.13, whose reader
(``rabbit_reader.erl``) and frame assembler behave the same way for everything here.

Several texts embed Erlang terms (``<<0,60,...>>`` binaries, ``{frame_too_large,N,M}``
tuples): they are what RabbitMQ sends and are asserted as they are.

Where RabbitMQ closes a socket without any Connection.Close (any error before Tune-Ok but a
refused login, an unknown method id, a missed heartbeat), the test asserts exactly that: no
frame, then EOF.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from pamqp import commands
from pamqp import frame as pframe
from pamqp.body import ContentBody
from pamqp.constants import FRAME_HEARTBEAT
from pamqp.header import ContentHeader

from leveret.inspect import BrokerThread

from .helpers import unique
from .wire import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    PROTOCOL_HEADER,
    PeerClosedError,
    WireClient,
    amqplain_response,
    raw_frame,
    raw_method,
)

pytestmark = pytest.mark.timeout(30)

LOGIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)


@pytest.fixture
def client(amqp_url: str) -> Iterator[WireClient]:
    with WireClient(amqp_url) as c:
        yield c


@pytest.fixture
def opened(client: WireClient) -> WireClient:
    """A connection that is open, with channel 1 open."""
    client.connect()
    client.open_channel(1)
    return client


@pytest.fixture
def bystander(amqp_url: str) -> Iterator[WireClient]:
    """A second connection, opened before the test's error; check it with assert_alive()."""
    with WireClient(amqp_url) as c:
        c.connect()
        c.open_channel(1)
        yield c


def declare_queue(c: WireClient, channel: int = 1) -> str:
    """Declare an exclusive server-named queue and return its name."""
    c.send(commands.Queue.Declare(queue="", exclusive=True), channel)
    name = c.expect(commands.Queue.DeclareOk, channel=channel).queue
    assert name is not None and name.startswith("amq.gen-"), name
    return name


def assert_alive(c: WireClient) -> None:
    """The connection still answers: declare a server-named queue on channel 1."""
    declare_queue(c)


def close_frame(c: WireClient, timeout: float = 5.0) -> commands.Connection.Close:
    """Read the broker's Connection.Close, answer Close-Ok and wait for EOF."""
    close = c.expect(commands.Connection.Close, channel=0, timeout=timeout)
    c.send(commands.Connection.CloseOk())
    assert c.wait_closed() == []
    return close


def reply(close: commands.Connection.Close | commands.Channel.Close) -> tuple[int, str, int, int]:
    return (
        int(close.reply_code or 0),
        close.reply_text,
        int(close.class_id or 0),
        int(close.method_id or 0),
    )


# -- protocol header --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x0a\x00", b"AMQP\x00\x00\x08\x00", b"HTTP/1.1", b"\x00" * 8],
    ids=["amqp-0-10", "amqp-0-8-0", "http", "zeros"],
)
def test_wrong_protocol_header_gets_supported_header_then_close(
    client: WireClient, header: bytes
) -> None:
    client.send_raw(header)
    assert client.read_until_closed() == PROTOCOL_HEADER


# -- start, tune, open ------------------------------------------------------------------------


def test_connection_start(client: WireClient) -> None:
    client.send_raw(PROTOCOL_HEADER)
    start = client.expect(commands.Connection.Start, channel=0)
    assert (start.version_major, start.version_minor) == (0, 9)
    # 3.13 offers PLAIN and AMQPLAIN (ANONYMOUS only arrived in 4.0).
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}
    assert start.locales == "en_US"
    props = start.server_properties
    assert props["capabilities"] == {
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
    for key in ("product", "version", "platform", "copyright", "information"):
        assert isinstance(props[key], str) and props[key], key


def test_connection_tune_defaults(client: WireClient) -> None:
    tune = client.negotiate()
    assert (tune.frame_max, tune.channel_max, tune.heartbeat) == (131072, 2047, 60)
    ok = client.open()
    assert ok.known_hosts == ""


def test_amqplain_login(client: WireClient) -> None:
    client.connect(mechanism="AMQPLAIN")
    client.open_channel(1)
    assert_alive(client)
    client.close_connection()


def test_wrong_password_with_auth_failure_close_capability(client: WireClient) -> None:
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.send(
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN",
            response="\0guest\0wrong-password",
            locale="en_US",
        )
    )
    assert reply(close_frame(client)) == (403, LOGIN_REFUSED, 0, 0)


def _login(client: WireClient, mechanism: str, response: str) -> None:
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.send(
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism=mechanism,
            response=response,
            locale="en_US",
        )
    )


@pytest.mark.parametrize(
    "response",
    ["guest\0guest\0guest", "\0guest", "\0guest\0guest\0more", "guest"],
    ids=["authorisation-identity", "no-password", "a-third-nul", "no-nul"],
)
def test_a_plain_response_of_another_shape_closes_without_a_close(
    client: WireClient, response: str
) -> None:
    # rabbit_auth_mechanism_plain:extract_user_pass/1 takes NUL, user, NUL, password and
    # nothing else: anything else is {protocol_error, "response ~p invalid"}, a syntax_error
    # in the handshake, which closes the socket without a Close (observed on 3.10.8).
    _login(client, "PLAIN", response)
    assert client.wait_closed(timeout=6) == []


def test_amqplain_takes_the_first_login(client: WireClient) -> None:
    # rabbit_auth_mechanism_amqplain: lists:keysearch/3 finds the first LOGIN key.
    raw = amqplain_response("nobody", client.url.password)
    raw += amqplain_response(client.url.user, client.url.password)
    _login(client, "AMQPLAIN", raw.decode("ascii"))
    assert reply(close_frame(client)) == (403, LOGIN_REFUSED.replace("PLAIN", "AMQPLAIN"), 0, 0)


def _amqplain_entry(name: bytes, tag: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + tag + value


def _long(text: str) -> bytes:
    return struct.pack(">I", len(text)) + text.encode()


def test_amqplain_takes_a_byte_array_login(client: WireClient) -> None:
    # The login as a byte array ('x'), the password a long string: credentials all the same
    # (rabbit_auth_mechanism_amqplain:handle_response/2 wants either to be a long string).
    table = _amqplain_entry(b"LOGIN", b"x", _long(client.url.user))
    table += _amqplain_entry(b"PASSWORD", b"S", _long(client.url.password))
    _login(client, "AMQPLAIN", table.decode("ascii"))
    client.expect(commands.Connection.Tune, channel=0)


def test_amqplain_with_a_wrong_byte_array_password_is_refused(client: WireClient) -> None:
    table = _amqplain_entry(b"LOGIN", b"S", _long(client.url.user))
    table += _amqplain_entry(b"PASSWORD", b"x", _long("wrong"))
    _login(client, "AMQPLAIN", table.decode("ascii"))
    assert reply(close_frame(client)) == (403, LOGIN_REFUSED.replace("PLAIN", "AMQPLAIN"), 0, 0)


@pytest.mark.parametrize("case", ["integer-login", "two-byte-arrays", "no-password"])
def test_amqplain_without_string_credentials_closes_without_a_close(
    client: WireClient, case: str
) -> None:
    # A missing LOGIN or PASSWORD, or neither a long string, is a syntax_error in the
    # handshake; an integer LOGIN makes RabbitMQ's check crash: either way the socket closes
    # without a Close (observed on 3.10.8).
    if case == "integer-login":
        table = _amqplain_entry(b"LOGIN", b"I", struct.pack(">i", 5))
        table += _amqplain_entry(b"PASSWORD", b"S", _long(client.url.password))
    elif case == "two-byte-arrays":
        table = _amqplain_entry(b"LOGIN", b"x", _long(client.url.user))
        table += _amqplain_entry(b"PASSWORD", b"x", _long(client.url.password))
    else:
        table = _amqplain_entry(b"LOGIN", b"S", _long(client.url.user))
    _login(client, "AMQPLAIN", table.decode("ascii"))
    assert client.wait_closed(timeout=6) == []


def test_wrong_password_without_capability_just_closes(client: WireClient) -> None:
    # RabbitMQ sends nothing and closes the socket (after a 3 s anti-DoS delay).
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.send(
        commands.Connection.StartOk(
            client_properties={},
            mechanism="PLAIN",
            response="\0guest\0wrong-password",
            locale="en_US",
        )
    )
    assert client.wait_closed(timeout=6) == []


@pytest.mark.parametrize("frame_max", [1024, 4095, 0, 131073])
def test_tune_ok_frame_max_out_of_range_closes_silently(client: WireClient, frame_max: int) -> None:
    # RabbitMQ raises "negotiated frame_max = 1024 is lower than the minimum allowed value
    # (4096)" (or "... higher than the maximum allowed value (131072)") but only logs it: the
    # error carries method 'connection.tune', so rabbit_reader:handle_exception/3 does not take
    # its tuning clause and closes the socket without a Connection.Close (after 3 s).
    client.negotiate(frame_max=frame_max)
    client.send(commands.Connection.Open(virtual_host=client.url.vhost))
    assert client.wait_closed(timeout=6) == []


@pytest.mark.parametrize("source", ["127.0.0.2", "127.1.2.3"])
def test_guest_may_log_in_from_any_127_address(amqp_url: str, source: str) -> None:
    # loopback_users: rabbit_net:is_loopback/1 takes all of 127.0.0.0/8 (and ::1 and
    # IPv4-mapped 127/8), not only 127.0.0.1. Linux routes the whole /8 to lo.
    with WireClient(amqp_url, source_address=source) as c:
        c.connect()
        c.open_channel(1)
        assert_alive(c)


def test_tune_ok_frame_max_at_minimum_is_accepted(client: WireClient) -> None:
    client.connect(frame_max=4096)
    client.open_channel(1)
    assert_alive(client)


def _start_ok(client: WireClient, mechanism: str = "PLAIN", **properties: object) -> None:
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.send(
        commands.Connection.StartOk(
            client_properties={
                "capabilities": {"authentication_failure_close": True},
                **properties,
            },
            mechanism=mechanism,
            response="\0guest\0guest",
            locale="en_US",
        )
    )


def _bad_frame_end(channel: int = 0) -> bytes:
    return raw_frame(FRAME_METHOD, channel, struct.pack(">HH", 10, 11), end=b"\x00")


@pytest.mark.parametrize(
    "case",
    [
        "start-ok-over-4096",
        "bad-frame-end-while-starting",
        "channel-open-while-starting",
        "connection-open-while-starting",
        "unknown-mechanism",
        "bad-frame-end-while-tuning",
    ],
)
def test_errors_before_tune_ok_close_without_a_close_frame(client: WireClient, case: str) -> None:
    # rabbit_reader:handle_exception/3 answers an error in the 'starting' or 'tuning' state
    # with a Close only for a refused login (tested above): anything else closes the socket
    # without one (after 3 s). Until Tune-Ok the frame limit is ?FRAME_MIN_SIZE (4096),
    # so a Start-Ok carrying 5 KB of client properties is frame_too_large.
    if case == "start-ok-over-4096":
        _start_ok(client, big="x" * 5000)
    elif case == "unknown-mechanism":
        _start_ok(client, mechanism="CRAM-MD5")
    elif case == "bad-frame-end-while-tuning":
        _start_ok(client)
        client.expect(commands.Connection.Tune)
        client.send_raw(_bad_frame_end())
    else:
        client.send_raw(PROTOCOL_HEADER)
        client.expect(commands.Connection.Start)
        if case == "bad-frame-end-while-starting":
            client.send_raw(_bad_frame_end())
        elif case == "channel-open-while-starting":
            client.send(commands.Channel.Open(), 1)
        else:
            client.send(commands.Connection.Open(virtual_host="/"))
    assert client.wait_closed(timeout=6) == []


def test_start_ok_within_4096_octets_is_accepted(client: WireClient) -> None:
    _start_ok(client, big="x" * 3500)
    client.expect(commands.Connection.Tune)


def test_channel_frame_before_connection_open_is_505(client: WireClient) -> None:
    # rabbit_reader:handle_frame/4 in the 'opening' state: unexpected_frame, with the
    # frame's octets, and a Close (unlike the states before Tune-Ok).
    client.negotiate()
    client.send(commands.Channel.Open(), 1)
    assert reply(close_frame(client)) == (
        505,
        "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>",
        0,
        0,
    )


def test_a_frame_pamqp_would_not_encode_is_quoted_as_sent(client: WireClient) -> None:
    # Found by tests/fuzz/: a Channel.Open with a non-empty (deprecated) out_of_band is
    # decoded, but pamqp refuses to encode it again for the octets of the 505 text: the
    # error escaped as an internal error. RabbitMQ quotes the octets as they came.
    client.negotiate()
    payload = b"\x00\x14\x00\x0a\x011"  # channel.open, out_of_band "1"
    client.send_raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    assert reply(close_frame(client)) == (
        505,
        "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,49>>",
        0,
        0,
    )


@pytest.mark.parametrize(
    ("payload", "octets"),
    [
        # connection.update-secret, a new_secret that is not UTF-8 (pamqp decodes it to
        # bytes and cannot encode it again)
        (b"\x00\x0a\x00\x46\x00\x00\x00\x01\xff\x01r", "0,10,0,70,0,0,0,1,255,1,114"),
        # basic.publish to an exchange name pamqp refuses to encode
        (b"\x00\x3c\x00\x28\x00\x00\x03a*b\x00\x00", "0,60,0,40,0,0,3,97,42,98,0,0"),
    ],
    ids=["longstr-not-utf8", "publish-odd-exchange-name"],
)
def test_other_frames_pamqp_would_not_encode_are_quoted_as_sent(
    client: WireClient, payload: bytes, octets: str
) -> None:
    client.negotiate()
    client.send_raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    assert reply(close_frame(client)) == (
        505,
        f"UNEXPECTED_FRAME - type 1, all octets = <<{octets}>>",
        0,
        0,
    )


def test_frame_error_while_opening_gets_a_close(client: WireClient) -> None:
    client.negotiate()
    client.send_raw(_bad_frame_end())
    assert reply(close_frame(client, timeout=6)) == (
        501,
        "FRAME_ERROR - type 1, all octets = <<0,10,0,11>>: {invalid_frame_end_marker,0}",
        0,
        0,
    )


def test_handshake_pipelined_in_one_write_uses_the_negotiated_frame_max(
    client: WireClient,
) -> None:
    # A client that sends Tune-Ok, Open, Channel.Open and a 6 KB publish in one write: the
    # publish's frames are over the pre-tune limit but within the frame_max just agreed.
    _start_ok(client)
    tune = client.expect(commands.Connection.Tune)
    queue = unique("pipelined")
    data = b"".join(
        [
            pframe.marshal(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0), 0),
            pframe.marshal(commands.Connection.Open(virtual_host=client.url.vhost), 0),
            pframe.marshal(commands.Channel.Open(), 1),
            pframe.marshal(commands.Queue.Declare(queue=queue, exclusive=True), 1),
            pframe.marshal(commands.Basic.Publish(routing_key=queue), 1),
            pframe.marshal(ContentHeader(0, 6000, commands.Basic.Properties()), 1),
            pframe.marshal(ContentBody(b"x" * 6000), 1),
            pframe.marshal(commands.Basic.Get(queue=queue, no_ack=True), 1),
        ]
    )
    client.send_raw(data)
    client.expect(commands.Connection.OpenOk, channel=0)
    client.expect(commands.Channel.OpenOk, channel=1)
    client.expect(commands.Queue.DeclareOk, channel=1)
    client.expect(commands.Basic.GetOk, channel=1)
    header, body = client.content(1)
    assert (header.body_size, body) == (6000, b"x" * 6000)


def test_frames_before_a_malformed_one_take_effect(opened: WireClient, amqp_url: str) -> None:
    # RabbitMQ's reader handles one frame at a time: a publish that came before a bad frame
    # in the same write is routed before the connection closes.
    queue = unique("before-error")
    with WireClient(amqp_url) as other:
        other.connect()
        other.open_channel(1)
        other.send(commands.Queue.Declare(queue=queue, auto_delete=False), 1)
        other.expect(commands.Queue.DeclareOk, channel=1)
        data = b"".join(
            [
                pframe.marshal(commands.Basic.Publish(routing_key=queue), 1),
                pframe.marshal(ContentHeader(0, 5, commands.Basic.Properties()), 1),
                pframe.marshal(ContentBody(b"hello"), 1),
                _bad_frame_end(1),
            ]
        )
        opened.send_raw(data)
        assert reply(close_frame(opened))[:2] == (
            501,
            "FRAME_ERROR - type 1, all octets = <<0,10,0,11>>: {invalid_frame_end_marker,0}",
        )
        other.send(commands.Queue.Delete(queue=queue), 1)
        assert other.expect(commands.Queue.DeleteOk, channel=1).message_count == 1


def test_channel_max_is_enforced(client: WireClient, bystander: WireClient) -> None:
    client.connect(channel_max=2)
    client.open_channel(1)
    client.open_channel(2)
    client.send(commands.Channel.Open(), 3)
    assert reply(close_frame(client)) == (
        530,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)",
        0,
        0,
    )
    assert_alive(bystander)


def test_channel_max_counts_open_channels_not_numbers(client: WireClient) -> None:
    client.connect(channel_max=2)
    client.open_channel(5)
    client.open_channel(9)
    client.send(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 5)
    client.expect(commands.Channel.CloseOk, channel=5)
    client.open_channel(100)


def test_open_unknown_vhost_is_530(client: WireClient) -> None:
    # The vhost connection-limit check runs first and is what fails for a missing vhost.
    client.negotiate()
    client.send(commands.Connection.Open(virtual_host="nope"))
    assert reply(close_frame(client)) == (530, "NOT_ALLOWED - vhost nope not found", 10, 40)


def test_client_connection_close_gets_close_ok(opened: WireClient) -> None:
    opened.open_channel(2)
    opened.send(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    opened.expect(commands.Connection.CloseOk, channel=0)


# -- heartbeats -------------------------------------------------------------------------------


def test_heartbeats_are_sent_and_a_silent_client_is_dropped(client: WireClient) -> None:
    client.connect(heartbeat=1)
    start = time.monotonic()
    client.read_frame(timeout=1.6, skip_heartbeats=False)  # a heartbeat within ~1 interval
    assert client.heartbeats >= 1
    # We stay silent: the broker gives up after about two missed intervals, with no Close.
    assert client.wait_closed(timeout=8) == []
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed <= 6.0, elapsed
    assert client.heartbeats >= 2


def test_a_client_sending_heartbeats_stays_connected(client: WireClient) -> None:
    client.connect(heartbeat=1)
    client.open_channel(1)
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        client.heartbeat()
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.4)
    assert client.heartbeats >= 2
    assert_alive(client)


# -- frame-level errors -----------------------------------------------------------------------


def test_frame_larger_than_frame_max_is_501(client: WireClient, bystander: WireClient) -> None:
    client.connect(frame_max=4096)
    client.open_channel(1)
    client.send(commands.Basic.Publish(routing_key=unique("nowhere")), 1)
    client.send(ContentHeader(0, 4097, commands.Basic.Properties()), 1)
    client.send_raw(raw_frame(FRAME_BODY, 1, b"x" * 4097))
    assert reply(close_frame(client)) == (
        501,
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}",
        0,
        0,
    )
    assert_alive(bystander)


def test_a_huge_frame_header_sent_alone_before_login_closes(
    client: WireClient, bystander: WireClient
) -> None:
    # A header that arrives in a read of its own announcing 4 GiB: the size is checked at
    # once (before login the limit is ?FRAME_MIN_SIZE), nothing of it is waited for.
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.send_raw(struct.pack(">BHI", FRAME_METHOD, 0, 0xFFFFFFFF))
    assert client.wait_closed(timeout=6) == []
    assert_alive(bystander)


def test_a_huge_frame_header_sent_alone_after_open_is_501(opened: WireClient) -> None:
    opened.send_raw(struct.pack(">BHI", FRAME_BODY, 1, 0xFFFFFFFF))
    code, text, _, _ = reply(close_frame(opened))
    assert (code, text.endswith(f"{{frame_too_large,{0xFFFFFFFF},131064}}")) == (501, True), text


def test_frame_payload_up_to_frame_max_is_tolerated(client: WireClient) -> None:
    # RabbitMQ allows a payload up to frame_max itself (8 bytes of "fudge" for clients that
    # forget the frame overhead); the limit it reports is frame_max - 8.
    client.connect(frame_max=4096)
    client.open_channel(1)
    q = declare_queue(client)
    client.send(commands.Basic.Publish(routing_key=q), 1)
    client.send(ContentHeader(0, 4096, commands.Basic.Properties()), 1)
    client.send_raw(raw_frame(FRAME_BODY, 1, b"y" * 4096))
    client.send(commands.Basic.Get(queue=q, no_ack=True), 1)
    get_ok = client.expect(commands.Basic.GetOk, channel=1)
    assert get_ok.routing_key == q
    _, body = client.content(1)
    assert body == b"y" * 4096


def test_large_method_frame_is_501(client: WireClient) -> None:
    client.connect(frame_max=4096)
    client.open_channel(1)
    client.send_raw(raw_method(1, 50, 10, b"\0\0" + b"x" * 5000))
    assert reply(close_frame(client)) == (
        501,
        "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,5006,4088}",
        0,
        0,
    )


def test_bad_frame_end_byte_is_501(opened: WireClient, bystander: WireClient) -> None:
    qos = struct.pack(">HHIHB", 60, 10, 0, 0, 0)  # basic.qos(0, 0, false)
    opened.send_raw(raw_frame(FRAME_METHOD, 1, qos, end=b"\x00"))
    assert reply(close_frame(opened)) == (
        501,
        "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,0,0>>: "
        "{invalid_frame_end_marker,0}",
        0,
        0,
    )
    assert_alive(bystander)


def test_unknown_frame_type_is_501(opened: WireClient) -> None:
    opened.send_raw(raw_frame(9, 0, b"abc"))
    assert reply(close_frame(opened)) == (
        501,
        'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame',
        0,
        0,
    )


@pytest.mark.parametrize(
    ("frame_type", "channel", "payload", "octets"),
    [
        (1, 1, b"", "<<>>"),  # a method frame without its class and method ids
        (1, 9, b"\x00\x32", "<<0,50>>"),  # on an unopened channel: still the frame's fault
        (2, 1, struct.pack(">HHQ", 60, 0, 3)[:11], "<<0,60,0,0,0,0,0,0,0,0,0>>"),
        (8, 0, b"\x00", "<<0>>"),  # a heartbeat frame carries nothing
        (8, 1, b"ab", '<<"ab">>'),
    ],
    ids=["empty-method", "short-method", "short-header", "heartbeat-payload", "heartbeat-ch1"],
)
def test_frames_too_short_for_their_type_are_unknown_frames(
    opened: WireClient,
    bystander: WireClient,
    frame_type: int,
    channel: int,
    payload: bytes,
    octets: str,
) -> None:
    # rabbit_command_assembler:analyze_frame/3 recognises a method frame of at least four
    # octets (class, method), a header frame of at least twelve (class, weight, body size)
    # and an empty heartbeat; anything else is an unknown frame (observed on 3.10.8).
    opened.send_raw(raw_frame(frame_type, channel, payload))
    assert reply(close_frame(opened)) == (
        501,
        f"FRAME_ERROR - type {frame_type}, all octets = {octets}: unknown_frame",
        0,
        0,
    )
    assert_alive(bystander)


@pytest.mark.parametrize("channel", [1, 7], ids=["open-channel", "unopened-channel"])
def test_heartbeat_on_a_channel_other_than_zero_is_505(opened: WireClient, channel: int) -> None:
    # rabbit_reader:handle_frame/4: a heartbeat belongs to channel 0 (AMQP 0-9-1 4.2.7).
    opened.send_raw(raw_frame(FRAME_HEARTBEAT, channel, b""))
    assert reply(close_frame(opened)) == (505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0)


@pytest.mark.parametrize("size", [12, 13], ids=["no-flags", "half-flags"])
def test_content_header_without_property_flags_is_541(opened: WireClient, size: int) -> None:
    # Twelve octets make a header frame, so the frame is taken; its properties then do not
    # decode, which crashes RabbitMQ's channel (observed on 3.10.8).
    queue = declare_queue(opened)
    opened.send(commands.Basic.Publish(routing_key=queue), 1)
    opened.send_raw(raw_frame(FRAME_HEADER, 1, (struct.pack(">HHQ", 60, 0, 0) + b"\0")[:size]))
    assert reply(close_frame(opened)) == (541, "INTERNAL_ERROR", 0, 0)


def test_truncated_method_arguments_are_501(opened: WireClient) -> None:
    opened.send_raw(raw_method(1, 50, 10, b"\0"))  # queue.declare cut after one byte
    assert reply(close_frame(opened)) == (501, "FRAME_ERROR - cannot decode <<0>>", 50, 10)


@pytest.mark.parametrize(
    ("channel", "class_id", "method_id"),
    [(1, 60, 99), (1, 999, 10), (0, 10, 99)],
    ids=["unknown-method", "unknown-class", "unknown-method-channel-0"],
)
def test_unknown_class_or_method_drops_the_connection(
    opened: WireClient, bystander: WireClient, channel: int, class_id: int, method_id: int
) -> None:
    # rabbit_framing_amqp_0_9_1:lookup_method_name/1 exits with {unknown_method_id, Id}: the
    # reader process dies and the socket is closed at once, without a Connection.Close.
    opened.send_raw(raw_method(channel, class_id, method_id))
    assert opened.wait_closed(timeout=5) == []
    assert_alive(bystander)


# -- channel-level protocol errors that close the connection ----------------------------------


def test_method_on_unopened_channel_is_504(client: WireClient, bystander: WireClient) -> None:
    client.connect()
    client.send(commands.Queue.Declare(queue=unique("q")), 3)
    assert reply(close_frame(client)) == (504, "CHANNEL_ERROR - expected 'channel.open'", 50, 10)
    assert_alive(bystander)


def test_publish_on_unopened_channel_is_504(client: WireClient) -> None:
    client.connect()
    client.publish(4, b"hello", routing_key=unique("q"))
    assert reply(close_frame(client)) == (504, "CHANNEL_ERROR - expected 'channel.open'", 60, 40)


def test_second_channel_open_is_504(opened: WireClient) -> None:
    opened.send(commands.Channel.Open(), 1)
    assert reply(close_frame(opened)) == (
        504,
        "CHANNEL_ERROR - second 'channel.open' seen",
        20,
        10,
    )


@pytest.mark.parametrize(
    "method",
    [
        commands.Connection.CloseOk(),
        commands.Connection.Blocked(reason="busy"),
        commands.Connection.Unblocked(),
        commands.Connection.UpdateSecretOk(),
    ],
    ids=["close-ok", "blocked", "unblocked", "update-secret-ok"],
)
def test_server_side_connection_methods_from_the_client_are_504(
    opened: WireClient, method: object
) -> None:
    # rabbit_reader:handle_method0/2 takes these only in reply to its own (or not at all):
    # anything else on channel 0 of a running connection is its catch-all 504.
    opened.send(method, 0)
    class_id, method_id = divmod(method.index, 0x10000)  # type: ignore[attr-defined]
    assert reply(close_frame(opened)) == (
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
        class_id,
        method_id,
    )


def test_non_connection_method_on_channel_zero_is_504(opened: WireClient) -> None:
    opened.send(commands.Queue.Declare(queue=unique("q")), 0)
    assert reply(close_frame(opened)) == (
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
        50,
        10,
    )


@pytest.mark.parametrize("kind", ["header", "body"])
def test_content_without_publish_is_505(
    opened: WireClient, bystander: WireClient, kind: str
) -> None:
    if kind == "header":
        opened.send(ContentHeader(0, 3, commands.Basic.Properties()), 1)
    else:
        opened.send(ContentBody(b"abc"), 1)
    assert reply(close_frame(opened)) == (
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        0,
        0,
    )
    assert_alive(bystander)


def test_content_header_on_unopened_channel_is_505(client: WireClient) -> None:
    client.connect()
    client.send(ContentHeader(0, 3, commands.Basic.Properties()), 2)
    assert reply(close_frame(client)) == (
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        0,
        0,
    )


def test_content_header_on_channel_zero_is_505(opened: WireClient) -> None:
    opened.send(ContentHeader(0, 3, commands.Basic.Properties()), 0)
    assert reply(close_frame(opened)) == (
        505,
        "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,3,0,0>>",
        0,
        0,
    )


def test_method_instead_of_content_header_is_505(opened: WireClient) -> None:
    opened.send(commands.Basic.Publish(routing_key=unique("q")), 1)
    opened.send(commands.Basic.Publish(routing_key=unique("q")), 1)
    assert reply(close_frame(opened)) == (
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, "
        "got non content header frame instead",
        60,
        40,
    )


def test_method_instead_of_content_body_is_505(opened: WireClient) -> None:
    opened.send(commands.Basic.Publish(routing_key=unique("q")), 1)
    opened.send(ContentHeader(0, 3, commands.Basic.Properties()), 1)
    opened.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    assert reply(close_frame(opened)) == (
        505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        60,
        40,
    )


@pytest.mark.parametrize(
    "properties",
    [
        struct.pack(">H", 0x8000 | 0x2000) + b"\x05ab",  # content_type cut short
        struct.pack(">HI", 0x2000, 16) + b"\x01a",  # headers longer than the frame
        struct.pack(">HI", 0x2000, 3) + b"\x01aZ",  # a field of unknown type Z
        struct.pack(">H", 0x1000) + b"\x02\x00\x00",  # delivery_mode, then 2 bytes too many
    ],
    ids=["truncated", "table-too-long", "unknown-field-type", "bytes-left-over"],
)
def test_properties_that_do_not_decode_are_541(
    opened: WireClient, bystander: WireClient, properties: bytes
) -> None:
    # rabbit_channel decodes the properties of every publish; when they do not decode the
    # channel process crashes and the reader closes the connection with the bare constant.
    queue = declare_queue(opened)
    opened.send(commands.Basic.Publish(routing_key=queue), 1)
    opened.send_raw(raw_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 2) + properties))
    opened.send_raw(raw_frame(FRAME_BODY, 1, b"hi"))
    assert reply(close_frame(opened)) == (541, "INTERNAL_ERROR", 0, 0)
    assert_alive(bystander)


def test_property_text_that_is_not_utf8_is_541(leveret: BrokerThread) -> None:
    # Leveret only: RabbitMQ keeps short strings as bytes and takes this message; pamqp,
    # which decodes Leveret's frames, cannot decode it, so Leveret refuses it the way
    # RabbitMQ refuses properties it cannot decode (leveret.message.properties_decode).
    with WireClient(leveret.url) as client:
        client.connect()
        client.open_channel(1)
        queue = declare_queue(client)
        client.send(commands.Basic.Publish(routing_key=queue), 1)
        properties = struct.pack(">H", 0x8000) + b"\x02\xff\xfe"  # content_type
        client.send_raw(raw_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 2) + properties))
        client.send_raw(raw_frame(FRAME_BODY, 1, b"hi"))
        assert reply(close_frame(client)) == (541, "INTERNAL_ERROR", 0, 0)


def test_a_bug_in_a_handler_closes_only_that_connection_with_541(
    leveret: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Leveret only (a fault injected into the in-process broker): an unexpected exception
    # is logged and closes its connection as RabbitMQ's reader does when a channel process
    # crashes, instead of dropping the socket; the other connections go on.
    def broken(self: object, *args: object) -> None:
        raise RuntimeError("injected")

    with WireClient(leveret.url) as client, WireClient(leveret.url) as other:
        other.connect()
        other.open_channel(1)
        client.connect()
        # Before the channel opens: a channel binds its handlers when it is created.
        monkeypatch.setattr("leveret.wire.channel.Channel._on_basic_qos", broken, raising=True)
        client.open_channel(1)
        client.send(commands.Basic.Qos(prefetch_count=1), 1)
        assert reply(close_frame(client)) == (541, "INTERNAL_ERROR", 0, 0)
        monkeypatch.undo()
        assert_alive(other)


def test_unsolicited_channel_close_ok_is_503(opened: WireClient) -> None:
    opened.send(commands.Channel.CloseOk(), 1)
    assert reply(close_frame(opened)) == (503, "COMMAND_INVALID - unimplemented method", 20, 41)


# -- 530 / 540 from basic methods --------------------------------------------------------------


def test_consumer_tag_reuse_on_a_channel_is_530(opened: WireClient, bystander: WireClient) -> None:
    q = declare_queue(opened)
    opened.send(commands.Basic.Consume(queue=q, consumer_tag="ctag"), 1)
    assert opened.expect(commands.Basic.ConsumeOk, channel=1).consumer_tag == "ctag"
    opened.send(commands.Basic.Consume(queue=q, consumer_tag="ctag"), 1)
    assert reply(close_frame(opened)) == (
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'ctag'",
        60,
        20,
    )
    assert_alive(bystander)


def test_same_consumer_tag_on_two_channels_is_fine(opened: WireClient) -> None:
    opened.open_channel(2)
    q = declare_queue(opened)
    for channel in (1, 2):
        opened.send(commands.Basic.Consume(queue=q, consumer_tag="ctag"), channel)
        assert opened.expect(commands.Basic.ConsumeOk, channel=channel).consumer_tag == "ctag"


def test_server_generated_consumer_tag(opened: WireClient) -> None:
    q = declare_queue(opened)
    opened.send(commands.Basic.Consume(queue=q, consumer_tag=""), 1)
    tag = opened.expect(commands.Basic.ConsumeOk, channel=1).consumer_tag
    assert tag is not None and tag.startswith("amq.ctag-")
    assert len(tag) == len("amq.ctag-") + 22


def test_immediate_publish_is_540(opened: WireClient, bystander: WireClient) -> None:
    opened.publish(1, b"now", routing_key=unique("q"), immediate=True)
    assert reply(close_frame(opened)) == (540, "NOT_IMPLEMENTED - immediate=true", 60, 40)
    assert_alive(bystander)


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (
            commands.Basic.Qos(prefetch_size=5),
            (540, "NOT_IMPLEMENTED - prefetch_size!=0 (5)", 60, 10),
        ),
        (commands.Channel.Flow(active=False), (540, "NOT_IMPLEMENTED - active=false", 20, 20)),
        (commands.Basic.Recover(requeue=False), (540, "NOT_IMPLEMENTED - requeue=false", 60, 110)),
    ],
    ids=["qos-prefetch-size", "flow-false", "recover-requeue-false"],
)
def test_not_implemented_methods_are_540(
    opened: WireClient, method: object, expected: tuple[int, str, int, int]
) -> None:
    opened.send(method, 1)
    assert reply(close_frame(opened)) == expected


def test_channel_flow_true_gets_flow_ok(opened: WireClient) -> None:
    opened.send(commands.Channel.Flow(active=True), 1)
    assert opened.expect(commands.Channel.FlowOk, channel=1).active is True


def test_unsolicited_channel_flow_ok_is_503(opened: WireClient) -> None:
    # RabbitMQ never sends channel.flow, so a flow-ok is no answer to anything (3.10.8).
    opened.send(commands.Channel.FlowOk(active=True), 1)
    assert reply(close_frame(opened)) == (503, "COMMAND_INVALID - unimplemented method", 20, 21)


def test_channel_open_ok_has_an_empty_channel_id(opened: WireClient) -> None:
    # The reserved longstr is sent empty (observed on 3.10.8), checked on the raw bytes.
    opened.send(commands.Channel.Open(), 2)
    assert opened.read_raw_frame() == (FRAME_METHOD, 2, struct.pack(">HHI", 20, 11, 0))


# -- channel close handshake ------------------------------------------------------------------


def test_frames_on_a_closing_channel_are_ignored_until_close_ok(opened: WireClient) -> None:
    missing = unique("missing")
    opened.send(commands.Queue.Declare(queue=missing, passive=True), 1)
    close = opened.expect(commands.Channel.Close, channel=1)
    assert reply(close) == (404, f"NOT_FOUND - no queue '{missing}' in vhost '/'", 50, 10)
    # Until we send Close-Ok the broker drops everything on channel 1, even what would
    # otherwise be an error (a second 404, a 540, a content frame).
    opened.send(commands.Queue.Declare(queue=unique("missing"), passive=True), 1)
    opened.publish(1, b"dropped", routing_key=unique("q"))
    opened.send(commands.Basic.Qos(prefetch_size=5), 1)
    opened.send(commands.Channel.CloseOk(), 1)
    opened.open_channel(1)  # the very next frame is Channel.Open-Ok
    assert_alive(opened)


def test_client_channel_close_while_broker_closes_gets_close_ok(opened: WireClient) -> None:
    # Crossing Channel.Close frames: the broker answers ours with Close-Ok, but the channel
    # number stays taken until our Close-Ok for its Close arrives.
    opened.send(commands.Queue.Declare(queue=unique("missing"), passive=True), 1)
    opened.expect(commands.Channel.Close, channel=1)
    opened.send(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)
    opened.expect(commands.Channel.CloseOk, channel=1)
    opened.send(commands.Channel.CloseOk(), 1)
    opened.open_channel(1)
    assert_alive(opened)


def test_channel_open_on_a_closing_channel_is_504(opened: WireClient) -> None:
    # The one method a closing channel does not ignore: channel.open (before our Close-Ok).
    opened.send(commands.Queue.Declare(queue=unique("missing"), passive=True), 1)
    opened.expect(commands.Channel.Close, channel=1)
    opened.send(commands.Channel.Open(), 1)
    assert reply(close_frame(opened)) == (
        504,
        "CHANNEL_ERROR - second 'channel.open' seen",
        20,
        10,
    )


def test_client_channel_close_and_reopen(opened: WireClient) -> None:
    opened.send(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)
    opened.expect(commands.Channel.CloseOk, channel=1)
    opened.open_channel(1)
    assert_alive(opened)


def test_channel_error_leaves_other_channels_and_connections_alone(
    opened: WireClient, bystander: WireClient
) -> None:
    opened.open_channel(2)
    opened.send(commands.Exchange.Declare(exchange=unique("missing"), passive=True), 2)
    close = opened.expect(commands.Channel.Close, channel=2)
    assert (close.reply_code, close.class_id, close.method_id) == (404, 40, 10)
    opened.send(commands.Channel.CloseOk(), 2)
    assert_alive(opened)
    assert_alive(bystander)


def test_peer_closed_is_reported(client: WireClient) -> None:
    """The helper's own contract: EOF surfaces as PeerClosedError, not as a hang."""
    client.send_raw(b"garbage!")
    assert client.read_raw(8) == PROTOCOL_HEADER
    with pytest.raises(PeerClosedError):
        client.read_frame(timeout=5)


# -- requeue at scale -------------------------------------------------------------------------


def test_closing_a_channel_with_40k_unacked_requeues_them_in_order_without_stalling_others(
    opened: WireClient, bystander: WireClient
) -> None:
    # A consumer without a prefetch limit holds every message; closing its channel gives all
    # of them back, in their original order, redelivered. Another client is served meanwhile
    # (requeueing one by one was O(n^2): 40k held every client for about 150 s).
    count = 40_000
    queue = unique("requeue")
    opened.send(commands.Queue.Declare(queue=queue, auto_delete=False), 1)
    opened.expect(commands.Queue.DeclareOk, channel=1)
    publishes = b"".join(
        pframe.marshal(commands.Basic.Publish(routing_key=queue), 1)
        + pframe.marshal(ContentHeader(0, 8, commands.Basic.Properties()), 1)
        + raw_frame(FRAME_BODY, 1, b"%08d" % n)
        for n in range(count)
    )
    opened.send_raw(publishes)
    opened.send(commands.Basic.Consume(queue=queue), 1)
    opened.expect(commands.Basic.ConsumeOk, channel=1)
    delivered = 0
    while delivered < count:
        frame_type, _, _ = opened.read_raw_frame()
        delivered += frame_type == FRAME_BODY
    opened.send(commands.Channel.Close(200, "bye", 0, 0), 1)
    started = time.monotonic()
    bystander.send(commands.Queue.Declare(queue=queue, passive=True), 1)
    declared = bystander.expect(commands.Queue.DeclareOk, channel=1, timeout=20)
    # Liveness, not a benchmark: before the fix the answer took minutes.
    assert time.monotonic() - started < 10
    opened.expect(commands.Channel.CloseOk, channel=1)
    if declared.message_count != count:  # the declare may have overtaken the requeue
        bystander.send(commands.Queue.Declare(queue=queue, passive=True), 1)
        declared = bystander.expect(commands.Queue.DeclareOk, channel=1)
    assert declared.message_count == count
    for expected in (0, 1, 2):
        bystander.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
        get_ok = bystander.expect(commands.Basic.GetOk, channel=1)
        _, body = bystander.content(1)
        assert (body, get_ok.redelivered) == (b"%08d" % expected, True)
    bystander.send(commands.Queue.Delete(queue=queue), 1)
    bystander.expect(commands.Queue.DeleteOk, channel=1)


# -- after close-ok ---------------------------------------------------------------------------


def test_the_broker_reads_on_after_close_ok_until_the_client_closes(
    opened: WireClient, bystander: WireClient
) -> None:
    # rabbit_reader: after close-ok the connection is 'closed' and frames are dropped until
    # the client closes the socket (or ?CLOSING_TIMEOUT). A client still writing (amqplib's
    # burst of publishes) must not get EPIPE and lose its close callback.
    queue = declare_queue(opened)
    opened.send(commands.Connection.Close(200, "bye", 0, 0))
    opened.expect(commands.Connection.CloseOk, channel=0)
    for n in range(200):  # still writing after close-ok: read and dropped
        opened.publish(1, b"late %d" % n, routing_key=queue)
    with pytest.raises(TimeoutError):  # the socket stays open: no EOF
        opened.read_frame(timeout=0.5)
    opened.publish(1, b"later", routing_key=queue)  # and writes still succeed
    opened.close()
    # Nothing sent after the Close took effect (the exclusive queue went with the connection).
    bystander.send(commands.Queue.Declare(queue=queue, passive=True), 1)
    close = bystander.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == 404


def test_amqplain_with_a_deeply_nested_extra_entry_logs_in(client: WireClient) -> None:
    # RabbitMQ parses the whole response table (any depth); only LOGIN and PASSWORD count.
    value = b"F" + struct.pack(">I", 0)  # an empty table
    # 560 levels: within the 4 KiB a frame may have before login, deeper than pamqp recursed.
    for _ in range(560):  # each a table holding the one before under the key "k"
        value = b"F" + struct.pack(">I", 2 + len(value)) + b"\x01k" + value
    raw = amqplain_response(client.url.user, client.url.password) + b"\x05extra" + value
    client.send_raw(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    # Start-Ok by hand (pamqp sends the response as text): no client properties, the
    # mechanism, the response bytes, the locale.
    args = struct.pack(">I", 0) + b"\x08AMQPLAIN" + struct.pack(">I", len(raw)) + raw
    client.send_raw(raw_method(0, 10, 11, args + b"\x05en_US"))
    client.expect(commands.Connection.Tune, channel=0)
