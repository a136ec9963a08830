"""The same job on a Spark cluster: a standalone master and worker, executors in their own JVMs.

The cluster is Spark's own standalone one (``spark-class ...Master`` and ``...Worker``, from
the PySpark install), on 127.0.0.1. Its executors run Python from a virtual environment that
has PySpark but not Leveret, as a cluster node would: the routing there can only import
``pipeline`` and ``exchanges`` from the archive the driver ships (``job.ship_packages``).
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

SPARK_HOME = Path(__import__("pyspark").__file__).parent
BIN = Path(sys.executable).parent

# A master, a worker, an executor and the driver: four JVMs.
pytestmark = pytest.mark.timeout(300)


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
    """A standalone master with one worker (2 cores); yields its URL and the worker's dir."""
    root = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    daemons = {
        "master": [
            *(spark_class, "org.apache.spark.deploy.master.Master"),
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"),
        ],
        "worker": [
            *(spark_class, "org.apache.spark.deploy.worker.Worker", url),
            *("--host", "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", "0"),
            *("--work-dir", str(root / "work")),
        ],
    }
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
        _wait_for(root / "worker.log", "Successfully registered with master", running[1], 120)
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

    data_dir, trace_dir, out = tmp_path / "data", tmp_path / "trace", tmp_path / "out"
    record_traffic(data_dir, trace_dir)
    done = subprocess.run(
        [
            str(BIN / "leveret"),
            "analyze",
            *("--trace", str(trace_dir), "--topology", str(data_dir), "--out", str(out)),
            *("--master", url, "--conf", "spark.ui.enabled=false"),
            *("--conf", "spark.executor.memory=512m"),
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
    queues = spark.read.parquet(str(out / "queues")).collect()
    assert {row["queue"]: row["messages"] for row in queues} == EXPECTED_QUEUES
    # The routing ran in the worker's executor, from the archive the driver shipped.
    (app,) = work.iterdir()
    assert list(app.glob("*/leveret-pipeline-*.zip"))
    assert "Running task" in (app / "0" / "stderr").read_text()
