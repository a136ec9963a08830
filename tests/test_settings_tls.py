"""Settings precedence (flag > environment > file > default), users from the config file,
and the AMQPS listener through aio-pika and pika with certificates made by the test."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from leveret.cli import build_parser, config_from
from leveret.config import Config
from leveret.node.auth import hash_password
from leveret.settings import resolve
from tests.conftest import BrokerThread


def settings_for(argv: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    args = build_parser().parse_args(["serve", *argv])
    return resolve(args, env)


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('port = 1111\nheartbeat = 11\nmax_connections = 7\nhost = "0.0.0.0"\n')
    settings = settings_for(
        ["--config", str(config), "--port", "3333"],
        {"LEVERET_PORT": "2222", "LEVERET_HEARTBEAT": "22"},
    )
    values = settings.values
    assert values["port"] == 3333  # flag
    assert values["heartbeat"] == 22  # environment over file
    assert values["max_connections"] == 7  # file over default
    assert values["host"] == ("0.0.0.0",)
    assert values["frame_max"] == 131072  # default


def test_config_file_from_environment_and_users_tables(tmp_path: Path) -> None:
    hashed = hash_password("h4sh")
    config = tmp_path / "leveret.toml"
    config.write_text(
        'vhosts = ["/", "orders"]\n'
        '[users.app]\npassword = "s3cret"\ntags = ["management"]\n'
        f'[users.ops]\npassword_hash = "{hashed}"\n'
        '[permissions.app."orders"]\nconfigure = "^app\\\\."\nwrite = ".*"\nread = ".*"\n'
    )
    settings = settings_for([], {"LEVERET_CONFIG": str(config)})
    built = config_from(settings)
    assert built.vhosts == ("/", "orders")
    access = built.access
    assert access is not None
    assert access.authenticate("app", "s3cret") is not None
    assert access.authenticate("ops", "h4sh") is not None
    assert access.authenticate("guest", "guest") is None  # only the configured users
    assert access.users["app"].tags == ["management"]
    assert access.can_access_vhost("app", "orders")
    assert not access.can_access_vhost("app", "/")


def test_configured_permissions_are_enforced(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text(
        'vhosts = ["/", "orders"]\n[users.app]\npassword = "s3cret"\n'
        '[permissions.app."orders"]\nconfigure = "^app\\\\."\nwrite = ".*"\nread = ".*"\n'
    )
    built = config_from(settings_for(["--config", str(config), "--port", "0"], {}))
    broker = BrokerThread(Config(port=0, vhosts=built.vhosts, access=built.access)).start()
    try:
        base = f"amqp://app:s3cret@127.0.0.1:{broker.server.port}/"
        connection = pika.BlockingConnection(pika.URLParameters(base + "orders"))
        channel = connection.channel()
        channel.queue_declare("app.jobs")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            channel.queue_declare("other.jobs")
        assert (err.value.reply_code, err.value.reply_text) == (
            403,
            "ACCESS_REFUSED - configure access to queue 'other.jobs' in vhost 'orders' "
            "refused for user 'app'",
        )
        connection.close()
        # No permissions on "/": refused at connection.open (530).
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            pika.BlockingConnection(pika.URLParameters(base + "%2F"))
        assert "NOT_ALLOWED - access to vhost '/' refused for user 'app'" in str(refused.value)
    finally:
        broker.stop()


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Test CA",
        "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, extra in (("server", ["-extfile", "san.cnf"]), ("client", [])):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *extra)  # fmt: skip
    return {p.stem + p.suffix.replace(".", "_"): p for p in directory.iterdir()}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_broker(certificates: dict[str, Path]):  # type: ignore[no-untyped-def]
    broker = BrokerThread(
        Config(
            port=0,
            tls_port=0,
            tls_cert=certificates["server_pem"],
            tls_key=certificates["server_key"],
            tls_ca=certificates["ca_pem"],
        )
    ).start()
    yield broker
    broker.stop()


def client_context(certificates: dict[str, Path], with_cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificates["ca_pem"]))
    if with_cert:
        context.load_cert_chain(certificates["client_pem"], certificates["client_key"])
    return context


async def test_aio_pika_over_mutual_tls(tls_broker, certificates) -> None:  # type: ignore[no-untyped-def]
    port = tls_broker.server.tls_port
    connection = await aio_pika.connect(
        host="127.0.0.1",
        port=port,
        login="guest",
        password="guest",
        ssl=True,
        ssl_context=client_context(certificates),
    )
    channel = await connection.channel()
    queue = await channel.declare_queue(exclusive=True)
    await channel.default_exchange.publish(aio_pika.Message(b"over tls"), queue.name)
    message = await queue.get(timeout=5)
    assert message.body == b"over tls"
    await connection.close()


def test_pika_over_mutual_tls(tls_broker, certificates) -> None:  # type: ignore[no-untyped-def]
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=tls_broker.server.tls_port,
        credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_context(certificates), "localhost"),
    )
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"pika tls")
    _method, _props, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"pika tls"
    connection.close()


async def test_tls_without_client_certificate_is_refused(tls_broker, certificates) -> None:  # type: ignore[no-untyped-def]
    context = client_context(certificates, with_cert=False)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", tls_broker.server.tls_port, ssl=context, server_hostname="localhost"
        )
        # TLS 1.3 reports a missing client certificate on the first read.
        writer.write(b"AMQP\x00\x00\x09\x01")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(10), 5)
        if not data:
            raise ConnectionError("closed")
