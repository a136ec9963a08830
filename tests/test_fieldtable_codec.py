"""leveret.node.fieldtable against pamqp, the codec of record: the iterative decoder gives pamqp's
values, the checker agrees with the decoder, encoding round-trips; and what pamqp cannot do:
tables nested 15,000 deep, timestamps over all 64 bits. Also the method decoding in
leveret.wire.codec that uses it, against pamqp's, and the publish-path check in leveret.message."""

from __future__ import annotations

import datetime
import decimal
import json
import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pamqp import commands, decode, encode, header
from pamqp import frame as pframe

from leveret.node import fieldtable
from leveret.node.message import (
    CACHED_PROPERTIES_MAX,
    decoded_table,
    marshal_properties,
    properties_decode,
    unmarshal_properties,
)
from leveret.wire import codec

# -- values pamqp can encode --------------------------------------------------------------

names = st.text(max_size=12).filter(lambda t: len(t.encode()) < 256)
scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=20),
    st.booleans(),
    st.floats(allow_nan=False, width=32),  # pamqp writes floats as 32-bit
    st.none(),
    st.decimals(places=2, min_value=-(10**6), max_value=10**6, allow_nan=False),
    st.integers(0, 2**32 - 1).map(lambda s: datetime.datetime.fromtimestamp(s, datetime.UTC)),
    st.binary(max_size=8).map(bytearray),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
    max_leaves=20,
)
tables = st.dictionaries(names, values, max_size=6)


def _pamqp_table(table: dict[str, Any]) -> bytes:
    return encode.field_table(table)


@settings(deadline=None)  # timing varies on a loaded machine
@given(tables)
def test_decoding_gives_pamqps_values(table: dict[str, Any]) -> None:
    data = _pamqp_table(table)
    assert fieldtable.decode_table(data) == decode.field_table(data)
    assert fieldtable.check_table(data)
    assert decoded_table(data) == decode.field_table(data)[1]


@settings(deadline=None)  # timing varies on a loaded machine
@given(tables)
def test_encoding_round_trips_with_rabbitmqs_types(table: dict[str, Any]) -> None:
    data = fieldtable.encode_table(table)
    assert fieldtable.check_table(data)
    assert fieldtable.decode_table(data) == decode.field_table(data)
    # pamqp reads back what was encoded (ints as longs, floats as doubles: exact).
    assert decode.field_table(data)[1] == table
    assert fieldtable.encode_table(fieldtable.decode_table(data)[1]) == data


def _mutations() -> st.SearchStrategy[bytes]:
    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        data = bytearray(_pamqp_table(draw(tables)))
        for _ in range(draw(st.integers(1, 3))):
            if len(data) <= 4:
                break
            at = draw(st.integers(4, len(data) - 1))
            edit = draw(st.sampled_from(["set", "cut", "add"]))
            if edit == "cut":
                del data[at]
            elif edit == "set":
                data[at] = draw(st.integers(0, 255))
            else:
                data.insert(at, draw(st.integers(0, 255)))
        # Keep the length prefix consistent now and then, so the entries are looked at.
        if draw(st.booleans()):
            data[:4] = struct.pack(">I", len(data) - 4)
        return bytes(data)

    return mutated()


@settings(max_examples=500, deadline=None)
@given(_mutations() | st.binary(max_size=40))
@example(b"\x00\x00\x00\x02\x01k")  # a name and no value: pamqp reads None, RabbitMQ refuses
@example(b"\x00\x00\x00\x07\x01kF\x00\x00\x00\x09")  # a nested table past its container
@example(b"\x00\x00\x00\x04\x02k0\x1a")  # an unknown type as the last octet
@example(b"\x00\x00\x00\x05\x01kA\x00\x00")  # an array's length cut short
def test_the_checker_agrees_with_the_decoder(data: bytes) -> None:
    try:
        taken, _ = fieldtable.decode_table(data)
    except ValueError:
        decodes = False
    else:
        decodes = taken == len(data)
    assert fieldtable.check_table(data) == decodes


