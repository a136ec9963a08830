"""The message store's counts for Prometheus: what it holds per queue (messages and body
bytes) and what it did with its files (storage/iostats.py), step by step."""

from __future__ import annotations

from pathlib import Path

from leveret.storage.messages import MessageStore
from leveret.storage.segments import HEADER_LEN, MARK_LEN

Q1 = ("/", "q1")
Q2 = ("v", "q2")
HEADER = b"\x00\x3c\x00\x00" + bytes(10)


def test_held_counts_and_bytes_follow_appends_acks_and_drops(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "msgs")
    store.recover()
    ids = [store.append(Q1, "x", "k", HEADER, b"a" * size) for size in (10, 200, 3000)]
    store.append(Q2, "x", "k", HEADER, b"b" * 7)
    assert store.held(Q1) == (3, 3210)
    assert store.held(Q2) == (1, 7)
    store.delivered(Q1, ids[1])  # the delivered bit leaves the size alone
    store.ack(Q1, ids[1])
    assert store.held(Q1) == (2, 3010)
    assert store.disk_counts(Q1) == (0, 3)
    store.drop_queue(Q1)
    assert store.held(Q1) == (0, 0)
    assert store.disk_counts(Q1) == (0, 0)
    store.close()


def test_held_and_reads_after_a_restart(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "msgs")
    store.recover()
    first = store.append(Q1, "x", "k", HEADER, b"a" * 100)
    store.append(Q1, "x", "k", HEADER, b"a" * 50)
    store.delivered(Q1, first)
    store.close()
    store = MessageStore.open(tmp_path / "msgs")
    recovered = store.recover()
    assert [m.redelivered for m in recovered[Q1]] == [True, False]
    assert store.held(Q1) == (2, 150)
    assert store.disk_counts(Q1) == (2, 0)  # read back, not written, in this run
    assert store.io.msg_reads == 2
    # msgs.1 and acks.1: each header checked, then each read whole
    assert store.io.read_ops == 4
    assert store.io.index_read_ops == 1
    assert (
        store.io.read_bytes
        == (tmp_path / "msgs" / "msgs.00000001").stat().st_size
        + (HEADER_LEN + MARK_LEN)
        + 2 * HEADER_LEN
    )
    store.ack(Q1, first)
    assert store.held(Q1) == (1, 50)
    store.sync()
    assert store.io.reopen_ops == 1  # acks.1 existed: opened again
    store.close()


def test_io_counts_writes_syncs_and_marks(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "msgs")
    store.recover()
    assert (store.io.write_ops, store.io.sync_ops, store.io.msg_writes) == (0, 0, 0)
    ids = [store.append(Q1, "x", "k", HEADER, b"m" * 64) for _ in range(5)]
    store.sync()
    segment = (tmp_path / "msgs" / "msgs.00000001").stat().st_size
    assert store.io.msg_writes == 5
    assert store.io.write_ops == 1  # one group commit, one write
    assert store.io.write_bytes == segment
    assert store.io.sync_ops == 1
    assert store.io.index_write_ops == 0
    for msg_id in ids[:2]:
        store.ack(Q1, msg_id)
    store.sync()  # marks are written, not fsynced
    assert store.io.index_write_ops == 1
    assert store.io.write_ops == 2
    assert store.io.write_bytes == segment + HEADER_LEN + 2 * MARK_LEN
    assert store.io.sync_ops == 1
    store.compact()  # fsyncs the marks
    assert store.io.sync_ops == 2
    assert store.io.sync_seconds > 0 and store.io.write_seconds > 0
    assert store.io.seek_ops == 0
    store.close()
