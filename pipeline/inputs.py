"""The job's inputs, checked and read before Spark starts. No Spark here.

* :func:`find_traces`: ``--trace`` arguments to trace files: version 3 segments
  (``trace-*.parquet`` with their ``keys-*.parquet`` dictionary, ``broker/trace/``) and the
  JSON-lines traces of versions 1 and 2 (``trace-*.jsonl``, optionally ``.gz``), each checked
  to be what its name says (a file that is not a trace is an error, not one unroutable
  message). URLs (``hdfs://``, ``s3a://``) are listed through Spark later.
* :func:`read_dictionaries`: the segments' dictionaries as two Arrow tables, read on the
  driver with PyArrow (a few milliseconds per segment: Spark need not run for them).
* :func:`segment_minutes`: how many minutes the segments span, from their Parquet statistics.
* :func:`check_output`: the output directory can be written.
* :func:`prepare`: all of it and the topologies, for the job (:class:`Prepared`).

Errors are :class:`~leveret.pipeline.topology.SourceError`: one line for the operator.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from leveret.pipeline.schema import (
    JSON_VERSIONS,
    ROWS_COLUMNS,
    SEGMENT_VERSION,
)
from leveret.pipeline.topology import SourceError, Topology, load

if TYPE_CHECKING:
    from leveret.pipeline.cli import JobOptions

PARQUET_MAGIC = b"PAR1"


@dataclass
class Traces:
    """Trace files by format."""

    segments: list[str] = field(default_factory=list)  # version 3 rows files
    jsonl: list[str] = field(default_factory=list)  # versions 1 and 2
    urls: list[str] = field(default_factory=list)  # listed through Hadoop once Spark runs

    def __bool__(self) -> bool:
        return bool(self.segments or self.jsonl or self.urls)


def is_url(path: str) -> bool:
    """``hdfs://...``, ``s3a://...``, and Hadoop's own ``file:/...`` spelling."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", path) is not None


def dictionary_path(segment: str) -> str:
    """The dictionary (``keys-*.parquet``) beside a segment (``trace-*.parquet``)."""
    head, sep, name = segment.rpartition("/")
    return f"{head}{sep}keys-{name[len('trace-') :]}"


def counts_path(segment: str) -> str:
    """The counts (``counts-*.parquet``) beside a segment (``trace-*.parquet``)."""
    head, sep, name = segment.rpartition("/")
    return f"{head}{sep}counts-{name[len('trace-') :]}"


def counted(segments: Sequence[str]) -> bool:
    """Whether every (local) segment has its counts file (brokers since they were added)."""
    return all(is_url(s) or os.path.exists(counts_path(s)) for s in segments)


def find_traces(paths: Iterable[str]) -> Traces:
    """Trace files for ``--trace`` arguments (directories, files, globs), checked."""
    out = Traces()
    for path in paths:
        if is_url(path):
            out.urls.append(path)
            continue
        if os.path.isdir(path):
            found = sorted(
                glob.glob(os.path.join(path, "trace-*.parquet"))
                + glob.glob(os.path.join(path, "trace-*.jsonl"))
                + glob.glob(os.path.join(path, "trace-*.jsonl.gz"))
            )
            if not found:
                raise SourceError(
                    f"--trace {path}: no trace files in it (trace-*.parquet, trace-*.jsonl)"
                )
        else:
            found = sorted(glob.glob(path))
            if not found:
                what = "matches no file" if glob.has_magic(path) else "no such file or directory"
                raise SourceError(f"--trace {path}: {what}")
        for file in found:
            if os.path.isdir(file):
                raise SourceError(f"--trace {file}: a directory inside a glob")
            kind = check_trace_file(file)
            (out.segments if kind == "segment" else out.jsonl).append(file)
    return out


