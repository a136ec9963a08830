"""Encoded message properties: decoding and encoding them apart from a message, reading
the headers table and delivery mode from raw bytes, and the cache keyed by them
(leveret.message)."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands, decode

from leveret.node.fieldtable import marshal_content_header
from leveret.node.message import (
    CACHED_PROPERTIES_MAX,
    Message,
    cached_by_properties,
    headers_and_mode,
    marshal_properties,
    unmarshal_properties,
    with_header,
)


def test_properties_round_trip() -> None:
    properties = commands.Basic.Properties(
        content_type="text/plain",
        delivery_mode=2,
        headers={"count": 3, "names": ["a", "b"]},
        message_id="m-1",
        priority=4,
    )
    decoded = unmarshal_properties(marshal_properties(properties))
    assert decoded.content_type == "text/plain"
    assert decoded.delivery_mode == 2
    assert decoded.headers == {"count": 3, "names": ["a", "b"]}
    assert (decoded.message_id, decoded.priority) == ("m-1", 4)


def test_cache_keeps_small_properties_and_passes_large_ones_through() -> None:
    calls: list[bytes] = []

    @cached_by_properties(maxsize=8)
    def length(encoded: bytes, extra: int) -> int:
        calls.append(encoded)
        return len(encoded) + extra

    small = b"s" * CACHED_PROPERTIES_MAX
    large = b"l" * (CACHED_PROPERTIES_MAX + 1)
    limit = CACHED_PROPERTIES_MAX
    assert [length(small, 1), length(small, 1), length(small, 2)] == [limit + 1] * 2 + [limit + 2]
    assert [length(large, 0), length(large, 0)] == [limit + 1] * 2
    # Each distinct small argument list computed once; the large one every time.
    assert calls == [small, small, large, large]


@pytest.mark.parametrize("content_type", [None, "application/json"])
@pytest.mark.parametrize("content_encoding", [None, "gzip"])
@pytest.mark.parametrize("headers", [None, {}, {"a": 1, "list": ["x", 2]}])
@pytest.mark.parametrize("delivery_mode", [None, 1, 2])
def test_headers_and_mode_read_from_the_raw_header(
    content_type: str | None,
    content_encoding: str | None,
    headers: dict[str, Any] | None,
    delivery_mode: int | None,
) -> None:
    """The raw-bytes reading agrees with pamqp's full decode, whatever precedes or follows."""
    properties = commands.Basic.Properties(
        content_type=content_type,
        content_encoding=content_encoding,
        headers=headers,
        delivery_mode=delivery_mode,
        message_id="m-1",
    )
    payload = marshal_content_header(7, properties)
    table, mode = headers_and_mode(payload)
    decoded = Message("", "k", payload, b"1234567").copy_properties()
    assert mode == decoded.delivery_mode == delivery_mode
    if headers is None:
        assert table is None
    else:
        assert table is not None
        assert decode.field_table(table) == (len(table), decoded.headers)
    assert Message("", "k", payload, b"1234567").persistent == (delivery_mode == 2)


def test_with_header_replaces_an_entry_and_keeps_the_other_types() -> None:
    # A released delayed message's x-delay becomes a signedint; the publisher's byte and
    # longstr headers keep their wire types (RabbitMQ keeps a table's other entries as is).
    def entry(name: bytes, value: bytes) -> bytes:
        return bytes([len(name)]) + name + value

    def content_header(table: bytes) -> bytes:
        fixed = (60).to_bytes(2, "big") + bytes(2) + bytes(8)
        return fixed + (0x2000).to_bytes(2, "big") + len(table).to_bytes(4, "big") + table

    byte, text = entry(b"a", b"b\x05"), entry(b"z", b"S\x00\x00\x00\x01y")
    before = byte + entry(b"x-delay", b"I" + (250).to_bytes(4, "big")) + text
    after = byte + text + entry(b"x-delay", b"I" + (-250).to_bytes(4, "big", signed=True))
    assert with_header(content_header(before), "x-delay", -250, "I") == content_header(after)