def test_large_tables_take_the_ascii_shortcut_and_still_check_names() -> None:
    body = b"".join(bytes([5]) + f"k{i:04d}".encode() + b"S\x00\x00\x00\x02ab" for i in range(100))
    table = struct.pack(">I", len(body)) + body
    assert fieldtable.check_table(table)
    bad_name = table.replace(b"k0042", b"k\xff042")
    assert not fieldtable.check_table(bad_name)
    with pytest.raises(ValueError):
        fieldtable.decode_table(bad_name)
    # Text that is not UTF-8 in a value is fine (pamqp gives bytes).
    odd_value = table.replace(b"\x02ab", b"\x02a\xff", 1)
    assert fieldtable.check_table(odd_value)
    assert fieldtable.decode_table(odd_value)[1]["k0000"] == b"a\xff"


# -- every width at its extremes, any timestamp -------------------------------------------

EXTREMES = [
    (b"b", ">b", -(2**7)), (b"b", ">b", 2**7 - 1), (b"B", ">B", 255), (b"s", ">h", -(2**15)),
    (b"u", ">H", 2**16 - 1), (b"I", ">i", -(2**31)), (b"i", ">I", 2**32 - 1),
    (b"l", ">q", -(2**63)), (b"L", ">q", 2**63 - 1),
]  # fmt: skip


@pytest.mark.parametrize(("tag", "fmt", "value"), EXTREMES)
def test_integers_of_every_width(tag: bytes, fmt: str, value: int) -> None:
    table = _one(tag + struct.pack(fmt, value))
    assert fieldtable.decode_table(table) == decode.field_table(table)
    assert fieldtable.decode_table(table)[1] == {"v": value}


def _one(tagged: bytes) -> bytes:
    body = b"\x01v" + tagged
    return struct.pack(">I", len(body)) + body


TIMESTAMPS = [0, 2**32 - 1, 2**32, 253402300799999, 253402300800000, 2**62, 2**63, 2**64 - 1]


@pytest.mark.parametrize("raw", TIMESTAMPS)
def test_any_timestamp_decodes_and_encodes_back(raw: int) -> None:
    table = _one(b"T" + struct.pack(">Q", raw))
    value = fieldtable.decode_table(table)[1]["v"]
    assert isinstance(value, datetime.datetime)
    try:
        expected = decode.field_table(table)[1]["v"]
    except ValueError:  # pamqp: year out of range
        assert raw > 253402300799999
        assert value.year == 9999
    else:
        assert value == expected
    assert fieldtable.timestamp_value(value) == raw
    assert fieldtable.encode_table(fieldtable.decode_table(table)[1]) == table
    assert fieldtable.amqp_json(value) == (raw if raw > 2**32 - 1 else int(value.timestamp()))


def test_timestamps_beyond_datetime_differ_by_their_wire_value() -> None:
    a, b = fieldtable.decode_timestamp(2**62), fieldtable.decode_timestamp(2**63)
    assert a != b and a == fieldtable.decode_timestamp(2**62)
    assert len({a, fieldtable.decode_timestamp(2**62)}) == 1


# -- nesting -------------------------------------------------------------------------------


def _nested(depth: int, arrays: bool) -> bytes:
    value = b"S\x00\x00\x00\x01x"
    for _ in range(depth):
        if arrays:
            value = b"A" + struct.pack(">I", len(value)) + value
        else:
            body = b"\x01k" + value
            value = b"F" + struct.pack(">I", len(body)) + body
    return _one(value)


@pytest.mark.parametrize("arrays", [False, True])
def test_fifteen_thousand_levels(arrays: bool) -> None:
    table = _nested(15000, arrays)
    assert fieldtable.check_table(table)
    taken, value = fieldtable.decode_table(table)
    assert taken == len(table)
    levels, node = 0, value["v"]
    while isinstance(node, dict | list):
        node = node["k"] if isinstance(node, dict) else node[0]
        levels += 1
    assert (levels, node) == (15000, "x")
    assert fieldtable.encode_table(value) == table
    # JSON shows the first JSON_DEPTH_MAX levels (json.dumps recurses), then says so.
    shown = fieldtable.amqp_json(value)
    text = json.dumps(shown)
    assert text.count("{") + text.count("[") == fieldtable.JSON_DEPTH_MAX
    assert json.dumps(fieldtable.TOO_DEEP_FOR_JSON) in text
    # Each container must hold its contents: one octet short is refused at any depth.
    assert not fieldtable.check_table(table[:-1])
    with pytest.raises(ValueError):
        fieldtable.decode_table(table[:-1])


