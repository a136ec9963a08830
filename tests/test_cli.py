"""The command line: ``leveret serve`` / ``python -m leveret serve`` in a real subprocess,
graceful shutdown on SIGTERM and SIGINT (Connection.Close 320 to clients, exit 0)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError("broker did not start listening")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """``python -m leveret serve`` in an empty working directory, without --data-dir."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            str(port),
            "--management-port",
            "0",
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, proc)
        yield proc, port, tmp_path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_closes_clients_with_320_and_exits_0(
    served: tuple[subprocess.Popen[bytes], int, Path], sig: signal.Signals
) -> None:
    proc, port, workdir = served
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/")
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_declare("survivor")
    proc.send_signal(sig)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        connection.process_data_events(time_limit=10)
        connection.process_data_events(time_limit=10)
    assert err.value.reply_code == 320
    assert (
        err.value.reply_text
        == "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    )
    assert proc.wait(10) == 0
    # Without --data-dir nothing is written to disk.
    assert list(workdir.iterdir()) == []


def test_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "leveret", "serve", "--port", str(port), "--data-dir", "data"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    # Exactly one line: what the data dir's recovery logged at info level is not shown
    # when the broker does not start.
    assert result.stderr == (
        f"leveret: error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )


def test_version_is_the_packages(tmp_path: Path) -> None:
    from leveret import __version__

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert __version__ == pyproject["project"]["version"]
    result = subprocess.run(
        [sys.executable, "-m", "leveret", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    build = "compiled" if _codec_is_an_extension() else "pure Python"
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"leveret {__version__} ({build})\n",
        "",
    )


def _codec_is_an_extension() -> bool:
    """Whether the frame reader this interpreter imports is a C extension (a compiled build)."""
    import leveret.wire.codec.reader as reader

    return Path(reader.__file__ or "").suffix in (".so", ".pyd")


def test_the_build_under_test_is_the_one_asked_for() -> None:
    """make test runs the suite on the pure build, then on the compiled one (LEVERET_TEST_BUILD
    names which): a compiled phase that imported the .py files would test nothing new."""
    from leveret import build_kind

    expected = os.environ.get("LEVERET_TEST_BUILD", "pure Python")
    assert (build_kind(), _codec_is_an_extension()) == (expected, expected == "compiled")


def test_leveret_console_script_help() -> None:
    script = Path(sys.executable).with_name("leveret")
    result = subprocess.run(
        [str(script), "serve", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    for flag in ("--host", "--port", "--data-dir", "--log-level"):
        assert flag in result.stdout


def test_served_broker_round_trips_large_bodies(
    served: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    # `leveret serve` runs on uvloop, whose writelines sends a large body's frames as views
    # of the body (the in-process test broker runs on the stdlib loop, which joins them).
    _proc, port, _workdir = served
    connection = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/")
    )
    channel = connection.channel()
    channel.queue_declare("large", exclusive=True)
    bodies = [os.urandom(size) for size in (1024 * 1024 + 17, 10, 3 * 131072, 131064, 131065)]
    for body in bodies:
        channel.basic_publish("", "large", body)
    received = []
    for _method, _properties, body in channel.consume("large", auto_ack=True, inactivity_timeout=5):
        assert body is not None, f"only {len(received)} of {len(bodies)} delivered"
        received.append(body)
        if len(received) == len(bodies):
            break
    assert received == bodies
    connection.close()
