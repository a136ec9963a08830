"""The analysis job: extract, transform, load, and its command line.

::

    spark-submit pipeline/job.py --trace DIR --topology SOURCE [--proposed SOURCE] --out DIR
    python -m leveret.pipeline.job       (same options; --master and --conf k=v pick the cluster)
    leveret analyze ...          (the broker's CLI: also takes a Leveret data dir as SOURCE)

SOURCE is ``leveret log dump`` output or a RabbitMQ ``definitions.json``. For a Leveret data
dir under ``spark-submit``, run ``leveret log dump --data-dir DIR > topology.jsonl`` first.

* **Extract**: read the trace's JSON lines with an explicit schema: when every trace file has
  its key index (schema version 2), only ``ts``, ``id``, ``size`` and ``mode`` of each line
  (:func:`extract_messages`) and the index (:func:`extract_index`); otherwise every field of
  every line (:func:`extract_trace`). Read the topology sources on the driver.
* **Transform** (:mod:`leveret.pipeline.transforms`): aggregate by key and minute (the one pass over
  the trace) while, on a second driver thread, the indexed keys are routed once each with the
  broker's route function; join the counts back, build the reports.
* **Load** (:func:`table_writers`, :func:`write_report`): Parquet tables under ``OUT/``, plus
  ``OUT/report.html`` and ``OUT/summary.json``.

Local mode (``local[*]``) is the default; under ``spark-submit`` its ``--master`` rules.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
import weakref
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit pipeline/job.py`: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from leveret.pipeline import collect, transforms
from leveret.pipeline import report as html_report
from leveret.pipeline.cli import JobOptions, add_arguments, options_from_args
from leveret.pipeline.progress import Progress
from leveret.pipeline.schema import KEYS_SCHEMA, MESSAGE_SCHEMA, SUPPORTED_VERSIONS, TRACE_SCHEMA
from leveret.pipeline.topology import SourceError, Topology, load

log = logging.getLogger("leveret.pipeline")

# Tables small enough to write as one file each.
SMALL_TABLES = frozenset(
    {"exchanges", "fanout", "rates", "unroutable", "whatif_summary", "whatif_unroutable"}
)
KEYS_PER_ROUTING_PARTITION = 20_000
# Spark queries the driver runs at once after the pass over the trace: the tables and the
# report's rows are small, so each query is mostly driver-side latency (planning, task
# launch, committing files) that overlaps well.
CONCURRENT_QUERIES = 8


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
    """Run from parsed arguments and return an exit status (for ``leveret analyze``).

    ``topology``/``proposed``: dump objects (``leveret.storage.records.event_to_json``) to use
    instead of reading ``args.topology``/``args.proposed`` as files.
    """
    _configure_logging()
    try:
        summary = run(options_from_args(args, topology, proposed))
    except SourceError as exc:
        log.error("%s", exc)
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


# -- Spark -------------------------------------------------------------------------------------


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession: ``local[*]`` unless a master is given or spark-submit chose one.

    An active session (a test's, or a notebook's) is used as it is: only the ``spark.sql.*``
    options of ``conf`` are applied to it, since the others need a new SparkContext.
    """
    conf = dict(conf or {})
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in conf.items():
            if key.startswith("spark.sql."):
                active.conf.set(key, value)
            else:
                log.warning("Spark option %s ignored: a Spark session is already running", key)
        return active
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    if master is not None and master.startswith("local"):
        # Python workers run the routing: make them this interpreter (the default is
        # whatever `python3` is on PATH, which may lack a matching Python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("leveret-analyze")
    if master is not None:
        builder = builder.master(master)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # The trace pass and the routing run as two jobs at once: under FIFO the routing's
        # tasks would wait for every task of the pass (see _Job.indexed_pass).
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(Path(__file__).with_name("fairscheduler.xml")),
    }
    if master is not None and master.startswith("local"):
        # Parsing JSON allocates short-lived objects at a furious rate: the throughput
        # collector reads a 10M-line trace ~15 % faster than G1 here. (Under spark-submit
        # the JVM is already running: pass it there with --driver-java-options.)
        defaults["spark.driver.extraJavaOptions"] = "-XX:+UseParallelGC"
        # Everything runs in this process: listen on loopback only, not on the address the
        # host name resolves to (Spark warns about a loopback host name and picks eth0's).
        defaults["spark.driver.host"] = defaults["spark.driver.bindAddress"] = "127.0.0.1"
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if "spark.sql.shuffle.partitions" not in conf:
        # The aggregates are small (key-minute groups): a few partitions per core, not
        # Spark's 200, which on a small cluster cost more in task launches than the work.
        session.conf.set("spark.sql.shuffle.partitions", str(2 * _cores(session)))
    if "spark.log.level" not in conf:  # spark-submit's console default is INFO: too chatty
        session.sparkContext.setLogLevel("WARN")
    return session


