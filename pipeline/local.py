"""Every output table from the pass's groups, on the driver, with PyArrow. No Spark here.

After the pass (:func:`leveret.pipeline.transforms.aggregate_segments`) a trace is a table of
``(key id, queue set id, minute)`` groups: 3.3M rows for 50M messages of 11k keys over five
hours. When they are that few (the usual case: traces repeat their keys endlessly), Spark
aggregates them once more in the same action (:func:`leveret.pipeline.transforms.driver_totals`):
totals per key id and queue set id (11k rows), and per route class and minute (240k: the keys
that reach the same queues share a class, :func:`route_classes`). Those come to the driver and
every table is derived here, in Arrow's C++ kernels: no more Spark jobs, whose fixed cost
(planning, code generation, task launch, committing files) was most of the job on small data.
The same tables for traces too big for the driver come from
:mod:`leveret.pipeline.transforms` in Spark; a test holds both to the same rows.

The inputs are Arrow tables: the totals per key id
(:data:`~leveret.pipeline.schema.KEY_ID_COLUMNS`), the minute routes (:func:`minute_routes`),
the dictionaries (``key, vhost, exchange, routing_key, headers`` and ``queue_set,
recorded``) and the routes (``leveret.pipeline.router.route_schema``, one row per key id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from leveret.pipeline.topology import Topology

# Words of a routing key holding a digit (shown as * in the unroutable report).
KEY_PATTERN = r"[^.]*[0-9][^.]*"
MINUTE = pa.timestamp("us", tz="UTC")
STRINGS = pa.list_(pa.string())


@dataclass(frozen=True)
class TopologyTables:
    """The topology's exchanges, queues and bindings, as Arrow tables."""

    exchanges: Any
    queues: Any
    bindings: Any

    @classmethod
    def of(cls, topology: Topology) -> TopologyTables:
        projections = topology.projections()
        exchanges = topology.exchange_table(projections)
        queues = topology.queue_table(projections)
        bindings = topology.binding_table(projections)
        return cls(
            exchanges=pa.table(
                {
                    "vhost": pa.array([e[0] for e in exchanges], pa.string()),
                    "exchange": pa.array([e[1] for e in exchanges], pa.string()),
                    "type": pa.array([e[2] for e in exchanges], pa.string()),
                }
            ),
            queues=pa.table(
                {
                    "vhost": pa.array([q[0] for q in queues], pa.string()),
                    "queue": pa.array([q[1] for q in queues], pa.string()),
                }
            ),
            bindings=pa.table(
                {
                    "binding_id": pa.array([b.binding_id for b in bindings], pa.int64()),
                    "vhost": pa.array([b.vhost for b in bindings], pa.string()),
                    "source": pa.array([b.source for b in bindings], pa.string()),
                    "destination": pa.array([b.destination for b in bindings], pa.string()),
                    "destination_type": pa.array(
                        [b.destination_type for b in bindings], pa.string()
                    ),
                    "routing_key": pa.array([b.routing_key for b in bindings], pa.string()),
                    "arguments": pa.array([b.arguments for b in bindings], pa.string()),
                }
            ),
        )


# -- helpers -----------------------------------------------------------------------------------


def _lookup(ids: Any, table: Any, column: str) -> Any:
    """Rows of ``table`` whose ``column`` equals each of ``ids`` (the ids must be there)."""
    index = pc.index_in(ids, value_set=table.column(column))
    if index.null_count:
        raise ValueError(f"{index.null_count} id(s) missing from the {column} dictionary")
    return table.take(index)


def _canonical(table: Any, id_column: str, value: Any) -> Any:
    """``(id, canonical id)``: ids whose entries are equal (traces of several formats give
    one key several ids) map to the first one."""
    first: dict[Any, int] = {}
    canonical = []
    for ident, entry in zip(table.column(id_column).to_pylist(), value(table), strict=True):
        canonical.append(first.setdefault(entry, ident))
    return pa.table({"id": table.column(id_column), "canonical": pa.array(canonical, pa.int64())})


