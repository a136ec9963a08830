"""The job's transforms: pure ``DataFrame -> DataFrame`` functions, testable one by one.

The data flow (see :mod:`leveret.pipeline.job` for the order in which they run)::

    message lines ──aggregate_indexed──> counts ──────────────┬── key_totals ──┐
     (v2: ts, id, size, mode)   (key id, minute)               │    (key)       │
    key index ─────index_keys──────────> keys ─ distinct_keys ─┼─ route_keys ─> routes
     (v2: once per key and file)        (key id: strings)      │                │
                                                minute_routes ─┴─ with_routes ──┤
    or, without an index (v1, --no-index):                        (per minute)  │
    whole lines ──aggregate──split_groups──> counts, keys      rates,     with_routes (per
                                                               queue_rates key: "routed")
                                                                  per_exchange, per_queue,
                                                                  per_binding, unroutable,
                                                                  fanout, recorded_mismatch,
                                                                  whatif_*

Traces repeat the same keys endlessly, so the only pass over the raw trace is an aggregation
(Spark SQL, partial aggregation on the map side): every message becomes a count in its
``(key id, minute)`` group, and the key's strings come from the broker's key index, once per
key rather than once per message. Routing happens once per *distinct* key (:func:`route_keys`,
Python, one router per partition); counts are joined back to the routes, and every report is
an aggregate over these small tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from leveret.pipeline.router import KeyRow, route_partition
from leveret.pipeline.schema import (
    BINDING_SCHEMA,
    EXCHANGE_SCHEMA,
    KEY_COLUMNS,
    QUEUE_SCHEMA,
    ROUTE_SCHEMA,
)
from leveret.pipeline.topology import DEFAULT_VHOST, Topology

KEY = list(KEY_COLUMNS)


def sum0(column: Column | str) -> Column:
    """``sum`` that is 0, not null, over no rows."""
    return sf.coalesce(sf.sum(column), sf.lit(0).cast("long"))


# -- extract-side shaping ----------------------------------------------------------------------
#
# The pass over the trace yields two tables, whichever way the trace is read:
#   counts: (schema_version, id, minute, messages, bytes, persistent), one row per key and minute
#   keys:   (id, vhost, exchange, routing_key, headers, recorded), one row per key id


def _minute(minute_index: Column) -> Column:
    return sf.timestamp_seconds(minute_index * 60).alias("minute")


def _message_totals(size: Column, mode: Column) -> list[Column]:
    """Messages, bytes and persistent messages of a group of trace lines."""
    return [
        sf.count(sf.lit(1)).alias("messages"),
        sum0(size).alias("bytes"),
        sf.count(sf.when(mode == 2, 1)).cast("long").alias("persistent"),
    ]


def _key_columns(vhost: Column, exchange: Column, routing_key: Column) -> list[Column]:
    """A key's vhost, exchange and routing key with the defaults of a missing field
    (``/``, ``""``, ``""``)."""
    return [
        sf.coalesce(vhost, sf.lit(DEFAULT_VHOST)).alias("vhost"),
        sf.coalesce(exchange, sf.lit("")).alias("exchange"),
        sf.coalesce(routing_key, sf.lit("")).alias("routing_key"),
    ]


def aggregate_indexed(messages: DataFrame) -> DataFrame:
    """``counts`` from version 2 message lines (:data:`~pipeline.schema.MESSAGE_SCHEMA`).

    Groups on numbers only (version, key id, minute): the key's strings come from the index
    (:func:`index_keys`), once per key instead of once per message.
    """
    minute_index = sf.floor(sf.col("ts") / 60).alias("minute_index")
    counted = messages.groupBy("v", "id", minute_index).agg(
        *_message_totals(sf.col("size"), sf.col("mode"))
    )
    return counted.select(
        sf.col("v").alias("schema_version"),
        "id",
        _minute(sf.col("minute_index")),
        "messages",
        "bytes",
        "persistent",
    )


def index_keys(index: DataFrame) -> DataFrame:
    """``keys`` from version 2 key index lines (:data:`~pipeline.schema.KEYS_SCHEMA`).

    Every file indexes the keys it uses, so a key appears once per file: identical lines
    collapse here. Two different keys with one id (a hash collision, or a hand-edited index)
    stay two rows: their messages then count twice in :func:`key_totals`, which is how the
    job notices (its totals no longer add up to the lines counted).
    """
    return index.select(
        "id",
        *_key_columns(sf.col("vhost"), sf.col("exchange"), sf.col("key")),
        "headers",
        sf.array_sort("queues").alias("recorded"),
    ).distinct()


def aggregate(trace: DataFrame, recorded: bool = True) -> DataFrame:
    """Key-minute groups from trace lines read whole (:data:`~pipeline.schema.TRACE_SCHEMA`):
    version 1 traces, or version 2 without an index. :func:`split_groups` makes them
    ``(counts, keys)``; cache the groups first, both come from them.

    Groups the columns as read and cleans up after, on the groups: a missing vhost is ``/``,
    a missing exchange or routing key ``""``, a missing body size 0. With ``recorded``, the
    broker's recorded queue list is part of the key. The key id is a 64-bit hash of the key's
    columns.
    """
    version = sf.coalesce(sf.col("v"), sf.col("schema_version")).alias("schema_version")
    groups = [
        version,
        sf.col("vhost"),
        sf.col("exchange"),
        sf.coalesce(sf.col("key"), sf.col("routing_key")).alias("routing_key"),
        sf.col("headers"),
        sf.floor(sf.col("ts") / 60).alias("minute_index"),
    ]
    if recorded:
        groups.append(sf.col("queues"))
    counted = trace.groupBy(*groups).agg(
        *_message_totals(
            sf.coalesce(sf.col("size"), sf.col("body_size")),
            sf.coalesce(sf.col("mode"), sf.col("delivery_mode")),
        )
    )
    queues = sf.array_sort("queues") if recorded else sf.lit(None).cast("array<string>")
    return counted.select(
        "schema_version",
        *_key_columns(sf.col("vhost"), sf.col("exchange"), sf.col("routing_key")),
        "headers",
        queues.alias("recorded"),
        _minute(sf.col("minute_index")),
        "messages",
        "bytes",
        "persistent",
    ).withColumn("id", sf.xxhash64(*KEY, "recorded"))


def split_groups(groups: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(counts, keys)`` of :func:`aggregate`'s groups."""
    counts = groups.select("schema_version", "id", "minute", "messages", "bytes", "persistent")
    return counts, groups.select("id", *KEY, "recorded").distinct()