def _cores(session: SparkSession) -> int:
    """Cores the job can count on: a local master's, or a cluster's default parallelism.

    On a cluster that is the executors' cores registered so far (at least 2): executors that
    join later only get more partitions per core.
    """
    master = session.sparkContext.master or ""
    if master.startswith("local"):
        return _local_cores(master)
    return max(2, session.sparkContext.defaultParallelism)


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]`` or ``local[*]`` master."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0]
    return (os.cpu_count() or 1) if count == "*" else max(1, int(count))


_SHIPPED: weakref.WeakSet[SparkContext] = weakref.WeakSet()


def ship_packages(sc: SparkContext) -> None:
    """Send the ``leveret.pipeline`` and ``leveret.exchanges`` sources to the executors (once
    per context), with the namespace's ``__init__`` that importing them runs first.

    Executors unpickle the routing closure, which imports both packages; on a cluster (or
    under ``spark-submit`` from another directory) they are not installed there.
    """
    if sc in _SHIPPED:
        return
    import leveret
    import leveret.exchanges
    import leveret.pipeline

    init = Path(leveret.__file__ or "")
    sources = [(init, Path("leveret", init.name))]
    for package in (leveret.exchanges, leveret.pipeline):
        root = Path(package.__file__ or "").parent
        prefix = Path(*package.__name__.split("."))
        sources += [(source, prefix / source.relative_to(root)) for source in root.rglob("*.py")]
    sources.sort(key=lambda pair: str(pair[1]))
    digest = hashlib.sha256()
    for source, name in sources:
        digest.update(str(name).encode() + b"\0" + source.read_bytes())
    # One archive per version of the sources, reused by every run (nothing to clean up).
    path = Path(tempfile.gettempdir()) / f"leveret-pipeline-{digest.hexdigest()[:16]}.zip"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for source, name in sources:
                archive.write(source, name)
        os.replace(partial, path)  # atomic: a concurrent run sees all of it or nothing
    sc.addPyFile(str(path))
    _SHIPPED.add(sc)


# -- extract -----------------------------------------------------------------------------------


def trace_paths(paths: Iterable[str], spark: SparkSession | None = None) -> list[str]:
    """Input files for Spark: a directory means its ``trace-*.jsonl*`` files.

    Local paths are checked here (Spark's own error for an empty glob is obscure). A URL
    (``hdfs://``, ``s3a://``) is expanded the same way through Hadoop's file system when a
    session is given, and goes to Spark as it is otherwise.
    """
    out: list[str] = []
    for path in paths:
        if _is_url(path):
            out.extend(_hadoop_traces(spark, path) if spark is not None else [path])
            continue
        pattern = os.path.join(path, "trace-*.jsonl*") if os.path.isdir(path) else path
        found = sorted(glob.glob(pattern))
        if not found:
            raise SourceError(f"no trace files at {pattern}")
        out.extend(found)
    return out


