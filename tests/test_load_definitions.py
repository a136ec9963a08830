"""`leveret serve --load-definitions FILE`: a RabbitMQ definitions.json export at start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika

from tests.test_cli import free_port, wait_listening

EXPORT = Path(__file__).parent / "management" / "data" / "rabbitmq-3.13-definitions.json"


def test_load_definitions_at_start_up(tmp_path: Path) -> None:
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
            "-1",
            "--load-definitions",
            str(EXPORT),
        ],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
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
