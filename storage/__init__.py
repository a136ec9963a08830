"""Durable bytes under ``--data-dir``: the definitions log and the message store.

Sync file I/O only (no asyncio, no wire codec); above :mod:`exchanges`, below ``broker``.
Suggested layout of the data directory::

    DATA/definitions.log   DefinitionLog: durable topology, one fsynced record per change
    DATA/msgs/             MessageStore: msgs.N segments and their acks.N mark files

Formats are documented at the top of :mod:`leveret.storage.log`, :mod:`leveret.storage.records` and
:mod:`leveret.storage.segments`.
"""

from leveret.storage.bookkeeping import CompactResult, StoreStats
from leveret.storage.errors import (
    AccessFileError,
    CorruptLogError,
    CorruptRecordError,
    LogFormatError,
    StorageError,
    StoreClosedError,
)
from leveret.storage.live import live_events
from leveret.storage.log import DefinitionLog
from leveret.storage.logtools import LogReport, check, read_log
from leveret.storage.messages import MessageStore
from leveret.storage.records import event_to_json
from leveret.storage.segments import QueueKey, StoredMessage

__all__ = [
    "AccessFileError",
    "CompactResult",
    "CorruptLogError",
    "CorruptRecordError",
    "DefinitionLog",
    "LogFormatError",
    "LogReport",
    "MessageStore",
    "QueueKey",
    "StorageError",
    "StoreClosedError",
    "StoreStats",
    "StoredMessage",
    "check",
    "event_to_json",
    "live_events",
    "read_log",
]
