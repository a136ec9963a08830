"""The definitions log: append and replay, repair on open, versions, compaction, check."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from storage_helpers import project

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    ExchangeType,
    Queue,
    QueueDeclared,
    QueueDeleted,
)
from leveret.storage.errors import CorruptLogError, LogFormatError, StoreClosedError
from leveret.storage.log import (
    FORMAT_VERSION,
    FRAME_LEN,
    HEADER_LEN,
    MAGIC,
    DefinitionLog,
)
from leveret.storage.logtools import check, read_log
from leveret.storage.records import RECORD_VERSION, encode

Record = tuple[str, Event]

RECORDS: list[Record] = [
    ("/", ExchangeDeclared(Exchange("x", ExchangeType.TOPIC, arguments={"a": 1}))),
    ("/", QueueDeclared(Queue("q1", durable=True))),
    ("/", QueueDeclared(Queue("q2", durable=True, arguments={"x-max-length": 5}))),
    ("/", BindingAdded(Binding("x", "q1", DestKind.QUEUE, "a.*"))),
    ("/", BindingAdded(Binding("amq.topic", "q2", DestKind.QUEUE, "#"))),
    ("v2", ExchangeDeclared(Exchange("y", ExchangeType.HEADERS))),
    ("/", BindingRemoved(Binding("x", "q1", DestKind.QUEUE, "a.*"))),
    ("/", QueueDeleted("q2")),
]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "definitions.log"


def write(path: Path, records: list[Record]) -> None:
    with DefinitionLog.open(path) as log:
        log.append_many(records)


def record_offsets(path: Path) -> list[int]:
    """Offset of each record in the file (the framing, read independently)."""
    data = path.read_bytes()
    offsets, pos = [], HEADER_LEN
    while pos < len(data):
        offsets.append(pos)
        pos += FRAME_LEN + struct.unpack_from(">I", data, pos)[0]
    return offsets


def test_a_new_log_is_a_header(tmp_path: Path) -> None:
    path = tmp_path / "data" / "definitions.log"  # the directory is created too
    with DefinitionLog.open(path) as log:
        assert log.replay() == []
    assert path.read_bytes() == MAGIC + FORMAT_VERSION.to_bytes(4, "big")


def test_appends_replay_in_order_after_reopen(path: Path) -> None:
    with DefinitionLog.open(path) as log:
        for vhost, event in RECORDS[:3]:
            log.append(vhost, event)
        log.append_many(RECORDS[3:])
        assert log.record_count == len(RECORDS)
    with DefinitionLog.open(path) as log:
        assert log.replay() == RECORDS
        assert log.replay() == RECORDS  # the second call reads the file again
    assert read_log(path) == RECORDS


def test_append_refuses_what_must_never_be_logged(path: Path) -> None:
    with DefinitionLog.open(path) as log:
        with pytest.raises(ValueError, match="exclusive"):
            log.append("/", QueueDeclared(Queue("q", durable=True, exclusive=True)))
        with pytest.raises(ValueError):
            log.append("/", QueueDeclared(Queue("q", durable=False)))
        with pytest.raises(ValueError):
            log.append("/", ExchangeDeclared(Exchange("x", ExchangeType.FANOUT, durable=False)))
        with pytest.raises(TypeError):  # unencodable: nothing of the batch is written
            log.append_many(
                [RECORDS[0], ("/", QueueDeclared(Queue("q", True, arguments={"a": {1}})))]
            )
        assert log.record_count == 0
    assert read_log(path) == []


def test_torn_tail_at_every_offset_of_the_last_record(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(path, RECORDS)
    data = path.read_bytes()
    last = record_offsets(path)[-1]
    for cut in range(last, len(data)):
        path.write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, "leveret.storage"):
            log = DefinitionLog.open(path)
        assert log.replay() == RECORDS[:-1]
        assert (cut == last) == (not caplog.records)  # a clean cut is no warning
        log.append(*RECORDS[-1])  # appends continue right after the last good record
        log.close()
        assert read_log(path) == RECORDS
    assert not list(path.parent.glob("*.corrupt-*"))  # torn tails are not worth keeping


def test_zeros_after_the_last_record_are_a_torn_tail(path: Path) -> None:
    write(path, RECORDS)
    with path.open("ab") as f:
        f.write(bytes(4096))
    with DefinitionLog.open(path) as log:
        assert log.replay() == RECORDS
    assert not list(path.parent.glob("*.corrupt-*"))


def test_corrupt_crc_in_the_middle_refuses_to_start_and_leaves_the_file(path: Path) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[3]
    data[bad + FRAME_LEN + 2] ^= 0x01  # one flipped bit in the fourth record's payload
    path.write_bytes(data)
    assert not check(path).ok
    with pytest.raises(CorruptLogError) as raised:
        DefinitionLog.open(path)
    message = str(raised.value)
    assert "\n" not in message
    assert str(path) in message and f"offset {bad}" in message
    assert "CRC mismatch" in message and "4 intact records" in message
    assert "--force-recovery" in message
    assert path.read_bytes() == data  # nothing repaired, nothing saved aside
    assert sorted(p.name for p in path.parent.iterdir()) == ["definitions.log"]


def test_forced_recovery_skips_only_the_corrupt_record(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    offsets = record_offsets(path)
    bad = offsets[3]
    data[bad + FRAME_LEN + 2] ^= 0x01
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, "leveret.storage"):
        log = DefinitionLog.open(path, force_recovery=True)
    assert log.replay() == RECORDS[:3] + RECORDS[4:]
    assert [(d.offset, d.end, d.reason) for d in log.damage] == [(bad, offsets[4], "CRC mismatch")]
    [message] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"offset {bad}" in message.getMessage()
    # The damaged record is kept for the operator, byte for byte; the log is clean again.
    assert (path.parent / f"definitions.log.corrupt-{bad}").read_bytes() == data[bad : offsets[4]]
    assert check(path).ok
    log.append(*RECORDS[3])
    log.close()
    assert read_log(path) == RECORDS[:3] + RECORDS[4:] + RECORDS[3:4]
    with DefinitionLog.open(path) as log:  # no force needed any more
        assert log.damage == []


@pytest.mark.parametrize("bit", range(32))
def test_any_flipped_bit_of_a_length_field_costs_one_record(path: Path, bit: int) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[1]
    data[bad + bit // 8] ^= 0x80 >> (bit % 8)
    path.write_bytes(data)
    with pytest.raises(CorruptLogError, match=f"offset {bad} "):
        DefinitionLog.open(path)
    assert path.read_bytes() == data
    report = check(path)
    assert not report.ok and report.error_offset == bad
    assert read_log(path) == RECORDS[:1] + RECORDS[2:]  # read-only, resynchronised
    with DefinitionLog.open(path, force_recovery=True) as log:
        assert log.replay() == RECORDS[:1] + RECORDS[2:]
    assert read_log(path) == RECORDS[:1] + RECORDS[2:]
    assert check(path).ok


def test_a_corrupt_last_record_is_a_tail_cut_as_before(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[-1]
    data[bad + FRAME_LEN + 2] ^= 0x01  # nothing sound after it: no refusal
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, "leveret.storage"):
        log = DefinitionLog.open(path)
    assert log.replay() == RECORDS[:-1]
    assert "corrupt record" in caplog.text
    assert (path.parent / f"definitions.log.corrupt-{bad}").read_bytes() == data[bad:]
    log.close()
    assert check(path).ok


def test_a_bad_length_field_at_the_end_is_a_tail(path: Path) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[-1]
    data[bad : bad + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(data)
    with DefinitionLog.open(path) as log:
        assert log.replay() == RECORDS[:-1]


def test_forced_recovery_with_damage_and_a_torn_tail(path: Path) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    offsets = record_offsets(path)
    data[offsets[2] + FRAME_LEN + 5] ^= 0x20
    data[offsets[5] : offsets[5] + 4] = b"\x00\x00\x00\x00"  # impossible length
    data += b"\x00\x00\x01\x00torn"
    path.write_bytes(data)
    with pytest.raises(CorruptLogError, match="and 1 more damaged place"):
        DefinitionLog.open(path)
    with DefinitionLog.open(path, force_recovery=True) as log:
        assert log.replay() == RECORDS[:2] + RECORDS[3:5] + RECORDS[6:]
        assert [d.offset for d in log.damage] == [offsets[2], offsets[5]]
    assert check(path).ok
    assert read_log(path) == RECORDS[:2] + RECORDS[3:5] + RECORDS[6:]


def test_an_undecodable_record_with_a_good_crc_is_skipped(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(path, RECORDS[:1])
    payload = b'\x01["Z","/"]'
    with path.open("ab") as f:
        f.write(struct.pack(">II", len(payload), __import__("zlib").crc32(payload)) + payload)
    write(path, RECORDS[1:2])
    with caplog.at_level(logging.ERROR, "leveret.storage"):
        log = DefinitionLog.open(path)
    assert log.replay() == RECORDS[:2]
    assert "skipped" in caplog.text
    assert log.dead_count == 1
    log.close()


def test_a_newer_format_version_is_refused_and_left_alone(path: Path) -> None:
    write(path, RECORDS)
    data = bytearray(path.read_bytes())
    data[8:12] = (FORMAT_VERSION + 1).to_bytes(4, "big")
    data += b"torn"
    path.write_bytes(data)
    with pytest.raises(LogFormatError, match="newer Leveret"):
        DefinitionLog.open(path)
    assert path.read_bytes() == data


def test_a_newer_record_version_is_refused_and_left_alone(path: Path) -> None:
    write(path, RECORDS[:2])
    payload = bytes([RECORD_VERSION + 1]) + encode("/", RECORDS[2][1])[1:]
    with path.open("ab") as f:
        f.write(struct.pack(">II", len(payload), __import__("zlib").crc32(payload)) + payload)
        f.write(b"torn tail")
    data = path.read_bytes()
    with pytest.raises(LogFormatError, match="newer"):
        DefinitionLog.open(path)
    assert path.read_bytes() == data


@pytest.mark.parametrize("content", [b"hello world, not a log", b"XX"])
def test_a_foreign_file_is_refused(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    with pytest.raises(LogFormatError, match="not a Leveret"):
        DefinitionLog.open(path)
    assert path.read_bytes() == content


@pytest.mark.parametrize("cut", range(HEADER_LEN))
def test_a_header_cut_short_is_recreated(path: Path, cut: int) -> None:
    path.write_bytes((MAGIC + FORMAT_VERSION.to_bytes(4, "big"))[:cut])
    with DefinitionLog.open(path) as log:
        assert log.replay() == []
        log.append(*RECORDS[0])
    assert read_log(path) == RECORDS[:1]


def test_compaction_keeps_the_live_definitions(path: Path) -> None:
    write(path, RECORDS)
    before = project(RECORDS)
    with DefinitionLog.open(path) as log:
        size = log.size
        assert (log.live_count, log.dead_count) == (3, 5)
        log.compact()
        assert (log.record_count, log.live_count, log.dead_count) == (3, 3, 0)
        assert log.size == os.path.getsize(path) < size
        log.append("/", ExchangeDeleted("x"))
    with DefinitionLog.open(path) as log:
        records = log.replay()
    assert project(records[:-1]) == before
    assert records[-1] == ("/", ExchangeDeleted("x"))
    assert not list(path.parent.glob("definitions.log.*"))


def test_compaction_with_the_callers_view_drops_exclusive_queues(path: Path) -> None:
    write(path, RECORDS)
    exclusive = Queue("ex", durable=True, exclusive=True)
    live: list[Record] = [
        ("/", QueueDeclared(exclusive)),
        ("/", BindingAdded(Binding("amq.direct", "ex", DestKind.QUEUE, "k"))),
        RECORDS[1],
    ]
    with DefinitionLog.open(path) as log:
        log.compact(live)
        assert log.replay() == [RECORDS[1]]


def test_needs_compaction_when_dead_records_pile_up(path: Path) -> None:
    with DefinitionLog.open(path, compact_min_dead=10) as log:
        log.append("/", QueueDeclared(Queue("keep", durable=True)))
        for i in range(6):
            log.append("/", QueueDeclared(Queue(f"q{i}", durable=True)))
            log.append("/", QueueDeleted(f"q{i}"))
        assert (log.live_count, log.dead_count) == (1, 12)
        assert log.needs_compaction()
        log.compact()
        assert not log.needs_compaction()
    with DefinitionLog.open(path) as log:
        assert log.replay() == [("/", QueueDeclared(Queue("keep", durable=True)))]
        assert log.compact_min_dead == 1000


def test_a_failed_write_is_rolled_back(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = DefinitionLog.open(path)
    log.append(*RECORDS[0])

    def short_then_fail(fd: int, data: bytes) -> int:
        monkeypatch.undo()
        os.write(fd, bytes(data)[:5])  # a partial record reaches the file
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_fail)
    with pytest.raises(OSError, match="No space"):
        log.append(*RECORDS[1])
    log.append(*RECORDS[2])
    log.close()
    assert read_log(path) == [RECORDS[0], RECORDS[2]]
    assert check(path).ok


def test_a_failed_fsync_rewrites_the_log_before_the_next_append(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fsync the file's content is unknown (the kernel may have dropped the
    pages), so the next append first writes the live records anew; while that fails too,
    appends are refused. The record whose fsync failed was never acknowledged: it is gone."""
    log = DefinitionLog.open(path)
    log.append(*RECORDS[0])

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("leveret.storage.log.datasync", fail)
    with pytest.raises(OSError):
        log.append(*RECORDS[1])
    monkeypatch.setattr("leveret.storage.log.write_all", lambda fd, data: fail(fd))
    with pytest.raises(StoreClosedError, match=r"fsync failed.*rewriting it failed"):
        log.append(*RECORDS[2])
    monkeypatch.undo()
    log.append(*RECORDS[2])
    log.close()
    with pytest.raises(StoreClosedError, match="closed"):
        log.append(*RECORDS[3])
    assert read_log(path) == [RECORDS[0], RECORDS[2]]
    assert check(path).ok


def test_check_reports_counts_and_the_first_problem(path: Path) -> None:
    write(path, RECORDS)
    report = check(path)
    assert report.ok and report.error_offset is None
    assert (report.records, report.live, report.dead) == (8, 3, 5)
    assert report.events["BindingAdded"] == 2
    assert report.valid_bytes == report.file_size == os.path.getsize(path)
    assert "OK" in str(report)
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00\x20torn")
    report = check(path)
    assert not report.ok
    assert report.error_offset == report.valid_bytes < report.file_size
    assert "torn tail" in report.problems[0]
    assert path.read_bytes().endswith(b"torn")  # check never repairs


def test_check_reports_a_foreign_file(path: Path) -> None:
    path.write_bytes(b"something else entirely")
    report = check(path)
    assert not report.ok and report.error_offset == 0
