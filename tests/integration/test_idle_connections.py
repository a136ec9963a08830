"""Many idle connections stay open and cost the other clients nothing.

A thousand raw connections (handshake, connection.open, one channel, heartbeats off) are
opened and left idle; a pika client then declares, publishes and gets as usual, and every
idle connection is still open afterwards (none dropped, none closed for want of a file
descriptor). ``bench/faults.py idle`` opens 5,000 against Leveret and RabbitMQ and reports
the broker's RSS per connection (RELIABILITY.md); this test keeps to 1,000 so that it runs
within the session's descriptor limit next to the in-process broker.
"""

from __future__ import annotations

import resource
import socket

import pika
import pytest

from .wire import WireClient

pytestmark = pytest.mark.timeout(120)

IDLE = 1000


def still_open(client: WireClient) -> bool:
    """No end of stream waiting on an idle connection (nothing else is sent: no heartbeats)."""
    client.sock.setblocking(False)
    try:
        return client.sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_a_thousand_idle_connections_stay_open_while_others_work(
    amqp_url: str, broker_kind: str
) -> None:
    if broker_kind == "rabbitmq":
        # Debian starts a node through su, whose limits give it 1,024 descriptors: the
        # deployment decides, not the broker (faults.py idle measures one with 20,000).
        pytest.skip("a RabbitMQ node's descriptor limit is its deployment's")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(hard, 8192) < 3 * IDLE:  # both ends live in this process, plus the broker's own
        pytest.skip(f"needs {3 * IDLE} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    clients: list[WireClient] = []
    try:
        for _ in range(IDLE):
            client = WireClient(amqp_url, timeout=30)
            clients.append(client)
            client.connect()
            client.open_channel(1)
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"still served")
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        connection.close()
        assert method is not None and body == b"still served"
        assert sum(still_open(c) for c in clients) == IDLE
    finally:
        for client in clients:
            client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
