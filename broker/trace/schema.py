"""The traffic trace: the messages the broker routed, as columnar segments for the Spark pipeline.

Schema version 3. A trace directory holds *segments*; a segment is two Parquet files written
by a background thread and made visible together when the segment closes (rolled by age,
row count or dictionary size, and by :meth:`TraceWriter.flush` and :meth:`TraceWriter.close`):

``trace-<UTC start>-<n>.parquet``, one row per published message, in row groups of up to
``row_group_rows`` rows (zstd)::

    ts      timestamp[us, UTC]  not null   publish time: when the broker routed it, read
                                           once per event-loop turn (the messages of one
                                           turn, usually one socket read, share it)
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
                                         shows it (leveret.node.fieldtable.amqp_json); null: none
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

The broker's side (:mod:`leveret.trace.recorder`, :mod:`leveret.trace.writer`): the publish
path appends one interned value per message (key, queues, mode and size) and reads the clock
once per event-loop turn, and a background thread turns them into segments
(:mod:`leveret.trace.segment`); :mod:`leveret.trace.reading` reads and converts them. ``ts``
has been the turn's time since the recorder began reading the clock once per turn; the
format did not change (still version 3): a reader sees runs of equal times where it saw
times microseconds apart.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any

from leveret.node.fieldtable import amqp_json
from leveret.node.message import cached_by_properties, decoded_table

SCHEMA_VERSION = 3
ID_BITS = 53  # JSON readers that use doubles (jq, JavaScript) keep 53-bit integers exact
log = logging.getLogger(__name__)


class TraceError(Exception):
    """The trace cannot be written or read (one line for the operator)."""


def arrow() -> tuple[Any, Any, Any]:
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
    arrow()


@functools.cache
def schemas() -> tuple[Any, Any, Any]:
    """The Arrow schemas of a segment's rows, its dictionary and its counts."""
    pa, _, _ = arrow()
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


# A dictionary entry: a row of the keys file (the dictionary schema's columns, in order).
Entry = tuple[int, str, int, str | None, str | None, str | None, str | None, list[str] | None]


def key_entry(vhost: str, exchange: str, routing_key: str, headers: str | None) -> Entry:
    """The dictionary entry of a key (headers as JSON text), its id third."""
    ident = key_id(key_fragment(vhost, exchange, routing_key, headers))
    return (SCHEMA_VERSION, "key", ident, vhost, exchange, routing_key, headers, None)


def queues_entry(queues: Iterable[str]) -> Entry:
    """The dictionary entry of a set of queue names, its id third."""
    names = sorted(queues)
    return (SCHEMA_VERSION, "queues", key_id(queues_fragment(names)), None, None, None, None, names)
