"""The analysis job: check the inputs, one pass over the trace, every table from it, and its
command line.

::

    spark-submit pipeline/job.py --trace DIR --topology SOURCE [--proposed SOURCE] --out DIR
    python -m leveret.pipeline.job       (same options; --master and --conf k=v pick the cluster)
    leveret analyze ...          (the broker's CLI: also takes a Leveret data dir as SOURCE)

SOURCE is ``leveret log dump`` output or a RabbitMQ ``definitions.json``. For a Leveret data
dir under ``spark-submit``, run ``leveret log dump --data-dir DIR > topology.jsonl`` first.

1. **Inputs, before Spark starts** (:mod:`leveret.pipeline.inputs`): the trace files found and
   checked (a file that is not a trace is an error), the topologies read, the output directory
   made. Any problem is one line and exit status 2, without a JVM.
2. **Routes, while the JVM starts**: the segments' dictionaries are read on the driver and
   every distinct key is routed once with the broker's own route function
   (:func:`leveret.pipeline.router.route_table`); with many keys, in Spark instead
   (``mapPartitions``, :func:`leveret.pipeline.transforms.route_keys`).
3. **One pass over the trace** (Spark SQL): the segments' rows, five numeric columns, grouped
   by key id, queue set id and minute (JSON-lines traces of versions 1 and 2: read whole and
   grouped by their strings).
4. **Every table from the groups**: when they are few (the usual case), the same Spark action
   aggregates them once more, per key and per route class and minute
   (:func:`leveret.pipeline.transforms.driver_totals`), brings those rows to the driver and
   every table is derived and written there with Arrow (:mod:`leveret.pipeline.local`):
   251k rows instead of 3.3M for 50M messages, and the driver's serial work, which two cores
   cannot share, stays small. Otherwise the groups are cached and the tables are Spark
   queries (:mod:`leveret.pipeline.transforms`), written a few at a time.
5. **The report**: ``OUT/report.html`` and ``OUT/summary.json``.

Local mode (``local[*]``) is the default; under ``spark-submit`` its ``--master`` rules.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit pipeline/job.py`: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from leveret.pipeline import collect, inputs, local, router, transforms
from leveret.pipeline import report as html_report
from leveret.pipeline.cli import JobOptions, add_arguments, options_from_args
from leveret.pipeline.progress import Progress
from leveret.pipeline.schema import (
    COUNTS_SCHEMA,
    GROUP_COLUMNS,
    JSON_VERSIONS,
    ROWS_SCHEMA,
    SEGMENT_VERSION,
    TRACE_SCHEMA,
)
from leveret.pipeline.session import (
    executor_cores,
    list_urls,
    read_dictionaries,
    ship_packages,
    spark_session,
)
from leveret.pipeline.topology import SourceError, Topology, load

log = logging.getLogger("leveret.pipeline")

# Tables small enough to write as one file each (when Spark writes them).
SMALL_TABLES = frozenset(
    {"exchanges", "fanout", "rates", "unroutable", "whatif_summary", "whatif_unroutable"}
)
KEYS_PER_ROUTING_PARTITION = 20_000
# Spark queries the driver runs at once when the tables are Spark's: each is small, mostly
# driver-side latency (planning, task launch, committing files) that overlaps well.
CONCURRENT_QUERIES = 8
# Parquet bytes per scan task: enough tasks for every core, not so many that their launches
# cost more than the reading (a segment's row groups are a few MB).
SCAN_BYTES_MIN = 4 * 1024 * 1024
SCAN_BYTES_MAX = 128 * 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    """The job's own parser (``spark-submit pipeline/job.py`` and ``python -m``)."""
    parser = argparse.ArgumentParser(
        prog="pipeline/job.py", description="Analyse a Leveret traffic trace with Spark"
    )
    add_arguments(parser)
    return parser