def test_json_within_the_depth_limit_is_what_json_can_write() -> None:
    table = _nested(fieldtable.JSON_DEPTH_MAX - 1, arrays=False)
    value = fieldtable.decode_table(table)[1]
    assert json.dumps(fieldtable.amqp_json(value)).count("{") == fieldtable.JSON_DEPTH_MAX
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    shallow = {"a": [1, {"b": when, "c": b"x"}], "d": decimal.Decimal("1.5"), "e": (1, 2)}
    assert fieldtable.amqp_json(shallow) == {
        "a": [1, {"b": int(when.timestamp()), "c": "x"}],
        "d": 1.5,
        "e": [1, 2],
    }


# -- basic properties ----------------------------------------------------------------------

shortstrs = st.text(max_size=20).filter(lambda t: len(t.encode()) < 256)
properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | shortstrs,
    content_encoding=st.none() | shortstrs,
    headers=st.none() | tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | shortstrs,
    reply_to=st.none() | shortstrs,
    expiration=st.none() | shortstrs,
    message_id=st.none() | shortstrs,
    timestamp=st.none()
    | st.integers(0, 2**32 - 1).map(lambda s: datetime.datetime.fromtimestamp(s, datetime.UTC)),
    message_type=st.none() | shortstrs,
    user_id=st.none() | shortstrs,
    app_id=st.none() | shortstrs,
)


@settings(deadline=None)  # timing varies on a loaded machine
@given(properties)
def test_properties_decode_as_pamqp_decodes_them(props: commands.Basic.Properties) -> None:
    payload = header.ContentHeader(0, 3, props).marshal()
    expected = header.ContentHeader()
    expected.unmarshal(payload)
    assert unmarshal_properties(payload[12:]) == expected.properties
    assert properties_decode(payload)


@settings(deadline=None)  # timing varies on a loaded machine
@given(properties)
def test_properties_encode_as_pamqp_encodes_them_but_the_headers(
    props: commands.Basic.Properties,
) -> None:
    headers, props.headers = props.headers, None
    assert marshal_properties(props) == header.ContentHeader(0, 0, props).marshal()[12:]
    props.headers = headers
    # Read back the same, but for empty strings, which pamqp (and so this) leaves out.
    assert _set(unmarshal_properties(marshal_properties(props))) == _set(props)


def _set(props: commands.Basic.Properties) -> dict[str, Any]:
    return {k: getattr(props, k) for k in props.__slots__ if getattr(props, k) not in (None, "")}


@pytest.mark.parametrize("raw", TIMESTAMPS)
def test_a_timestamp_property_of_any_value(raw: int) -> None:
    encoded = struct.pack(">HQ", 0x0240, raw)[:2] + b"\x01r" + struct.pack(">Q", raw)
    props = unmarshal_properties(encoded)
    assert props.reply_to == "r"
    assert fieldtable.timestamp_value(props.timestamp) == raw
    assert marshal_properties(props) == encoded
    assert properties_decode(struct.pack(">HHQ", 60, 0, 0) + encoded)


def test_the_publish_check_takes_deep_and_large_headers() -> None:
    fixed = struct.pack(">HHQH", 60, 0, 0, 0x2000)
    deep = _nested(15000, arrays=False)
    assert properties_decode(fixed + deep)
    assert not properties_decode(fixed + deep[:-1])
    assert not properties_decode(fixed + deep + b"\x00")  # bytes left over
    # Large tables are remembered once found well formed, by their bytes.
    body = b"".join(bytes([5]) + f"h{i:04d}".encode() + b"t\x01" for i in range(500))
    large = struct.pack(">I", len(body)) + body
    assert len(large) > CACHED_PROPERTIES_MAX
    assert properties_decode(fixed + large) and properties_decode(fixed + large)
    assert not properties_decode(fixed + large[:-2] + b"Z\x01")  # an unknown field type


