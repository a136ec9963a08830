"""The traffic trace: the messages the broker routed, as columnar segments for the Spark pipeline.

Schema version 3. A trace directory holds *segments*; a segment is two Parquet files written
by a background thread and made visible together when the segment closes (rolled by age,
row count or dictionary size, and by :meth:`TraceWriter.flush` and :meth:`TraceWriter.close`):

``trace-<UTC start>-<n>.parquet``, one row per published message, in row groups of up to
``row_group_rows`` rows (zstd)::

    ts      timestamp[us, UTC]  not null   publish time
    key     int64               not null   the message's key, an id of the dictionary below:
                                           (vhost, exchange, routing key, headers)
    queues  int64               not null   the set of queues it reached, an id of the
                                           dictionary (the empty set: unroutable)
    size    int64               not null   body size in bytes (bodies are never recorded)
    mode    int16                          delivery mode; null when the publisher set none

``keys-<UTC start>-<n>.parquet``, the segment's dictionary: one row per key and one per queue
set that its rows use::

    v            int32         not null  schema version (3)
    kind         string        not null  "key" or "queues"
    id           int64         not null
    vhost        string                  kind "key": the key's fields (null for "queues")
    exchange     string
    routing_key  string
    headers      string                  the headers table as JSON, as the management API
                                         shows it (leveret.fieldtable.amqp_json); null: none
    queues       list<string>            kind "queues": queue names, sorted (null for "key")

``counts-<UTC start>-<n>.parquet``, the segment's rows counted by key, queue set and minute
(what most questions need, a few rows per key and minute instead of one per message; the rows
stay the reference, for per-message questions)::

    key, queues   int64  not null  as in the rows
    minute        int64  not null  minutes since the epoch (UTC)
    messages      int64  not null  rows in the group
    bytes         int64  not null  their body sizes, summed
    persistent    int64  not null  rows with delivery mode 2

An id is the first 53 bits of the BLAKE2b hash of the entry's JSON (:func:`key_fragment`,
:func:`queues_fragment`), so an entry has the same id in every segment (readers may take the
union of the dictionaries) and ids survive readers that use doubles (jq, JavaScript). Rows
repeat a few keys endlessly, so Parquet stores the id columns dictionary-encoded in a few bits
per row, and a reader aggregates numbers, not strings.

While a segment is written its rows go to ``trace-*.parquet.part`` (a Parquet file has its
schema and row group index at the end, so it is unreadable until closed); on close the
dictionary and the counts are written, then the rows file is renamed: a ``trace-*.parquet``
always has its ``keys-*.parquet`` and ``counts-*.parquet``. A crash loses the open segment
(at most ``max_seconds`` of trace, 5 minutes by default) and leaves its ``.part`` file,
which readers ignore.

``leveret trace dump PATH`` prints segments as JSON lines (one object per message, with the
dictionary's strings) for people and ``jq``; ``leveret trace convert`` turns the JSON-lines
traces of versions 1 and 2 (earlier brokers) into segments. The Spark pipeline reads both.

Publishing never waits for the disk: :meth:`TraceWriter.record` appends a tuple to a bounded
in-memory buffer (nothing is decoded on the publish path) and the writer thread turns batches
of them into Arrow columns and Parquet row groups (encoding and compression run in Arrow's C++
code, outside the interpreter lock); when the buffer is full, records are dropped and counted
(``dropped``), and the count is logged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from leveret.fieldtable import amqp_json
from leveret.message import cached_by_properties, decoded_table, headers_and_mode

SCHEMA_VERSION = 3
ID_BITS = 53  # JSON readers that use doubles (jq, JavaScript) keep 53-bit integers exact
log = logging.getLogger(__name__)

# (ts, vhost, exchange, routing_key, raw content header, body_size, queues)
Record = tuple[float, str, str, str, bytes, int, tuple[str, ...]]
# A key as the writer looks it up: vhost, exchange, routing key, and the headers as the raw
# table (records) or JSON text (converted traces).
_Lookup = tuple[str, str, str, bytes | str | None]


class TraceError(Exception):
    """The trace cannot be written or read (one line for the operator)."""


def _arrow() -> tuple[Any, Any, Any]:
    """``pyarrow``, ``pyarrow.compute`` and ``pyarrow.parquet``, imported when a trace is
    first written or read (a broker without a trace never loads them)."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
        import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
    except ImportError as exc:
        raise TraceError(
            f"the traffic trace needs pyarrow ({exc}): pip install 'leveret[pipeline]'"
        ) from None
    return pa, pc, pq


