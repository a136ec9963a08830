"""The external broker switch: ``--leveret-url`` / ``LEVERET_URL`` / ``leveret_url``.

The "external" broker is a second in-process Leveret started here with
:class:`~broker.inspect.BrokerThread`, so this runs in CI without a RabbitMQ. Without a
management API the fixtures use the URL as it is; with one (a stand-in serving RabbitMQ's
``/api`` routes from that broker, mgmt_stub.py) each test gets its own vhost and the
inspector reads queues over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest

from leveret.inspect import BrokerThread

from .mgmt_stub import ManagementStub

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""


@pytest.fixture
def external() -> Iterator[BrokerThread]:
    """The 'external' broker: another Leveret, not the plugin's."""
    broker = BrokerThread().start()
    yield broker
    broker.stop()


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A clean project, whatever this shell's environment says."""
    monkeypatch.delenv("LEVERET_URL", raising=False)
    monkeypatch.delenv("LEVERET_MANAGEMENT_URL", raising=False)
    pytester.makeini(INI)
    return pytester


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def queue_names(broker: BrokerThread, vhost: str) -> list[str]:
    """The queues of ``vhost`` on ``broker``."""
    return broker.call(lambda: sorted(broker.server.state.vhosts[vhost].queues))


USES_THE_URL_AS_IT_IS = """
import aio_pika
import pytest
from leveret.inspect import InspectionUnavailableError
from leveret.testing import ExternalBroker

def test_sync(amqp_url, leveret_broker, leveret_vhost, pika_connection, leveret):
    assert isinstance(leveret_broker, ExternalBroker)
    assert amqp_url == "{url}"
    assert leveret_vhost == "/"
    pika_connection.channel().queue_declare("from-pika")
    with pytest.raises(InspectionUnavailableError) as problem:
        leveret.wait_for_messages("from-pika", 1)
    assert "needs the management HTTP API of the external broker" in str(problem.value)
    assert "guest:***@" in str(problem.value)

@pytest.mark.asyncio
async def test_async(aio_pika_connection):
    channel = await aio_pika_connection.channel()
    await channel.declare_queue("from-aio-pika")

@pytest.mark.leveret_only
def test_leveret_only():
    raise AssertionError("skipped against an external broker")
"""


def test_option_without_management_api(project: pytest.Pytester, external: BrokerThread) -> None:
    project.makepyfile(USES_THE_URL_AS_IT_IS.format(url=external.url))
    result = project.runpytest(
        "--leveret-url",
        external.url,
        "--leveret-management-url",
        f"http://127.0.0.1:{closed_port()}",
        "-rs",
    )
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*leveret_only: the fixtures point at an external broker*"])
    # The tests used the external broker's "/" vhost; the plugin started no broker.
    assert queue_names(external, "/") == ["from-aio-pika", "from-pika"]


