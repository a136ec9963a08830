"""Segments: per-record magic, resynchronisation after a bad record, the version 1 format, and
reading kept-aside messages back (``MessageStore.reload``)."""

from __future__ import annotations

import itertools
import logging
import struct
from pathlib import Path

import pytest

from leveret.storage.messages import MessageStore
from leveret.storage.segments import (
    FRAME_LEN,
    HEADER,
    HEADER_LEN,
    RECORD_MAGIC,
    SEGMENT_MAGIC,
    StoredMessage,
    message_record,
    queue_prefix,
    segment_path,
)

Q1 = ("/", "q1")
Q2 = ("v", "q2")
HEADER_PAYLOAD = b"\x00\x3c\x00\x00" + bytes(10)

Recovered = dict[tuple[str, str], list[StoredMessage]]


def reopen(directory: Path, **kwargs: int) -> tuple[MessageStore, Recovered]:
    store = MessageStore.open(directory, **kwargs)
    return store, store.recover()


def bodies(recovered: Recovered, queue: tuple[str, str] = Q1) -> list[bytes]:
    return [m.body for m in recovered.get(queue, [])]


def fill(directory: Path, n: int, body: bytes = b"", **kwargs: int) -> None:
    with MessageStore.open(directory, **kwargs) as store:
        for i in range(n):
            store.append(Q1, "ex", f"rk.{i}", HEADER_PAYLOAD, body + b"body-%d" % i)


def record_offsets(data: bytes, frame_len: int = FRAME_LEN) -> list[int]:
    """Record offsets of a segment: the length is the u32 just before the CRC."""
    offsets, pos = [], HEADER_LEN
    while pos < len(data):
        offsets.append(pos)
        pos += frame_len + struct.unpack_from(">I", data, pos + frame_len - 8)[0]
    return offsets


def expected(n: int, lost: int | None = None) -> list[bytes]:
    return [b"body-%d" % i for i in range(n) if i != lost]


def test_records_start_with_the_magic(tmp_path: Path) -> None:
    fill(tmp_path, 3)
    data = segment_path(tmp_path, 1).read_bytes()
    assert data[:HEADER_LEN] == HEADER.pack(SEGMENT_MAGIC, 2)
    offsets = record_offsets(data)
    assert len(offsets) == 3
    assert all(data[o : o + 4] == RECORD_MAGIC for o in offsets)


