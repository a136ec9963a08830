"""The job's Spark transforms: pure ``DataFrame -> DataFrame`` functions, testable one by one.

The data flow (see :mod:`leveret.pipeline.job` for when each runs)::

    segment counts (v3) ──aggregate_counts──┐  (or, with --rows, the segments' rows:
     (key, queues, minute: totals)         │   aggregate_segments: ts, key, queues, size, mode)
                                           ├─> groups: (key id, queue set id, minute)
    JSON lines (v1, v2) ──aggregate_json────┘    messages, bytes, persistent
     (read whole)    └── dictionaries (strings of each id, collected on the driver)

    dictionaries ── route (driver: leveret.pipeline.router.route_table; many keys:
                           route_keys, mapPartitions) ──> routes (one row per key id)

    groups + dictionaries + routes:
       few groups:  driver_totals (per key; per route class and minute), in the same action,
                    to the driver: every table in Arrow (leveret.pipeline.local)
       many groups: key_totals ("keys") ─┬─ per_exchange, per_queue, per_binding, unroutable,
                                         │  fanout, recorded_mismatch, whatif_*
                    minute_routes ───────┴─ rates, queue_rates          (this module)

The only pass over the raw trace is an aggregation on numbers (Spark SQL, partial aggregation
on the map side, column-pruned Parquet): every message becomes a count in its
``(key id, queue set id, minute)`` group; the strings come from the segments' dictionaries,
once per key instead of once per message. JSON-lines traces (versions 1 and 2) are grouped by
their strings instead, and given ids here (``xxhash64``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from leveret.pipeline.router import route_ids
from leveret.pipeline.schema import (
    BINDING_SCHEMA,
    EXCHANGE_SCHEMA,
    KEY_COLUMNS,
    QUEUE_SCHEMA,
    ROUTE_SCHEMA,
)
from leveret.pipeline.topology import DEFAULT_VHOST, Topology

KEY = list(KEY_COLUMNS)
# Words of a routing key holding a digit (shown as * in the unroutable report); the same
# pattern as leveret.pipeline.local.KEY_PATTERN.
KEY_PATTERN = r"[^.]*[0-9][^.]*"


def sum0(column: Column | str) -> Column:
    """``sum`` that is 0, not null, over no rows."""
    return sf.coalesce(sf.sum(column), sf.lit(0).cast("long"))


# -- the pass ----------------------------------------------------------------------------------


def _message_totals(size: Column, mode: Column) -> list[Column]:
    """Messages, bytes and persistent messages of a group of trace rows."""
    return [
        sf.count(sf.lit(1)).alias("messages"),
        sum0(size).alias("bytes"),
        sf.count(sf.when(mode == 2, 1)).cast("long").alias("persistent"),
    ]


def aggregate_segments(rows: DataFrame) -> DataFrame:
    """Groups from version 3 segment rows (:data:`~leveret.pipeline.schema.ROWS_SCHEMA`):
    numbers only, the strings are in the dictionaries."""
    minute = sf.floor(sf.unix_micros("ts") / 60_000_000).alias("minute")
    return rows.groupBy("key", sf.col("queues").alias("queue_set"), minute).agg(
        *_message_totals(sf.col("size"), sf.col("mode"))
    )


def aggregate_counts(counts: DataFrame) -> DataFrame:
    """Groups from version 3 segment counts (:data:`~leveret.pipeline.schema.COUNTS_SCHEMA`):
    the recorder's per-segment counts, summed (segments may share a minute)."""
    return counts.groupBy("key", sf.col("queues").alias("queue_set"), "minute").agg(
        *(sum0(c).alias(c) for c in ("messages", "bytes", "persistent"))
    )


