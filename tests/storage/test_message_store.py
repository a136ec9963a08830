"""The message store: append, ack, recover in order, redelivered, repair, reclaiming, threads."""

from __future__ import annotations

import logging
import os
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from leveret.storage.errors import LogFormatError, StoreClosedError
from leveret.storage.messages import MessageStore
from leveret.storage.segments import (
    FRAME_LEN,
    HEADER_LEN,
    SEGMENT_VERSION,
    StoredMessage,
    marks_path,
    segment_path,
)

Q1 = ("/", "q1")
Q2 = ("v", "q2")
HEADER = b"\x00\x3c\x00\x00" + bytes(10)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "msgs"


def reopen(
    directory: Path, **kwargs: int
) -> tuple[MessageStore, dict[tuple[str, str], list[StoredMessage]]]:
    store = MessageStore.open(directory, **kwargs)
    return store, store.recover()


def bodies(
    recovered: dict[tuple[str, str], list[StoredMessage]], queue: tuple[str, str]
) -> list[bytes]:
    return [m.body for m in recovered.get(queue, [])]


def fill(store: MessageStore, n: int, queue: tuple[str, str] = Q1) -> list[int]:
    return [store.append(queue, "ex", f"rk.{i}", HEADER, b"body-%d" % i) for i in range(n)]


def record_offsets(path: Path) -> list[int]:
    """Offset of each record of a (current format) segment: magic, then the length."""
    data = path.read_bytes()
    offsets, pos = [], HEADER_LEN
    while pos < len(data):
        offsets.append(pos)
        pos += FRAME_LEN + struct.unpack_from(">I", data, pos + 4)[0]
    return offsets


def test_messages_come_back_per_queue_in_order_without_the_acked(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        assert store.recover() == {}
        ids = [
            store.append(Q1 if i % 3 else Q2, "ex", f"k{i}", HEADER, b"%d" % i) for i in range(30)
        ]
        assert ids == list(range(1, 31))
        assert store.sync() == 30
        for msg_id in ids[:10]:
            assert store.ack(Q1 if (msg_id - 1) % 3 else Q2, msg_id)
        assert not store.ack(Q1, ids[0])  # already acked
        assert not store.ack(Q2, ids[1])  # not Q2's message
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"%d" % i for i in range(10, 30) if i % 3]
    assert bodies(recovered, Q2) == [b"%d" % i for i in range(10, 30) if not i % 3]
    first = recovered[Q1][0]
    assert (first.exchange, first.routing_key, first.header, first.expires) == (
        "ex",
        "k10",
        HEADER,
        0,
    )
    assert store.append(Q1, "", "", b"", b"") == 31  # ids go on after the largest seen
    store.close()


