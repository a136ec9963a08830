"""What a message store did with its files, counted as RabbitMQ's file_handle_cache_stats
counts its own (deps/rabbit/src/file_handle_cache_stats.erl, served by rabbitmq_prometheus
as ``rabbitmq_io_*``, ``rabbitmq_msg_store_*`` and ``rabbitmq_queue_index_*``).

The store (:mod:`leveret.storage.messages`) keeps one :class:`IoStats` and adds to it where
the I/O happens; readers take the numbers as they are (plain ints and floats, each updated
by one thread at a time under the store's I/O lock, so a reader on another thread sees a
value that was true a moment ago). What each counter means here:

- *read*: one read of a file (a segment ``msgs.N`` or a mark file ``acks.N``, read whole at
  start-up, when a segment is rewritten, or when messages are read back for a queue; and
  each file's header, checked at start-up before anything is repaired);
- *write*: one ``write()`` call to either file; *sync*: one fsync or fdatasync of either;
- *seek*: the store never seeks (it appends with ``O_APPEND`` and reads files whole), so
  this stays 0, as it is;
- *reopen*: a mark file opened again for writing after it was closed (RabbitMQ's
  file_handle_cache reopens a handle it closed to stay under its limit);
- *message store read / write*: messages read back from the segments / messages written
  to them (rabbit_msg_store counts one per message read or written);
- *queue index read / write*: reads and writes of the mark files, which hold what
  RabbitMQ's queue index journal holds for a message besides its body (delivered, acked).
"""

from __future__ import annotations

import time


class IoStats:
    """Counters of one store's file I/O (see the module doc)."""

    __slots__ = (
        "index_read_ops",
        "index_write_ops",
        "msg_reads",
        "msg_writes",
        "read_bytes",
        "read_ops",
        "read_seconds",
        "reopen_ops",
        "seek_ops",
        "seek_seconds",
        "sync_ops",
        "sync_seconds",
        "write_bytes",
        "write_ops",
        "write_seconds",
    )

    def __init__(self) -> None:
        self.read_ops = self.read_bytes = 0
        self.write_ops = self.write_bytes = 0
        self.sync_ops = self.seek_ops = self.reopen_ops = 0
        self.read_seconds = self.write_seconds = self.sync_seconds = self.seek_seconds = 0.0
        self.msg_reads = self.msg_writes = 0
        self.index_read_ops = self.index_write_ops = 0

    def read(self, size: int, started: float, *, index: bool = False, count: int = 1) -> None:
        """One read (or ``count``) of ``size`` bytes begun at ``started``
        (``time.perf_counter()``); ``index``: of a mark file."""
        self.read_ops += count
        self.read_bytes += size
        self.read_seconds += time.perf_counter() - started
        if index:
            self.index_read_ops += count

    def wrote(self, size: int, started: float, *, index: bool = False) -> None:
        """One write of ``size`` bytes begun at ``started``; ``index``: to a mark file."""
        self.write_ops += 1
        self.write_bytes += size
        self.write_seconds += time.perf_counter() - started
        if index:
            self.index_write_ops += 1

    def synced(self, started: float) -> None:
        """One fsync or fdatasync begun at ``started``."""
        self.sync_ops += 1
        self.sync_seconds += time.perf_counter() - started

    def add(self, other: IoStats) -> None:
        """Add ``other``'s counts to these (a node's total over its stores)."""
        for name in IoStats.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
