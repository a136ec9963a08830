"""Durable bytes under ``--data-dir``: the definitions log and the message store.

Sync file I/O only (no asyncio, no wire codec); above :mod:`exchanges`, below ``broker``.
Suggested layout of the data directory::

    DATA/definitions.log   DefinitionLog: durable topology, one fsynced record per change
    DATA/msgs/             MessageStore: msgs.N segments and their acks.N mark files

Formats are documented at the top of :mod:`storage.log`, :mod:`storage.records` and
:mod:`storage.segments`.
"""

from storage.errors import CorruptRecordError, LogFormatError, StorageError, StoreClosedError
from storage.live import live_events
from storage.log import DefinitionLog
from storage.logtools import LogReport, check, read_log
from storage.messages import CompactResult, MessageStore, StoreStats
from storage.records import event_to_json
from storage.segments import QueueKey, StoredMessage

__all__ = [
    "CompactResult",
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
