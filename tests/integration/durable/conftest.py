"""pika fixtures for the scenarios on durable queue types (quorum queues and streams), whose
queues are durable and never exclusive, so they outlive the test's connection and are
deleted afterwards. They replace, in this directory, the integration conftest's ``ch`` and
``cleanup``, which are aio-pika's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel


@pytest.fixture
def connection(pika_connection: pika.BlockingConnection) -> pika.BlockingConnection:
    """The pytest plugin's pika connection (broker/testing.py), which follows ``amqp_url``."""
    return pika_connection


@pytest.fixture
def ch(connection: pika.BlockingConnection) -> BlockingChannel:
    return connection.channel()


@pytest.fixture
def cleanup(amqp_url: str) -> Iterator[list[str]]:
    """Queue names to delete after the test (through a connection of its own)."""
    names: list[str] = []
    yield names
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = conn.channel()
    for name in names:
        channel.queue_delete(name)
    conn.close()