def require_arrow() -> None:
    """Raise :class:`TraceError` (one line) if pyarrow, which writes the trace, is missing."""
    _arrow()


@functools.cache
def schemas() -> tuple[Any, Any, Any]:
    """The Arrow schemas of a segment's rows, its dictionary and its counts."""
    pa, _, _ = _arrow()
    metadata = {b"leveret.trace.version": str(SCHEMA_VERSION).encode()}
    rows = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("key", pa.int64(), nullable=False),
            pa.field("queues", pa.int64(), nullable=False),
            pa.field("size", pa.int64(), nullable=False),
            pa.field("mode", pa.int16()),
        ],
        metadata=metadata,
    )
    counts = pa.schema(
        [
            pa.field(name, pa.int64(), nullable=False)
            for name in ("key", "queues", "minute", "messages", "bytes", "persistent")
        ],
        metadata=metadata,
    )
    dictionary = pa.schema(
        [
            pa.field("v", pa.int32(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("vhost", pa.string()),
            pa.field("exchange", pa.string()),
            pa.field("routing_key", pa.string()),
            pa.field("headers", pa.string()),
            pa.field("queues", pa.list_(pa.string())),
        ],
        metadata=metadata,
    )
    return rows, dictionary, counts


# -- ids -----------------------------------------------------------------------------------------


def key_fragment(vhost: str, exchange: str, routing_key: str, headers_json: str | None) -> str:
    """A key's JSON: ``{"vhost":..,"exchange":..,"key":..,"headers":..}`` (its id's input)."""
    dumps = json.dumps
    headers = headers_json if headers_json is not None else "null"
    return (
        f'{{"vhost":{dumps(vhost)},"exchange":{dumps(exchange)},"key":{dumps(routing_key)},'
        f'"headers":{headers}}}'
    )


def queues_fragment(queues: Iterable[str]) -> str:
    """A queue set's JSON: its names, sorted (its id's input)."""
    return json.dumps(sorted(queues))


def key_id(fragment: str) -> int:
    """An id: the first 53 bits of the BLAKE2b hash of a fragment."""
    digest = hashlib.blake2b(fragment.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - ID_BITS)


def decode_properties(raw_header: bytes) -> tuple[str | None, int | None]:
    """The headers (as JSON text, or None) and delivery mode of a raw content header
    payload (class id, weight, body size, then the property flags and values)."""
    table, mode = headers_and_mode(raw_header)
    return (headers_json(table) if table is not None else None), mode


def headers_json(table: bytes) -> str | None:
    """A raw headers table as JSON text (None, with a warning once, if it does not decode)."""
    try:
        return _headers_json(table)
    except ValueError:
        # Publishing refuses properties that do not decode (leveret.message.properties_decode),
        # but the writer must not die on a record that slips through: no headers, a warning.
        _warn_undecodable()
        return None


@functools.cache
def _warn_undecodable() -> None:
    log.warning("trace: headers that do not decode are recorded as no headers")


@cached_by_properties(maxsize=4096)
def _headers_json(table: bytes) -> str:
    return json.dumps(amqp_json(decoded_table(table)), separators=(",", ":"))


# -- writing ---------------------------------------------------------------------------------


class Segment:
    """One segment being written: its rows in Arrow chunks, then Parquet row groups; its
    dictionary in memory until :meth:`close` writes it. Not thread-safe (one writer)."""

    def __init__(
        self, path: Path, row_group_rows: int = 1_000_000, compression: str = "zstd"
    ) -> None:
        if not path.name.startswith("trace-") or path.suffix != ".parquet":
            raise ValueError(f"a segment is named trace-*.parquet, not {path.name}")
        self.path = path
        self.keys_path = path.with_name("keys-" + path.name[len("trace-") :])
        self.counts_path = path.with_name("counts-" + path.name[len("trace-") :])
        self.row_group_rows = max(1, row_group_rows)
        self.compression = compression
        self.rows = 0
        self._part = path.with_name(path.name + ".part")
        self._writer: Any = None
        self._keys: dict[_Lookup, int] = {}
        self._queue_sets: dict[tuple[str, ...], int] = {}
        self._entries: dict[tuple[str, int], tuple[Any, ...]] = {}
        self._columns: tuple[list[float], list[int], list[int], list[int], list[int | None]] = (
            [],
            [],
            [],
            [],
            [],
        )
        self._chunks: list[Any] = []
        self._chunk_rows = 0
        self._counts: list[Any] = []  # per row group

    @property
    def lookups(self) -> int:
        """Keys and queue sets this segment holds in memory (what ``max_keys`` bounds)."""
        return len(self._keys) + len(self._queue_sets)

    def _key(self, lookup: _Lookup, headers: str | None) -> int:
        vhost, exchange, routing_key, _ = lookup
        ident = key_id(key_fragment(vhost, exchange, routing_key, headers))
        entry = (SCHEMA_VERSION, "key", ident, vhost, exchange, routing_key, headers, None)
        self._entries.setdefault(("key", ident), entry)
        self._keys[lookup] = ident
        return ident

    def _queues(self, queues: tuple[str, ...]) -> int:
        names = sorted(queues)
        ident = key_id(queues_fragment(names))
        entry = (SCHEMA_VERSION, "queues", ident, None, None, None, None, names)
        self._entries.setdefault(("queues", ident), entry)
        self._queue_sets[queues] = ident
        return ident

    def key(self, vhost: str, exchange: str, routing_key: str, headers: str | None) -> int:
        """The id of a key (headers as JSON text), added to the dictionary if new."""
        ident = self._keys.get((vhost, exchange, routing_key, headers))
        return (
            ident
            if ident is not None
            else self._key((vhost, exchange, routing_key, headers), headers)
        )

    def queue_set(self, queues: Sequence[str]) -> int:
        """The id of a set of queue names, added to the dictionary if new."""
        names = tuple(queues)
        ident = self._queue_sets.get(names)
        return ident if ident is not None else self._queues(names)

    def append(self, batch: Any) -> None:
        """Rows already in Arrow form (a record batch of the rows schema, ids from
        :meth:`key` and :meth:`queue_set`): how a generator writes segments in bulk."""
        rows_schema, _, _ = schemas()
        if not batch.schema.equals(rows_schema):
            raise ValueError(f"rows must have the schema {rows_schema}, not {batch.schema}")
        self._chunk()
        self._chunks.append(batch)
        self._chunk_rows += batch.num_rows
        self._rows_added(batch.num_rows)

    def take(self, buffer: deque[Record], limit: int, max_lookups: int) -> int:
        """Move up to ``limit`` records from ``buffer`` into the segment (fewer when its
        dictionary reaches ``max_lookups``); returns how many."""
        ts_column, key_column, queues_column, size_column, mode_column = self._columns
        keys, queue_sets = self._keys, self._queue_sets
        popleft = buffer.popleft
        taken = 0
        while buffer and taken < limit and len(keys) + len(queue_sets) < max_lookups:
            ts, vhost, exchange, routing_key, raw_header, body_size, queues = popleft()
            table, mode = headers_and_mode(raw_header)
            lookup = (vhost, exchange, routing_key, table)
            ident = keys.get(lookup)
            if ident is None:
                ident = self._key(lookup, headers_json(table) if table is not None else None)
            queues_id = queue_sets.get(queues)
            if queues_id is None:
                queues_id = self._queues(queues)
            ts_column.append(ts)
            key_column.append(ident)
            queues_column.append(queues_id)
            size_column.append(body_size)
            mode_column.append(mode)
            taken += 1
        self._rows_added(taken)
        return taken

    def add(
        self,
        ts: float,
        vhost: str,
        exchange: str,
        routing_key: str,
        headers: str | None,
        body_size: int,
        mode: int | None,
        queues: Sequence[str],
    ) -> None:
        """One message from decoded fields (headers as JSON text): the converter's way in."""
        ident = self.key(vhost, exchange, routing_key, headers)
        queues_id = self.queue_set(queues)
        ts_column, key_column, queues_column, size_column, mode_column = self._columns
        ts_column.append(ts)
        key_column.append(ident)
        queues_column.append(queues_id)
        size_column.append(body_size)
        mode_column.append(mode)
        self._rows_added(1)

    def _rows_added(self, count: int) -> None:
        self.rows += count
        if len(self._columns[0]) >= 65_536:
            self._chunk()
        if self._chunk_rows >= self.row_group_rows:
            self._write_row_group()

    def _chunk(self) -> None:
        """The rows gathered in Python lists, as one Arrow record batch."""
        if not self._columns[0]:
            return
        pa, pc, _ = _arrow()
        rows_schema, _, _ = schemas()
        ts, key, queues, size, mode = self._columns
        micros = pc.cast(pc.multiply(pa.array(ts, pa.float64()), 1e6), pa.int64(), safe=False)
        batch = pa.record_batch(
            [
                micros.view(pa.timestamp("us", tz="UTC")),
                pa.array(key, pa.int64()),
                pa.array(queues, pa.int64()),
                pa.array(size, pa.int64()),
                pa.array(mode, pa.int16()),
            ],
            schema=rows_schema,
        )
        self._chunks.append(batch)
        self._chunk_rows += batch.num_rows
        for column in self._columns:
            column.clear()

    def _write_row_group(self) -> None:
        self._chunk()
        if not self._chunks:
            return
        pa, _, pq = _arrow()
        rows_schema, _, _ = schemas()
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._part,
                rows_schema,
                compression=self.compression,
                # Timestamps only grow: deltas take a byte or two where a dictionary fails.
                use_dictionary=["key", "queues", "size", "mode"],
                column_encoding={"ts": "DELTA_BINARY_PACKED"},
                write_statistics=["ts"],
            )
        table = pa.Table.from_batches(self._chunks, rows_schema)
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._counts.append(_count(table))
        self._chunks.clear()
        self._chunk_rows = 0

    def close(self) -> bool:
        """Write what is left, the dictionary, and make the segment visible (the rows file
        last); False if the segment has no rows (then it leaves no file)."""
        self._write_row_group()
        if self._writer is None:
            return False
        self._writer.close()
        self._writer = None
        pa, _, pq = _arrow()
        _, dictionary_schema, counts_schema = schemas()
        columns = list(zip(*self._entries.values(), strict=True))
        dictionary = pa.Table.from_arrays(
            [
                pa.array(column, field.type)
                for column, field in zip(columns, dictionary_schema, strict=True)
            ],
            schema=dictionary_schema,
        )
        partial = self.keys_path.with_name(self.keys_path.name + ".part")
        pq.write_table(dictionary, partial, compression=self.compression)
        os.replace(partial, self.keys_path)
        counts = _sum_counts(pa.concat_tables(self._counts)).cast(counts_schema)
        partial = self.counts_path.with_name(self.counts_path.name + ".part")
        pq.write_table(counts, partial, compression=self.compression)
        os.replace(partial, self.counts_path)
        os.replace(self._part, self.path)
        return True

    def abandon(self) -> None:
        """Close without publishing (the ``.part`` file is removed)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._part.unlink(missing_ok=True)


COUNT_KEYS = ["key", "queues", "minute"]


def _count(rows: Any) -> Any:
    """Rows counted by key, queue set and minute (Arrow's hash aggregation, in C++)."""
    pa, pc, _ = _arrow()
    minute = pc.divide(rows.column("ts").cast(pa.int64()), 60_000_000)
    persistent = pc.fill_null(pc.equal(rows.column("mode"), 2), False).cast(pa.int64())
    table = pa.table(
        {
            "key": rows.column("key"),
            "queues": rows.column("queues"),
            "minute": minute,
            "messages": pa.repeat(pa.scalar(1, pa.int64()), rows.num_rows),
            "bytes": rows.column("size"),
            "persistent": persistent,
        }
    )
    return _sum_counts(table)


def _sum_counts(table: Any) -> Any:
    sums = ["messages", "bytes", "persistent"]
    grouped = table.group_by(COUNT_KEYS, use_threads=False).aggregate([(c, "sum") for c in sums])
    return grouped.select([*COUNT_KEYS, *(f"{c}_sum" for c in sums)]).rename_columns(
        [*COUNT_KEYS, *sums]
    )


def segment_path(directory: Path, started: float, sequence: int) -> Path:
    """``trace-<UTC start>-<n>.parquet`` in ``directory``, with a sequence number no segment
    there uses yet (a restarted broker may start within the same second)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started))
    while True:
        path = directory / f"trace-{stamp}-{sequence:04d}.parquet"
        if not path.exists() and not path.with_name(path.name + ".part").exists():
            return path
        sequence += 1


class TraceWriter:
    """Buffers trace records and writes them from a thread into rolling segments."""

    def __init__(
        self,
        directory: Path,
        max_rows: int = 20_000_000,
        max_seconds: float = 300.0,
        max_keys: int = 100_000,
        buffer_limit: int = 200_000,
        flush_interval: float = 0.2,
        row_group_rows: int = 1_000_000,
    ) -> None:
        _arrow()  # a missing pyarrow is an error now, not in the thread
        self.directory = directory
        self.max_rows = max(1, max_rows)
        self.max_seconds = max_seconds
        # The dictionary of the open segment lives in memory: traces whose routing keys are
        # all different (ids in the key) would grow it without bound, so a segment also
        # rolls when it holds max_keys keys and queue sets.
        self.max_keys = max(1, max_keys)
        self.buffer_limit = buffer_limit
        self.flush_interval = flush_interval
        self.row_group_rows = row_group_rows
        self.dropped = 0
        self.written = 0
        self.segments = 0  # closed so far
        self._logged_dropped = 0
        self._buffer: deque[Record] = deque()
        self._flushes: deque[threading.Event] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._segment: Segment | None = None
        self._segment_started = 0.0
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
        try:
            while not self._stop.is_set():
                self._wake.wait(self.flush_interval)
                self._wake.clear()
                self._drain()
                self._roll_if_old()
                if self._flushes:
                    self._close_segment()
                    while self._flushes:
                        self._flushes.popleft().set()
            self._drain()
        except Exception:  # the broker goes on without its trace
            log.exception("trace: the writer stopped; records from now on are dropped")
            self.buffer_limit = 0
            self._buffer.clear()
        finally:
            self._close_segment()
            while self._flushes:
                self._flushes.popleft().set()

    def _drain(self) -> None:
        buffer = self._buffer
        while buffer:
            segment = self._open_segment()
            room = self.max_rows - segment.rows
            self.written += segment.take(buffer, room, self.max_keys)
            if segment.rows >= self.max_rows or segment.lookups >= self.max_keys:
                self._close_segment()
        if self.dropped != self._logged_dropped:
            log.warning("trace: %d records dropped (the writer fell behind)", self.dropped)
            self._logged_dropped = self.dropped

    def _open_segment(self) -> Segment:
        if self._segment is None:
            now = time.time()
            self._sequence += 1
            path = segment_path(self.directory, now, self._sequence)
            self._sequence = int(path.stem.rsplit("-", 1)[1])
            self._segment = Segment(path, self.row_group_rows)
            self._segment_started = time.monotonic()
        return self._segment

    def _roll_if_old(self) -> None:
        if (
            self._segment is not None
            and time.monotonic() - self._segment_started >= self.max_seconds
        ):
            self._close_segment()

    def _close_segment(self) -> None:
        segment, self._segment = self._segment, None
        if segment is not None and segment.close():
            self.segments += 1

    def close(self) -> None:
        """Write what is buffered, close the open segment and stop the writer thread."""
        self._stop.set()
        self._wake.set()
        self._thread.join(10)

    def flush(self, timeout: float = 5.0) -> None:
        """Write everything recorded so far and close the open segment, so that readers see
        it (for tests, tools and shutdown); waits at most ``timeout`` seconds."""
        if not self._thread.is_alive():
            return
        done = threading.Event()
        self._flushes.append(done)
        self._wake.set()
        done.wait(timeout)


# -- reading and converting --------------------------------------------------------------------


def segment_files(paths: Iterable[str | Path]) -> list[Path]:
    """Segments (``trace-*.parquet``) of directories and files, sorted by name per argument."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out.extend(sorted(path.glob("trace-*.parquet")))
        elif path.exists():
            out.append(path)
        else:
            raise TraceError(f"{path}: no such file or directory")
    return out


def read_dictionary(segment: Path) -> tuple[dict[int, dict[str, Any]], dict[int, list[str]]]:
    """A segment's dictionary: keys by id (vhost, exchange, routing_key, headers as JSON
    text) and queue sets by id."""
    _, _, pq = _arrow()
    path = segment.with_name("keys-" + segment.name[len("trace-") :])
    if not segment.name.startswith("trace-") or not path.exists():
        raise TraceError(f"{segment}: not a trace segment (no {path.name} beside it)")
    keys: dict[int, dict[str, Any]] = {}
    queue_sets: dict[int, list[str]] = {}
    for entry in pq.read_table(path).to_pylist():
        if entry["v"] != SCHEMA_VERSION:
            raise TraceError(f"{path}: trace schema version {entry['v']}, not {SCHEMA_VERSION}")
        if entry["kind"] == "queues":
            queue_sets[entry["id"]] = entry["queues"]
        else:
            keys[entry["id"]] = {
                "vhost": entry["vhost"],
                "exchange": entry["exchange"],
                "key": entry["routing_key"],
                "headers": entry["headers"],
            }
    return keys, queue_sets


def read_messages(segment: Path) -> Iterator[dict[str, Any]]:
    """A segment's messages as JSON objects, in order: ``ts`` (seconds), ``vhost``,
    ``exchange``, ``key`` (the routing key), ``headers`` (absent if none), ``size``, ``mode``
    (absent if none) and ``queues``: what ``leveret trace dump`` prints."""
    pa, _, pq = _arrow()
    keys, queue_sets = read_dictionary(segment)
    try:
        parquet = pq.ParquetFile(segment)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{segment}: not a Parquet file ({exc})") from None
    headers_cache: dict[int, Any] = {}
    for batch in parquet.iter_batches(batch_size=65_536):
        micros = batch.column("ts").cast(pa.int64()).to_pylist()
        columns = [batch.column(name).to_pylist() for name in ("key", "queues", "size", "mode")]
        for ts, ident, queues_id, size, mode in zip(micros, *columns, strict=True):
            key = keys[ident]
            line: dict[str, Any] = {
                "ts": ts / 1e6,
                "vhost": key["vhost"],
                "exchange": key["exchange"],
                "key": key["key"],
            }
            if key["headers"] is not None:
                if ident not in headers_cache:
                    headers_cache[ident] = json.loads(key["headers"])
                line["headers"] = headers_cache[ident]
            line["size"] = size
            if mode is not None:
                line["mode"] = mode
            line["queues"] = queue_sets[queues_id]
            yield line


def convert(
    sources: Iterable[str | Path], directory: Path, max_rows: int = 20_000_000
) -> list[Path]:
    """Write the messages of JSON-lines traces (versions 1 and 2, ``trace-*.jsonl`` files or
    directories of them; key index files are skipped) as version 3 segments in ``directory``;
    returns the segments written."""
    files: list[Path] = []
    for source in map(Path, sources):
        if source.is_dir():
            files.extend(sorted(source.glob("trace-*.jsonl")))
        elif source.exists():
            files.append(source)
        else:
            raise TraceError(f"{source}: no such file or directory")
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    segment: Segment | None = None
    sequence = 0
    for file in files:
        with file.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                    version = message.get("v", message.get("schema_version"))
                    if version not in (1, 2) or "ts" not in message:
                        raise ValueError(f"not a version 1 or 2 trace line: {line[:80]!r}")
                except ValueError as exc:
                    raise TraceError(f"{file}:{number}: {exc}") from None
                if segment is None:
                    sequence += 1
                    path = segment_path(directory, float(message["ts"]), sequence)
                    sequence = int(path.stem.rsplit("-", 1)[1])
                    segment = Segment(path)
                headers = message.get("headers")
                segment.add(
                    float(message["ts"]),
                    message.get("vhost") or "/",
                    message.get("exchange") or "",
                    message.get("key", message.get("routing_key")) or "",
                    json.dumps(headers, separators=(",", ":")) if headers is not None else None,
                    int(message.get("size", message.get("body_size")) or 0),
                    message.get("mode", message.get("delivery_mode")),
                    message.get("queues") or (),
                )
                if segment.rows >= max_rows:
                    segment.close()
                    written.append(segment.path)
                    segment = None
    if segment is not None and segment.close():
        written.append(segment.path)
    return written
