"""The traffic trace: one JSON line per published message, for the Spark pipeline.

Schema (``schema_version`` 1), one object per line::

    {"schema_version": 1, "ts": 1763780000.123,      # publish time, seconds since the epoch
     "vhost": "/", "exchange": "amq.topic", "routing_key": "a.b",
     "headers": {"k": "v"} | null,                    # the headers table, JSON-safe
     "body_size": 100, "delivery_mode": 1 | 2 | null,
     "queues": ["q1", "q2"], "routed": true}          # queues reached ([] = unroutable)

Bodies are never recorded. Files are ``trace-<UTC start>-<n>.jsonl`` in the trace
directory, rolled by size and by age. Publishing never waits for the disk: records go
into a bounded in-memory buffer as tuples (nothing is encoded on the publish path) and a
writer thread encodes and writes them; when the buffer is full, records are dropped and
counted (``dropped``), and the count is logged.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pamqp import header as pamqp_header

SCHEMA_VERSION = 1
log = logging.getLogger(__name__)

# (ts, vhost, exchange, routing_key, raw content header, body_size, queues)
Record = tuple[float, str, str, str, bytes, int, tuple[str, ...]]


def json_safe(value: Any) -> Any:
    """An AMQP field value as plain JSON (bytes as text, timestamps as ISO strings)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def encode_record(record: Record) -> str:
    """One trace line (without the newline)."""
    ts, vhost, exchange, routing_key, raw_header, body_size, queues = record
    content = pamqp_header.ContentHeader()
    content.unmarshal(raw_header)
    props = content.properties
    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "ts": round(ts, 6),
            "vhost": vhost,
            "exchange": exchange,
            "routing_key": routing_key,
            "headers": json_safe(props.headers) if props.headers is not None else None,
            "body_size": body_size,
            "delivery_mode": props.delivery_mode,
            "queues": sorted(queues),
            "routed": bool(queues),
        },
        separators=(",", ":"),
    )


class TraceWriter:
    """Buffers trace records and writes them from a thread into rolling files."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int = 64 * 1024 * 1024,
        max_seconds: float = 3600.0,
        buffer_limit: int = 200_000,
        flush_interval: float = 0.2,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.buffer_limit = buffer_limit
        self.flush_interval = flush_interval
        self.dropped = 0
        self.written = 0
        self._buffer: deque[Record] = deque()
        self._stop = threading.Event()
        self._file: Any = None
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
        if self._file is not None:
            self._file.close()

    def _drain(self) -> None:
        buffer = self._buffer
        if not buffer:
            return
        lines = []
        while buffer:
            lines.append(encode_record(buffer.popleft()))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        self._roll_if_needed(len(data))
        self._file.write(data)
        self._file.flush()
        self._file_bytes += len(data)
        self.written += len(lines)
        if self.dropped:
            log.warning("trace: %d records dropped (the disk fell behind)", self.dropped)

    def _roll_if_needed(self, incoming: int) -> None:
        now = time.time()
        if self._file is not None and (
            self._file_bytes + incoming > self.max_bytes
            or now - self._file_started > self.max_seconds
        ):
            self._file.close()
            self._file = None
        if self._file is None:
            self._sequence += 1
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
            path = self.directory / f"trace-{stamp}-{self._sequence:04d}.jsonl"
            self._file = path.open("ab")
            self._file_bytes = 0
            self._file_started = now

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