def aggregate_json(trace: DataFrame) -> DataFrame:
    """Key-minute groups with their strings from JSON-lines traces read whole
    (:data:`~leveret.pipeline.schema.TRACE_SCHEMA`, versions 1 and 2): ``schema_version``,
    ``key`` and ``queue_set`` ids (``xxhash64`` of the strings), the key's strings,
    ``recorded``, ``minute`` and the totals. Cache it: the groups (:data:`GROUP_COLUMNS`) and
    the dictionaries both come from it.

    A missing vhost is ``/``, a missing exchange or routing key ``""``, a missing body size 0.
    """
    version = sf.coalesce(sf.col("v"), sf.col("schema_version")).alias("schema_version")
    groups = [
        version,
        sf.col("vhost"),
        sf.col("exchange"),
        sf.coalesce(sf.col("key"), sf.col("routing_key")).alias("routing_key"),
        sf.col("headers"),
        sf.floor(sf.col("ts") / 60).alias("minute"),
        sf.col("queues"),
    ]
    counted = trace.groupBy(*groups).agg(
        *_message_totals(
            sf.coalesce(sf.col("size"), sf.col("body_size")),
            sf.coalesce(sf.col("mode"), sf.col("delivery_mode")),
        )
    )
    recorded = sf.coalesce(sf.array_sort("queues"), sf.array().cast("array<string>"))
    out = counted.select(
        "schema_version",
        sf.coalesce(sf.col("vhost"), sf.lit(DEFAULT_VHOST)).alias("vhost"),
        sf.coalesce(sf.col("exchange"), sf.lit("")).alias("exchange"),
        sf.coalesce(sf.col("routing_key"), sf.lit("")).alias("routing_key"),
        "headers",
        recorded.alias("recorded"),
        sf.col("minute").cast("long").alias("minute"),
        "messages",
        "bytes",
        "persistent",
    )
    return out.withColumn("key", sf.xxhash64(*KEY)).withColumn("queue_set", sf.xxhash64("recorded"))


# -- routing -----------------------------------------------------------------------------------