def _is_url(path: str) -> bool:
    """``hdfs://...``, ``s3a://...``, and Hadoop's own ``file:/...`` spelling."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", path) is not None


def _hadoop_fs(spark: SparkSession, url: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(url)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def _hadoop_traces(spark: SparkSession, url: str) -> list[str]:
    fs, path = _hadoop_fs(spark, url)
    if fs.isDirectory(path):
        path = path.suffix("/trace-*.jsonl*")
    found = sorted(str(status.getPath().toString()) for status in fs.globStatus(path) or [])
    if not found:
        raise SourceError(f"no trace files at {path.toString()}")
    return found


def index_paths(files: Sequence[str], spark: SparkSession | None = None) -> list[str] | None:
    """The key index (``keys-*``) of every trace file (``trace-*``), or None if one has none."""
    out = []
    for file in files:
        head, _, name = file.rpartition("/")
        if not name.startswith("trace-"):
            return None
        index = f"{head}/keys-{name[len('trace-') :]}" if head else f"keys-{name[6:]}"
        if _is_url(index):
            if spark is None:
                return None
            fs, path = _hadoop_fs(spark, index)
            if not fs.exists(path):
                return None
        elif not os.path.exists(index):
            return None
        out.append(index)
    return out


def extract_trace(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Trace lines read whole: every field of every line (:data:`~pipeline.schema.TRACE_SCHEMA`)."""
    return spark.read.schema(TRACE_SCHEMA).json(list(files))