def test_redelivered_marks_messages_delivered_before_the_restart(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        ids = fill(store, 4)
        store.delivered(Q1, ids[1])
        store.delivered(Q1, ids[1])  # writes one mark only
        store.delivered(Q1, ids[3])
        store.ack(Q1, ids[3])
        store.delivered(Q1, 999)  # unknown: ignored
    assert os.path.getsize(marks_path(directory, 1)) == HEADER_LEN + 3 * 13
    store, recovered = reopen(directory)
    assert [m.redelivered for m in recovered[Q1]] == [False, True, False]
    store.delivered(Q1, ids[1])  # known to be delivered already: nothing new
    store.close()
    assert os.path.getsize(marks_path(directory, 1)) == HEADER_LEN + 3 * 13


def test_nothing_is_written_before_sync(directory: Path) -> None:
    store = MessageStore.open(directory)
    fill(store, 3)
    assert not segment_path(directory, 1).exists()
    assert store.sync() == 3
    assert len(record_offsets(segment_path(directory, 1))) == 3
    _, recovered = reopen(directory)  # what a kill -9 right now would find
    assert len(recovered[Q1]) == 3
    store.close()


def test_expires_and_large_bodies_round_trip(directory: Path) -> None:
    body = os.urandom(300_000)
    with MessageStore.open(directory) as store:
        store.append(Q1, "é" * 100, "k" * 255, HEADER, body, expires=1_700_000_000_123)
        with pytest.raises(ValueError):
            store.append(Q1, "x" * 256, "", HEADER, b"")
        with pytest.raises(ValueError):
            store.append(("/", "q" * 256), "x", "", HEADER, b"")
    store, recovered = reopen(directory)
    [message] = recovered[Q1]
    assert (message.body, message.expires, message.exchange) == (body, 1_700_000_000_123, "é" * 100)
    store.close()


def test_torn_tail_at_every_offset_of_the_last_record(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 5)
    path = segment_path(directory, 1)
    data = path.read_bytes()
    last = record_offsets(path)[-1]
    for cut in range(last, len(data)):
        path.write_bytes(data[:cut])
        store, recovered = reopen(directory)
        assert bodies(recovered, Q1) == [b"body-%d" % i for i in range(4)]
        assert store.append(Q1, "ex", "again", HEADER, b"again") == 5
        store.close()
        _, recovered = reopen(directory)
        assert bodies(recovered, Q1)[-1] == b"again"
    assert not list(directory.glob("*.corrupt-*"))


def test_a_large_torn_record_is_kept_aside_with_a_warning(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 2)
        store.append(Q1, "ex", "big", HEADER, bytes(200_000))
    path = segment_path(directory, 1)
    last = record_offsets(path)[-1]
    path.write_bytes(path.read_bytes()[:-1000])
    with caplog.at_level(logging.WARNING, "leveret.storage"):
        store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-0", b"body-1"]
    assert {r.levelno for r in caplog.records} == {logging.WARNING}
    assert (directory / f"msgs.00000001.corrupt-{last}").stat().st_size > 190_000
    store.close()


def test_torn_marks_are_cut_at_a_whole_mark(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        ids = fill(store, 3)
        store.ack(Q1, ids[0])
        store.ack(Q1, ids[1])
    path = marks_path(directory, 1)
    path.write_bytes(path.read_bytes()[:-5])  # the second ack is torn
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-1", b"body-2"]
    assert os.path.getsize(path) == HEADER_LEN + 13
    store.close()


def test_a_corrupt_record_in_the_middle_costs_that_message_only(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 5)
    path = segment_path(directory, 1)
    data = bytearray(path.read_bytes())
    data[record_offsets(path)[2] + 40] ^= 0x10
    path.write_bytes(data)
    with caplog.at_level(logging.ERROR, "leveret.storage"):
        store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-0", b"body-1", b"body-3", b"body-4"]
    assert "skipped" in caplog.text
    store.close()


def test_a_corrupt_length_in_the_middle_costs_that_message_only(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 5)
    path = segment_path(directory, 1)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[2]
    data[bad + 4 : bad + 8] = b"\xff\xff\xff\xff"  # impossible, not just past the end
    path.write_bytes(data)
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-0", b"body-1", b"body-3", b"body-4"]
    assert path.read_bytes() == data  # skipped in place: nothing cut, nothing lost
    assert not list(directory.glob("*.corrupt-*"))
    store.close()


def test_a_corrupt_length_in_the_last_record_truncates_and_keeps_the_tail_aside(
    directory: Path,
) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 5)
    path = segment_path(directory, 1)
    data = bytearray(path.read_bytes())
    bad = record_offsets(path)[-1]
    data[bad + 4 : bad + 8] = b"\xff\xff\xff\xff"
    path.write_bytes(data)
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-%d" % i for i in range(4)]
    assert (directory / f"msgs.00000001.corrupt-{bad}").read_bytes() == data[bad:]
    store.close()


def test_a_bad_mark_is_skipped_not_the_marks_after_it(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        ids = fill(store, 3)
        for msg_id in ids:
            store.ack(Q1, msg_id)
    path = marks_path(directory, 1)
    data = bytearray(path.read_bytes())
    data[HEADER_LEN + 13 + 5] ^= 0xFF  # the second ack
    path.write_bytes(data)
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-1"]  # redelivered rather than lost
    store.close()


def test_newer_format_is_refused_before_any_repair(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 2)
    first = segment_path(directory, 1)
    first.write_bytes(first.read_bytes() + b"torn")
    second = segment_path(directory, 2)
    second.write_bytes(b"LVRTMSGS" + (SEGMENT_VERSION + 1).to_bytes(4, "big"))
    with pytest.raises(LogFormatError, match=f"format version {SEGMENT_VERSION + 1}"):
        MessageStore.open(directory)
    assert first.read_bytes().endswith(b"torn")


def test_partial_files_and_orphans_are_cleaned_up(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 2)
    segment_path(directory, 2).write_bytes(b"LVRT")  # crash while creating segment 2
    marks_path(directory, 7).write_bytes(b"")  # crash while deleting segment 7
    (directory / "msgs.00000001.tmp").write_bytes(b"half a rewrite")
    store, recovered = reopen(directory)
    assert bodies(recovered, Q1) == [b"body-0", b"body-1"]
    assert sorted(os.listdir(directory)) == ["msgs.00000001"]
    store.close()


def test_segments_rotate_and_fully_acked_ones_are_deleted(directory: Path) -> None:
    store = MessageStore.open(directory, segment_size=1000)
    ids = fill(store, 60)
    store.sync()
    segments = sorted(directory.glob("msgs.*"))
    assert len(segments) > 3
    assert all(p.stat().st_size <= 1000 for p in segments)
    for msg_id in ids[:-1]:
        store.ack(Q1, msg_id)
    store.sync()
    assert store.needs_compaction()
    result = store.compact()
    assert result.deleted == len(segments) - 1 and result.reclaimed > 0
    assert sorted(os.listdir(directory)) == ["acks" + segments[-1].name[4:], segments[-1].name]
    assert not store.needs_compaction()
    store.close()
    _, recovered = reopen(directory, segment_size=1000)
    assert bodies(recovered, Q1) == [b"body-59"]


def test_rewrite_keeps_unacked_messages_in_order(directory: Path) -> None:
    store = MessageStore.open(directory, segment_size=4000)
    ids = fill(store, 100)
    store.delivered(Q1, ids[5])
    store.sync()
    keep = [i for i in ids if i % 7 == 0 or i == ids[5]]
    for msg_id in ids:
        if msg_id not in keep:
            store.ack(Q1, msg_id)
    store.sync()
    before = store.stats()
    rewritten = 0
    while store.needs_compaction():
        result = store.compact()
        rewritten += result.rewritten
        assert result.deleted or result.rewritten
    assert rewritten > 0
    after = store.stats()
    assert after.live == before.live == len(keep)
    assert after.bytes < before.bytes
    store.append(Q1, "ex", "new", HEADER, b"new")
    store.close()
    store, recovered = reopen(directory, segment_size=4000)
    assert [m.msg_id for m in recovered[Q1]] == [*keep, 101]
    assert [m.redelivered for m in recovered[Q1]] == [i == ids[5] for i in keep] + [False]
    store.close()


def test_acks_during_a_rewrite_are_not_lost(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(directory, segment_size=2000)
    ids = fill(store, 40)
    store.sync()
    survivors = [ids[3], ids[9]]
    for msg_id in ids[:30]:
        if msg_id not in survivors:
            store.ack(Q1, msg_id)
    real_replace = os.replace

    def ack_then_replace(src: str, dst: str) -> None:
        store.ack(Q1, survivors[0])  # acked after the live records were copied
        store.sync()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", ack_then_replace)
    assert store.compact().rewritten == 1
    monkeypatch.undo()
    store.close()
    _, recovered = reopen(directory, segment_size=2000)
    assert survivors[0] not in [m.msg_id for m in recovered[Q1]]
    assert survivors[1] in [m.msg_id for m in recovered[Q1]]


def test_drop_queue_acks_all_its_messages(directory: Path) -> None:
    with MessageStore.open(directory) as store:
        fill(store, 5, Q1)
        fill(store, 2, Q2)
        store.sync()
        assert store.drop_queue(Q1) == 5
        assert store.drop_queue(Q1) == 0
    _, recovered = reopen(directory)
    assert list(recovered) == [Q2]


def test_sync_covers_appends_from_another_thread(directory: Path) -> None:
    store = MessageStore.open(directory, segment_size=50_000)
    done = threading.Event()
    watermarks: list[int] = []

    def syncer() -> None:
        while not done.is_set():
            watermarks.append(store.sync())

    thread = threading.Thread(target=syncer)
    thread.start()
    ids = []
    for i in range(5000):
        ids.append(store.append(Q1 if i % 2 else Q2, "ex", "k", HEADER, b"%d" % i))
        if i % 3 == 0:
            store.ack(Q1 if i % 2 else Q2, ids[-1])
    done.set()
    thread.join()
    assert watermarks == sorted(watermarks)
    store.close()
    _, recovered = reopen(directory)
    expected = [i + 1 for i in range(5000) if i % 3]
    assert sorted(m.msg_id for q in recovered.values() for m in q) == expected
    assert [m.body for m in recovered[Q1]] == [b"%d" % i for i in range(5000) if i % 2 and i % 3]


CHILD = """
import sys, threading
from leveret.storage.messages import MessageStore

store = MessageStore.open(sys.argv[1], segment_size=20_000)
def reclaim():
    while True:
        store.compact()
threading.Thread(target=reclaim, daemon=True).start()
while True:
    ids = [store.append(("/", "q"), "", "k", b"h", b"%d" % i) for i in range(50)]
    durable = store.sync()
    for msg_id in ids:
        if msg_id % 3:  # two in three acked: segments get rewritten and deleted
            store.ack(("/", "q"), msg_id)
    print(durable, flush=True)
"""


@pytest.mark.parametrize("lines", [1, 7, 40])
def test_kill_9_loses_nothing_that_sync_confirmed(directory: Path, lines: int) -> None:
    """A child appends, syncs, acks and compacts flat out; SIGKILL it at some point: every
    message it saw confirmed (and did not ack) is back, in order."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    confirmed = 0
    for _ in range(lines):
        confirmed = int(child.stdout.readline())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    store, recovered = reopen(directory, segment_size=20_000)
    got = [m.msg_id for m in recovered.get(("/", "q"), [])]
    assert got == sorted(got)
    missing = set(range(1, confirmed + 1)) - set(got)
    assert all(i % 3 for i in missing)  # acked ones may come back, or not
    assert all(m.body == b"%d" % ((m.msg_id - 1) % 50) for m in recovered[("/", "q")])
    store.close()


def test_recover_is_once_and_a_closed_store_refuses_work(directory: Path) -> None:
    store = MessageStore.open(directory)
    store.recover()
    with pytest.raises(RuntimeError):
        store.recover()
    store.close()
    with pytest.raises(StoreClosedError):
        store.append(Q1, "", "", b"", b"")
    with pytest.raises(StoreClosedError):
        store.sync()


def test_a_failed_fsync_stops_the_store(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MessageStore.open(directory)
    fill(store, 1)

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("leveret.storage.messages.datasync", fail)
    with pytest.raises(OSError):
        store.sync()
    monkeypatch.undo()
    with pytest.raises(StoreClosedError, match="sync failed"):
        store.append(Q1, "", "", b"", b"")
    store.close()
