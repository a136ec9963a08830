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
import threading
from collections.abc import Iterator

import pytest

from broker.config import Config
from broker.server import Server


class BrokerThread:
    """A Leveret server running on its own event loop in a daemon thread."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.server = Server(config)
        self._thread = threading.Thread(target=self._run, name="leveret-test-broker", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # report start-up failures to the test thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self.loop.run_forever()

    def start(self) -> BrokerThread:
        self._thread.start()
        self._started.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.server.port}/"


@pytest.fixture(scope="session")
def leveret() -> Iterator[BrokerThread]:
    """The session's in-process broker."""
    broker = BrokerThread(Config(host="127.0.0.1", port=0)).start()
    yield broker
    broker.stop()


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