def route_keys(
    keys: DataFrame,
    current: Broadcast[Topology],
    proposed: Broadcast[Topology] | None = None,
    bindings: bool = True,
    partitions: int | None = None,
) -> DataFrame:
    """Routes (``ROUTE_SCHEMA``) of a keys dictionary (``key, vhost, exchange, routing_key,
    headers``) in Spark, for many distinct keys: ``mapPartitions`` runs
    :func:`leveret.pipeline.router.route_ids` per partition, which builds its routers once from
    the broadcast topologies and routes each key with the broker's own function."""
    spark = keys.sparkSession
    if partitions is not None:
        keys = keys.repartition(partitions)

    def route(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        return route_ids(
            rows,
            current.value,
            proposed.value if proposed is not None else None,
            bindings=bindings,
        )

    rdd = keys.select("key", *KEY).rdd.map(tuple).mapPartitions(route)
    return spark.createDataFrame(rdd, ROUTE_SCHEMA)


# -- the per-key and per-minute tables ---------------------------------------------------------


def key_ids(groups: DataFrame) -> DataFrame:
    """Per key id and queue set id: the totals and the first and last minute (minutes since
    the epoch), what every per-key table needs of the groups
    (:data:`~leveret.pipeline.schema.KEY_ID_COLUMNS`)."""
    return groups.groupBy("key", "queue_set").agg(
        *(sum0(c).alias(c) for c in ("messages", "bytes", "persistent")),
        sf.min("minute").alias("first"),
        sf.max("minute").alias("last"),
    )


def driver_totals(groups: DataFrame, key_class: DataFrame) -> DataFrame:
    """Everything the driver's tables need of the groups, in one aggregation (grouping sets):
    the totals per key id and queue set id (``per_key`` true: :func:`key_ids`), and per
    route class and minute (``key_class``: ``key, class``, a broadcast of one row per key;
    leveret.pipeline.local.route_classes). A row per key and one per class and minute
    instead of one per key and minute: 11k + 240k rows for the benchmark's 3.3M groups."""
    classed = groups.join(sf.broadcast(key_class), "key")
    return classed.groupingSets(
        [["key", "queue_set"], ["class", "minute"]], "key", "queue_set", "class", "minute"
    ).agg(
        *(sum0(c).alias(c) for c in ("messages", "bytes", "persistent")),
        sf.min("minute").alias("first"),
        sf.max("minute").alias("last"),
        (sf.grouping_id() == 3).alias("per_key"),  # class and minute aggregated away
    )


def key_totals(
    groups: DataFrame,
    keys: DataFrame,
    queue_sets: DataFrame,
    routes: DataFrame,
    recorded: bool = True,
) -> DataFrame:
    """The ``keys`` table: per key (vhost, exchange, routing key, headers) and recorded queue
    set, the totals, first and last minute, and the routes (the columns of
    :func:`leveret.pipeline.local.key_totals`).

    Groups by the key's strings, not its ids: traces of several formats give one key several
    ids.
    """
    joined = key_ids(groups).join(sf.broadcast(keys), "key").join(sf.broadcast(routes), "key")
    if recorded:
        joined = joined.join(sf.broadcast(queue_sets), "queue_set")
    else:
        joined = joined.withColumn("recorded", sf.lit(None).cast("array<string>"))
    route_columns = ["queues", "exchange_exists", "bindings", "proposed_queues"]
    route_columns += ["proposed_exchange_exists", "error"]
    totals = joined.groupBy(*KEY, "recorded").agg(
        *(sum0(c).alias(c) for c in ("messages", "bytes", "persistent")),
        sf.timestamp_seconds(sf.min("first") * 60).alias("first_minute"),
        sf.timestamp_seconds(sf.max("last") * 60).alias("last_minute"),
        *(sf.first(c).alias(c) for c in route_columns),
    )
    return totals.select(
        *KEY,
        "recorded",
        "messages",
        "bytes",
        "persistent",
        "first_minute",
        "last_minute",
        "queues",
        sf.size("queues").alias("fanout"),
        "exchange_exists",
        "bindings",
        "proposed_queues",
        sf.size("proposed_queues").alias("proposed_fanout"),
        "proposed_exchange_exists",
        "error",
    )


def minute_routes(groups: DataFrame, keys: DataFrame, routes: DataFrame) -> DataFrame:
    """Per group: minute (a timestamp), vhost, messages, bytes, and the key's routed queues
    and fan-out: what the per-minute reports need (the routes joined on the key id, a
    broadcast of one row per key)."""
    by_id = routes.join(keys.select("key", "vhost"), "key").select(
        "key", "vhost", "queues", sf.size("queues").alias("fanout")
    )
    return groups.join(sf.broadcast(by_id), "key").select(
        sf.timestamp_seconds(sf.col("minute") * 60).alias("minute"),
        "vhost",
        "messages",
        "bytes",
        "queues",
        "fanout",
    )


# -- reports -----------------------------------------------------------------------------------


def key_pattern(routing_key: Column) -> Column:
    """A routing key with every word that holds a digit replaced by ``*``.

    ``order.42.created`` and ``order.7.created`` both become ``order.*.created``, so
    unroutable traffic groups by the shape of its keys rather than by id.
    """
    return sf.regexp_replace(routing_key, KEY_PATTERN, "*")


def traffic() -> list[Column]:
    """The usual totals of a group of routed rows (``messages``, ``bytes``, ``routed_messages``,
    ``unroutable_messages``, ``unroutable_bytes``, ``deliveries``)."""
    unroutable = sf.col("fanout") == 0
    return [
        sum0("messages").alias("messages"),
        sum0("bytes").alias("bytes"),
        sum0(sf.when(~unroutable, sf.col("messages"))).alias("routed_messages"),
        sum0(sf.when(unroutable, sf.col("messages"))).alias("unroutable_messages"),
        sum0(sf.when(unroutable, sf.col("bytes"))).alias("unroutable_bytes"),
        sum0(sf.col("messages") * sf.col("fanout")).alias("deliveries"),
    ]


def per_exchange(routed: DataFrame, exchanges: DataFrame) -> DataFrame:
    """Traffic per exchange, idle exchanges of the topology included (``type`` null: the
    exchange is not in the topology)."""
    flows = routed.groupBy("vhost", "exchange").agg(*traffic(), sf.count(sf.lit(1)).alias("keys"))
    out = flows.join(exchanges, ["vhost", "exchange"], "full_outer")
    counts = ["messages", "bytes", "routed_messages", "unroutable_messages"]
    counts += ["unroutable_bytes", "deliveries", "keys"]
    return out.fillna(0, subset=counts).select("vhost", "exchange", "type", *counts)


def per_queue(routed: DataFrame, queues: DataFrame) -> DataFrame:
    """Messages and bytes delivered to each queue of the topology (idle queues: 0)."""
    delivered = (
        routed.select(
            "vhost", "messages", "bytes", "persistent", sf.explode("queues").alias("queue")
        )
        .groupBy("vhost", "queue")
        .agg(
            sum0("messages").alias("messages"),
            sum0("bytes").alias("bytes"),
            sum0("persistent").alias("persistent"),
        )
    )
    out = queues.join(delivered, ["vhost", "queue"], "full_outer")
    return out.fillna(0, subset=["messages", "bytes", "persistent"])


def per_binding(routed: DataFrame, bindings: DataFrame, total_messages: int) -> DataFrame:
    """Messages and bytes that matched each binding, and their share of all messages.

    A binding matches a message when routing evaluates it and it matches (exchange-to-exchange
    and alternate-exchange hops included); ``messages == 0`` are bindings that never matched.
    """
    matched = (
        routed.where(sf.col("bindings").isNotNull())
        .select("messages", "bytes", sf.explode("bindings").alias("binding_id"))
        .groupBy("binding_id")
        .agg(sum0("messages").alias("messages"), sum0("bytes").alias("bytes"))
    )
    out = bindings.join(matched, "binding_id", "left").fillna(0, subset=["messages", "bytes"])
    share = sf.col("messages") / sf.lit(total_messages) if total_messages else sf.lit(0.0)
    return out.withColumn("share", share.cast("double"))


def _by_pattern(rows: DataFrame, reason: Column) -> DataFrame:
    """Messages, bytes, keys and an example key by vhost, exchange, key pattern, reason."""
    return (
        rows.withColumn("pattern", key_pattern(sf.col("routing_key")))
        .withColumn("reason", reason)
        .groupBy("vhost", "exchange", "pattern", "reason")
        .agg(
            sum0("messages").alias("messages"),
            sum0("bytes").alias("bytes"),
            sf.size(sf.collect_set("routing_key")).alias("keys"),
            sf.min("routing_key").alias("example"),
        )
    )


def unroutable(routed: DataFrame) -> DataFrame:
    """Unroutable traffic by vhost, exchange, routing-key pattern and reason."""
    reason = sf.when(~sf.col("exchange_exists"), sf.lit("no such exchange")).otherwise(
        sf.lit("no matching binding")
    )
    return _by_pattern(routed.where(sf.col("fanout") == 0), reason)


def fanout_distribution(routed: DataFrame) -> DataFrame:
    """How many messages reached 0, 1, 2, ... queues."""
    return routed.groupBy("fanout").agg(
        sum0("messages").alias("messages"),
        sum0("bytes").alias("bytes"),
        sf.count(sf.lit(1)).alias("keys"),
    )


def rates(routed_minutes: DataFrame) -> DataFrame:
    """Per minute: messages, bytes, routed, unroutable and deliveries."""
    return routed_minutes.groupBy("minute").agg(*traffic())


def queue_rates(routed_minutes: DataFrame) -> DataFrame:
    """Per minute and queue: messages and bytes delivered."""
    return (
        routed_minutes.select(
            "minute", "vhost", "messages", "bytes", sf.explode("queues").alias("queue")
        )
        .groupBy("minute", "vhost", "queue")
        .agg(sum0("messages").alias("messages"), sum0("bytes").alias("bytes"))
    )


def recorded_mismatch(routed: DataFrame) -> DataFrame:
    """Keys whose queues, as routed here, differ from the queues the broker recorded.

    Usually the topology source lacks transient queues or bindings (the binding log keeps
    only durable topology), or the topology changed while the trace was recorded.
    """
    return (
        routed.where(sf.col("recorded").isNotNull() & (sf.col("recorded") != sf.col("queues")))
        .groupBy(*KEY, "recorded", "queues")
        .agg(sum0("messages").alias("messages"), sum0("bytes").alias("bytes"))
        .withColumn("missing", sf.array_except("recorded", "queues"))
        .withColumn("extra", sf.array_except("queues", "recorded"))
    )


# -- what-if -----------------------------------------------------------------------------------


def whatif_queues(routed: DataFrame) -> DataFrame:
    """Per queue: messages now and under the proposed topology, gained and lost."""
    queue = sf.col("queue")
    now = sf.array_contains("queues", queue)
    then = sf.array_contains("proposed_queues", queue)
    union = sf.array_union("queues", "proposed_queues")
    return (
        routed.select("vhost", "messages", "bytes", "queues", "proposed_queues")
        .select("*", sf.explode(union).alias("queue"))
        .groupBy("vhost", "queue")
        .agg(
            sum0(sf.when(now, sf.col("messages"))).alias("current_messages"),
            sum0(sf.when(then, sf.col("messages"))).alias("proposed_messages"),
            sum0(sf.when(then & ~now, sf.col("messages"))).alias("gained_messages"),
            sum0(sf.when(now & ~then, sf.col("messages"))).alias("lost_messages"),
            sum0(sf.when(then & ~now, sf.col("bytes"))).alias("gained_bytes"),
            sum0(sf.when(now & ~then, sf.col("bytes"))).alias("lost_bytes"),
        )
    )


def whatif_summary(routed: DataFrame) -> DataFrame:
    """One row: how the proposed topology changes routing of the whole trace."""
    now, then = sf.col("fanout") > 0, sf.col("proposed_fanout") > 0
    changed = sf.col("queues") != sf.col("proposed_queues")
    messages = sf.col("messages")
    return routed.agg(
        sum0(messages).alias("messages"),
        sum0(sf.when(now, messages)).alias("routed_now"),
        sum0(sf.when(then, messages)).alias("routed_proposed"),
        sum0(sf.when(now & ~then, messages)).alias("newly_unroutable"),
        sum0(sf.when(~now & then, messages)).alias("newly_routable"),
        sum0(sf.when(changed, messages)).alias("changed"),
        sum0(messages * sf.col("fanout")).alias("deliveries_now"),
        sum0(messages * sf.col("proposed_fanout")).alias("deliveries_proposed"),
    )


def whatif_unroutable(routed: DataFrame) -> DataFrame:
    """Messages routable now that the proposed topology leaves unroutable, by key pattern."""
    reason = sf.when(~sf.col("proposed_exchange_exists"), sf.lit("exchange removed")).otherwise(
        sf.lit("no matching binding")
    )
    stranded = routed.where((sf.col("fanout") > 0) & (sf.col("proposed_fanout") == 0))
    return _by_pattern(stranded, reason)


# -- topology tables ---------------------------------------------------------------------------


def topology_tables(spark: SparkSession, topology: Topology) -> dict[str, DataFrame]:
    """The topology's bindings, queues and exchanges as small DataFrames."""
    projections = topology.projections()
    bindings: Sequence[tuple[object, ...]] = [
        (
            b.binding_id,
            b.vhost,
            b.source,
            b.destination,
            b.destination_type,
            b.routing_key,
            b.arguments,
        )
        for b in topology.binding_table(projections)
    ]
    return {
        "bindings": spark.createDataFrame(bindings, BINDING_SCHEMA),
        "queues": spark.createDataFrame(topology.queue_table(projections), QUEUE_SCHEMA),
        "exchanges": spark.createDataFrame(topology.exchange_table(projections), EXCHANGE_SCHEMA),
    }


# -- all reports -------------------------------------------------------------------------------


def reports(
    routed: DataFrame,
    routed_minutes: DataFrame,
    topology: dict[str, DataFrame],
    total_messages: int,
    whatif: bool = False,
    bindings: bool = True,
) -> dict[str, DataFrame]:
    """Every output table, by name (lazy: nothing runs until they are written).

    ``routed`` is :func:`with_routes` of :func:`key_totals`, ``routed_minutes``
    :func:`minute_routes`; ``topology`` is :func:`topology_tables` of the current topology;
    ``total_messages`` (from :func:`versions`) is the denominator of binding shares;
    ``bindings=False`` leaves out the per-binding table (no attribution was routed).
    """
    tables = {
        "keys": routed,
        "exchanges": per_exchange(routed, topology["exchanges"]),
        "queues": per_queue(routed, topology["queues"]),
        "unroutable": unroutable(routed),
        "fanout": fanout_distribution(routed),
        "rates": rates(routed_minutes),
        "queue_rates": queue_rates(routed_minutes),
        "recorded_mismatch": recorded_mismatch(routed),
    }
    if bindings:
        tables["bindings"] = per_binding(routed, topology["bindings"], total_messages)
    if whatif:
        tables["whatif_queues"] = whatif_queues(routed)
        tables["whatif_summary"] = whatif_summary(routed)
        tables["whatif_unroutable"] = whatif_unroutable(routed)
    return tables