def extract_messages(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Version 2 message lines, only what the aggregation needs (:data:`MESSAGE_SCHEMA`)."""
    return spark.read.schema(MESSAGE_SCHEMA).json(list(files))


def extract_index(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Version 2 key index lines (:data:`~pipeline.schema.KEYS_SCHEMA`)."""
    return spark.read.schema(KEYS_SCHEMA).json(list(files))


# -- the job -----------------------------------------------------------------------------------


@dataclass
class Pass:
    """What the pass over the trace produced (every frame cached)."""

    counts: DataFrame  # schema_version, id, minute, messages, bytes, persistent
    keys: DataFrame  # id, vhost, exchange, routing_key, headers, recorded
    routes: DataFrame  # leveret.pipeline.schema.ROUTE_SCHEMA, one row per distinct key
    messages: int
    groups: int
    key_count: int


class _Job:
    """One run's state: the session, the options, the topologies, the frames to unpersist."""

    def __init__(self, spark: SparkSession, options: JobOptions, progress: Progress) -> None:
        self.spark = spark
        self.options = options
        self.progress = progress
        self.cached: list[DataFrame] = []
        self._saved: dict[str, str | None] = {}
        self.current: Topology | None = None
        self.proposed: Topology | None = None
        self.topology_tables: dict[str, DataFrame] = {}

    # -- session and cache

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

    def configure(self, **settings: str) -> None:
        """Set SQL options for this run (``a_b`` means ``spark.sql.a.b``); :meth:`restore`
        puts the session's own values back."""
        conf = self.spark.conf
        for name, value in settings.items():
            key = "spark.sql." + name.replace("_", ".")
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

    # -- stages

    def read_topology(self) -> None:
        """The current (and proposed) topology, on the driver, and its small tables."""
        with self.progress.stage("read the topology") as done:
            self.current = load(self.options.topology)
            done.append(f"current: {self.current.describe()}")
            if self.options.proposed is not None:
                self.proposed = load(self.options.proposed)
                done.append(f"proposed: {self.proposed.describe()}")
            self.topology_tables = transforms.topology_tables(self.spark, self.current)

    def route(self, keys: DataFrame, done: list[str]) -> tuple[DataFrame, int]:
        """Route every distinct key of ``keys`` once; returns (routes, distinct keys)."""
        sc = self.spark.sparkContext
        distinct = self.keep(transforms.distinct_keys(keys))
        key_count = distinct.count()
        partitions = max(
            1, min(sc.defaultParallelism * 4, math.ceil(key_count / KEYS_PER_ROUTING_PARTITION))
        )
        assert self.current is not None
        routes = transforms.route_keys(
            distinct,
            sc.broadcast(self.current),
            sc.broadcast(self.proposed) if self.proposed is not None else None,
            bindings=self.options.bindings,
            partitions=partitions,
        )
        routes = self.keep(routes)
        routes.count()
        done.append(f"{key_count:,} distinct keys in {partitions} partition(s)")
        return routes, key_count

    def _keys(self, keys: DataFrame) -> DataFrame:
        if self.options.recorded:
            return keys
        return keys.withColumn("recorded", sf.lit(None).cast("array<string>"))

    def indexed_pass(self, files: Sequence[str], index: Sequence[str]) -> Pass:
        """Count the message lines by key id and minute while, on the driver's other thread,
        the topology is read and the index's keys are routed: the count keeps the cores busy,
        the rest is mostly driver work and waiting."""

        sc = self.spark.sparkContext
        group = f"leveret-count-{id(self)}"

        def count() -> tuple[DataFrame, int, int]:
            sc.setJobGroup(group, "count the trace by key id and minute", interruptOnCancel=True)
            with self.progress.stage("count the trace by key id and minute") as done:
                counts = transforms.aggregate_indexed(extract_messages(self.spark, files))
                counts = self.keep(counts)
                messages, groups = _check_versions(transforms.versions(counts).collect())
                done.append(f"{messages:,} messages in {groups:,} key-minute groups")
                return counts, messages, groups

        with ThreadPoolExecutor(1) as pool:
            counting = pool.submit(count)
            # Its own scheduler pool, so that (under FAIR scheduling) the routing's tasks take
            # the next free core instead of queueing behind every task of the count.
            sc.setLocalProperty("spark.scheduler.pool", "leveret-route")
            try:
                self.read_topology()
                with self.progress.stage("read the key index, route each distinct key") as done:
                    keys = self.keep(transforms.index_keys(extract_index(self.spark, index)))
                    routes, key_count = self.route(keys, done)
            except BaseException:
                sc.cancelJobGroup(group)  # a bad topology: do not wait for the whole count
                raise
            finally:
                sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
            counts, messages, groups = counting.result()
        return Pass(counts, self._keys(keys), routes, messages, groups, key_count)

    def full_pass(self, files: Sequence[str]) -> Pass:
        """Aggregate the trace read whole, then route its distinct keys."""
        self.read_topology()
        with self.progress.stage("aggregate the trace by key and minute") as done:
            trace = extract_trace(self.spark, files)
            groups_frame = self.keep(transforms.aggregate(trace, recorded=self.options.recorded))
            counts, keys = transforms.split_groups(groups_frame)
            messages, groups = _check_versions(transforms.versions(counts).collect())
            keys = self.keep(keys)
            done.append(f"{messages:,} messages in {groups:,} key-minute groups (every field)")
        with self.progress.stage(
            "route each distinct key with leveret.exchanges.routing.route"
        ) as done:
            routes, key_count = self.route(keys, done)
        return Pass(counts, keys, routes, messages, groups, key_count)

    def routed(self, result: Pass) -> DataFrame:
        """Per key: totals and routes (the ``keys`` table), cached."""
        totals = transforms.key_totals(result.counts, result.keys)
        return self.keep(transforms.with_routes(totals, result.routes))


class IndexMismatchError(Exception):
    """The key index does not account for every message line of the trace."""

    def __init__(self, indexed: int, lines: int) -> None:
        super().__init__(f"the key index accounts for {indexed:,} of {lines:,} messages")


def run(options: JobOptions, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run the whole job; returns the summary (also written to ``OUT/summary.json``).

    A trace whose key index does not match its lines (a damaged or hand-edited index) is
    read again whole, with a warning.
    """
    if spark is None:
        spark = spark_session(options.master, options.conf)
    try:
        return _run(options, spark)
    except IndexMismatchError as exc:
        log.warning("%s: reading every field of every line instead", exc)
        return _run(replace(options, index=False), spark)


def _run(options: JobOptions, spark: SparkSession) -> dict[str, Any]:
    started = time.perf_counter()
    sc = spark.sparkContext
    ship_packages(sc)
    progress = Progress(sc, stages=5 if options.report else 4, interval=options.progress_interval)
    summary: dict[str, Any] = {"trace": list(options.trace), "out": str(options.out)}
    state = _Job(spark, options, progress)
    try:
        # Every shuffle of this job is small (groups, keys): adaptive execution only adds a
        # Spark job per stage.
        state.configure(adaptive_enabled="false")
        files = trace_paths(options.trace, spark)
        index = index_paths(files, spark) if options.index else None
        log.info(
            "%d trace file(s), %s",
            len(files),
            "each with its key index" if index is not None else "read whole (no key index)",
        )
        summary["indexed"] = index is not None
        result = state.indexed_pass(files, index) if index else state.full_pass(files)
        # After the pass, every table is small: one shuffle partition per query, and a few
        # queries at a time (run_all).
        state.configure(shuffle_partitions="1")
        routed = state.routed(result)
        assert state.current is not None
        current, proposed = state.current, state.proposed

        routed_minutes = transforms.minute_routes(result.counts, result.keys, result.routes)
        tables = transforms.reports(
            routed,
            routed_minutes,
            state.topology_tables,
            result.messages,
            whatif=proposed is not None,
            bindings=options.bindings,
        )
        for name, frame in tables.items():  # every table is an aggregate: keep it for the report
            if not frame.is_cached:
                tables[name] = state.keep(frame)

        with progress.stage(f"write {len(tables)} Parquet tables, gather the report") as done:
            writes = table_writers(tables, options.out)
            queries = collect.queries(tables, options.top)
            results = run_all([*writes, *queries.values()])
            rows = dict(zip(queries, results[len(writes) :], strict=True))
            gathered = collect.assemble(rows)
            summary.update(collect.summarise(gathered))
            if summary["messages"] != result.messages and index is not None:
                # Lines whose key id the index lacks, or an id the index gives two keys:
                # a damaged index. The trace itself is fine: read it whole.
                raise IndexMismatchError(summary["messages"], result.messages)
            summary.update(distinct_keys=result.key_count, key_minute_groups=result.groups)
            summary["notes"] = list(current.notes) + list(proposed.notes if proposed else ())
            done.append(
                f"{summary['messages']:,} messages, {summary['unroutable_messages']:,} unroutable"
            )

        if options.report:
            with progress.stage("write the HTML report") as done:
                path = write_report(gathered, summary, options, current, proposed)
                done.append(str(path))
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


def run_all(tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run Spark actions from ``CONCURRENT_QUERIES`` driver threads; results in task order."""
    if len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(min(CONCURRENT_QUERIES, len(tasks))) as pool:
        return list(pool.map(lambda task: task(), tasks))


def _check_versions(rows: Sequence[Any]) -> tuple[int, int]:
    """Refuse trace versions this pipeline cannot read; return (messages, groups)."""
    unknown = sorted(
        row["schema_version"]
        for row in rows
        if row["schema_version"] is not None and row["schema_version"] not in SUPPORTED_VERSIONS
    )
    if unknown:
        raise SourceError(
            f"trace schema version(s) {unknown} are newer than this pipeline reads "
            f"({sorted(SUPPORTED_VERSIONS)}): upgrade Leveret"
        )
    return sum(row["messages"] for row in rows), sum(row["groups"] for row in rows)


def _headline(summary: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("messages", "unroutable_messages", "distinct_keys", "seconds", "messages_per_second")
    return {k: summary.get(k) for k in keys} | {"out": summary.get("out")}


# -- load --------------------------------------------------------------------------------------


def table_writers(tables: Mapping[str, DataFrame], out: Path) -> list[Callable[[], None]]:
    """One task per table: write it as Parquet under ``out/<name>/`` (replacing earlier
    results). Run them with :func:`run_all`."""

    def writer(name: str, frame: DataFrame) -> Callable[[], None]:
        def write() -> None:
            started = time.perf_counter()
            data = frame.coalesce(1) if name in SMALL_TABLES else frame
            data.write.mode("overwrite").parquet(str(out / name))
            log.info("    %s (%.1f s)", name, time.perf_counter() - started)

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
