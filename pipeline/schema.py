"""Explicit Spark schemas: the trace the broker writes, and the pipeline's own row shapes.

Traces are read with :data:`TRACE_SCHEMA`, never with schema inference (inference scans the
data once more and guesses differently per file). ``headers`` is read as a *string*: for an
object, Spark keeps its raw JSON text, which :func:`leveret.pipeline.router.parse_headers` turns
back into a table with JSON's types (ints stay ints, floats floats, booleans booleans), so
headers-exchange matching sees the values the broker saw, as far as the trace keeps them
(``broker/trace.py`` writes them as the management API shows them, ``leveret.fieldtable.amqp_json``:
bytes as text, decimals as numbers, timestamps as epoch seconds).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

# Trace versions this pipeline reads (broker/trace.py SCHEMA_VERSION). A new version needs
# its own reader and a test per version.
SUPPORTED_VERSIONS = frozenset({1, 2})

# Version 2 message lines, the fields the aggregation needs: Spark's JSON reader skips the
# others (the strings come once per key from the index), which is what makes the pass cheap.
MESSAGE_SCHEMA = StructType(
    [
        StructField("v", IntegerType()),
        StructField("ts", DoubleType()),  # publish time, seconds since the epoch
        StructField("id", LongType()),  # the key id: a line of the file's key index
        StructField("size", LongType()),  # body size
        StructField("mode", IntegerType()),  # delivery mode
    ]
)

# Version 2 key index lines (keys-*.jsonl).
KEYS_SCHEMA = StructType(
    [
        StructField("v", IntegerType()),
        StructField("id", LongType()),
        StructField("vhost", StringType()),
        StructField("exchange", StringType()),
        StructField("key", StringType()),  # the routing key
        StructField("headers", StringType()),  # raw JSON text of the headers table, or null
        StructField("queues", ArrayType(StringType())),  # recorded by the broker
    ]
)

# Every field of both versions, for traces read whole (no index): version 1 names, then the
# version 2 names that differ (the reader coalesces them).
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

# The routing key of a message, as far as routing is concerned.
KEY_COLUMNS = ("vhost", "exchange", "routing_key", "headers")

# What leveret.pipeline.router.route_partition yields for each distinct key.
ROUTE_SCHEMA = StructType(
    [
        StructField("vhost", StringType(), False),
        StructField("exchange", StringType(), False),
        StructField("routing_key", StringType(), False),
        StructField("headers", StringType()),
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