def run_args(
    args: argparse.Namespace,
    topology: Iterable[Mapping[str, Any]] | None = None,
    proposed: Iterable[Mapping[str, Any]] | None = None,
) -> int:
    """Run from parsed arguments and return an exit status (for ``leveret analyze``): an
    input that cannot be used is one ``error: ...`` line on stderr and status 2.

    ``topology``/``proposed``: dump objects (``leveret.storage.records.event_to_json``) to use
    instead of reading ``args.topology``/``args.proposed`` as files.
    """
    _configure_logging()
    try:
        summary = run(options_from_args(args, topology, proposed))
    except SourceError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(_headline(summary)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit pipeline/job.py ...`` / ``python -m leveret.pipeline.job ...``."""
    return run_args(build_parser().parse_args(argv))


def _configure_logging() -> None:
    """Progress lines at INFO: through the caller's handlers if it set some up, else stderr."""
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per closed connection
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.propagate = False


# -- the job -----------------------------------------------------------------------------------


@dataclass
class Prepared:
    """Everything the job knows before Spark runs."""

    traces: inputs.Traces
    current: Topology
    proposed: Topology | None
    trace_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def prepare(options: JobOptions) -> Prepared:
    """Check the inputs and read the topologies: no Spark (errors: :class:`SourceError`)."""
    traces = inputs.find_traces(options.trace)
    current = _topology(options.topology, "--topology")
    proposed = _topology(options.proposed, "--proposed") if options.proposed is not None else None
    inputs.check_output(options.out)
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


@dataclass
class Routes:
    """The keys dictionary, the queue sets, and the routes: on the driver (Arrow tables) or,
    for many keys, the routes as a Spark DataFrame."""

    keys: Any
    queue_sets: Any
    table: Any = None  # Arrow, when routed on the driver
    frame: DataFrame | None = None  # Spark, when routed there


class _Job:
    """One run's state: the session, the options, the frames to unpersist."""

    def __init__(
        self, spark: SparkSession, options: JobOptions, prepared: Prepared, progress: Progress
    ) -> None:
        self.spark = spark
        self.options = options
        self.prepared = prepared
        self.progress = progress
        self.cached: list[DataFrame] = []
        self._saved: dict[str, str | None] = {}
        self.read = "json"  # what the pass reads: "counts", "rows" or "json"

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame``, cached until :meth:`release`."""
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(frame)
        return frame

    def release(self) -> None:
        """Unpersist every frame :meth:`keep` cached."""
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()

    def configure(self, settings: Mapping[str, str]) -> None:
        """Set SQL options for this run, unless ``--conf`` set them; :meth:`restore` puts the
        session's own values back."""
        conf = self.spark.conf
        for key, value in settings.items():
            if key in self.options.conf:
                continue
            self._saved.setdefault(key, conf.get(key, None))
            conf.set(key, value)

    def restore(self) -> None:
        """Undo :meth:`configure`."""
        for key, value in self._saved.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)
        self._saved.clear()

    def size_settings(self) -> None:
        """Spark SQL settings sized to this trace and these cores (each overridable with
        ``--conf``): scan tasks of total/(2 x cores) bytes (at least a few MB), shuffles in one
        partition per 32 MB of trace read, at most two per core (adaptive execution merges
        small ones), no Spark job just to list many files."""
        cores = executor_cores(self.spark)
        size = max(1, self.prepared.trace_bytes)
        files = len(self.prepared.traces.segments) + len(self.prepared.traces.jsonl)
        scan = size + files * 4 * 1024 * 1024  # Spark's open cost per file
        split = min(SCAN_BYTES_MAX, max(SCAN_BYTES_MIN, math.ceil(scan / (2 * cores))))
        partitions = max(1, min(2 * cores, math.ceil(size / (32 * 1024 * 1024))))
        self.configure(
            {
                "spark.sql.files.maxPartitionBytes": str(split),
                "spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
            }
        )

    # -- routing

    def route(self, keys: Any, queue_sets: Any) -> Routes:
        """Route every distinct key once: on the driver, or in Spark for many keys."""
        current, proposed = self.prepared.current, self.prepared.proposed
        options = self.options
        with self.progress.stage(f"route {keys.num_rows:,} distinct key(s)") as done:
            if keys.num_rows <= options.driver_keys:
                table = router.route_table(keys, current, proposed, options.bindings)
                done.append("on the driver")
                return Routes(keys, queue_sets, table=table)
            sc = self.spark.sparkContext
            ship_packages(sc)
            partitions = max(
                1,
                min(
                    sc.defaultParallelism * 4,
                    math.ceil(keys.num_rows / KEYS_PER_ROUTING_PARTITION),
                ),
            )
            frame = transforms.route_keys(
                self.spark.createDataFrame(keys),
                sc.broadcast(current),
                sc.broadcast(proposed) if proposed is not None else None,
                bindings=options.bindings,
                partitions=partitions,
            )
            frame = self.keep(frame)
            frame.count()
            done.append(f"in Spark, {partitions} partition(s)")
            return Routes(keys, queue_sets, frame=frame)

    # -- the pass

    def json_pass(self, files: Sequence[str]) -> tuple[DataFrame, Any, Any]:
        """JSON-lines traces read whole: their groups (cached) and dictionaries."""
        groups = self.keep(
            transforms.aggregate_json(self.spark.read.schema(TRACE_SCHEMA).json(list(files)))
        )
        entries = (
            groups.select("schema_version", "key", *transforms.KEY, "queue_set", "recorded")
            .distinct()
            .toArrow()
        )
        versions = {v for v in entries.column("schema_version").to_pylist() if v is not None}
        newer = sorted(v for v in versions if v not in JSON_VERSIONS)
        if newer:
            raise SourceError(
                f"trace schema version(s) {newer} are newer than this pipeline reads "
                f"({sorted(JSON_VERSIONS | {SEGMENT_VERSION})}): upgrade Leveret"
            )
        keys = inputs.distinct_ids([entries.select(["key", *transforms.KEY])], inputs.KEYS_ARROW)
        sets = inputs.distinct_ids([entries.select(["queue_set", "recorded"])], inputs.SETS_ARROW)
        return groups.select(*GROUP_COLUMNS), keys, sets

    def segment_groups(self, segments: Sequence[str]) -> DataFrame:
        """The pass over version 3 segments (lazy): their counts, or with ``--rows`` (or a
        segment without counts) every row."""
        if not self.options.rows and inputs.counted(segments):
            counts = self.spark.read.schema(COUNTS_SCHEMA).parquet(
                *(inputs.counts_path(s) for s in segments)
            )
            self.read = "counts"
            return transforms.aggregate_counts(counts)
        rows = self.spark.read.schema(ROWS_SCHEMA).parquet(*segments)
        self.read = "rows"
        return transforms.aggregate_segments(rows)


