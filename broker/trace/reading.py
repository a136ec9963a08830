"""Reading trace segments (``leveret trace dump``) and converting the JSON-lines traces of
versions 1 and 2 (``leveret trace convert``); the format is :mod:`leveret.trace.schema`'s."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from leveret.trace.schema import SCHEMA_VERSION, TraceError, arrow
from leveret.trace.segment import Segment, segment_path


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
    _, _, pq = arrow()
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
    pa, _, pq = arrow()
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
