"""A segment being written: its rows as Parquet row groups, its dictionary and counts on close.

The file layout is :mod:`leveret.trace.schema`'s; the broker's writer thread
(:mod:`leveret.trace.writer`), ``leveret trace convert`` and the benchmarks' generators all
write through :class:`Segment`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from leveret.trace.schema import Entry, arrow, key_entry, queues_entry, schemas

# A key as :meth:`Segment.key` looks it up: vhost, exchange, routing key, headers as JSON.
_Lookup = tuple[str, str, str, str | None]


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
        self._entries: dict[tuple[str, int], Entry] = {}
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
        """Dictionary entries (keys and queue sets) this segment holds in memory (what the
        writer's ``max_keys`` bounds)."""
        return len(self._entries)

    def knows(self, entry: Entry) -> bool:
        """Whether the dictionary holds ``entry`` (from :func:`key_entry`, :func:`queues_entry`)."""
        return (entry[1], entry[2]) in self._entries

    def use(self, entries: Iterable[Entry]) -> None:
        """Add the dictionary entries that rows given to :meth:`append` refer to."""
        for entry in entries:
            self._entries.setdefault((entry[1], entry[2]), entry)

    def key(self, vhost: str, exchange: str, routing_key: str, headers: str | None) -> int:
        """The id of a key (headers as JSON text), added to the dictionary if new."""
        lookup = (vhost, exchange, routing_key, headers)
        ident = self._keys.get(lookup)
        if ident is None:
            entry = key_entry(vhost, exchange, routing_key, headers)
            self.use((entry,))
            ident = self._keys[lookup] = entry[2]
        return ident

    def queue_set(self, queues: Sequence[str]) -> int:
        """The id of a set of queue names, added to the dictionary if new."""
        names = tuple(queues)
        ident = self._queue_sets.get(names)
        if ident is None:
            entry = queues_entry(names)
            self.use((entry,))
            ident = self._queue_sets[names] = entry[2]
        return ident

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
        pa, _, _ = arrow()
        rows_schema, _, _ = schemas()
        ts, key, queues, size, mode = self._columns
        batch = pa.record_batch(
            [
                timestamps(pa.array(ts, pa.float64())),
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
        pa, _, pq = arrow()
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
        pa, _, pq = arrow()
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


def timestamps(seconds: Any) -> Any:
    """A float64 Arrow array of seconds since the epoch as the rows' ``ts`` column (µs)."""
    pa, pc, _ = arrow()
    micros = pc.cast(pc.multiply(seconds, 1e6), pa.int64(), safe=False)
    return micros.view(pa.timestamp("us", tz="UTC"))


COUNT_KEYS = ["key", "queues", "minute"]


def _count(rows: Any) -> Any:
    """Rows counted by key, queue set and minute (Arrow's hash aggregation, in C++)."""
    pa, pc, _ = arrow()
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