def run(options: JobOptions, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run the whole job; returns the summary (also written to ``OUT/summary.json``)."""
    started = time.perf_counter()
    progress = Progress(None, stages=5 if options.report else 4, interval=options.progress_interval)
    with progress.stage("check the inputs, read the topology") as done:
        prepared = prepare(options)
        traces = prepared.traces
        done.append(
            f"{len(traces.segments)} segment(s), {len(traces.jsonl)} JSON-lines file(s)"
            + (f", {len(traces.urls)} URL(s)" if traces.urls else "")
            + f"; current: {prepared.current.describe()}"
            + (f"; proposed: {prepared.proposed.describe()}" if prepared.proposed else "")
        )
    with ThreadPoolExecutor(1) as pool:
        # The JVM starts while the driver reads the dictionaries and routes.
        session: Future[SparkSession] | None = None
        if spark is None:
            session = pool.submit(spark_session, options.master, options.conf, options.ui)
        try:
            keys, sets = (
                inputs.read_dictionaries(traces.segments) if not traces.urls else (None, None)
            )
            early = None
            # (Without a JVM to wait for, the pass routes, when it can overlap the two.)
            if (
                session is not None
                and keys is not None
                and not traces.jsonl
                and keys.num_rows <= options.driver_keys
            ):
                early = _route_on_driver(keys, sets, prepared, options, progress)
        finally:
            if session is not None:
                spark = session.result()
    assert spark is not None
    summary: dict[str, Any] = {"trace": list(options.trace), "out": str(options.out)}
    progress.sc = spark.sparkContext
    state = _Job(spark, options, prepared, progress)
    try:
        _analyse(state, early, summary)
    finally:
        state.release()
        state.restore()
    summary["seconds"] = round(time.perf_counter() - started, 3)
    summary["stage_seconds"] = {k: round(v, 3) for k, v in progress.timings.items()}
    summary["messages_per_second"] = round(summary["messages"] / max(summary["seconds"], 1e-9))
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    log.info(
        "analysed %s messages in %.1f s (%s messages/s)",
        f"{summary['messages']:,}",
        summary["seconds"],
        f"{summary['messages_per_second']:,}",
    )
    return summary


def _route_on_driver(
    keys: Any, sets: Any, prepared: Prepared, options: JobOptions, progress: Progress
) -> Routes:
    with progress.stage(f"route {keys.num_rows:,} distinct key(s)") as done:
        table = router.route_table(keys, prepared.current, prepared.proposed, options.bindings)
        done.append("on the driver, while Spark starts")
    return Routes(keys, sets, table=table)


@dataclass
class Counted:
    """What the pass produced: the groups (a Spark frame), the routes, the number of
    messages, and either the driver's inputs (:class:`Driver`) or the number of key-minute
    groups, which are too many for it (the tables are then Spark's)."""

    groups: DataFrame
    routes: Routes
    messages: int
    driver: Driver | None = None
    count: int | None = None


@dataclass
class Driver:
    """What the driver's tables (:func:`leveret.pipeline.local.reports`) need: totals per key
    id and queue set id, and the minute routes (per route class and minute)."""

    per_id: Any
    minutes: Any

    @property
    def rows(self) -> int:
        """Rows that came to the driver."""
        return int(self.per_id.num_rows + self.minutes.num_rows)


def _count(state: _Job, routes: Routes | None) -> Counted:
    """Stage 3: the pass over the trace and what the tables need of it. Few key-minute
    groups (the segments' statistics bound them before anything runs): routed first, then one
    Spark action, the pass and :func:`leveret.pipeline.transforms.driver_totals`, brings a
    row per key and per route class and minute to the driver. Many (or not known): the
    groups are cached and counted while this thread routes."""
    spark, options, traces = state.spark, state.options, state.prepared.traces
    with state.progress.stage("count the trace by key and minute") as done:
        parts = []
        if routes is not None:
            keys, sets = routes.keys, routes.queue_sets
        else:
            keys, sets = read_dictionaries(spark, traces.segments)
        if traces.segments:
            parts.append(state.segment_groups(traces.segments))
        if traces.jsonl:
            json_groups, json_keys, json_sets = state.json_pass(traces.jsonl)
            parts.append(json_groups)
            keys = inputs.distinct_ids([keys, json_keys], inputs.KEYS_ARROW)
            sets = inputs.distinct_ids([sets, json_sets], inputs.SETS_ARROW)
        groups = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        local_segments = [s for s in traces.segments if not inputs.is_url(s)]
        estimate = (
            keys.num_rows * max(1, inputs.segment_minutes(local_segments))
            if traces.segments and not traces.jsonl and len(local_segments) == len(traces.segments)
            else None
        )
        if estimate is not None and estimate <= options.driver_groups:
            if routes is None:
                routes = state.route(keys, sets)
            driver = _to_driver(state, groups, routes)
            messages = int(pc.sum(driver.per_id.column("messages")).as_py() or 0)
            done.append(f"{messages:,} messages: {driver.rows:,} rows to the driver")
            return Counted(groups, routes, messages, driver=driver)
        groups = state.keep(groups)
        totals = groups.agg(sf.count(sf.lit(1)), transforms.sum0("messages"))
        with ThreadPoolExecutor(1) as pool:
            # The pass runs in the JVM, into the cache, while this thread routes (Python).
            counting = pool.submit(totals.first)
            try:
                if routes is None:
                    routes = state.route(keys, sets)
            finally:
                row = counting.result()
        assert row is not None
        count, messages = int(row[0]), int(row[1])
        done.append(f"{messages:,} messages in {count:,} key-minute groups")
        if count <= options.driver_groups:
            return Counted(groups, routes, messages, driver=_to_driver(state, groups, routes))
    return Counted(groups, routes, messages, count=count)


def _to_driver(state: _Job, groups: DataFrame, routes: Routes) -> Driver:
    """The driver's inputs: the keys' route classes (Arrow), then one Spark action."""
    if routes.table is None:
        assert routes.frame is not None
        routes.table = routes.frame.toArrow()
    key_class, classes = local.route_classes(routes.keys, routes.table)
    totals = transforms.driver_totals(groups, state.spark.createDataFrame(key_class)).toArrow()
    per_id, class_minutes = local.split_totals(totals)
    return Driver(per_id, local.minute_routes(class_minutes, classes))


def _analyse(state: _Job, routes: Routes | None, summary: dict[str, Any]) -> None:
    """Stages 3 to 5 (the pass, the tables, the report), into ``summary``."""
    spark, options, prepared, progress = state.spark, state.options, state.prepared, state.progress
    state.size_settings()
    if prepared.traces.urls:
        list_urls(spark, prepared.traces)
    counted = _count(state, routes)
    routes, driver = counted.routes, counted.driver
    keys, sets = routes.keys, routes.queue_sets
    distinct = keys.group_by(transforms.KEY, use_threads=False).aggregate([]).num_rows
    summary["distinct_keys"] = distinct
    if driver is not None:
        summary["driver_rows"] = driver.rows
    else:
        summary["key_minute_groups"] = counted.count
    summary["tables_on"] = "driver" if driver is not None else "spark"
    summary["read"] = state.read
    current, proposed = prepared.current, prepared.proposed
    if driver is not None:
        with progress.stage("derive and write the tables (Arrow, on the driver)") as done:
            assert routes.table is not None
            tables = local.reports(
                driver.per_id,
                driver.minutes,
                keys,
                sets,
                routes.table,
                local.TopologyTables.of(current),
                whatif=proposed is not None,
                bindings=options.bindings,
                recorded=options.recorded,
            )
            if inputs.is_url(str(options.out)):
                for name, table in tables.items():
                    spark.createDataFrame(table).write.mode("overwrite").parquet(
                        str(options.out / name)
                    )
            else:
                local.write_tables(tables, options.out)
            gathered = collect.assemble(local.report_rows(tables, options.top))
            done.append(f"{len(tables)} tables")
    else:
        gathered = _spark_tables(state, counted.groups, keys, sets, routes, counted.messages)
    summary.update(collect.summarise(gathered))
    summary["notes"] = list(current.notes) + list(proposed.notes if proposed else ())
    if options.report:
        with progress.stage("write the HTML report") as done:
            path = write_report(gathered, summary, options, current, proposed)
            done.append(str(path))


def _spark_tables(
    state: _Job, groups: DataFrame, keys: Any, sets: Any, routes: Routes, messages: int
) -> collect.Gathered:
    """The tables as Spark queries over the cached groups, written a few at a time."""
    spark, options, prepared = state.spark, state.options, state.prepared
    with state.progress.stage("derive and write the tables (Spark)") as done:
        keys_frame = spark.createDataFrame(keys)
        sets_frame = spark.createDataFrame(sets)
        routes_frame = (
            routes.frame if routes.frame is not None else spark.createDataFrame(routes.table)
        )
        routed = state.keep(
            transforms.key_totals(groups, keys_frame, sets_frame, routes_frame, options.recorded)
        )
        minutes = transforms.minute_routes(groups, keys_frame, routes_frame)
        tables = transforms.reports(
            routed,
            minutes,
            transforms.topology_tables(spark, prepared.current),
            messages,
            whatif=prepared.proposed is not None,
            bindings=options.bindings,
        )
        for name, frame in tables.items():
            if not frame.is_cached:
                tables[name] = state.keep(frame)
        writes = table_writers(tables, options.out)
        queries = collect.queries(tables, options.top)
        results = run_all([*writes, *queries.values()])
        rows = dict(zip(queries, results[len(writes) :], strict=True))
        done.append(f"{len(tables)} tables")
    return collect.assemble(rows)


def run_all(tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run Spark actions from ``CONCURRENT_QUERIES`` driver threads; results in task order."""
    if len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(min(CONCURRENT_QUERIES, len(tasks))) as pool:
        return list(pool.map(lambda task: task(), tasks))


def _headline(summary: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("messages", "unroutable_messages", "distinct_keys", "seconds", "messages_per_second")
    return {k: summary.get(k) for k in keys} | {"out": summary.get("out")}


# -- load --------------------------------------------------------------------------------------


def table_writers(tables: Mapping[str, DataFrame], out: Path) -> list[Callable[[], None]]:
    """One task per table: write it as Parquet under ``out/<name>/`` (replacing earlier
    results). Run them with :func:`run_all`."""

    def writer(name: str, frame: DataFrame) -> Callable[[], None]:
        def write() -> None:
            data = frame.coalesce(1) if name in SMALL_TABLES else frame
            data.write.mode("overwrite").parquet(str(out / name))

        return write

    return [writer(name, frame) for name, frame in tables.items()]


def write_report(
    gathered: collect.Gathered,
    summary: Mapping[str, Any],
    options: JobOptions,
    current: Topology,
    proposed: Topology | None,
) -> Path:
    """Draw the charts and write ``OUT/report.html``."""
    page = html_report.render(
        collect.build_report(gathered, summary, options.top, current, proposed, options.trace)
    )
    options.out.mkdir(parents=True, exist_ok=True)
    path = options.out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


if __name__ == "__main__":
    sys.exit(main())
