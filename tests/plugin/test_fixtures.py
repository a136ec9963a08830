"""The plugin's fixtures as a user's project sees them, through ``pytester``.

Each test writes a small test suite into a fresh directory (no conftest of this project)
and runs pytest on it, in-process (fast) or in a subprocess (for pytest-xdist), with the
plugin loaded from its pytest11 entry point as after ``pip install leveret``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A clean project: the in-process broker, whatever this shell's environment says."""
    monkeypatch.delenv("LEVERET_URL", raising=False)
    monkeypatch.delenv("LEVERET_MANAGEMENT_URL", raising=False)
    pytester.makeini(INI)
    return pytester


def test_fixtures_are_registered(project: pytest.Pytester) -> None:
    result = project.runpytest("--fixtures")
    for name in (
        "leveret_broker",
        "leveret_config",
        "leveret_vhost",
        "amqp_url",
        "aio_pika_connection",
        "pika_connection",
        "leveret",
    ):
        result.stdout.fnmatch_lines([f"{name}*"])
    result = project.runpytest("--help")
    result.stdout.fnmatch_lines(["*--leveret-url=URL*", "*--leveret-management-url=URL*"])
    result.stdout.fnmatch_lines(["*leveret_url (string)*", "*leveret_timeout (string)*"])
    result = project.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.leveret_only:*"])


def test_each_test_gets_its_own_vhost_deleted_afterwards(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        import re

        import pika
        import pytest

        SEEN = []

        def connect(url):
            return pika.BlockingConnection(pika.URLParameters(url))

        def test_first(amqp_url, leveret_vhost, leveret_broker):
            assert re.fullmatch(
                r"amqp://guest:guest@127\\.0\\.0\\.1:\\d+/test_first-[0-9a-f]{8}", amqp_url
            )
            assert amqp_url.endswith("/" + leveret_vhost)
            assert amqp_url.startswith(leveret_broker.url.rstrip("/"))
            connection = connect(amqp_url)
            channel = connection.channel()
            channel.queue_declare("shared")
            channel.basic_publish("", "shared", b"from the first test")
            # left open on purpose: deleting the vhost closes it
            SEEN.append((amqp_url, leveret_vhost, connection))

        def test_second(amqp_url, leveret_vhost, leveret_broker):
            (first_url, first_vhost, leaked), = SEEN
            assert leveret_vhost != first_vhost
            vhosts = leveret_broker.call(lambda: set(leveret_broker.server.state.vhosts))
            assert first_vhost not in vhosts and leveret_vhost in vhosts
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                leaked.process_data_events(time_limit=1)
                leaked.channel()
            assert closed.value.reply_code == 320
            with pytest.raises(pika.exceptions.AMQPConnectionError):
                connect(first_url)
            connection = connect(amqp_url)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as absent:
                connection.channel().queue_declare("shared", passive=True)
            assert absent.value.reply_code == 404
            assert connection.channel().queue_declare("shared").method.message_count == 0
            connection.close()

        @pytest.mark.parametrize("name", ["a/b", "ünï code"])
        def test_odd_names(amqp_url, leveret_vhost, name):
            assert re.fullmatch(r"test_odd_names_[a-z_]+-[0-9a-f]{8}", leveret_vhost)
            assert all(c.isalnum() or c in "_.-" for c in leveret_vhost)
            connect(amqp_url).close()
        """
    )
    project.runpytest().assert_outcomes(passed=4)


def test_session_broker_shared_then_stopped(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        from leveret.inspect import BrokerThread

        PORTS = []

        def test_one(leveret_broker, tmp_path_factory):
            assert isinstance(leveret_broker, BrokerThread)
            assert leveret_broker.config.host == "127.0.0.1"
            PORTS.append(leveret_broker.server.port)

        def test_two(leveret_broker, pytestconfig):
            assert PORTS == [leveret_broker.server.port]
            (pytestconfig.rootpath / "port").write_text(str(PORTS[0]))
        """
    )
    project.runpytest().assert_outcomes(passed=2)
    port = int((project.path / "port").read_text())
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass  # the broker stopped with the session


