"""The Leveret pytest plugin: an AMQP broker as a test fixture.

Installed with the package (entry point ``pytest11: leveret``), so ``pip install leveret``
is all a project needs. Fixtures (see docs/testing.md for examples):

``leveret_broker`` (session)
    One in-process broker per test session (per pytest-xdist worker, each a process) on
    127.0.0.1, port 0, running on its own event loop in a daemon thread: a
    :class:`~broker.inspect.BrokerThread`. With ``--leveret-url`` / ``LEVERET_URL`` it is an
    :class:`ExternalBroker` instead and nothing is started.
``leveret_config`` (session)
    The :class:`~broker.config.Config` the in-process broker starts with; override it in a
    conftest.py to change limits.
``leveret_vhost`` (function)
    A fresh vhost for the test, named after it plus a random suffix, with full permissions
    for the URL's user (guest); deleted (its connections closed, queues gone) afterwards.
``amqp_url`` (function)
    The URL of that vhost, e.g. ``amqp://guest:guest@127.0.0.1:40123/test_orders-1a2b3c4d``.
``aio_pika_connection`` (function, async; needs pytest-asyncio)
    An ``aio_pika`` connection to ``amqp_url``, closed after the test.
``pika_connection`` (function)
    A ``pika.BlockingConnection`` to ``amqp_url``, closed after the test.
``leveret`` (function)
    An :class:`~broker.inspect.Inspector` bound to the test's vhost: queue depth, ready,
    unacked, consumers, counters, and waits (``wait_for_messages``, ``wait_until_acked``,
    ``wait_for_consumers``...) that replace sleeps; ``leveret.clock``, the vhost's virtual
    clock (frozen on first use: ``advance(seconds)`` fires what comes due);
    ``leveret.journal``, the vhost's traffic journal (:mod:`~broker.inspect.journal`),
    recording from its first use to the test's end.
    ``leveret.faults`` injects faults (drop or close connections, restart, alarms, cancel
    consumers, delay: docs/testing.md), and the alarms and delay it left on are cleared
    after the test.

External broker: ``--leveret-url URL`` (or ``LEVERET_URL``, or the ``leveret_url`` ini
option) runs the same tests against another broker, e.g. a real RabbitMQ. Per-test vhosts
and the inspector then use its management HTTP API, at ``--leveret-management-url``
(``LEVERET_MANAGEMENT_URL``, ``leveret_management_url``; default ``http://HOST:15672``,
``none`` to turn it off) with the URL's credentials. Without a reachable management API
every test uses the URL's own vhost (no isolation: tests must clean up after themselves)
and the inspector raises :class:`~broker.inspect.InspectionUnavailableError`.

What only Leveret can do (``leveret.clock``...) raises
:class:`~broker.inspect.LeveretOnlyError` against another broker, and the test is skipped
with its text. The marker ``@pytest.mark.leveret_only`` skips a test when the fixtures
point at an external broker (for tests of Leveret-specific behaviour).
"""

from __future__ import annotations

import os
import re
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from leveret.inspect import (
    DEFAULT_TIMEOUT,
    BrokerThread,
    InspectionUnavailableError,
    Inspector,
    LeveretOnlyError,
    ManagementAPI,
    QueueNotFoundError,
    QueueStats,
    amqp_url_with,
)

if TYPE_CHECKING:
    import aio_pika.abc

    from leveret.config import Config

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - pytest-asyncio is optional for users
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "BrokerThread",
    "ExternalBroker",
    "InspectionUnavailableError",
    "Inspector",
    "LeveretBroker",
    "LeveretOnlyError",
    "ManagementAPI",
    "QueueNotFoundError",
    "QueueStats",
    "aio_pika_connection",
    "amqp_url",
    "leveret",
    "leveret_broker",
    "leveret_config",
    "leveret_vhost",
    "pika_connection",
]

URL_ENV = "LEVERET_URL"
MANAGEMENT_URL_ENV = "LEVERET_MANAGEMENT_URL"
#: Values of the management URL setting that turn the management API off.
OFF = frozenset({"none", "off", "no", "false", "0"})
#: Longest test-name part of a per-test vhost name (the suffix comes on top).
VHOST_NAME_MAX = 80