def versions(counts: DataFrame) -> DataFrame:
    """Per trace schema version: messages and key-minute groups (one small action)."""
    return counts.groupBy("schema_version").agg(
        sum0("messages").alias("messages"), sf.count(sf.lit(1)).alias("groups")
    )


def key_totals(counts: DataFrame, keys: DataFrame) -> DataFrame:
    """Per key (and recorded queue list): totals over the whole trace, first and last minute.

    Groups by the key's columns, not its id: keys that differ only in what ``keys`` no longer
    tells apart (``recorded`` left out) are one row.
    """

    def totals(first: str, last: str) -> list[Column]:
        return [
            *(sum0(c).alias(c) for c in ("messages", "bytes", "persistent")),
            sf.min(first).alias("first_minute"),
            sf.max(last).alias("last_minute"),
        ]

    per_id = counts.groupBy("id").agg(*totals("minute", "minute"))
    joined = per_id.join(sf.broadcast(keys), "id")
    return joined.groupBy(*KEY, "recorded").agg(*totals("first_minute", "last_minute"))


def minute_routes(counts: DataFrame, keys: DataFrame, routes: DataFrame) -> DataFrame:
    """``counts`` (per key id and minute) with the key's vhost, ``queues`` and ``fanout``:
    what the per-minute reports need.

    The routes are first attached to the key ids (one row per key), so the many key-minute
    groups join a small broadcast table on one number instead of on the key's strings.
    """
    by_id = with_routes(keys.select("id", *KEY), routes).select("id", "vhost", "queues", "fanout")
    return counts.join(sf.broadcast(by_id), "id")


def distinct_keys(keys: DataFrame) -> DataFrame:
    """The distinct ``(vhost, exchange, routing_key, headers)``: what gets routed."""
    return keys.select(*KEY).distinct()


# -- routing -----------------------------------------------------------------------------------


def route_keys(
    keys: DataFrame,
    current: Broadcast[Topology],
    proposed: Broadcast[Topology] | None = None,
    bindings: bool = True,
    partitions: int | None = None,
) -> DataFrame:
    """Route each distinct key with ``leveret.exchanges.routing.route`` (``ROUTE_SCHEMA`` rows).

    Runs :func:`leveret.pipeline.router.route_partition` with ``mapPartitions``: every partition
    builds its routers once from the broadcast topologies.
    """
    spark = keys.sparkSession
    if partitions is not None:
        # One partition (the usual case) needs no shuffle: gather the cached keys.
        keys = keys.coalesce(1) if partitions == 1 else keys.repartition(partitions)

    def route_rows(rows: Iterable[KeyRow]) -> Iterator[tuple[Any, ...]]:
        return route_partition(
            rows,
            current.value,
            proposed.value if proposed is not None else None,
            bindings=bindings,
        )

    rdd = keys.select(*KEY).rdd.map(tuple).mapPartitions(route_rows)
    return spark.createDataFrame(rdd, ROUTE_SCHEMA)


def with_routes(counts: DataFrame, routes: DataFrame) -> DataFrame:
    """``counts`` (one row per key) joined with their routes.

    Adds ``queues``, ``fanout`` (queues reached, 0 = unroutable), ``exchange_exists``,
    ``bindings``, ``proposed_queues``, ``proposed_fanout``, ``proposed_exchange_exists``.
    Null headers join null headers.
    """
    condition = [counts[c].eqNullSafe(routes[c]) for c in KEY]
    joined = counts.join(routes, condition, "inner")
    return joined.select(
        counts["*"],
        routes["queues"],
        sf.size(routes["queues"]).alias("fanout"),
        routes["exchange_exists"],
        routes["bindings"],
        routes["proposed_queues"],
        sf.size(routes["proposed_queues"]).alias("proposed_fanout"),
        routes["proposed_exchange_exists"],
        routes["error"],
    )


# -- reports -----------------------------------------------------------------------------------


def key_pattern(routing_key: Column) -> Column:
    """A routing key with every word that holds a digit replaced by ``*``.

    ``order.42.created`` and ``order.7.created`` both become ``order.*.created``, so
    unroutable traffic groups by the shape of its keys rather than by id.
    """
    words = sf.split(routing_key, r"\.", -1)
    masked = sf.transform(words, lambda w: sf.when(w.rlike("[0-9]"), sf.lit("*")).otherwise(w))
    return sf.array_join(masked, ".")


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
