"""Shared fixtures: one in-process Leveret per test session, and an opt-in real RabbitMQ.

Integration scenarios take the ``amqp_url`` fixture. It is parametrised over
``leveret`` (an in-process broker on 127.0.0.1, port 0, running on its own event loop
in a background thread so that both blocking pika and aio-pika can use it) and
``rabbitmq`` (``RABBITMQ_URL``, default amqp://guest:guest@127.0.0.1:5672/), which
carries the ``rabbitmq`` marker and is deselected unless ``-m rabbitmq`` is given.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread

# `leveret serve` opens rabbitmq_prometheus's port, 15692, by default: the brokers this suite
# starts as subprocesses (they inherit the environment) keep it off, so that parallel tests
# never compete for it. Tests of the listener give --prometheus-port themselves.
os.environ.setdefault("LEVERET_PROMETHEUS_PORT", "-1")

# LEVERET_TEST_LOOP=uvloop runs every loop of the suite (the in-process brokers' and the
# tests' own) on uvloop, as `leveret serve` runs: make test's second pass does, on the
# compiled build, whose native classes check what the loop hands them (uvloop's handles are
# not asyncio's classes).
if os.environ.get("LEVERET_TEST_LOOP") == "uvloop":
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

# ``from tests.conftest import BrokerThread`` keeps working: the class now lives in
# broker/inspect.py, shared with the pytest plugin (broker/testing.py).
__all__ = ["BrokerThread"]

# The plugin (broker/testing.py, loaded through its pytest11 entry point) defines
# ``amqp_url`` and ``leveret`` too: the fixtures below override them for this project's own
# suite. tests/plugin/ tests the plugin's versions (conftest there, and pytester).


@pytest.fixture(scope="session")
def leveret() -> Iterator[BrokerThread]:
    """The session's in-process broker. An exception that reaches its event loop (a
    callback's, which no client sees) fails the session: it is a bug, in either build."""
    broker = BrokerThread(Config(host="127.0.0.1", port=0))
    unhandled: list[str] = []

    def record(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        unhandled.append(f"{context.get('message')}: {context.get('exception')!r}")
        loop.default_exception_handler(context)

    broker.loop.set_exception_handler(record)
    broker.start()
    yield broker
    broker.stop()
    assert unhandled == []


@pytest.fixture(
    scope="session",
    params=["leveret", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)],
)
def broker_kind(request: pytest.FixtureRequest) -> str:
    """Which broker the scenario runs against: ``leveret`` or ``rabbitmq``."""
    return str(request.param)


@pytest.fixture(scope="session")
def amqp_url(broker_kind: str, request: pytest.FixtureRequest) -> str:
    """URL of the broker under test: Leveret, or a real RabbitMQ with ``-m rabbitmq``."""
    if broker_kind == "rabbitmq":
        return os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
    broker: BrokerThread = request.getfixturevalue("leveret")
    return broker.url
