"""Fixtures for the management API tests: a broker started in the test's own event loop
(port 0) with the management API on another free port, and an HTTP client for it.

The broker and the aio-pika clients share the test's loop, as the management server
shares the broker's loop in production.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import aiohttp
import pytest

from leveret.config import Config
from leveret.management import start_management
from leveret.management.prometheus import start_prometheus
from leveret.server import Server

from .helpers import Mgmt, Target, basic


@pytest.fixture
async def mgmt() -> AsyncIterator[Mgmt]:
    """A fresh broker and management API for one test (stats sampled every 0.2 s), with
    its Prometheus listener (``server.prometheus``, closed by ``stop``), each on a free
    port."""
    server = Server(Config(host="127.0.0.1", port=0))
    await server.start()
    handle = await start_management(server.state, "127.0.0.1", 0, stats_interval=0.2)
    server.prometheus = await start_prometheus(server.state, "127.0.0.1", 0)
    session = aiohttp.ClientSession(headers=basic("guest", "guest"))
    try:
        yield Mgmt(server, handle, session)
    finally:
        await session.close()
        await handle.close()
        await server.stop()


@pytest.fixture(params=["leveret", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    """A broker to scrape: a Leveret of its own with its Prometheus listener, or with
    ``-m rabbitmq`` a real RabbitMQ (``RABBITMQ_URL``, ``RABBITMQ_PROMETHEUS_URL``)."""
    async with aiohttp.ClientSession() as session:
        if request.param == "rabbitmq":
            yield Target(
                os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"),
                os.environ.get("RABBITMQ_PROMETHEUS_URL", "http://127.0.0.1:15692"),
                session,
            )
        else:
            config = Config(host="127.0.0.1", port=0, prometheus_port=0)
            server = Server(config)
            await server.start()
            assert server.prometheus is not None
            try:
                yield Target(
                    f"amqp://guest:guest@127.0.0.1:{server.port}/", server.prometheus.url, session
                )
            finally:
                await server.stop()
