"""Timestamp field values: pamqp's reading of a 64-bit timestamp (seconds up to 2^32,
milliseconds above), and the wire value kept for those above 2^32 so that they encode back as
they came.

Its own module, outside build_support/compiled.txt, because :class:`WireTimestamp`
subclasses a C type outside builtins (``datetime.datetime``), which mypyc cannot compile into
a native class and does not refuse: compiled with fields.py, it crashed the interpreter.
Imported from here, it stays a Python class in both builds.
"""

from __future__ import annotations

import datetime

# pamqp reads a timestamp above this as milliseconds ("anything above the year 2106").
_SECONDS_MAX = 0xFFFFFFFF


class WireTimestamp(datetime.datetime):
    """A timestamp field value above 2^32, which pamqp reads as milliseconds: the datetime
    pamqp gives (:data:`datetime.datetime.max` when the value is beyond year 9999, where
    pamqp fails) with the 64-bit value from the wire in :attr:`raw`, which encoding writes
    back. Two of them are equal when their wire values are."""

    __slots__ = ("raw",)
    raw: int

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WireTimestamp):
            return self.raw == other.raw
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = datetime.datetime.__hash__


def decode_timestamp(value: int) -> datetime.datetime:
    """A timestamp's Python value from its unsigned 64-bit wire value: pamqp's datetime,
    a :class:`WireTimestamp` above 2^32."""
    if value <= _SECONDS_MAX:
        return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    try:
        stamp = WireTimestamp.fromtimestamp(value / 1000.0, tz=datetime.UTC)
    except (ValueError, OverflowError, OSError):
        stamp = WireTimestamp(9999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC)
    stamp.raw = value
    return stamp


def timestamp_value(value: datetime.datetime) -> int:
    """The wire value of a timestamp (seconds since the epoch; naive means UTC)."""
    raw = getattr(value, "raw", None)
    if raw is not None:
        return int(raw)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return int(value.timestamp())
