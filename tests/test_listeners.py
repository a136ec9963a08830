"""Listening sockets as RabbitMQ's: ``::`` serves IPv4 clients too (Erlang's dual-stack
listener), ``localhost`` is 127.0.0.1 and ::1, several hosts (``--host`` repeated, as
``listeners.tcp.N``) each get a socket on the one port and every bound address is listed;
the AMQPS port gives a client 10 s (handshake_timeout) to finish its TLS handshake instead
of asyncio's 60 s.

The IPv6 tests need ::1 on the loopback interface. Where it is missing (``ip -6 addr show
lo`` shows no ``inet6 ::1``), root can enable it with ``sysctl -w
net.ipv6.conf.lo.disable_ipv6=0``; the tests then fail saying so, they are never skipped.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pika
import pytest
from test_settings_tls import make_certificates

from leveret.cli import build_parser, config_from
from leveret.config import Config
from leveret.inspect import BrokerThread
from leveret.settings import resolve
from tests.control.conftest import start_node, stop_node
from tests.test_settings_errors import leveret, refused

IPV6_MISSING = (
    "::1 cannot be bound on this machine: enable IPv6 on loopback "
    "(sysctl -w net.ipv6.conf.lo.disable_ipv6=0) to run the IPv6 listener tests"
)


def require_ipv6_loopback() -> None:
    """Fail (never skip) when ::1 cannot be bound, saying how to enable it."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.fail(f"{IPV6_MISSING} ({exc})")


def declare_through(host: str, port: int) -> None:
    """A pika client connects to ``host`` and declares a queue."""
    params = pika.URLParameters(f"amqp://guest:guest@{host}:{port}/")
    connection = pika.BlockingConnection(params)
    try:
        assert connection.channel().queue_declare("", exclusive=True).method.queue
    finally:
        connection.close()


def overview_listeners(port: int) -> list[tuple[str, str, int]]:
    """``/api/overview``'s listeners as (protocol, ip_address, port)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/overview")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
    with urllib.request.urlopen(request, timeout=5) as response:
        body = json.load(response)
    return [(item["protocol"], item["ip_address"], item["port"]) for item in body["listeners"]]


def test_localhost_listens_on_both_loopback_addresses() -> None:
    # /etc/hosts often names only 127.0.0.1 localhost; RabbitMQ (Erlang's resolver) and
    # Leveret bind ::1 too, where Node's amqplib and others connect first.
    require_ipv6_loopback()
    broker = BrokerThread(Config(host="localhost", port=0, management_port=0)).start()
    try:
        port = broker.server.port
        for host in ("127.0.0.1", "[::1]"):
            declare_through(host, port)
        management = broker.server.management
        assert management is not None
        amqp = [item for item in overview_listeners(management.port) if item[0] == "amqp"]
        assert sorted(amqp) == [("amqp", "127.0.0.1", port), ("amqp", "::1", port)]
    finally:
        broker.stop()


def test_several_hosts_share_one_port_and_are_all_listed(tmp_path: Path) -> None:
    require_ipv6_loopback()
    certificates = make_certificates(tmp_path)
    broker = BrokerThread(
        Config(
            host=("127.0.0.1", "::1"),
            port=0,
            tls_port=0,
            tls_cert=certificates["server_pem"],
            tls_key=certificates["server_key"],
            management_port=0,
        )
    ).start()
    try:
        port, tls_port = broker.server.port, broker.server.tls_port
        assert tls_port is not None
        declare_through("127.0.0.1", port)
        declare_through("[::1]", port)
        management = broker.server.management
        assert management is not None
        listed = overview_listeners(management.port)
        amqp = sorted(item for item in listed if item[0].startswith("amqp"))
        assert amqp == [
            ("amqp", "127.0.0.1", port),
            ("amqp", "::1", port),
            ("amqp/ssl", "127.0.0.1", tls_port),
            ("amqp/ssl", "::1", tls_port),
        ]
    finally:
        broker.stop()


def test_host_repeated_a_variable_and_a_file_list_give_several_hosts(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--host", "127.0.0.1", "--host", "::1"])
    assert config_from(resolve(args, {})).hosts == ("127.0.0.1", "::1")
    serve = build_parser().parse_args(["serve"])
    assert resolve(serve, {"LEVERET_HOST": "localhost,::"}).values["host"] == ("localhost", "::")
    config = tmp_path / "leveret.toml"
    config.write_text('host = ["127.0.0.1", "::1"]\n')
    assert resolve(serve, {"LEVERET_CONFIG": str(config)}).values["host"] == ("127.0.0.1", "::1")
    config.write_text('host = "::"\n')
    assert resolve(serve, {"LEVERET_CONFIG": str(config)}).values["host"] == ("::",)


def test_an_address_that_cannot_be_bound_is_one_line_naming_it(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is on no interface of this machine.
    result = leveret(
        "serve", "--host", "127.0.0.1", "--host", "192.0.2.1", "--port", "0",
        "--management-port", "-1", "--prometheus-port", "-1", cwd=tmp_path,
    )  # fmt: skip
    line = refused(result, status=1)
    assert line.startswith("leveret: error: cannot listen on 192.0.2.1:"), line
    assert line.endswith(": cannot assign requested address"), line


def test_an_empty_host_list_in_the_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text("host = []\n")
    line = refused(leveret("serve", "--config", str(config), cwd=tmp_path), str(config))
    assert "key 'host'" in line and "at least one host" in line, line


def test_a_broker_on_the_ipv6_wildcard_serves_ipv4_and_ipv6_clients() -> None:
    require_ipv6_loopback()
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


def test_leveret_serve_host_localhost_serves_both_and_status_lists_them(tmp_path: Path) -> None:
    # The whole path: the flag, the settings, the server, `leveret ctl status`.
    require_ipv6_loopback()
    node = start_node(tmp_path / "data", "--host", "localhost")
    try:
        status = json.loads(node.ctl("status", "--formatter", "json").stdout)
        amqp = sorted(
            (item["interface"], item["port"])
            for item in status["listeners"]
            if item["protocol"] == "amqp"
        )
        assert amqp == [("127.0.0.1", node.port), ("::1", node.port)]
        for host in ("127.0.0.1", "[::1]"):
            declare_through(host, node.port)
    finally:
        stop_node(node)


def test_the_ipv6_wildcard_beside_ipv4_addresses_takes_ipv6_only() -> None:
    # --host 0.0.0.0 --host :: (RabbitMQ's two listeners for both families): the IPv4
    # socket serves IPv4, the :: one IPv6, on one port.
    require_ipv6_loopback()
    broker = BrokerThread(Config(host=("0.0.0.0", "::"), port=0)).start()
    try:
        assert sorted(broker.server.state.addresses) == [
            ("0.0.0.0", broker.server.port),
            ("::", broker.server.port),
        ]
        for host in ("127.0.0.1", "[::1]"):
            declare_through(host, broker.server.port)
    finally:
        broker.stop()