class ExternalBroker:
    """A broker the plugin did not start (``--leveret-url``), with its management API
    when one answers.

    The management API is looked for once, when a fixture first needs it: at
    ``management_url`` if given, else at ``http://HOST:15672`` with the URL's credentials.
    """

    def __init__(self, url: str, management_url: str | None = None) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self.user = urllib.parse.unquote(parts.username or "guest")
        self.password = urllib.parse.unquote(parts.password or "guest")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        #: The vhost the URL names ("/" when it names none, as clients assume).
        self.default_vhost = urllib.parse.unquote(path) if path else "/"
        if management_url is None:
            host = parts.hostname or "localhost"
            host = f"[{host}]" if ":" in host else host
            management_url = f"http://{host}:15672"
        self.management_url = management_url if management_url.lower() not in OFF else None
        self._management: ManagementAPI | None = None
        self._probed = False
        self.management_problem = ""

    def __repr__(self) -> str:
        return f"ExternalBroker({redact(self.url)!r}, management={self.management_url!r})"

    @property
    def management(self) -> ManagementAPI | None:
        """The management API client, or None when none answers (see
        :attr:`management_problem`)."""
        if not self._probed:
            self._probed = True
            if self.management_url is None:
                self.management_problem = "the management API is turned off"
            else:
                api = ManagementAPI(self.management_url, self.user, self.password)
                problem = api.probe()
                if problem is None:
                    self._management = api
                else:
                    self.management_problem = problem
        return self._management

    @property
    def isolated(self) -> bool:
        """Whether each test gets its own vhost (the management API answers)."""
        return self.management is not None

    def vhost_url(self, vhost: str) -> str:
        """The broker URL with ``vhost`` as its (percent-encoded) path."""
        return amqp_url_with(self.url, vhost)

    def add_vhost(self, name: str) -> str:
        """Create ``name`` through the management API, with full permissions for the URL's
        user; returns its URL."""
        api = self._require_management()
        api.create_vhost(name)
        api.set_permissions(name, self.user)
        return self.vhost_url(name)

    def delete_vhost(self, name: str) -> bool:
        """Delete ``name`` through the management API."""
        self._require_management().delete_vhost(name)
        return True

    def inspector(self, vhost: str = "/") -> Inspector:
        """An inspector of ``vhost`` through the management API, or one that raises
        :class:`InspectionUnavailableError` saying why there is none."""
        api = self.management
        if api is None:
            return Inspector.unavailable(self._unavailable_text(), vhost)
        return Inspector(api, vhost=vhost)

    def _unavailable_text(self) -> str:
        return (
            f"the leveret inspector needs the management HTTP API of the external broker "
            f"{redact(self.url)}: {self.management_problem}. Enable it (rabbitmq-plugins "
            f"enable rabbitmq_management), point --leveret-management-url / "
            f"{MANAGEMENT_URL_ENV} at it, or run without --leveret-url / {URL_ENV}"
        )

    def _require_management(self) -> ManagementAPI:
        api = self.management
        if api is None:
            raise InspectionUnavailableError(self._unavailable_text())
        return api


#: What ``leveret_broker`` yields.
LeveretBroker = BrokerThread | ExternalBroker


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def vhost_name_for(test_name: str) -> str:
    """A fresh vhost name: the test's name (characters other than letters, digits, ``_``,
    ``.`` and ``-`` replaced by ``_``) plus ``-`` and 8 random hex digits."""
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "_", test_name).strip("_")[:VHOST_NAME_MAX] or "test"
    return f"{base}-{secrets.token_hex(4)}"


