"""aio-pika fixtures shared by the integration scenarios (the pika modules define their own
``conn``/``ch``, which take precedence there)."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import aio_pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread

from .helpers import PASSWORD, Http, Tenant, unique


@pytest.fixture
async def conn(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    """An aio-pika connection to the broker under test."""
    connection = await aio_pika.connect(amqp_url)
    yield connection
    await connection.close()


@pytest.fixture
async def ch(conn: aio_pika.abc.AbstractConnection) -> aio_pika.abc.AbstractChannel:
    """A channel on ``conn``."""
    return await conn.channel()


@pytest.fixture
async def cleanup(amqp_url: str) -> AsyncIterator[SimpleNamespace]:
    """Names appended to ``.queues`` / ``.exchanges`` are deleted after the test."""
    names = SimpleNamespace(queues=[], exchanges=[])
    yield names
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        for queue in names.queues:
            await channel.queue_delete(queue)
        for exchange in names.exchanges:
            await channel.exchange_delete(exchange)
    finally:
        await connection.close()


@pytest.fixture(scope="module")
def brokers(broker_kind: str) -> Iterator[tuple[str, Http]]:
    """(AMQP URL, management API) of the broker under test."""
    if broker_kind == "rabbitmq":
        yield (
            os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"),
            Http(os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")),
        )
        return
    broker = BrokerThread(Config(host="127.0.0.1", port=0, management_port=0)).start()
    try:
        management = broker.server.management
        assert management is not None
        yield broker.url, Http(management.url)
    finally:
        broker.stop()


@pytest.fixture
def tenant(brokers: tuple[str, Http]) -> Iterator[Tenant]:
    """A vhost and a user of the test's own on the broker under test, deleted afterwards."""
    url, api = brokers
    vhost, user = unique("lt-vhost"), unique("lt-user")
    quoted = urllib.parse.quote(vhost, safe="")
    assert api("PUT", f"/api/vhosts/{quoted}", {})[0] == 201
    assert api("PUT", f"/api/users/{user}", {"password": PASSWORD, "tags": ""})[0] == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    for name in ("%2F", quoted):
        assert api("PUT", f"/api/permissions/{name}/{user}", everything)[0] in (201, 204)
    assert api("PUT", f"/api/permissions/{quoted}/guest", everything)[0] in (201, 204)
    yield Tenant(api, url, vhost, user)
    api("DELETE", f"/api/vhosts/{quoted}")
    api("DELETE", f"/api/users/{user}")
