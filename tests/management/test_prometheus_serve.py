"""`leveret serve --prometheus-port`: the listener of a broker run from the command line,
and a port that cannot be bound (one line, exit 1, as for the other listeners)."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.test_cli import free_port, wait_listening

from .prometheus_families import families

ROOT = Path(__file__).resolve().parents[2]


def serve(*flags: str) -> subprocess.Popen[bytes]:
    """``python -m leveret serve`` on a free AMQP port with ``flags``."""
    return subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--management-port", "-1", *flags],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_serve_with_prometheus_port(tmp_path: Path) -> None:
    amqp, metrics = free_port(), free_port()
    proc = serve("--port", str(amqp), "--prometheus-port", str(metrics), "--log-level", "warning")
    try:
        wait_listening(amqp, proc)
        wait_listening(metrics, proc)  # the listeners start in turn: AMQP first
        url = f"http://127.0.0.1:{metrics}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"] == "text/plain; version=0.0.4"
            plain = response.read().decode()
        assert "rabbitmq_connections" in families(plain)
        # Prometheus asks for gzip, and gets it, as from rabbitmq_prometheus.
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            unpacked = gzip.decompress(response.read()).decode()
        assert 'encoding="identity"' in unpacked  # the scrape before was sent as it was
        assert set(families(unpacked)) == set(families(plain))
    finally:
        proc.terminate()
        proc.wait(15)


def test_busy_prometheus_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve("--port", "0", "--prometheus-port", str(port))
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    lines = err.decode().strip().splitlines()
    assert lines[-1] == f"leveret: error: cannot listen on 127.0.0.1:{port}: address already in use"
    assert "Traceback" not in err.decode()