def _sum(table: Any, keys: Sequence[str], columns: Sequence[str], count: str = "") -> Any:
    """``table`` grouped by ``keys`` with the sums of ``columns`` (same names) and, with
    ``count``, the number of rows in that column."""
    aggregations: list[Any] = [(c, "sum") for c in columns]
    names = list(keys) + list(columns)
    if count:
        aggregations.append(([], "count_all"))
        names.append(count)
    grouped = table.group_by(list(keys), use_threads=False).aggregate(aggregations)
    # Arrow names the outputs "<column>_sum"/"count_all" after the keys; put them back.
    ordered = [f"{c}_sum" for c in columns] + (["count_all"] if count else [])
    return grouped.select(list(keys) + ordered).rename_columns(names)


def _when(condition: Any, values: Any) -> Any:
    return pc.if_else(condition, values, pa.scalar(0, values.type))


def _list_text(lists: Any) -> Any:
    """Lists of strings as comparable text (the lists are sorted)."""
    return pc.binary_join(lists, "\x00")


def _explode(table: Any, column: str, keep: Sequence[str], name: str) -> Any:
    """One row per element of the list ``column`` (null lists: none), with ``keep``."""
    lists = table.column(column)
    parents = pc.list_parent_indices(lists)
    out = table.select(list(keep)).take(parents)
    return out.append_column(name, pc.list_flatten(lists))


def _minutes(minutes: Any) -> Any:
    micros = pc.multiply(minutes.cast(pa.int64()), 60_000_000)
    if isinstance(micros, pa.ChunkedArray):
        micros = micros.combine_chunks()
    return micros.view(MINUTE)


# -- the per-key table -------------------------------------------------------------------------


def _key_fields(table: Any) -> list[tuple[Any, ...]]:
    columns = [table.column(c).to_pylist() for c in ("vhost", "exchange", "routing_key", "headers")]
    return list(zip(*columns, strict=True))


def key_totals(per_id: Any, keys: Any, queue_sets: Any, routes: Any, recorded: bool = True) -> Any:
    """The ``keys`` table: per key (vhost, exchange, routing key, headers) and recorded queue
    set, the totals over the trace, first and last minute, and the routes; from the totals
    per key id and queue set id (:data:`~leveret.pipeline.schema.KEY_ID_COLUMNS`)."""
    key_map = _canonical(keys, "key", _key_fields)
    set_map = _canonical(
        queue_sets, "queue_set", lambda t: [tuple(q) for q in t["recorded"].to_pylist()]
    )
    # Ids whose strings are equal (traces of several formats) become one row.
    key_ids = _lookup(per_id.column("key"), key_map, "id").column("canonical")
    set_ids = (
        _lookup(per_id.column("queue_set"), set_map, "id").column("canonical")
        if recorded
        else pa.nulls(per_id.num_rows, pa.int64())
    )
    per = pa.table(
        {
            "key": key_ids,
            "queue_set": set_ids,
            "messages": per_id.column("messages"),
            "bytes": per_id.column("bytes"),
            "persistent": per_id.column("persistent"),
            "first": per_id.column("first"),
            "last": per_id.column("last"),
        }
    )
    totals = per.group_by(["key", "queue_set"], use_threads=False).aggregate(
        [
            ("messages", "sum"),
            ("bytes", "sum"),
            ("persistent", "sum"),
            ("first", "min"),
            ("last", "max"),
        ]
    )
    strings = _lookup(totals.column("key"), keys, "key")
    route = _lookup(totals.column("key"), routes, "key")
    if recorded:
        recorded_lists = _lookup(totals.column("queue_set"), queue_sets, "queue_set").column(
            "recorded"
        )
    else:
        recorded_lists = pa.nulls(totals.num_rows, STRINGS)
    queues = route.column("queues")
    proposed = route.column("proposed_queues")
    return pa.table(
        {
            "vhost": strings.column("vhost"),
            "exchange": strings.column("exchange"),
            "routing_key": strings.column("routing_key"),
            "headers": strings.column("headers"),
            "recorded": recorded_lists,
            "messages": totals.column("messages_sum"),
            "bytes": totals.column("bytes_sum"),
            "persistent": totals.column("persistent_sum"),
            "first_minute": _minutes(totals.column("first_min")),
            "last_minute": _minutes(totals.column("last_max")),
            "queues": queues,
            "fanout": pc.list_value_length(queues).cast(pa.int32()),
            "exchange_exists": route.column("exchange_exists"),
            "bindings": route.column("bindings"),
            "proposed_queues": proposed,
            "proposed_fanout": pc.list_value_length(proposed).cast(pa.int32()),
            "proposed_exchange_exists": route.column("proposed_exchange_exists"),
            "error": route.column("error"),
        }
    )


