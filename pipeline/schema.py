"""Explicit schemas: the traces the broker writes, and the pipeline's own row shapes.

Version 3 traces are Parquet segments (``broker/trace/``): the pass reads their rows with
:data:`ROWS_SCHEMA` (five numeric columns) and the strings come from the segments'
dictionaries, read on the driver (:mod:`leveret.pipeline.inputs`). JSON-lines traces of
versions 1 and 2 are read whole with :data:`TRACE_SCHEMA`, never with schema inference
(inference scans the data once more and guesses differently per file).

``headers`` is a *string* everywhere: the JSON text of the table, which
:func:`leveret.pipeline.router.parse_headers` turns back into a table with JSON's types (ints
stay ints, floats floats, booleans booleans), so headers-exchange matching sees the values the
broker saw, as far as the trace keeps them (``broker/trace/`` writes them as the management
API shows them, ``leveret.node.fieldtable.amqp_json``: bytes as text, decimals as numbers,
timestamps as epoch seconds).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Trace versions this pipeline reads (broker/trace/ SCHEMA_VERSION): version 3 segments, and
# the JSON-lines traces of versions 1 and 2 (read whole). A new version needs its own reader
# and a test.
SEGMENT_VERSION = 3
JSON_VERSIONS = frozenset({1, 2})
SUPPORTED_VERSIONS = JSON_VERSIONS | {SEGMENT_VERSION}

# Version 3 segment rows (trace-*.parquet): what the pass reads.
ROWS_COLUMNS = ("ts", "key", "queues", "size", "mode")
ROWS_SCHEMA = StructType(
    [
        StructField("ts", TimestampType()),  # publish time (UTC, microseconds)
        StructField("key", LongType()),  # id of (vhost, exchange, routing key, headers)
        StructField("queues", LongType()),  # id of the set of queues the broker reached
        StructField("size", LongType()),  # body size
        StructField("mode", ShortType()),  # delivery mode
    ]
)

# Version 3 segment counts (counts-*.parquet): the rows counted by key, queue set and minute.
COUNTS_SCHEMA = StructType(
    [
        StructField(name, LongType())
        for name in ("key", "queues", "minute", "messages", "bytes", "persistent")
    ]
)

# Every field of versions 1 and 2, for JSON-lines traces: version 1 names, then the version 2
# names that differ (the reader coalesces them).
TRACE_SCHEMA = StructType(
    [
        StructField("schema_version", IntegerType()),
        StructField("ts", DoubleType()),
        StructField("vhost", StringType()),
        StructField("exchange", StringType()),
        StructField("routing_key", StringType()),
        StructField("headers", StringType()),
        StructField("body_size", LongType()),
        StructField("delivery_mode", IntegerType()),
        StructField("queues", ArrayType(StringType())),
        StructField("v", IntegerType()),
        StructField("key", StringType()),
        StructField("size", LongType()),
        StructField("mode", IntegerType()),
    ]
)

# The pass's result, whatever the trace's format: one row per key id, queue set id and minute
# (minutes since the epoch), with the messages' totals.
GROUP_COLUMNS = ("key", "queue_set", "minute", "messages", "bytes", "persistent")

# Per key id and queue set id (leveret.pipeline.transforms.key_ids): the groups' totals and
# their first and last minute.
KEY_ID_COLUMNS = ("key", "queue_set", "messages", "bytes", "persistent", "first", "last")

# The routing key of a message, as far as routing is concerned.
KEY_COLUMNS = ("vhost", "exchange", "routing_key", "headers")

# Routes: one row per key id (leveret.pipeline.router.route_keys).
ROUTE_SCHEMA = StructType(
    [
        StructField("key", LongType(), False),
        StructField("queues", ArrayType(StringType(), False), False),
        StructField("exchange_exists", BooleanType(), False),
        StructField("bindings", ArrayType(LongType(), False)),
        StructField("proposed_queues", ArrayType(StringType(), False)),
        StructField("proposed_exchange_exists", BooleanType()),
        StructField("error", StringType()),
    ]
)

BINDING_SCHEMA = StructType(
    [
        StructField("binding_id", LongType(), False),
        StructField("vhost", StringType(), False),
        StructField("source", StringType(), False),
        StructField("destination", StringType(), False),
        StructField("destination_type", StringType(), False),
        StructField("routing_key", StringType(), False),
        StructField("arguments", StringType(), False),
    ]
)

QUEUE_SCHEMA = StructType(
    [StructField("vhost", StringType(), False), StructField("queue", StringType(), False)]
)

EXCHANGE_SCHEMA = StructType(
    [
        StructField("vhost", StringType(), False),
        StructField("exchange", StringType(), False),
        StructField("type", StringType(), False),
    ]
)
