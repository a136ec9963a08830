"""The traffic trace: one JSON line per published message, for the Spark pipeline.

Schema version 2. A trace directory holds pairs of files, rolled together by size, by age and
when the index reaches ``max_keys`` keys (it is kept in memory while the file is written):
``trace-<UTC start>-<n>.jsonl`` with one line per published message, and its key index
``keys-<UTC start>-<n>.jsonl``. A message line is complete on its own::

    {"v": 2,                                  # schema version
     "ts": 1763780000.123456,                 # publish time, seconds since the epoch (UTC)
     "id": 4503599627370495,                  # key id: the index line with the fields below
     "size": 100,                             # body size in bytes (bodies are never recorded)
     "mode": 2,                               # delivery mode; absent when the publisher set none
     "vhost": "/", "exchange": "amq.topic", "key": "a.b",   # "key": the routing key
     "headers": {"k": "v"},                   # the headers table as the management API shows
                                              # it (leveret.fieldtable.amqp_json); absent if none
     "queues": ["q1", "q2"]}                  # queues reached, sorted ([] = unroutable)

Messages that share vhost, exchange, routing key, headers and queues share a *key*, and
traces repeat a few keys endlessly. ``id`` is a 53-bit hash of the key's fields (so it is the
same in every file and survives ``jq``'s doubles), and the first message of a key in a trace
file also adds the key's fields, once, to the file's index::

    {"v": 2, "id": 4503599627370495, "vhost": "/", "exchange": "amq.topic", "key": "a.b",
     "headers": {"k": "v"}, "queues": ["q1", "q2"]}

The index is written (and flushed) before the message lines that use it, so a crash never
leaves a message whose key is missing from its file's index. The Spark pipeline reads only
``ts``, ``id``, ``size`` and ``mode`` of the message lines and takes the strings from the index;
a trace without an index (version 1, or a file whose index was lost) is read whole, every
field of every line (slower, same results). Version 1 lines, still read by the pipeline, had
``schema_version``, ``ts``, ``vhost``, ``exchange``, ``routing_key``, ``headers`` (null when none),
``body_size``, ``delivery_mode``, ``queues`` and ``routed``, and no index.

Publishing never waits for the disk: records go into a bounded in-memory buffer as tuples
(nothing is encoded on the publish path) and a writer thread encodes and writes them; when
the buffer is full, records are dropped and counted (``dropped``), and the count is logged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from leveret.fieldtable import amqp_json
from leveret.message import cached_by_properties, decoded_table, headers_and_mode

SCHEMA_VERSION = 2
ID_BITS = 53  # JSON readers that use doubles (jq, JavaScript) keep 53-bit integers exact
log = logging.getLogger(__name__)

# (ts, vhost, exchange, routing_key, raw content header, body_size, queues)
Record = tuple[float, str, str, str, bytes, int, tuple[str, ...]]
# What makes two messages the same key: vhost, exchange, routing key, headers JSON, queues.
KeyFields = tuple[str, str, str, str | None, tuple[str, ...]]


def key_fragment(fields: KeyFields) -> str:
    """The key's part of a line: ``"vhost":..,"exchange":..,"key":..,"headers":..,"queues":..``."""
    vhost, exchange, routing_key, headers_json, queues = fields
    dumps = json.dumps
    headers = f',"headers":{headers_json}' if headers_json is not None else ""
    return (
        f'"vhost":{dumps(vhost)},"exchange":{dumps(exchange)},"key":{dumps(routing_key)}'
        f'{headers},"queues":{dumps(sorted(queues))}'
    )


def key_id(fragment: str) -> int:
    """The key's id: the first 53 bits of the BLAKE2b hash of its fragment."""
    digest = hashlib.blake2b(fragment.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - ID_BITS)


def decode_properties(raw_header: bytes) -> tuple[str | None, int | None]:
    """The headers (as JSON text, or None) and delivery mode of a raw content header
    payload (class id, weight, body size, then the property flags and values)."""
    table, mode = headers_and_mode(raw_header)
    if table is None:
        return None, mode
    try:
        return _headers_json(table), mode
    except ValueError:
        # Publishing refuses properties that do not decode (leveret.message.properties_decode),
        # but this thread must not die on a record that slips through: no headers, a warning.
        _warn_undecodable()
        return None, mode


@functools.cache
def _warn_undecodable() -> None:
    log.warning("trace: headers that do not decode are recorded as no headers")


@cached_by_properties(maxsize=4096)
def _headers_json(table: bytes) -> str:
    # Cached by the table's bytes alone: decoding is most of a line's cost (this thread
    # shares the interpreter with the broker's event loop), and publishers repeat their
    # headers even when other properties (aio-pika's message_id) change on every message.
    return json.dumps(amqp_json(decoded_table(table)), separators=(",", ":"))