# -- reports -----------------------------------------------------------------------------------


def _traffic(table: Any) -> Any:
    """``table`` (messages, bytes, fanout) with the usual totals' inputs as columns."""
    routed = pc.greater(table.column("fanout"), 0)
    unroutable = pc.invert(routed)
    messages, size = table.column("messages"), table.column("bytes")
    return (
        table.append_column("routed_messages", _when(routed, messages))
        .append_column("unroutable_messages", _when(unroutable, messages))
        .append_column("unroutable_bytes", _when(unroutable, size))
        .append_column("deliveries", pc.multiply(messages, table.column("fanout").cast(pa.int64())))
    )


TRAFFIC = ["messages", "bytes", "routed_messages", "unroutable_messages", "unroutable_bytes"]
TRAFFIC += ["deliveries"]


def per_exchange(routed: Any, exchanges: Any) -> Any:
    """Traffic per exchange, idle exchanges of the topology included (``type`` null: not in
    the topology)."""
    flows = _sum(_traffic(routed), ["vhost", "exchange"], TRAFFIC, count="keys")
    return _full_outer(flows, exchanges, ["vhost", "exchange"], [*TRAFFIC, "keys"]).select(
        ["vhost", "exchange", "type", *TRAFFIC, "keys"]
    )


def _full_outer(flows: Any, topology: Any, on: Sequence[str], counts: Sequence[str]) -> Any:
    """``flows`` full-outer-joined with the small ``topology`` table on ``on``; missing counts
    are 0."""
    joined = flows.join(topology, list(on), join_type="full outer", use_threads=False)
    for name in counts:
        index = joined.schema.get_field_index(name)
        joined = joined.set_column(index, name, pc.fill_null(joined.column(name), 0))
    return joined


def per_queue(routed: Any, queues: Any) -> Any:
    """Messages, bytes and persistent messages delivered to each queue (idle queues: 0)."""
    delivered = _sum(
        _explode(routed, "queues", ["vhost", "messages", "bytes", "persistent"], "queue"),
        ["vhost", "queue"],
        ["messages", "bytes", "persistent"],
    )
    out = _full_outer(delivered, queues, ["vhost", "queue"], ["messages", "bytes", "persistent"])
    return out.select(["vhost", "queue", "messages", "bytes", "persistent"])


def per_binding(routed: Any, bindings: Any, total_messages: int) -> Any:
    """Messages and bytes that matched each binding, and their share of all messages."""
    matched = _sum(
        _explode(routed, "bindings", ["messages", "bytes"], "binding_id"),
        ["binding_id"],
        ["messages", "bytes"],
    )
    out = bindings.join(matched, "binding_id", join_type="left outer", use_threads=False)
    out = out.sort_by("binding_id")
    messages = pc.fill_null(out.column("messages"), 0)
    out = out.set_column(out.schema.get_field_index("messages"), "messages", messages)
    out = out.set_column(
        out.schema.get_field_index("bytes"), "bytes", pc.fill_null(out.column("bytes"), 0)
    )
    share = (
        pc.divide(messages.cast(pa.float64()), float(total_messages))
        if total_messages
        else pa.array([0.0] * out.num_rows, pa.float64())
    )
    return out.append_column("share", share)


def _by_pattern(rows: Any, reason: Any) -> Any:
    """Messages, bytes, keys and an example key by vhost, exchange, key pattern, reason."""
    table = pa.table(
        {
            "vhost": rows.column("vhost"),
            "exchange": rows.column("exchange"),
            "pattern": pc.replace_substring_regex(rows.column("routing_key"), KEY_PATTERN, "*"),
            "reason": reason,
            "messages": rows.column("messages"),
            "bytes": rows.column("bytes"),
            "routing_key": rows.column("routing_key"),
        }
    )
    keys = ["vhost", "exchange", "pattern", "reason"]
    grouped = table.group_by(keys, use_threads=False).aggregate(
        [
            ("messages", "sum"),
            ("bytes", "sum"),
            ("routing_key", "count_distinct"),
            ("routing_key", "min"),
        ]
    )
    return (
        grouped.select(
            [*keys, "messages_sum", "bytes_sum", "routing_key_count_distinct", "routing_key_min"]
        )
        .rename_columns([*keys, "messages", "bytes", "keys", "example"])
        .set_column(6, "keys", grouped.column("routing_key_count_distinct").cast(pa.int32()))
    )