def test_pika_connection_fixture(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        SEEN = []

        def test_uses_it(pika_connection, leveret, leveret_vhost):
            assert pika_connection.is_open
            assert pika_connection._impl.params.virtual_host == leveret_vhost
            channel = pika_connection.channel()
            channel.queue_declare("q")
            channel.basic_publish("", "q", b"x")
            assert leveret.wait_for_messages("q", 1).messages_ready == 1
            SEEN.append(pika_connection)

        def test_closed_after():
            assert SEEN[0].is_closed
        """
    )
    project.runpytest().assert_outcomes(passed=2)


def test_aio_pika_connection_fixture_in_strict_mode(project: pytest.Pytester) -> None:
    project.makepyfile(
        """
        import aio_pika
        import pytest

        SEEN = []

        @pytest.mark.asyncio
        async def test_uses_it(aio_pika_connection, leveret, leveret_vhost):
            assert not aio_pika_connection.is_closed
            channel = await aio_pika_connection.channel()
            queue = await channel.declare_queue("q")
            await channel.default_exchange.publish(aio_pika.Message(b"hello"), "q")
            await leveret.wait_for_messages_async("q", 1)
            message = await queue.get()
            assert message.body == b"hello"
            await message.ack()
            await leveret.wait_until_acked_async("q", 1)
            assert aio_pika_connection.url.path == "/" + leveret_vhost
            SEEN.append(aio_pika_connection)

        def test_closed_after():
            assert SEEN[0].is_closed
        """
    )
    project.runpytest("--asyncio-mode=strict").assert_outcomes(passed=2)


def test_leveret_fixture_and_timeout_option(project: pytest.Pytester) -> None:
    project.makeini(INI + "leveret_timeout = 0.25\n")
    project.makepyfile(
        """
        import time

        import pytest
        from leveret.inspect import Inspector

        def test_bound_to_the_vhost(leveret, leveret_vhost, pika_connection):
            assert isinstance(leveret, Inspector)
            assert leveret.vhost == leveret_vhost
            assert leveret.timeout == 0.25
            assert leveret.queues() == []
            pika_connection.channel().queue_declare("q")
            assert leveret.queues() == ["q"]
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="timed out after 0.25 s"):
                leveret.wait_for_messages("q", 1)
            assert time.monotonic() - started < 2
        """
    )
    project.runpytest().assert_outcomes(passed=1)


def test_leveret_config_can_be_overridden(project: pytest.Pytester) -> None:
    project.makeconftest(
        """
        import pytest
        from leveret.config import Config

        @pytest.fixture(scope="session")
        def leveret_config():
            return Config(host="127.0.0.1", port=0, max_message_size=1000)
        """
    )
    project.makepyfile(
        """
        import pika
        import pytest

        def test_small_messages(leveret_broker, pika_connection):
            assert leveret_broker.config.max_message_size == 1000
            channel = pika_connection.channel()
            channel.queue_declare("q")
            channel.basic_publish("", "q", b"x" * 2000)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                channel.queue_declare("q", passive=True)
            assert closed.value.reply_code == 406
        """
    )
    project.runpytest().assert_outcomes(passed=1)


def test_report_header_and_lazy_start(project: pytest.Pytester) -> None:
    """The header names the broker; a session that uses no leveret fixture starts none."""
    project.makepyfile(
        """
        import threading

        def test_no_broker_thread():
            assert not [t for t in threading.enumerate() if t.name.startswith("leveret")]
        """
    )
    result = project.runpytest_subprocess()
    result.stdout.fnmatch_lines(["leveret: in-process broker per session (127.0.0.1, port 0)"])
    result.assert_outcomes(passed=1)


XDIST_TESTS = """
import json
import os

import pika
import pytest

@pytest.mark.parametrize("n", range(6))
def test_isolated(n, amqp_url, leveret_broker, leveret_vhost, leveret, pytestconfig):
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    declared = channel.queue_declare("shared")
    assert declared.method.message_count == 0  # nobody else's message is here
    channel.basic_publish("", "shared", str(n).encode())
    assert leveret.wait_for_messages("shared", 1).messages_ready == 1
    connection.close()
    port = getattr(getattr(leveret_broker, "server", None), "port", None)
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "port": port,
              "vhost": leveret_vhost, "url": amqp_url}
    (pytestconfig.rootpath / f"record-{n}.json").write_text(json.dumps(record))
"""


def records(path: Path) -> list[dict[str, str]]:
    """What each test of XDIST_TESTS wrote."""
    return [json.loads(p.read_text()) for p in sorted(path.glob("record-*.json"))]


def test_xdist_one_broker_per_worker(project: pytest.Pytester) -> None:
    project.makepyfile(XDIST_TESTS)
    result = project.runpytest_subprocess("-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=6)
    seen = records(project.path)
    assert len(seen) == 6
    assert {r["worker"] for r in seen} == {"gw0", "gw1"}
    by_worker = {w: {r["port"] for r in seen if r["worker"] == w} for w in ("gw0", "gw1")}
    assert all(len(ports) == 1 for ports in by_worker.values())  # one broker per worker...
    assert by_worker["gw0"] != by_worker["gw1"]  # ...each its own
    assert len({r["vhost"] for r in seen}) == 6