# -- methods with tables (leveret.wire.codec) ---------------------------------------------------

table_methods = st.one_of(
    st.builds(
        commands.Queue.Declare,
        queue=st.text("abc", max_size=5),
        passive=st.booleans(),
        durable=st.booleans(),
        exclusive=st.booleans(),
        auto_delete=st.booleans(),
        nowait=st.booleans(),
        arguments=tables,
    ),
    st.builds(
        commands.Exchange.Declare,
        exchange=st.text("abc", max_size=5),
        exchange_type=st.sampled_from(["direct", "topic"]),
        passive=st.booleans(),
        durable=st.booleans(),
        auto_delete=st.booleans(),
        internal=st.booleans(),
        nowait=st.booleans(),
        arguments=tables,
    ),
    st.builds(
        commands.Queue.Bind,
        queue=st.text("abc", max_size=5),
        exchange=st.text("abc", max_size=5),
        routing_key=shortstrs,
        nowait=st.booleans(),
        arguments=tables,
    ),
    st.builds(commands.Queue.Unbind, queue=st.text("q", max_size=3), arguments=tables),
    st.builds(
        commands.Exchange.Bind, destination=st.just("d"), source=st.just("s"), arguments=tables
    ),
    st.builds(commands.Exchange.Unbind, destination=st.just("d"), arguments=tables),
    st.builds(
        commands.Basic.Consume,
        queue=st.text("abc", max_size=5),
        consumer_tag=shortstrs,
        no_local=st.booleans(),
        no_ack=st.booleans(),
        exclusive=st.booleans(),
        nowait=st.booleans(),
        arguments=tables,
    ),
    st.builds(
        commands.Connection.StartOk,
        client_properties=tables,
        mechanism=st.sampled_from(["PLAIN", "AMQPLAIN"]),
        response=st.text(max_size=10),
        locale=st.just("en_US"),
    ),
)


@settings(deadline=None)  # timing varies on a loaded machine
@given(table_methods)
def test_methods_with_tables_decode_as_pamqp_decodes_them(method: Any) -> None:
    payload = pframe.marshal(method, 1)[7:-1]
    decoded = codec.decode_method(payload)
    expected = type(method)()
    expected.unmarshal(payload[4:])
    assert type(decoded) is type(method)
    assert {k: getattr(decoded, k) for k in method.__slots__} == {
        k: getattr(expected, k) for k in method.__slots__
    }
    if hasattr(method, "arguments"):
        assert isinstance(decoded.arguments, codec.TypedTable)
        assert set(decoded.arguments.types) == set(method.arguments)
    assert codec.frame_octets(decoded) == (codec.FRAME_METHOD, payload)


def test_a_method_with_a_deep_table_and_cut_short_ones() -> None:
    args = _nested(15000, arrays=True)
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x00" + args
    declare = codec.decode_method(payload)
    assert isinstance(declare, commands.Queue.Declare)
    assert (declare.queue, declare.arguments.types) == ("q", {"v": "array"})
    for cut in (len(payload) - 1, 9, 7):
        with pytest.raises(Exception) as info:
            codec.decode_method(payload[:cut])
        assert getattr(info.value, "code", None) == 501


@pytest.mark.parametrize(
    "value", ["1.25", "-2", "10", "1E+2", "0.000", "-2147483648", "2147483647", "1.5E-250"]
)
def test_decimals_encode_as_pamqp_encodes_them(value: str) -> None:
    number = decimal.Decimal(value)
    assert fieldtable.encode_value(number) == b"D" + encode.decimal(number)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "2147483648", "1E-256"])
def test_decimals_out_of_range_are_refused_as_pamqp_refuses_them(value: str) -> None:
    with pytest.raises(TypeError):
        encode.decimal(decimal.Decimal(value))
    with pytest.raises(TypeError):
        fieldtable.encode_value(decimal.Decimal(value))
