"""Small durable-file helpers shared by the definitions log and the message store.

The rules they encode: data is only durable after ``fsync`` of the file, and a new or renamed
file is only durable after ``fsync`` of its directory as well (the directory entry is separate
metadata on POSIX file systems).
"""

from __future__ import annotations

import errno
import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("leveret.storage")

# fdatasync skips the inode timestamps but still flushes the size needed to read appended
# data back; it is what an append-only file needs and is cheaper than fsync.
datasync = getattr(os, "fdatasync", os.fsync)

# Tails up to this size that end in an incomplete record are crash leftovers and are just cut
# off; anything larger, or any record whose CRC fails, is copied aside before truncation so
# that an operator can still look at it.
TORN_TAIL_KEEP = 64 * 1024


# Write errors that say only that there is no room: the file system is full (ENOSPC), a
# quota is reached (EDQUOT) or the file may grow no further (EFBIG: a file size limit,
# RLIMIT_FSIZE). Nothing already on disk is damaged by them: the bytes that did not fit are
# simply not there (a copy-on-write file system keeps the old blocks as they were), so a
# writer may cut what it wrote back and try again later. Any other error (EIO above all)
# may mean that data, old or new, is damaged, or that the page cache no longer matches the
# disk; a writer must then stop (see storage/messages.py).
OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` is a write error that only means "no room" (:data:`OUT_OF_SPACE`)."""
    return isinstance(error, OSError) and error.errno in OUT_OF_SPACE


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until everything is written (regular files rarely write short, but may)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def create_atomically(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, all or nothing: temp file, fsync, rename, fsync dir.

    When the temp file cannot be written (a full disk) it is removed, so that a failed
    attempt does not keep the space it took."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def truncate_tail(path: Path, offset: int, tail: bytes, reason: str, *, torn: bool) -> None:
    """Cut ``path`` back to ``offset`` and say so in the log.

    The removed ``tail`` is first copied to ``PATH.corrupt-OFFSET`` unless it is a plain torn
    write no larger than :data:`TORN_TAIL_KEEP` (a large "torn" tail may be a corrupt length
    field hiding good records, so it is kept, with a warning rather than an error).
    """
    if torn and len(tail) <= TORN_TAIL_KEEP:
        log.warning(
            "%s: torn tail at offset %d (%s), %d bytes cut", path, offset, reason, len(tail)
        )
    else:
        aside = path.with_name(f"{path.name}.corrupt-{offset}")
        create_atomically(aside, tail)  # durable before the truncation below
        log.log(
            logging.WARNING if torn else logging.ERROR,
            "%s: %s at offset %d (%s): the %d bytes from there on are not used; saved to %s",
            path,
            "torn tail" if torn else "corrupt record",
            offset,
            reason,
            len(tail),
            aside,
        )
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Suspend the cyclic garbage collector while loading.

    Recovery creates millions of objects that all stay alive; each generation-2 collection
    walks all of them, which made loading 100k definitions 2.5 times slower. Nothing built
    while loading forms reference cycles, so there is nothing for the collector to find.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
