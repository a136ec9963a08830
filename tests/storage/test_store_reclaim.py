"""Reclaiming dead segments, the head included (issue 32): a segment none of whose messages
is live is deleted by ``compact()`` whether or not it is the one being appended to (the head
is rolled over to a new number first), without any new write and after a restart alike;
records of a dead segment that were never written (acked before their sync, or kept for a
retry on a full disk) are dropped with it, so consumers can free a truly full disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from leveret.storage import messages as messages_module
from leveret.storage.messages import MessageStore
from leveret.storage.segments import StoredMessage, segment_path

Q1 = ("/", "q1")
HEADER = b"\x00\x3c\x00\x00" + bytes(10)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "msgs"


def fill(store: MessageStore, n: int, start: int = 0) -> list[int]:
    return [store.append(Q1, "ex", "rk", HEADER, b"body-%d" % i) for i in range(start, start + n)]


def recovered(directory: Path) -> list[StoredMessage]:
    store = MessageStore.open(directory)
    try:
        return store.recover().get(Q1, [])
    finally:
        store.close()


def files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_fully_acked_head_is_deleted_without_a_new_write(directory: Path) -> None:
    store = MessageStore.open(directory)
    ids = fill(store, 50)
    store.sync()
    assert files(directory) == ["msgs.00000001"]  # one segment: the head
    for msg_id in ids:
        store.ack(Q1, msg_id)
    store.sync()
    assert files(directory) == ["acks.00000001", "msgs.00000001"]
    assert store.emptied > 0
    assert store.needs_compaction()
    size = segment_path(directory, 1).stat().st_size
    result = store.compact()
    assert (result.deleted, result.reclaimed) == (1, size)
    assert files(directory) == []  # nothing left: not even the new head, never written
    assert not store.needs_compaction() and store.emptied == 0
    assert store.stats().records == 0
    # Appends go on in a new head (msgs.2), and survive a restart.
    fill(store, 3, start=50)
    store.sync()
    assert files(directory) == ["msgs.00000002"]
    store.close()
    assert [m.body for m in recovered(directory)] == [b"body-50", b"body-51", b"body-52"]


def test_a_fully_acked_head_left_by_a_restart_is_deleted(directory: Path) -> None:
    store = MessageStore.open(directory)
    for msg_id in fill(store, 20):
        store.ack(Q1, msg_id)
    store.sync()
    store.close()  # msgs.1 holds 20 records, all acked: it is the head again after a restart
    store = MessageStore.open(directory)
    assert store.recover() == {}
    assert store.needs_compaction()
    assert store.compact().deleted == 1
    assert files(directory) == []
    fill(store, 1, start=20)
    store.close()
    assert [m.body for m in recovered(directory)] == [b"body-20"]


def test_a_head_with_a_live_message_is_kept(directory: Path) -> None:
    store = MessageStore.open(directory)
    ids = fill(store, 10)
    store.sync()
    for msg_id in ids[1:]:
        store.ack(Q1, msg_id)
    store.sync()
    assert not store.needs_compaction()  # the head is never rewritten, and not dead
    assert store.compact().deleted == 0
    store.close()
    assert [m.body for m in recovered(directory)] == [b"body-0"]


def test_records_acked_before_their_sync_are_dropped_with_their_segment(
    directory: Path,
) -> None:
    store = MessageStore.open(directory)
    store.sync()
    for msg_id in fill(store, 5):
        store.ack(Q1, msg_id)  # acked before any sync wrote them
    assert store.compact().deleted == 1
    assert store.sync() == 5  # covers them: nothing left to write
    assert files(directory) == []
    fill(store, 1, start=5)
    store.close()
    assert [(m.msg_id, m.body) for m in recovered(directory)] == [(6, b"body-5")]


def test_consumers_free_a_full_disk_whose_writes_failed(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk is full: a sync fails and keeps its records for a retry, which would fail
    too. Once every message is acked, compacting deletes the written part and drops the
    rest, and the next sync succeeds without writing any of it."""
    store = MessageStore.open(directory)
    written = fill(store, 10)
    store.sync()
    full = True
    real_write_all = messages_module.write_all

    def write_all(fd: int, data: Any) -> None:
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data)

    monkeypatch.setattr(messages_module, "write_all", write_all)
    kept = fill(store, 10, start=10)
    with pytest.raises(OSError):
        store.sync()
    for msg_id in written + kept:
        store.ack(Q1, msg_id)
    with pytest.raises(OSError):  # the acks cannot be written either
        store.sync()
    assert store.failed is None
    result = store.compact()
    assert result.deleted == 1 and result.reclaimed > 0
    assert files(directory) == []
    assert store.sync() == 20  # nothing left that needs room
    full = False
    fill(store, 1, start=20)
    store.sync()
    store.close()
    assert [m.body for m in recovered(directory)] == [b"body-20"]
