"""Encoded message properties: decoding and encoding them apart from a message, and the
cache keyed by them (broker.message)."""

from __future__ import annotations

from pamqp import commands

from broker.message import (
    CACHED_PROPERTIES_MAX,
    cached_by_properties,
    marshal_properties,
    unmarshal_properties,
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
    assert [length(small, 1), length(small, 1), length(small, 2)] == [2049, 2049, 2050]
    assert [length(large, 0), length(large, 0)] == [2049, 2049]
    # Each distinct small argument list computed once; the large one every time.
    assert calls == [small, small, large, large]