@pytest.mark.parametrize("bit", range(32))
def test_any_flipped_bit_of_a_length_field_costs_one_message(tmp_path: Path, bit: int) -> None:
    fill(tmp_path, 9)
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    bad = record_offsets(bytes(data))[4]
    data[bad + 4 + bit // 8] ^= 0x80 >> (bit % 8)
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    assert bodies(recovered) == expected(9, lost=4)
    store.close()


@pytest.mark.parametrize("field", ["magic", "crc", "flags", "msg_id", "name lengths", "body"])
def test_a_flipped_bit_anywhere_costs_at_most_that_message(tmp_path: Path, field: str) -> None:
    fill(tmp_path, 9)
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    offsets = record_offsets(bytes(data))
    at = {"magic": 1, "crc": 9, "flags": 12, "msg_id": 20, "name lengths": 33, "body": -3}[field]
    data[(offsets[5] if at < 0 else offsets[4]) + at] ^= 0x04
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    got = bodies(recovered)
    if field == "magic":  # the magic only serves resynchronisation: the record is sound
        assert got == expected(9)
    else:
        assert got == expected(9, lost=4)
    store.close()


@pytest.mark.parametrize("added", [128, 1024])
def test_a_length_that_lands_on_a_later_record_skips_nothing_else(
    tmp_path: Path, added: int
) -> None:
    """Records of exactly 128 bytes: the flipped bit makes the length point at a later sound
    record; the records in between are sound and must not be skipped."""
    with MessageStore.open(tmp_path) as store:
        for i in range(20):
            store.append(Q1, "ex", "k", HEADER_PAYLOAD, b"body-%02d" % i + bytes(64))
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    offsets = record_offsets(bytes(data))
    assert {b - a for a, b in itertools.pairwise(offsets)} == {128}
    length = struct.unpack_from(">I", data, offsets[5] + 4)[0]
    assert not length & added
    struct.pack_into(">I", data, offsets[5] + 4, length | added)
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    assert [m.body[:7] for m in recovered[Q1]] == [b"body-%02d" % i for i in range(20) if i != 5]
    store.close()


def test_one_bad_length_in_a_big_segment_costs_one_message(tmp_path: Path) -> None:
    """The outside fault test's case: 4000 messages in one segment, a bit flipped in the
    length field of the 2000th record."""
    fill(tmp_path, 4000, body=bytes(200))
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    bad = record_offsets(bytes(data))[1999]
    data[bad + 5] ^= 0x10  # the length grows by 1 MiB: "runs past the end"-sized
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    assert len(recovered[Q1]) == 3999
    assert [m.body[200:] for m in recovered[Q1]] == expected(4000, lost=1999)
    store.close()


def test_the_magic_inside_a_body_is_no_record(tmp_path: Path) -> None:
    """A body holding the magic, and even a whole record with a smaller id: after damage to
    that very record, resynchronisation lands on the next real record."""
    fake = message_record(1, 0, queue_prefix(("/", "fake")), b"", b"k", b"h", b"fake")
    with MessageStore.open(tmp_path) as store:
        for i in range(6):
            body = RECORD_MAGIC + b"\x00\x00\x00\x10" + fake if i == 3 else b"body-%d" % i
            store.append(Q1, "ex", "k", HEADER_PAYLOAD, body)
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    bad = record_offsets(bytes(data))[3]
    data[bad + 4] ^= 0x01
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    assert bodies(recovered) == [b"body-%d" % i for i in (0, 1, 2, 4, 5)]
    assert ("/", "fake") not in recovered
    store.close()


def test_a_skipped_record_stays_skipped_when_the_segment_is_rewritten(tmp_path: Path) -> None:
    fill(tmp_path, 60, segment_size=2000)
    first = segment_path(tmp_path, 1)
    data = bytearray(first.read_bytes())
    offsets = record_offsets(bytes(data))
    data[offsets[2] + 6] ^= 0x01
    first.write_bytes(data)
    store, recovered = reopen(tmp_path, segment_size=2000)
    survivors = recovered[Q1]
    assert len(survivors) == 59
    kept = [m.msg_id for m in survivors[: len(offsets) - 1 : 3]]
    for message in survivors[: len(offsets) - 1]:
        if message.msg_id not in kept:
            store.ack(Q1, message.msg_id)
    store.sync()
    while store.needs_compaction():
        store.compact()
    store.close()
    store, recovered = reopen(tmp_path, segment_size=2000)
    assert [m.msg_id for m in recovered[Q1]][: len(kept)] == kept
    assert len(recovered[Q1]) == len(kept) + 59 - (len(offsets) - 1)
    store.close()


# -- version 1 segments -------------------------------------------------------------------


def make_v1(path: Path) -> list[int]:
    """Rewrite a version 2 segment in the version 1 format; returns the record offsets."""
    data = path.read_bytes()
    offsets = record_offsets(data)
    records = [data[o + 4 : e] for o, e in zip(offsets, [*offsets[1:], len(data)], strict=True)]
    path.write_bytes(HEADER.pack(SEGMENT_MAGIC, 1) + b"".join(records))
    return record_offsets(path.read_bytes(), frame_len=8)


def test_version_1_segments_are_read_and_never_appended_to(tmp_path: Path) -> None:
    fill(tmp_path, 5)
    v1 = segment_path(tmp_path, 1)
    make_v1(v1)
    before = v1.read_bytes()
    store, recovered = reopen(tmp_path)
    assert bodies(recovered) == expected(5)
    assert store.append(Q1, "ex", "k", HEADER_PAYLOAD, b"new") == 6
    store.close()
    assert v1.read_bytes() == before  # the new message went to a new, version 2 segment
    assert segment_path(tmp_path, 2).read_bytes()[:HEADER_LEN] == HEADER.pack(SEGMENT_MAGIC, 2)
    _, recovered = reopen(tmp_path)
    assert bodies(recovered) == [*expected(5), b"new"]


@pytest.mark.parametrize("bit", [0, 7, 13, 30])
def test_version_1_resynchronises_on_the_next_ids(tmp_path: Path, bit: int) -> None:
    fill(tmp_path, 9)
    path = segment_path(tmp_path, 1)
    offsets = make_v1(path)
    data = bytearray(path.read_bytes())
    data[offsets[4] + bit // 8] ^= 0x80 >> (bit % 8)
    path.write_bytes(data)
    store, recovered = reopen(tmp_path)
    assert bodies(recovered) == expected(9, lost=4)
    store.close()


def test_rewriting_a_version_1_segment_upgrades_it(tmp_path: Path) -> None:
    fill(tmp_path, 40, segment_size=1000)
    v1 = segment_path(tmp_path, 1)
    in_first = len(make_v1(v1))
    assert 3 < in_first < 40
    store, recovered = reopen(tmp_path, segment_size=1000)
    for message in recovered[Q1][1:in_first]:
        store.ack(Q1, message.msg_id)
    store.sync()
    assert store.compact().rewritten == 1
    store.close()
    assert v1.read_bytes()[:HEADER_LEN] == HEADER.pack(SEGMENT_MAGIC, 2)
    store, recovered = reopen(tmp_path, segment_size=1000)
    assert bodies(recovered) == [b"body-0", *expected(40)[in_first:]]
    store.close()


# -- reading messages back ----------------------------------------------------------------


def test_reload_reads_messages_left_in_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(tmp_path, segment_size=1500) as store:
        for i in range(30):
            store.append(Q1 if i % 2 else Q2, "ex", f"k{i}", HEADER_PAYLOAD, b"%d" % i)
        store.sync()
        store.delivered(Q2, 3)
        store.ack(Q2, 5)
    store, recovered = reopen(tmp_path, segment_size=1500)
    # Q2 is "unknown": left alone (not dropped). Q1's messages go on being used.
    for message in recovered[Q1][:5]:
        store.ack(Q1, message.msg_id)
    store.append(Q1, "ex", "new", HEADER_PAYLOAD, b"new")
    store.sync()
    while store.needs_compaction():
        store.compact()
    with caplog.at_level(logging.ERROR, "leveret.storage"):
        again = store.reload(Q2)
    assert not caplog.records
    assert again == recovered[Q2]
    assert [m.redelivered for m in again] == [m.msg_id == 3 for m in again]
    assert store.reload(("/", "none")) == []
    store.close()
    _, recovered_again = reopen(tmp_path, segment_size=1500)
    assert recovered_again[Q2] == recovered[Q2]  # still live: reload acks nothing
