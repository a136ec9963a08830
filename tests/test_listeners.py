"""Listening sockets as RabbitMQ's: ``::`` serves IPv4 clients too (Erlang's dual-stack
listener), and the AMQPS port gives a client 10 s (handshake_timeout) to finish its TLS
handshake instead of asyncio's 60 s."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pika
import pytest
from test_settings_tls import make_certificates

from leveret.config import Config
from leveret.inspect import BrokerThread


def test_a_broker_on_the_ipv6_wildcard_serves_ipv4_and_ipv6_clients() -> None:
    broker = BrokerThread(
        Config(host="::", port=0, management_host="::", management_port=0)
    ).start()
    try:
        for host in ("127.0.0.1", "[::1]"):
            params = pika.URLParameters(f"amqp://guest:guest@{host}:{broker.server.port}/")
            connection = pika.BlockingConnection(params)
            assert connection.channel().queue_declare("", exclusive=True).method.queue
            connection.close()
            management = broker.server.management
            assert management is not None
            request = urllib.request.Request(f"http://{host}:{management.port}/api/overview")
            request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200
    finally:
        broker.stop()


@pytest.mark.timeout(30)
def test_a_tls_client_that_never_finishes_its_handshake_is_closed(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    broker = BrokerThread(
        Config(
            port=0,
            tls_port=0,
            tls_cert=certificates["server_pem"],
            tls_key=certificates["server_key"],
            handshake_timeout=1.0,
        )
    ).start()
    try:
        silent = socket.create_connection(("127.0.0.1", broker.server.tls_port), timeout=10)
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the broker, not by our timeout
        assert time.monotonic() - started < 8
        silent.close()
    finally:
        broker.stop()
