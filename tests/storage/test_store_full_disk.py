"""The message store on a full disk: a sync that fails for want of room (ENOSPC, EDQUOT,
EFBIG) leaves well formed files and a usable store, the next sync writes what failed, and
nothing is written twice; any other error still stops the store.

The failures are injected by replacing ``os.write``, ``datasync`` and friends for one call
(the seam every write of the store goes through), and made real in a subprocess with
``RLIMIT_FSIZE`` (a write past the limit fails with EFBIG), which a process may lower and
raise again itself without privileges.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leveret.storage import bookkeeping
from leveret.storage import messages as messages_module
from leveret.storage.errors import StoreClosedError
from leveret.storage.messages import MessageStore
from leveret.storage.segments import HEADER_LEN, StoredMessage, marks_path, segment_path

Q1 = ("/", "q1")
HEADER = b"\x00\x3c\x00\x00" + bytes(10)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "msgs"


def fill(store: MessageStore, start: int, n: int) -> list[int]:
    return [store.append(Q1, "ex", "rk", HEADER, b"body-%d" % i) for i in range(start, start + n)]


def recovered(directory: Path, **kwargs: Any) -> list[StoredMessage]:
    store = MessageStore.open(directory, **kwargs)
    try:
        return store.recover().get(Q1, [])
    finally:
        store.close()


def no_room(code: int = errno.ENOSPC) -> OSError:
    return OSError(code, os.strerror(code))


def fail_once(
    monkeypatch: pytest.MonkeyPatch, target: str, error: OSError, partial: bool = False
) -> list[int]:
    """Make the next call of ``target`` (a dotted name) fail with ``error``; with
    ``partial``, an ``os.write`` first writes half of what it was given. Returns the list
    the failing call's fd is put in."""
    module_name, _, name = target.rpartition(".")
    module: Any = sys.modules[module_name] if module_name != "os" else os
    original: Callable[..., Any] = getattr(module, name)
    seen: list[int] = []

    def failing(fd: int, *args: Any) -> Any:
        monkeypatch.setattr(module, name, original)
        seen.append(fd)
        if partial:
            data = bytes(args[0])
            original(fd, data[: len(data) // 2])
        raise error

    monkeypatch.setattr(module, name, failing)
    return seen


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_write_without_room_is_cut_back_and_written_by_the_next_sync(
    directory: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    code: int,
) -> None:
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 5)
    assert store.sync() == 5
    path = segment_path(directory, 1)
    size = path.stat().st_size
    fill(store, 5, 5)
    fail_once(monkeypatch, "os.write", no_room(code), partial=True)
    with pytest.raises(OSError) as raised:
        store.sync()
    assert raised.value.errno == code
    assert path.stat().st_size == size  # the half record is gone: the file is well formed
    assert store.failed is None
    fill(store, 10, 5)  # the store takes more at once
    assert store.sync() == 15  # ...and writes what failed with them
    store.close()
    caplog.set_level(logging.WARNING, logger="leveret.storage")
    assert [m.body for m in recovered(directory)] == [b"body-%d" % i for i in range(15)]
    assert not caplog.records  # no torn tail, nothing skipped


def test_a_failed_fdatasync_for_want_of_room_is_retried_without_duplicates(
    directory: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Delayed allocation and network file systems report a full disk at fsync time; the
    # written bytes are cut off and written again from memory, not trusted.
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 3)
    store.sync()
    size = segment_path(directory, 1).stat().st_size
    fill(store, 3, 3)
    fail_once(monkeypatch, "leveret.storage.messages.datasync", no_room())
    with pytest.raises(OSError, match="No space"):
        store.sync()
    assert segment_path(directory, 1).stat().st_size == size
    assert store.sync() == 6
    store.close()
    caplog.set_level(logging.WARNING, logger="leveret.storage")
    assert [m.msg_id for m in recovered(directory)] == list(range(1, 7))
    assert not caplog.records


def test_a_new_segment_that_cannot_be_written_is_written_whole_later(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(directory, segment_size=HEADER_LEN + 3 * 64)  # 3 records
    store.recover()
    fill(store, 0, 3)
    store.sync()
    fill(store, 3, 3)  # rotates: msgs.00000002 is new
    assert not segment_path(directory, 2).exists()
    fail_once(monkeypatch, "os.write", no_room(), partial=True)
    with pytest.raises(OSError):
        store.sync()
    assert segment_path(directory, 2).stat().st_size == 0  # not even its header is left
    assert store.sync() == 6
    store.close()
    assert [m.msg_id for m in recovered(directory)] == list(range(1, 7))


def test_marks_that_cannot_be_written_are_written_later(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(directory)
    store.recover()
    ids = fill(store, 0, 4)
    store.sync()
    store.ack(Q1, ids[0])
    store.delivered(Q1, ids[1])
    store.sync()  # acks.00000001 now exists
    marks_size = marks_path(directory, 1).stat().st_size
    store.ack(Q1, ids[2])
    fail_once(monkeypatch, "os.write", no_room(), partial=True)
    with pytest.raises(OSError):
        store.sync()
    assert marks_path(directory, 1).stat().st_size == marks_size  # no half mark
    store.sync()
    store.close()
    messages = recovered(directory)
    assert [(m.msg_id, m.redelivered) for m in messages] == [(ids[1], True), (ids[3], False)]


def test_a_failed_directory_fsync_is_retried_and_nothing_is_written_twice(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 3)
    fail_once(monkeypatch, "leveret.storage.messages.fsync_dir", no_room())
    with pytest.raises(OSError):
        store.sync()
    calls: list[Path] = []
    real = messages_module.fsync_dir
    monkeypatch.setattr(messages_module, "fsync_dir", lambda d: (calls.append(d), real(d)))
    assert store.sync() == 3
    assert calls == [directory]  # the new segment's name, made durable this time
    store.close()
    assert [m.msg_id for m in recovered(directory)] == [1, 2, 3]


def test_a_backlog_is_written_in_chunks_and_a_failure_in_one_cuts_all_back(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bookkeeping, "WRITE_CHUNK", 1000)
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 100)  # about 6 KB
    writes: list[int] = []
    real_write = os.write

    def counting(fd: int, data: Any) -> int:
        writes.append(len(data))
        if len(writes) == 3:
            raise no_room()
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting)
    with pytest.raises(OSError):
        store.sync()
    monkeypatch.setattr(os, "write", real_write)
    assert max(writes) <= 1000
    assert segment_path(directory, 1).stat().st_size == 0
    assert store.sync() == 100
    store.close()
    assert [m.msg_id for m in recovered(directory)] == list(range(1, 101))


def test_other_write_errors_still_stop_the_store(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 2)
    fail_once(monkeypatch, "os.write", OSError(errno.EIO, "Input/output error"))
    with pytest.raises(OSError):
        store.sync()
    assert store.failed is not None and "Input/output error" in store.failed
    with pytest.raises(StoreClosedError, match="sync failed"):
        store.append(Q1, "", "", b"", b"")
    store.close()


def test_a_cut_that_fails_stops_the_store(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MessageStore.open(directory)
    store.recover()
    fill(store, 0, 2)
    fail_once(monkeypatch, "os.write", no_room(), partial=True)
    fail_once(monkeypatch, "os.ftruncate", OSError(errno.EIO, "Input/output error"))
    with pytest.raises(OSError):
        store.sync()
    assert store.failed is not None and "could not cut" in store.failed
    with pytest.raises(StoreClosedError):
        store.sync()
    store.close()


# The same with real EFBIG: a child process lowers its own file size limit below what the
# segment needs, syncs (and fails), raises the limit again (back to the hard limit, which
# needs no privilege) and syncs again.
CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    from leveret.storage.messages import MessageStore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    store = MessageStore.open(sys.argv[1])
    store.recover()
    q = ("/", "q1")
    for i in range(10):
        store.append(q, "ex", "rk", b"h" * 14, b"x" * 1000)
    print(store.sync(), flush=True)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, hard))
    for i in range(20):
        store.append(q, "ex", "rk", b"h" * 14, b"y" * 1000)
    try:
        store.sync()
    except OSError as exc:
        print(exc.errno, store.failed, flush=True)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    print(store.sync(), flush=True)
    store.close()
    """
)


def test_a_real_file_size_limit(directory: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert child.stdout.split("\n")[:3] == ["10", f"{errno.EFBIG} None", "30"], child.stderr
    messages = recovered(directory)
    assert [m.body for m in messages] == [b"x" * 1000] * 10 + [b"y" * 1000] * 20
