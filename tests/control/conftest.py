"""A broker started as a real process (``python -m leveret serve``) with a data directory,
and ``leveret ctl`` / ``leveret diagnostics`` run as real processes against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The tools read LEVERET_* variables: none of the caller's may leak in. The brokers keep
# rabbitmq_prometheus's port off, so that parallel tests never compete for 15692.
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")},
    "PYTHONPATH": str(ROOT),
    "LEVERET_PROMETHEUS_PORT": "-1",
}


def leveret(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m leveret ARGS`` as the ``leveret`` console script runs it."""
    return subprocess.run(
        [sys.executable, "-m", "leveret", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        check=False,
    )


@dataclass
class Node:
    """A running broker process and how to reach it."""

    proc: subprocess.Popen[bytes]
    data_dir: Path
    port: int = 0

    def ctl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``leveret ctl ARGS --data-dir DIR``."""
        return leveret("ctl", *args, "--data-dir", str(self.data_dir), stdin=stdin)

    def diagnostics(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``leveret diagnostics ARGS --data-dir DIR``."""
        return leveret("diagnostics", *args, "--data-dir", str(self.data_dir))

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "%2F") -> str:
        """An AMQP URL for pika."""
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/{vhost}"

    def rows(self, *args: str) -> list[dict[str, object]]:
        """A listing through ``--formatter json``."""
        result = self.ctl(*args, "--formatter", "json")
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)
        assert isinstance(rows, list)
        return rows


def start_node(data_dir: Path, *extra: str) -> Node:
    """``leveret serve`` on a free port with ``data_dir``, once ``diagnostics ping``
    answers (what the Docker healthcheck waits for)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            "0",
            "--management-port",
            "-1",
            "--data-dir",
            str(data_dir),
            "--log-level",
            "warning",
            *extra,
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    node = Node(proc, data_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode}: {proc.stderr!r}")
        if node.diagnostics("-q", "ping").returncode == 0:
            status = json.loads(node.ctl("status", "--formatter", "json").stdout)
            node.port = next(
                item["port"] for item in status["listeners"] if item["protocol"] == "amqp"
            )
            return node
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the broker's control socket never answered")


def stop_node(node: Node) -> None:
    """SIGTERM, then wait (kill if it hangs)."""
    if node.proc.poll() is None:
        node.proc.terminate()
        try:
            node.proc.wait(15)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(5)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One broker process for a test module."""
    started = start_node(tmp_path_factory.mktemp("ctl") / "data")
    try:
        yield started
    finally:
        stop_node(started)
