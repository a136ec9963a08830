"""The analysis job: extract, transform, load, and its command line.

::

    spark-submit pipeline/job.py --trace DIR --topology SOURCE [--proposed SOURCE] --out DIR
    python -m pipeline.job       (same options; --master and --conf k=v pick the cluster)
    leveret analyze ...          (the broker's CLI: also takes a Leveret data dir as SOURCE)

SOURCE is ``leveret log dump`` output or a RabbitMQ ``definitions.json``. For a Leveret data
dir under ``spark-submit``, run ``leveret log dump --data-dir DIR > topology.jsonl`` first.

* **Extract** (:func:`extract_trace`): read the trace's JSON lines with an explicit schema;
  read the topology sources on the driver.
* **Transform** (:mod:`pipeline.transforms`): aggregate by key and minute (the one pass over
  the trace), route each distinct key once with the broker's route function, join the counts
  back, build the reports.
* **Load** (:func:`load_tables`, :func:`write_report`): Parquet tables under ``OUT/``, plus
  ``OUT/report.html`` and ``OUT/summary.json``.

Local mode (``local[*]``) is the default; under ``spark-submit`` its ``--master`` rules.
"""

from __future__ import annotations

import argparse
import atexit
import glob
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import weakref
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit pipeline/job.py`: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession

from pipeline import collect, transforms
from pipeline import report as html_report
from pipeline.cli import JobOptions, add_arguments, options_from_args
from pipeline.progress import Progress
from pipeline.schema import SUPPORTED_VERSIONS, TRACE_SCHEMA
from pipeline.topology import SourceError, Topology, load

log = logging.getLogger("leveret.pipeline")

# Tables small enough to write as one file each.
SMALL_TABLES = frozenset(
    {"exchanges", "fanout", "rates", "unroutable", "whatif_summary", "whatif_unroutable"}
)
KEYS_PER_ROUTING_PARTITION = 20_000


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

    ``topology``/``proposed``: dump objects (``storage.records.event_to_json``) to use instead
    of reading ``args.topology``/``args.proposed`` as files.
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
    """``spark-submit pipeline/job.py ...`` / ``python -m pipeline.job ...``."""
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
    defaults = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}
    if master is not None and master.startswith("local"):
        # Parsing JSON allocates short-lived objects at a furious rate: the throughput
        # collector reads a 10M-line trace ~15 % faster than G1 here. (Under spark-submit
        # the JVM is already running: pass it there with --driver-java-options.)
        defaults["spark.driver.extraJavaOptions"] = "-XX:+UseParallelGC"
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    running = session.sparkContext.master or ""
    if running.startswith("local") and "spark.sql.shuffle.partitions" not in conf:
        # The aggregates are small: a few partitions per core, not Spark's 200.
        session.conf.set("spark.sql.shuffle.partitions", str(2 * _local_cores(running)))
    if "spark.log.level" not in conf:  # spark-submit's console default is INFO: too chatty
        session.sparkContext.setLogLevel("WARN")
    return session


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]`` or ``local[*]`` master."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0]
    return (os.cpu_count() or 1) if count == "*" else max(1, int(count))


_SHIPPED: weakref.WeakSet[SparkContext] = weakref.WeakSet()


def ship_packages(sc: SparkContext) -> None:
    """Send the ``pipeline`` and ``exchanges`` sources to the executors (once per context).

    Executors unpickle the routing closure, which imports both packages; on a cluster (or
    under ``spark-submit`` from another directory) they are not installed there.
    """
    if sc in _SHIPPED:
        return
    import exchanges
    import pipeline

    directory = tempfile.mkdtemp(prefix="leveret-pyfiles-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = Path(directory) / "leveret_pipeline.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in (exchanges, pipeline):
            root = Path(package.__file__ or "").parent
            for source in sorted(root.rglob("*.py")):
                archive.write(source, source.relative_to(root.parent))
    sc.addPyFile(str(path))
    _SHIPPED.add(sc)


# -- extract -----------------------------------------------------------------------------------


def trace_paths(paths: Iterable[str]) -> list[str]:
    """Input files for Spark: a directory means its ``trace-*.jsonl*`` files.

    Local paths are checked here (Spark's own error for an empty glob is obscure); URLs
    (``hdfs://``, ``s3a://``) go to Spark as they are.
    """
    out: list[str] = []
    for path in paths:
        if "://" in path:
            out.append(path)
            continue
        pattern = os.path.join(path, "trace-*.jsonl*") if os.path.isdir(path) else path
        found = sorted(glob.glob(pattern))
        if not found:
            raise SourceError(f"no trace files at {pattern}")
        out.extend(found)
    return out


def extract_trace(spark: SparkSession, paths: Iterable[str]) -> DataFrame:
    """The trace lines as a DataFrame with :data:`~pipeline.schema.TRACE_SCHEMA`."""
    return spark.read.schema(TRACE_SCHEMA).json(trace_paths(paths))


# -- the job -----------------------------------------------------------------------------------


def run(options: JobOptions, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run the whole job; returns the summary (also written to ``OUT/summary.json``)."""
    started = time.perf_counter()
    if spark is None:
        spark = spark_session(options.master, options.conf)
    sc = spark.sparkContext
    ship_packages(sc)
    whatif = options.proposed is not None
    progress = Progress(sc, stages=6 if options.report else 5, interval=options.progress_interval)
    summary: dict[str, Any] = {"trace": list(options.trace), "out": str(options.out)}
    cached: list[DataFrame] = []
    try:
        with progress.stage("read the topology") as done:
            current = load(options.topology)
            proposed = load(options.proposed) if options.proposed is not None else None
            done.append(f"current: {current.describe()}")
            if proposed is not None:
                done.append(f"proposed: {proposed.describe()}")
            topo_tables = transforms.topology_tables(spark, current)

        with progress.stage("aggregate the trace by key and minute") as done:
            trace = extract_trace(spark, options.trace)
            aggregated = transforms.aggregate(trace, recorded=options.recorded)
            aggregated = aggregated.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(aggregated)
            messages, groups = _check_versions(transforms.versions(aggregated).collect())
            done.append(f"{messages:,} messages in {groups:,} key-minute groups")

        with progress.stage("route distinct keys with exchanges.routing.route") as done:
            totals = transforms.key_totals(aggregated).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(totals)
            keys = transforms.distinct_keys(totals)
            key_count = keys.count()
            partitions = max(
                1, min(sc.defaultParallelism * 4, math.ceil(key_count / KEYS_PER_ROUTING_PARTITION))
            )
            routes = transforms.route_keys(
                keys,
                sc.broadcast(current),
                sc.broadcast(proposed) if proposed is not None else None,
                bindings=options.bindings,
                partitions=partitions,
            ).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(routes)
            routes.count()
            done.append(f"{key_count:,} distinct keys in {partitions} partition(s)")

        routed = transforms.with_routes(totals, routes).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(routed)
        routed_minutes = transforms.with_routes(aggregated, routes)
        tables = transforms.reports(routed, routed_minutes, topo_tables, messages, whatif=whatif)
        if not options.bindings:
            del tables["bindings"]
        for name, frame in tables.items():  # every table is an aggregate: keep it for the report
            if not frame.is_cached:
                tables[name] = frame.persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(tables[name])

        with progress.stage(f"write {len(tables)} Parquet tables to {options.out}") as done:
            load_tables(tables, options.out)
            done.append(", ".join(tables))

        with progress.stage("summarise") as done:
            gathered = collect.gather(tables, options.top)
            summary.update(collect.summarise(gathered))
            summary.update(distinct_keys=key_count, key_minute_groups=groups)
            summary["notes"] = list(current.notes) + list(proposed.notes if proposed else ())
            done.append(
                f"{summary['messages']:,} messages, {summary['unroutable_messages']:,} unroutable"
            )

        if options.report:
            with progress.stage("write the HTML report") as done:
                path = write_report(gathered, summary, options, current, proposed)
                done.append(str(path))
    finally:
        for frame in cached:
            frame.unpersist()
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


def load_tables(tables: Mapping[str, DataFrame], out: Path) -> None:
    """Write every table as Parquet under ``out/<name>/`` (replacing earlier results)."""
    for name, frame in tables.items():
        started = time.perf_counter()
        if name in SMALL_TABLES:
            frame = frame.coalesce(1)
        frame.write.mode("overwrite").parquet(str(out / name))
        log.info("    %s (%.1f s)", name, time.perf_counter() - started)


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