def unroutable(routed: Any) -> Any:
    """Unroutable traffic by vhost, exchange, routing-key pattern and reason."""
    rows = routed.filter(pc.equal(routed.column("fanout"), 0))
    reason = pc.if_else(rows.column("exchange_exists"), "no matching binding", "no such exchange")
    return _by_pattern(rows, reason)


def fanout_distribution(routed: Any) -> Any:
    """How many messages reached 0, 1, 2, ... queues."""
    return _sum(routed, ["fanout"], ["messages", "bytes"], count="keys").sort_by("fanout")


def route_classes(keys: Any, routes: Any) -> tuple[Any, Any]:
    """The keys' route classes: keys that reach the same queues in the same vhost share one
    (11k keys of the benchmark's topic mix make 801), so the per-minute tables can be counted
    by class and minute instead of by key and minute. Returns ``(key, class)`` for Spark
    (:func:`leveret.pipeline.transforms.driver_totals`) and ``(class, vhost, queues)``."""
    vhosts = _lookup(routes.column("key"), keys, "key").column("vhost").to_pylist()
    ids: dict[tuple[Any, ...], int] = {}
    classes = [
        ids.setdefault((vhost, tuple(queues)), len(ids))
        for vhost, queues in zip(vhosts, routes.column("queues").to_pylist(), strict=True)
    ]
    key_class = pa.table({"key": routes.column("key"), "class": pa.array(classes, pa.int32())})
    table = pa.table(
        {
            "class": pa.array(range(len(ids)), pa.int32()),
            "vhost": pa.array([vhost for vhost, _ in ids], pa.string()),
            "queues": pa.array([list(queues) for _, queues in ids], STRINGS),
        }
    )
    return key_class, table


def split_totals(totals: Any) -> tuple[Any, Any]:
    """The two halves of :func:`leveret.pipeline.transforms.driver_totals`: the totals per
    key id and queue set id (:data:`~leveret.pipeline.schema.KEY_ID_COLUMNS`), and per
    route class and minute (``class, minute, messages, bytes``)."""
    by_key = pc.equal(totals.column("per_key"), True)
    per_id = totals.filter(by_key).select(
        ["key", "queue_set", "messages", "bytes", "persistent", "first", "last"]
    )
    per_class = totals.filter(pc.invert(by_key)).select(["class", "minute", "messages", "bytes"])
    return per_id, per_class


def minute_routes(class_minutes: Any, classes: Any) -> Any:
    """Per route class and minute: minute, vhost, messages, bytes, and the class's queues and
    fan-out."""
    route = _lookup(class_minutes.column("class"), classes, "class")
    return pa.table(
        {
            "minute": class_minutes.column("minute"),
            "vhost": route.column("vhost"),
            "messages": class_minutes.column("messages"),
            "bytes": class_minutes.column("bytes"),
            "queues": route.column("queues"),
            "fanout": pc.list_value_length(route.column("queues")).cast(pa.int32()),
        }
    )


def rates(routed_minutes: Any) -> Any:
    """Per minute: messages, bytes, routed, unroutable and deliveries."""
    out = _sum(_traffic(routed_minutes), ["minute"], TRAFFIC).sort_by("minute")
    return out.set_column(0, "minute", _minutes(out.column("minute")))


def queue_rates(routed_minutes: Any) -> Any:
    """Per minute and queue: messages and bytes delivered."""
    exploded = _explode(routed_minutes, "queues", ["minute", "vhost", "messages", "bytes"], "queue")
    out = _sum(exploded, ["minute", "vhost", "queue"], ["messages", "bytes"])
    return out.set_column(0, "minute", _minutes(out.column("minute")))


def recorded_mismatch(routed: Any) -> Any:
    """Keys whose queues, as routed here, differ from the queues the broker recorded."""
    recorded = routed.column("recorded")
    differs = pc.and_kleene(
        pc.is_valid(recorded),
        pc.not_equal(_list_text(recorded), _list_text(routed.column("queues"))),
    )
    rows = routed.filter(pc.fill_null(differs, False))
    columns = ["vhost", "exchange", "routing_key", "headers", "recorded", "queues"]
    out = rows.select([*columns, "messages", "bytes"])
    missing, extra = [], []
    for now, then in zip(out["recorded"].to_pylist(), out["queues"].to_pylist(), strict=True):
        missing.append([q for q in now if q not in set(then)])
        extra.append([q for q in then if q not in set(now)])
    return out.append_column("missing", pa.array(missing, STRINGS)).append_column(
        "extra", pa.array(extra, STRINGS)
    )