def check_trace_file(path: str) -> str:
    """``"segment"`` or ``"jsonl"`` for a trace file, or a :class:`SourceError` saying why it
    is not one."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            if head == PARQUET_MAGIC:
                return _check_segment(path)
    except OSError as exc:
        raise SourceError(f"--trace {path}: {exc.strerror or exc}") from None
    return _check_jsonl(path)


def _check_segment(path: str) -> str:
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"--trace {path}: a damaged Parquet file ({exc})") from None
    version = (schema.metadata or {}).get(b"leveret.trace.version", b"").decode()
    missing = [name for name in ROWS_COLUMNS if name not in schema.names]
    if not os.path.basename(path).startswith("trace-") or missing or not version:
        raise SourceError(f"--trace {path}: a Parquet file, but not a Leveret trace segment")
    if int(version) > SEGMENT_VERSION:
        raise SourceError(
            f"--trace {path}: trace schema version {version} is newer than this pipeline "
            f"reads ({SEGMENT_VERSION}): upgrade Leveret"
        )
    if not os.path.exists(dictionary_path(path)):
        raise SourceError(f"--trace {path}: its dictionary {dictionary_path(path)} is missing")
    return "segment"


def _check_jsonl(path: str) -> str:
    """The first line of a JSON-lines trace must be a version 1 or 2 message."""
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), None)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise SourceError(f"--trace {path}: not a trace file ({exc})") from None
    if first is None:
        raise SourceError(f"--trace {path}: empty, not a trace file")
    try:
        line = json.loads(first)
    except ValueError:
        line = None
    version = line.get("v", line.get("schema_version")) if isinstance(line, dict) else None
    if not isinstance(version, int) or "ts" not in line:
        raise SourceError(
            f"--trace {path}: not a Leveret trace (its first line is not a trace message)"
        )
    if version not in JSON_VERSIONS:
        if version > max(JSON_VERSIONS):
            raise SourceError(
                f"--trace {path}: trace schema version {version} is newer than this pipeline "
                f"reads: upgrade Leveret"
            )
        raise SourceError(f"--trace {path}: unknown trace schema version {version}")
    return "jsonl"


KEYS_ARROW = pa.schema(
    [
        ("key", pa.int64()),
        ("vhost", pa.string()),
        ("exchange", pa.string()),
        ("routing_key", pa.string()),
        ("headers", pa.string()),
    ]
)
SETS_ARROW = pa.schema([("queue_set", pa.int64()), ("recorded", pa.list_(pa.string()))])


def read_dictionaries(segments: Sequence[str]) -> tuple[Any, Any]:
    """The union of the segments' dictionaries: ``(keys, queue_sets)`` Arrow tables of
    :data:`KEYS_ARROW` and :data:`SETS_ARROW`, one row per id."""
    keys: list[Any] = []
    sets: list[Any] = []
    for segment in segments:
        path = dictionary_path(segment)
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"--trace {segment}: its dictionary is unreadable ({exc})") from None
        more_keys, more_sets = split_dictionary(table, path)
        keys.append(more_keys)
        sets.append(more_sets)
    return distinct_ids(keys, KEYS_ARROW), distinct_ids(sets, SETS_ARROW)


def split_dictionary(table: Any, where: str) -> tuple[Any, Any]:
    """A dictionary file's rows as (keys, queue sets) tables."""
    versions = set(table.column("v").to_pylist())
    if versions - {SEGMENT_VERSION}:
        raise SourceError(f"{where}: trace schema version(s) {sorted(versions)} unknown")
    kind = table.column("kind")
    keys = table.filter(pc.equal(kind, "key"))
    sets = table.filter(pc.equal(kind, "queues"))
    return (
        keys.select(["id", "vhost", "exchange", "routing_key", "headers"]),
        sets.select(["id", "queues"]),
    )


def distinct_ids(tables: Sequence[Any], schema: Any) -> Any:
    """The tables (first column: the id) as one of ``schema``, one row per id (the first: an
    id names one entry, whichever segment it comes from)."""
    parts = [t.rename_columns(schema.names).cast(schema) for t in tables]
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    if table.num_rows < 2:
        return table
    ids = table.column(0)
    order = pc.sort_indices(ids)
    ordered = ids.take(order)
    changes = pc.not_equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
    keep = pa.concat_arrays([pa.array([True]), changes.combine_chunks()])
    if keep.false_count == 0:
        return table
    return table.take(order.filter(keep))


def segment_minutes(segments: Sequence[str]) -> int:
    """Minutes from the first to the last message of the segments, from the row groups'
    statistics of ``ts`` (0 if unknown)."""
    low: int | None = None
    high: int | None = None
    for segment in segments:
        metadata = pq.read_metadata(segment)
        column = metadata.schema.names.index("ts")
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(column).statistics
            if stats is None or not stats.has_min_max:
                return 0
            first, last = _micros(stats.min), _micros(stats.max)
            low = first if low is None else min(low, first)
            high = last if high is None else max(high, last)
    if low is None or high is None:
        return 0
    return high // 60_000_000 - low // 60_000_000 + 1


def _micros(value: Any) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1_000_000)


def check_output(out: Path) -> None:
    """The output directory exists or can be made, and is writable."""
    if is_url(str(out)):
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"--out {out}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise SourceError(f"--out {out}: not writable")


# -- everything the job knows before Spark runs ----------------------------------------------------


@dataclass
class Prepared:
    """Everything the job knows before Spark runs."""

    traces: Traces
    current: Topology
    proposed: Topology | None
    trace_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def prepare(options: JobOptions) -> Prepared:
    """Check the inputs and read the topologies: no Spark (errors: :class:`SourceError`)."""
    traces = find_traces(options.trace)
    current = _topology(options.topology, "--topology")
    proposed = _topology(options.proposed, "--proposed") if options.proposed is not None else None
    check_output(options.out)
    size = sum(os.path.getsize(f) for f in [*traces.segments, *traces.jsonl])
    return Prepared(traces, current, proposed, size)


def _topology(source: Any, flag: str) -> Topology:
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.exists():
            raise SourceError(f"{flag} {path}: no such file or directory")
        try:
            return load(path)
        except OSError as exc:
            raise SourceError(f"{flag} {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SourceError(f"{flag} {path}: not a text file") from None
        except SourceError as exc:
            text = str(exc)
            raise SourceError(
                text if text.startswith(str(path)) else f"{flag} {path}: {text}"
            ) from None
    return load(source)
