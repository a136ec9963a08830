"""Errors raised by the storage layer.

Torn tails and bad CRCs are *not* errors: they are expected after a crash, repaired on open
and reported through :mod:`logging`. Errors are for what cannot be repaired without losing
data silently, so the broker must refuse to start and tell the operator.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of the storage layer's errors."""


class LogFormatError(StorageError):
    """A file is not one of ours, or was written by a newer format version.

    Raised instead of truncating, so that a downgrade never destroys data.
    """


class StoreClosedError(StorageError):
    """The store or log was closed, or an earlier fsync failed and it refuses further writes.

    After a failed fsync the kernel may have dropped the dirty pages, so retrying could report
    success for data that never reached the disk; the only safe course is to stop. The
    message store makes one exception: a write or fsync that fails only for want of room
    (ENOSPC, EDQUOT, EFBIG) damages nothing, and the store cuts back and retries from memory
    instead (storage/messages.py).
    """


class CorruptRecordError(StorageError, ValueError):
    """A record's payload passed its CRC but cannot be decoded (a bug, or a hand-edited file)."""


class AccessFileError(StorageError):
    """The saved user database (``users.json``) cannot be read."""


class CorruptLogError(StorageError):
    """A record in the middle of a log is damaged and intact records follow it.

    Cutting the log there would silently drop every definition after it, so opening refuses
    (the file is left untouched) unless told to skip the damaged bytes (``force_recovery``,
    the broker's ``--force-recovery``). The message is one line naming the file, the offset
    and the remedy.
    """