# -- configuration -------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--leveret-url``, ``--leveret-management-url`` and their ini options."""
    group = parser.getgroup("leveret", "Leveret AMQP broker fixtures")
    group.addoption(
        "--leveret-url",
        dest="leveret_url",
        default=None,
        metavar="URL",
        help=f"run the leveret fixtures against this broker instead of an in-process Leveret "
        f"(env {URL_ENV}; ini leveret_url), e.g. amqp://guest:guest@localhost:5672/",
    )
    group.addoption(
        "--leveret-management-url",
        dest="leveret_management_url",
        default=None,
        metavar="URL",
        help=f"management HTTP API of the --leveret-url broker, for per-test vhosts and the "
        f"inspector (env {MANAGEMENT_URL_ENV}; ini leveret_management_url; default "
        f"http://HOST:15672; 'none': do not use one)",
    )
    parser.addini(
        "leveret_url",
        type="string",
        default="",
        help="external broker URL for the leveret fixtures (see --leveret-url)",
    )
    parser.addini(
        "leveret_management_url",
        type="string",
        default="",
        help="management API of the external broker (see --leveret-management-url)",
    )
    parser.addini(
        "leveret_timeout",
        type="string",
        default=str(DEFAULT_TIMEOUT),
        help=f"default timeout in seconds of the leveret inspector's waits "
        f"(default {DEFAULT_TIMEOUT:g})",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``leveret_only`` marker."""
    config.addinivalue_line(
        "markers",
        "leveret_only: the test needs the in-process Leveret broker; skipped when the "
        "leveret fixtures point at an external broker (--leveret-url / LEVERET_URL)",
    )


def _setting(config: pytest.Config, name: str, env: str) -> str | None:
    """A setting from the command line, else the environment, else the ini file."""
    value = config.getoption(name)
    if value is None:
        value = os.environ.get(env)
    if value is None:
        value = config.getini(name)
    return str(value) if value else None


def external_url(config: pytest.Config) -> str | None:
    """The external broker URL the fixtures use, or None for an in-process Leveret."""
    return _setting(config, "leveret_url", URL_ENV)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which broker the leveret fixtures use."""
    url = external_url(config)
    if url is None:
        return "leveret: in-process broker per session (127.0.0.1, port 0)"
    return f"leveret: external broker {redact(url)}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``leveret_only`` tests against an external broker."""
    if item.get_closest_marker("leveret_only") is not None:
        url = external_url(item.config)
        if url is not None:
            pytest.skip(f"leveret_only: the fixtures point at an external broker {redact(url)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test that asks an external broker for what only Leveret does (the inspector's
    ``clock``, ``journal``, ``faults``) is skipped with the one line saying why."""
    try:
        return (yield)
    except LeveretOnlyError as exc:
        pytest.skip(str(exc))


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def leveret_config() -> Config:
    """The configuration of the in-process broker: 127.0.0.1, a free port, and a short
    shutdown so a leaked client connection cannot hold up the end of the session."""
    from leveret.config import Config

    return Config(host="127.0.0.1", port=0, shutdown_timeout=0.5)


@pytest.fixture(scope="session")
def leveret_broker(request: pytest.FixtureRequest) -> Iterator[LeveretBroker]:
    """The session's broker: an in-process :class:`BrokerThread`, or the
    :class:`ExternalBroker` given by ``--leveret-url`` / ``LEVERET_URL``."""
    config = request.config
    url = external_url(config)
    if url is not None:
        yield ExternalBroker(url, _setting(config, "leveret_management_url", MANAGEMENT_URL_ENV))
        return
    broker_config: Config = request.getfixturevalue("leveret_config")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    broker = BrokerThread(broker_config, name=f"leveret-broker{'-' + worker if worker else ''}")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def leveret_vhost(request: pytest.FixtureRequest, leveret_broker: LeveretBroker) -> Iterator[str]:
    """A fresh vhost for this test (the URL's vhost on an external broker without a
    management API); deleted after the test, with its queues and connections."""
    if isinstance(leveret_broker, ExternalBroker) and not leveret_broker.isolated:
        yield leveret_broker.default_vhost
        return
    name = vhost_name_for(request.node.name)
    leveret_broker.add_vhost(name)
    try:
        yield name
    finally:
        leveret_broker.delete_vhost(name)


@pytest.fixture
def amqp_url(leveret_broker: LeveretBroker, leveret_vhost: str) -> str:
    """``amqp://guest:guest@127.0.0.1:PORT/<vhost>``: the test's own vhost (the
    ``--leveret-url`` as it is on an external broker without a management API)."""
    if isinstance(leveret_broker, ExternalBroker) and not leveret_broker.isolated:
        return leveret_broker.url
    return leveret_broker.vhost_url(leveret_vhost)


@pytest.fixture
def leveret(
    request: pytest.FixtureRequest, leveret_broker: LeveretBroker, leveret_vhost: str
) -> Iterator[Inspector]:
    """An :class:`Inspector` of the test's vhost; its journal, if the test used it, stops
    recording afterwards, and faults it injected (``leveret.faults``: alarms, a delay) are
    cleared."""
    inspector = leveret_broker.inspector(leveret_vhost)
    inspector.timeout = float(request.config.getini("leveret_timeout") or DEFAULT_TIMEOUT)
    try:
        yield inspector
    finally:
        inspector.stop_journal()
        inspector.faults.reset()


@pytest.fixture
def pika_connection(amqp_url: str) -> Iterator[Any]:
    """A ``pika.BlockingConnection`` to the test's vhost, closed after the test."""
    import pika  # type: ignore[import-untyped]

    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        yield connection
    finally:
        if connection.is_open:
            try:
                connection.close()
            except pika.exceptions.AMQPError:
                pass  # closed by the broker meanwhile


async def _aio_pika_connection(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    """An ``aio_pika`` connection to the test's vhost, closed after the test."""
    import aio_pika

    connection = await aio_pika.connect(amqp_url)
    try:
        yield connection
    finally:
        await connection.close()


def _no_pytest_asyncio() -> None:
    """``aio_pika_connection`` needs pytest-asyncio."""
    raise pytest.UsageError("the aio_pika_connection fixture needs pytest-asyncio installed")


if pytest_asyncio is not None:
    aio_pika_connection = pytest_asyncio.fixture(_aio_pika_connection, name="aio_pika_connection")
else:  # pragma: no cover
    # mypy sees pytest-asyncio installed, so this branch as unreachable.
    aio_pika_connection = pytest.fixture(  # type: ignore[unreachable]
        _no_pytest_asyncio, name="aio_pika_connection"
    )
