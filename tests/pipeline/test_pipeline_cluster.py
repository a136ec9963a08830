"""The same job on a Spark cluster: a standalone master and two workers, executors in their
own JVMs, and the same tables as a local run.

The cluster is Spark's own standalone one (``spark-class ...Master`` and ``...Worker``, from
the PySpark install), on 127.0.0.1. Its executors run Python from a virtual environment that
has PySpark but not Leveret, as a cluster node would: when they route (many keys: forced
here with ``--driver-keys 0``) they can only import ``pipeline`` and ``exchanges`` from the
archive the driver ships (``leveret.pipeline.session.ship_packages``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_traffic import EXPECTED_QUEUES, EXPECTED_UNROUTABLE, PUBLISHED, record_traffic
from pyspark.sql import SparkSession

from leveret.pipeline import job
from leveret.storage.logtools import read_log
from leveret.storage.records import event_to_json

SPARK_HOME = Path(__import__("pyspark").__file__).parent
BIN = Path(sys.executable).parent

# A master, two workers, their executors and the driver: six JVMs, three runs.
pytestmark = pytest.mark.timeout(420)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _spark_env() -> dict[str, str]:
    # Every daemon and the driver bind to loopback, and the master's REST server stays off.
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A standalone master with two workers (one core each); yields its URL and the
    workers' directory."""
    root = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    daemons = {
        "master": [
            *(spark_class, "org.apache.spark.deploy.master.Master"),
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"),
        ],
    }
    for worker in ("worker1", "worker2"):
        daemons[worker] = [
            *(spark_class, "org.apache.spark.deploy.worker.Worker", url),
            *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"),
            *("--work-dir", str(root / "work" / worker)),
        ]
    running: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in daemons.items():
            with (root / f"{name}.log").open("wb") as log:
                running.append(
                    subprocess.Popen(
                        argv,
                        env=_spark_env(),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # the worker's executors go with it
                    )
                )
        for name, process in zip(daemons, running, strict=True):
            if name != "master":
                _wait_for(root / f"{name}.log", "Successfully registered with master", process, 120)
        yield url, root / "work"
    finally:
        for process in reversed(running):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def _python_without_leveret(root: Path) -> Path:
    """A virtual environment that sees this one's packages but not the editable Leveret.

    A ``.pth`` line puts the site-packages directory on ``sys.path``; the ``.pth`` files in it
    (the editable install's finder among them) are not processed.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    (site / "parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root / "bin" / "python"


def _tables(spark: SparkSession, out: Path) -> dict[str, list[str]]:
    return {
        path.name: sorted(map(repr, spark.read.parquet(str(path)).collect()))
        for path in sorted(out.iterdir())
        if path.is_dir()
    }


def test_leveret_analyze_on_a_standalone_cluster(
    cluster: tuple[str, Path], spark: SparkSession, tmp_path: Path
) -> None:
    url, work = cluster
    executor_python = _python_without_leveret(tmp_path / "executor-venv")
    for module, importable in (("pyspark", True), ("exchanges", False), ("pipeline", False)):
        probe = subprocess.run(
            [str(executor_python), "-c", f"import {module}"], cwd=tmp_path, check=False
        )
        assert (probe.returncode == 0) is importable, module

    data_dir, trace_dir = tmp_path / "data", tmp_path / "trace"
    record_traffic(data_dir, trace_dir)
    local_out = tmp_path / "local"
    argv = ["--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(local_out)]
    dump = [event_to_json(vhost, event) for vhost, event in read_log(data_dir / "definitions.log")]
    assert job.run_args(job.build_parser().parse_args(argv), topology=dump) == 0
    expected = _tables(spark, local_out)
    assert len(expected) == 9

    # The usual way (routes and tables on the driver, the pass on the executors), then with
    # the routing in the executors' Python and the tables as Spark queries.
    for name, flags in (
        ("cluster", []),
        ("in-spark", ["--driver-keys", "0", "--driver-groups", "0"]),
    ):
        out = tmp_path / name
        done = subprocess.run(
            [
                str(BIN / "leveret"),
                "analyze",
                *("--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out)),
                *("--master", url, "--conf", "spark.executor.memory=512m", *flags),
            ],
            cwd=tmp_path,
            env={**_spark_env(), "PYSPARK_PYTHON": str(executor_python)},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["messages"] == sum(n for n, *_ in PUBLISHED)
        assert summary["unroutable_messages"] == EXPECTED_UNROUTABLE
        assert summary["tables_on"] == ("spark" if flags else "driver")
        queues = spark.read.parquet(str(out / "queues")).collect()
        assert {row["queue"]: row["messages"] for row in queues} == EXPECTED_QUEUES
        assert _tables(spark, out) == expected, name

    # Both workers ran executors, and the routing ran in them, from the archive the driver
    # shipped.
    apps = sorted(work.glob("worker*/app-*"))
    assert {path.parent.name for path in apps} == {"worker1", "worker2"}
    assert any(list(app.glob("*/leveret-pipeline-*.zip")) for app in apps)
    stderr = "".join(p.read_text() for p in work.glob("worker*/app-*/*/stderr"))
    assert "Running task" in stderr