def whatif_queues(routed: Any) -> Any:
    """Per queue: messages now and under the proposed topology, gained and lost."""
    rows = routed.append_column("row", pa.array(range(routed.num_rows), pa.int64()))
    now = _explode(rows, "queues", ["row"], "queue")
    then = _explode(rows, "proposed_queues", ["row"], "queue")
    now = now.append_column("now", pa.repeat(pa.scalar(1, pa.int8()), now.num_rows))
    now = now.append_column("then", pa.repeat(pa.scalar(0, pa.int8()), now.num_rows))
    then = then.append_column("now", pa.repeat(pa.scalar(0, pa.int8()), then.num_rows))
    then = then.append_column("then", pa.repeat(pa.scalar(1, pa.int8()), then.num_rows))
    both = pa.concat_tables([now, then]).group_by(["row", "queue"], use_threads=False)
    pairs = both.aggregate([("now", "max"), ("then", "max")])
    source = rows.take(pairs.column("row"))
    is_now = pc.equal(pairs.column("now_max"), 1)
    is_then = pc.equal(pairs.column("then_max"), 1)
    gained = pc.and_(is_then, pc.invert(is_now))
    lost = pc.and_(is_now, pc.invert(is_then))
    messages, size = source.column("messages"), source.column("bytes")
    table = pa.table(
        {
            "vhost": source.column("vhost"),
            "queue": pairs.column("queue"),
            "current_messages": _when(is_now, messages),
            "proposed_messages": _when(is_then, messages),
            "gained_messages": _when(gained, messages),
            "lost_messages": _when(lost, messages),
            "gained_bytes": _when(gained, size),
            "lost_bytes": _when(lost, size),
        }
    )
    return _sum(table, ["vhost", "queue"], table.column_names[2:])


def whatif_summary(routed: Any) -> Any:
    """One row: how the proposed topology changes routing of the whole trace."""
    messages = routed.column("messages")
    now = pc.greater(routed.column("fanout"), 0)
    then = pc.greater(routed.column("proposed_fanout"), 0)
    changed = pc.not_equal(
        _list_text(routed.column("queues")), _list_text(routed.column("proposed_queues"))
    )

    def total(values: Any) -> int:
        return int(pc.sum(values).as_py() or 0)

    row = {
        "messages": total(messages),
        "routed_now": total(_when(now, messages)),
        "routed_proposed": total(_when(then, messages)),
        "newly_unroutable": total(_when(pc.and_(now, pc.invert(then)), messages)),
        "newly_routable": total(_when(pc.and_(pc.invert(now), then), messages)),
        "changed": total(_when(pc.fill_null(changed, False), messages)),
        "deliveries_now": total(pc.multiply(messages, routed.column("fanout").cast(pa.int64()))),
        "deliveries_proposed": total(
            pc.multiply(messages, routed.column("proposed_fanout").cast(pa.int64()))
        ),
    }
    return pa.table({name: pa.array([value], pa.int64()) for name, value in row.items()})


def whatif_unroutable(routed: Any) -> Any:
    """Messages routable now that the proposed topology leaves unroutable, by key pattern."""
    stranded = routed.filter(
        pc.and_(
            pc.greater(routed.column("fanout"), 0), pc.equal(routed.column("proposed_fanout"), 0)
        )
    )
    reason = pc.if_else(
        stranded.column("proposed_exchange_exists"), "no matching binding", "exchange removed"
    )
    return _by_pattern(stranded, reason)


