"""The Spark side of a job that is not the analysis: the session (settings sized for a short
local job, overridable with ``--conf``), the packages shipped to executors, and the trace
files listed and their dictionaries read through Spark's file systems."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import weakref
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit pipeline/job.py`: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import SparkContext
from pyspark.sql import SparkSession

from leveret.pipeline import inputs
from leveret.pipeline.topology import SourceError

log = logging.getLogger("leveret.pipeline")


# -- Spark -------------------------------------------------------------------------------------


def spark_session(
    master: str | None = None, conf: Mapping[str, str] | None = None, ui: bool = False
) -> SparkSession:
    """A SparkSession for a short job: ``local[*]`` unless a master is given or spark-submit
    chose one; no web UI unless ``ui``; every default overridable with ``conf``.

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
        # Python workers (distributed routing) must be this interpreter, not whatever
        # `python3` is on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("leveret-analyze")
    if master is not None:
        builder = builder.master(master)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "true" if ui else "false",
        # The distributed routing runs beside the pass: under FIFO its tasks would wait for
        # every task of the pass.
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(Path(__file__).with_name("fairscheduler.xml")),
        # Short jobs over small shuffles: adaptive execution coalesces what the size-based
        # partition counts (set per run, _Job.configure) overshoot.
        "spark.sql.adaptive.enabled": "true",
    }
    if master is not None and master.startswith("local"):
        # Aggregating allocates short-lived objects at a furious rate: the throughput
        # collector suits a batch job. (Under spark-submit the JVM is already running: pass
        # it there with --driver-java-options.)
        defaults["spark.driver.extraJavaOptions"] = "-XX:+UseParallelGC"
        # Everything runs in this process: listen on loopback only, not on the address the
        # host name resolves to (Spark warns about a loopback host name and picks eth0's).
        defaults["spark.driver.host"] = defaults["spark.driver.bindAddress"] = "127.0.0.1"
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if "spark.log.level" not in conf:  # spark-submit's console default is INFO: too chatty
        session.sparkContext.setLogLevel("WARN")
    return session


def executor_cores(session: SparkSession) -> int:
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

    Executors that route (many distinct keys) unpickle the routing closure, which imports both
    packages; on a cluster (or under ``spark-submit`` from another directory) they are not
    installed there.
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


def _hadoop_fs(spark: SparkSession, url: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(url)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def list_urls(spark: SparkSession, traces: inputs.Traces) -> None:
    """Add the trace files of ``traces.urls`` (``hdfs://``, ``s3a://``, ``file:/``), listed
    through Hadoop's file system, to ``traces``."""
    for url in traces.urls:
        fs, path = _hadoop_fs(spark, url)
        patterns = (
            [path.suffix("/trace-*.parquet"), path.suffix("/trace-*.jsonl*")]
            if fs.isDirectory(path)
            else [path]
        )
        found = sorted(
            str(status.getPath().toString())
            for pattern in patterns
            for status in fs.globStatus(pattern) or []
        )
        if not found:
            raise SourceError(f"--trace {url}: no trace files at {path.toString()}")
        for file in found:
            if file.endswith(".parquet"):
                dictionary_fs, dictionary = _hadoop_fs(spark, inputs.dictionary_path(file))
                if not dictionary_fs.exists(dictionary):
                    raise SourceError(f"--trace {file}: its dictionary is missing")
                traces.segments.append(file)
            else:
                traces.jsonl.append(file)
    traces.urls.clear()


def read_dictionaries(spark: SparkSession, segments: Sequence[str]) -> tuple[Any, Any]:
    """The segments' dictionaries (:func:`leveret.pipeline.inputs.read_dictionaries`): on the
    driver for local files, through Spark for URLs."""
    remote = [s for s in segments if inputs.is_url(s)]
    keys, sets = inputs.read_dictionaries([s for s in segments if not inputs.is_url(s)])
    if remote:
        table = spark.read.parquet(*(inputs.dictionary_path(s) for s in remote)).toArrow()
        more_keys, more_sets = inputs.split_dictionary(table, "--trace")
        keys = inputs.distinct_ids([keys, more_keys], inputs.KEYS_ARROW)
        sets = inputs.distinct_ids([sets, more_sets], inputs.SETS_ARROW)
    return keys, sets
