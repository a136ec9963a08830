"""One SparkSession for the whole pipeline test session: local[2], tiny shuffles, no UI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from leveret.pipeline import session as pipeline_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local Spark, shared by every pipeline test (starting one takes seconds)."""
    session = (
        SparkSession.builder.master("local[2]")
        .appName("leveret-pipeline-tests")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")  # tests listen on loopback only
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # Executors import pipeline/ and exchanges/ from the archive shipped here.
    pipeline_session.ship_packages(session.sparkContext)
    yield session
    session.stop()