def reports(
    per_id: Any,
    minutes: Any,
    keys: Any,
    queue_sets: Any,
    routes: Any,
    topology: TopologyTables,
    whatif: bool = False,
    bindings: bool = True,
    recorded: bool = True,
) -> dict[str, Any]:
    """Every output table, by name (the names and columns of
    :func:`leveret.pipeline.transforms.reports`), from the totals per key id and queue set
    id and the :func:`minute_routes`."""
    routed = key_totals(per_id, keys, queue_sets, routes, recorded)
    total = int(pc.sum(routed.column("messages")).as_py() or 0)
    tables = {
        "keys": routed,
        "exchanges": per_exchange(routed, topology.exchanges),
        "queues": per_queue(routed, topology.queues),
        "unroutable": unroutable(routed),
        "fanout": fanout_distribution(routed),
        "rates": rates(minutes),
        "queue_rates": queue_rates(minutes),
        "recorded_mismatch": recorded_mismatch(routed),
    }
    if bindings:
        tables["bindings"] = per_binding(routed, topology.bindings, total)
    if whatif:
        tables["whatif_queues"] = whatif_queues(routed)
        tables["whatif_summary"] = whatif_summary(routed)
        tables["whatif_unroutable"] = whatif_unroutable(routed)
    return tables


# -- load --------------------------------------------------------------------------------------


def write_tables(tables: Mapping[str, Any], out: Path) -> None:
    """Each table as ``out/<name>/part-00000.parquet`` (replacing earlier results), the
    layout Spark writes and reads."""
    for name, table in tables.items():
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            if old.is_file():
                old.unlink()
        pq.write_table(table, directory / "part-00000.parquet", compression="snappy")
        (directory / "_SUCCESS").write_bytes(b"")


# -- the report's rows -------------------------------------------------------------------------


def _rows(table: Any, columns: Sequence[str]) -> list[list[Any]]:
    data = [table.column(c).to_pylist() for c in columns]
    return [list(row) for row in zip(*data, strict=True)]


def _top(
    table: Any, columns: Sequence[str], order: Sequence[tuple[str, str]], limit: int | None
) -> list[list[Any]]:
    ordered = table.sort_by(list(order)) if table.num_rows else table
    if limit is not None:
        ordered = ordered.slice(0, limit)
    return _rows(ordered, columns)


def report_rows(tables: Mapping[str, Any], top: int) -> dict[str, Any]:
    """The results of :func:`leveret.pipeline.collect.queries`, from the Arrow tables."""
    from leveret.pipeline import collect

    desc = [("messages", "descending")]
    exchanges = tables["exchanges"]
    rates_table = tables["rates"]
    mismatch = tables["recorded_mismatch"]
    got: dict[str, Any] = {
        "exchanges": _top(
            exchanges, collect.EXCHANGE_COLUMNS, [*desc, ("exchange", "ascending")], None
        ),
        "rates": _top(
            rates_table,
            ["minute", "messages", "routed_messages", "unroutable_messages"],
            [("minute", "ascending")],
            None,
        ),
        "fanout": _top(
            tables["fanout"],
            ["fanout", "messages", "bytes", "keys"],
            [("fanout", "ascending")],
            None,
        ),
        "queues": _top(
            tables["queues"], collect.QUEUE_COLUMNS, [*desc, ("queue", "ascending")], top
        ),
        "unroutable": _top(tables["unroutable"], collect.UNROUTABLE_COLUMNS, desc, top),
        "mismatch": _top(mismatch, collect.MISMATCH_COLUMNS, desc, top),
        "mismatch_total": (int(pc.sum(mismatch.column("messages")).as_py() or 0),),
    }
    if "bindings" in tables:
        bindings = tables["bindings"]
        hot = bindings.filter(pc.greater(bindings.column("messages"), 0))
        never = bindings.filter(pc.equal(bindings.column("messages"), 0))
        columns = [*collect.BINDING_COLUMNS, "messages", "share"]
        got["hot"] = _top(hot, columns, [*desc, ("binding_id", "ascending")], top)
        got["never"] = _top(never, collect.BINDING_COLUMNS, [("binding_id", "ascending")], top)
        got["binding_counts"] = (bindings.num_rows, never.num_rows)
    if "whatif_summary" in tables:
        got["whatif"] = tables["whatif_summary"].to_pylist()[0]
        queues = tables["whatif_queues"]
        changed = queues.filter(
            pc.or_(
                pc.greater(queues.column("gained_messages"), 0),
                pc.greater(queues.column("lost_messages"), 0),
            )
        )
        changed = changed.append_column(
            "change", pc.add(changed.column("gained_messages"), changed.column("lost_messages"))
        )
        got["whatif_queues"] = _top(
            changed, collect.WHATIF_COLUMNS, [("change", "descending"), ("queue", "ascending")], top
        )
        got["whatif_unroutable"] = _top(
            tables["whatif_unroutable"], collect.UNROUTABLE_COLUMNS, desc, top
        )
    return got