class KeyIndex:
    """The keys of one trace file: their ids and fragments, and the index lines to write."""

    __slots__ = ("_keys", "pending")

    def __init__(self) -> None:
        self._keys: dict[KeyFields, tuple[int, str]] = {}
        self.pending: list[str] = []  # index lines not yet written

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, fields: KeyFields) -> tuple[int, str]:
        """The key's id and fragment; a key new to this file queues its index line."""
        known = self._keys.get(fields)
        if known is None:
            fragment = key_fragment(fields)
            known = self._keys[fields] = (key_id(fragment), fragment)
            self.pending.append(f'{{"v":{SCHEMA_VERSION},"id":{known[0]},{fragment}}}')
        return known


def message_line(ts: float, ident: int, body_size: int, mode: int | None, fragment: str) -> str:
    """A message line (without the newline) from its parts and its key's fragment."""
    mode_part = f',"mode":{mode}' if mode is not None else ""
    return (
        f'{{"v":{SCHEMA_VERSION},"ts":{ts:.6f},"id":{ident},"size":{body_size}{mode_part},'
        f"{fragment}}}"
    )


def encode_record(record: Record, index: KeyIndex) -> str:
    """One message line (without the newline); a new key also goes into ``index``."""
    ts, vhost, exchange, routing_key, raw_header, body_size, queues = record
    headers_json, mode = decode_properties(raw_header)
    if len(queues) > 1:  # routing returns queues in no set order: one key per set
        queues = tuple(sorted(queues))
    ident, fragment = index.lookup((vhost, exchange, routing_key, headers_json, queues))
    return message_line(ts, ident, body_size, mode, fragment)


class TraceWriter:
    """Buffers trace records and writes them from a thread into rolling files."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int = 64 * 1024 * 1024,
        max_seconds: float = 3600.0,
        max_keys: int = 100_000,
        buffer_limit: int = 200_000,
        flush_interval: float = 0.2,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        # The index of the current file lives in memory: traces whose routing keys are all
        # different (ids in the key) would grow it without bound, so a file also rolls when
        # its index reaches max_keys keys.
        self.max_keys = max(1, max_keys)
        self.buffer_limit = buffer_limit
        self.flush_interval = flush_interval
        self.dropped = 0
        self.written = 0
        self._buffer: deque[Record] = deque()
        self._stop = threading.Event()
        self._file: Any = None
        self._keys_file: Any = None
        self._index = KeyIndex()
        self._file_bytes = 0
        self._file_started = 0.0
        self._sequence = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="leveret-trace", daemon=True)
        self._thread.start()

    def record(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        raw_header: bytes,
        body_size: int,
        queues: tuple[str, ...],
    ) -> None:
        """Queue one record (called on the publish path: no I/O, no encoding)."""
        if len(self._buffer) >= self.buffer_limit:
            self.dropped += 1
            return
        self._buffer.append(
            (time.time(), vhost, exchange, routing_key, raw_header, body_size, queues)
        )

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval):
            self._drain()
        self._drain()
        self._close_files()

    def _drain(self) -> None:
        buffer = self._buffer
        while buffer:
            self._roll_if_needed()
            index = self._index
            lines = []
            while buffer and len(index) < self.max_keys:
                lines.append(encode_record(buffer.popleft(), index))
            self._write(index, lines)
        if self.dropped:
            log.warning("trace: %d records dropped (the disk fell behind)", self.dropped)

    def _write(self, index: KeyIndex, lines: list[str]) -> None:
        if index.pending:  # the index goes to disk before the lines that use it
            self._keys_file.write(("\n".join(index.pending) + "\n").encode("utf-8"))
            self._keys_file.flush()
            index.pending.clear()
        if lines:
            data = ("\n".join(lines) + "\n").encode("utf-8")
            self._file.write(data)
            self._file.flush()
            self._file_bytes += len(data)
            self.written += len(lines)

    def _roll_if_needed(self) -> None:
        """Start a new pair of files when the current one is full, old or has max_keys keys
        (checked before a batch is encoded, since a new file starts a new key index)."""
        now = time.time()
        if self._file is not None and (
            self._file_bytes >= self.max_bytes
            or now - self._file_started > self.max_seconds
            or len(self._index) >= self.max_keys
        ):
            self._close_files()
        if self._file is None:
            self._sequence += 1
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
            name = f"{stamp}-{self._sequence:04d}.jsonl"
            self._keys_file = (self.directory / f"keys-{name}").open("ab")
            self._file = (self.directory / f"trace-{name}").open("ab")
            self._index = KeyIndex()
            self._file_bytes = 0
            self._file_started = now

    def _close_files(self) -> None:
        for handle in (self._file, self._keys_file):
            if handle is not None:
                handle.close()
        self._file = self._keys_file = None

    def close(self) -> None:
        """Write what is buffered and stop the writer thread."""
        self._stop.set()
        self._thread.join(10)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything recorded so far is written (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._buffer and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(self.flush_interval)
