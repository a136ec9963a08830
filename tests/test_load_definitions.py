"""`leveret serve --load-definitions FILE`: a RabbitMQ definitions.json export at start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pika

from tests.management.definitions_roundtrip import UNLOADABLE, UNLOADABLE_LINES
from tests.test_cli import free_port, wait_listening

EXPORT = Path(__file__).parent / "management" / "data" / "rabbitmq-3.13-definitions.json"


def serve(definitions: Path) -> tuple[subprocess.Popen[str], int]:
    """``leveret serve --load-definitions DEFINITIONS`` on a free port (its log piped)."""
    port = free_port()
    command = [sys.executable, "-m", "leveret", "serve", "--port", str(port)]
    command += ["--management-port", "-1", "--load-definitions", str(definitions)]
    proc = subprocess.Popen(
        command,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, port


def test_load_definitions_at_start_up(tmp_path: Path) -> None:
    proc, port = serve(EXPORT)
    try:
        wait_listening(port, proc)
        # The exported user logs in with its original password (RabbitMQ's SHA-256 hash)
        # on the exported vhost, where the exported queues exist.
        params = pika.URLParameters(f"amqp://test:test12@127.0.0.1:{port}/shop")
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        declared = channel.queue_declare("orders.created", passive=True)
        assert declared.method.queue == "orders.created"
        connection.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_load_definitions_names_what_it_skips(tmp_path: Path) -> None:
    """What Leveret cannot load is named in the log, one line per item, and the broker
    starts with the rest."""
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(UNLOADABLE))
    proc, port = serve(path)
    try:
        wait_listening(port, proc)
        connection = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/fed")
        )
        assert connection.channel().queue_declare("q", passive=True).method.queue == "q"
        connection.close()
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=10)
    # "<time> WARNING leveret.management.definitions: definitions: skipped ...", one a line.
    marker = "leveret.management.definitions: definitions: "
    skipped = [line.split(marker, 1)[1] for line in log.splitlines() if marker + "skipped" in line]
    assert skipped == UNLOADABLE_LINES
    assert f"loaded definitions from {path} (items skipped: {len(UNLOADABLE_LINES)})" in log