def test_environment_variable_and_management_off(
    project: pytest.Pytester, external: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(USES_THE_URL_AS_IT_IS.format(url=external.url))
    monkeypatch.setenv("LEVERET_URL", external.url)
    monkeypatch.setenv("LEVERET_MANAGEMENT_URL", "none")
    result = project.runpytest_subprocess()
    result.stdout.fnmatch_lines(["leveret: external broker amqp://guest:***@127.0.0.1:*/"])
    result.assert_outcomes(passed=2, skipped=1)


def test_option_beats_environment_beats_ini(
    project: pytest.Pytester, external: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    project.makeini(INI + f"leveret_url = {dead}\nleveret_management_url = none\n")
    project.makepyfile(
        """
        def test_url(amqp_url, pytestconfig):
            (pytestconfig.rootpath / "url").write_text(amqp_url)
        """
    )
    project.runpytest().assert_outcomes(passed=1)
    assert (project.path / "url").read_text() == dead  # from the ini file
    monkeypatch.setenv("LEVERET_URL", external.url)
    project.runpytest().assert_outcomes(passed=1)
    assert (project.path / "url").read_text() == external.url  # the environment wins
    other = external.vhost_url("other")
    project.runpytest("--leveret-url", other).assert_outcomes(passed=1)
    assert (project.path / "url").read_text() == other  # the option wins


WITH_MANAGEMENT = """
import pika
import pytest
from leveret.testing import ExternalBroker

@pytest.mark.parametrize("n", range(2))
def test_isolated(n, amqp_url, leveret_broker, leveret_vhost, leveret, pytestconfig):
    assert isinstance(leveret_broker, ExternalBroker) and leveret_broker.isolated
    assert leveret_vhost.startswith(f"test_isolated_{{n}}-")
    assert amqp_url == "{base}" + leveret_vhost
    assert "via management API" in repr(leveret)
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    assert channel.queue_declare("shared").method.message_count == 0
    channel.basic_publish("", "shared", b"x")
    stats = leveret.wait_for_messages("shared", 1)
    assert (stats.messages_ready, stats.published) == (1, 1)
    method, _, _ = channel.basic_get("shared")
    channel.basic_ack(method.delivery_tag)
    assert leveret.wait_until_acked("shared", 1).acked == 1
    assert leveret.queues() == ["shared"]
    with pytest.raises(TimeoutError, match="the queue does not exist"):
        leveret.wait_for_consumers("absent", 1, timeout=0.1)
    connection.close()
    (pytestconfig.rootpath / f"vhost-{{n}}").write_text(leveret_vhost)
"""


def test_management_api_gives_per_test_vhosts_and_inspection(
    project: pytest.Pytester, external: BrokerThread
) -> None:
    with ManagementStub(external) as stub:
        project.makepyfile(WITH_MANAGEMENT.format(base=external.url))
        result = project.runpytest(
            "--leveret-url", external.url, "--leveret-management-url", stub.url
        )
        result.assert_outcomes(passed=2)
        vhosts = [(project.path / f"vhost-{n}").read_text() for n in range(2)]
        assert len(set(vhosts)) == 2
        # created, granted, and deleted through the API; nothing left behind
        for vhost in vhosts:
            assert ("PUT", f"/api/vhosts/{vhost}") in stub.requests
            assert ("PUT", f"/api/permissions/{vhost}/guest") in stub.requests
            assert ("DELETE", f"/api/vhosts/{vhost}") in stub.requests
        assert external.call(lambda: sorted(external.server.state.vhosts)) == ["/"]


def test_with_leverets_own_management_api(project: pytest.Pytester, external: BrokerThread) -> None:
    """The same against Leveret's management API (broker/management), as a RabbitMQ's."""
    from leveret.management import start_management

    handle = asyncio.run_coroutine_threadsafe(
        start_management(external.server.state, "127.0.0.1", 0, stats_interval=0.2), external.loop
    ).result(10)
    try:
        project.makepyfile(WITH_MANAGEMENT.format(base=external.url))
        result = project.runpytest(
            "--leveret-url", external.url, "--leveret-management-url", handle.url
        )
        result.assert_outcomes(passed=2)
        assert external.call(lambda: sorted(external.server.state.vhosts)) == ["/"]
    finally:
        asyncio.run_coroutine_threadsafe(handle.close(), external.loop).result(10)


def test_xdist_workers_share_an_external_broker(
    project: pytest.Pytester, external: BrokerThread
) -> None:
    """Two workers, one external broker: the per-test vhosts keep them apart."""
    with ManagementStub(external) as stub:
        project.makepyfile(
            WITH_MANAGEMENT.format(base=external.url).replace("range(2)", "range(4)")
        )
        result = project.runpytest_subprocess(
            "-n",
            "2",
            "-p",
            "xdist",
            "--leveret-url",
            external.url,
            "--leveret-management-url",
            stub.url,
        )
        result.assert_outcomes(passed=4)
        assert len({(project.path / f"vhost-{n}").read_text() for n in range(4)}) == 4
        assert external.call(lambda: sorted(external.server.state.vhosts)) == ["/"]


def test_management_api_rejecting_credentials_is_explained(
    project: pytest.Pytester, external: BrokerThread
) -> None:
    with ManagementStub(external) as stub:
        url = external.url.replace("guest:guest", "guest:wrong")
        project.makepyfile(
            """
            import pytest
            from leveret.inspect import InspectionUnavailableError

            def test_inspect(leveret_vhost, leveret):
                assert leveret_vhost == "/"
                with pytest.raises(InspectionUnavailableError, match="HTTP 401"):
                    leveret.queues()
            """
        )
        result = project.runpytest("--leveret-url", url, "--leveret-management-url", stub.url)
        result.assert_outcomes(passed=1)
        assert json.dumps(stub.requests).count("/api/overview") == 1


USES_THE_CLOCK = """
import pika

def test_clock(amqp_url, leveret):
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.queue_declare("q", arguments={{"x-message-ttl": 600_000}})
    leveret.clock.freeze()
    channel.basic_publish("", "q", b"x")
    leveret.wait_for_messages("q", 1)
    leveret.clock.advance(601)
    assert leveret.messages_ready("q") == 0
    connection.close()
"""


def test_the_clock_of_another_broker_skips_the_test(
    project: pytest.Pytester, external: BrokerThread
) -> None:
    """A RabbitMQ (here its stand-in) cannot move its time: the test is skipped, saying so."""
    with ManagementStub(external) as stub:
        project.makepyfile(USES_THE_CLOCK.format())
        result = project.runpytest(
            "-rs", "--leveret-url", external.url, "--leveret-management-url", stub.url
        )
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(
            [
                f"SKIPPED * the virtual clock needs Leveret: the broker at {stub.url} has no "
                "/api/leveret/clock/*"
            ]
        )


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            USES_THE_CLOCK.format(),
            "the virtual clock is not available: the leveret inspector needs the management "
            "HTTP API of the external broker*",
        ),
        (
            "def test_journal(leveret):\n    leveret.journal.published()\n",
            "no traffic journal: the leveret inspector needs the management HTTP API*",
        ),
        (
            "def test_drop(leveret):\n    leveret.faults.drop_connections()\n",
            "injected faults need the in-process Leveret broker*",
        ),
    ],
    ids=["clock", "journal", "faults"],
)
def test_leveret_only_features_without_a_management_api_skip_the_test(
    project: pytest.Pytester, external: BrokerThread, code: str, reason: str
) -> None:
    """A test using the clock, the journal or faults against an external broker is
    skipped with one line saying why (LeveretOnlyError, the plugin's hook), never failed."""
    project.makepyfile(code)
    result = project.runpytest(
        "-rs", "--leveret-url", external.url, "--leveret-management-url", "none"
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED * {reason}"])


def test_the_clock_of_an_external_leveret_moves(
    project: pytest.Pytester, external: BrokerThread
) -> None:
    """An external Leveret's clock, through /api/leveret/clock: a Go or Node suite's way."""
    from leveret.management import start_management

    handle = asyncio.run_coroutine_threadsafe(
        start_management(external.server.state, "127.0.0.1", 0, stats_interval=0.2), external.loop
    ).result(10)
    try:
        project.makepyfile(USES_THE_CLOCK.format())
        result = project.runpytest(
            "--leveret-url", external.url, "--leveret-management-url", handle.url
        )
        result.assert_outcomes(passed=1)
    finally:
        asyncio.run_coroutine_threadsafe(handle.close(), external.loop).result(10)
