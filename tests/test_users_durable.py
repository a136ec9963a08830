"""Users, permissions and vhosts made at run time survive a restart with a data dir."""

from __future__ import annotations

import json
from pathlib import Path

import pika
import pika.exceptions
import pytest

from leveret.config import Config
from leveret.exchanges.policies import parse as parse_policy
from leveret.node.auth import Permission, TopicPermission
from tests.conftest import BrokerThread


def test_users_permissions_and_vhosts_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:

        def setup() -> None:
            server = broker.server
            server.state.add_vhost("orders")
            server.state.access.add_user("app", password="s3cret", tags=["management"])
            server.state.access.set_permissions("app", "orders", Permission("^app\\.", ".*", ".*"))

        broker.call(setup)
    finally:
        broker.stop()
    saved = json.loads((tmp_path / "users.json").read_text())
    assert "orders" in saved["vhosts"]
    assert {u["name"] for u in saved["users"]} == {"guest", "app"}

    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        url = f"amqp://app:s3cret@127.0.0.1:{again.server.port}/orders"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.queue_declare("app.jobs")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            channel.queue_declare("other")
        assert err.value.reply_code == 403
        connection.close()
        assert again.server.state.access.users["app"].tags == ["management"]
    finally:
        again.stop()


def test_vhost_and_user_limits_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:

        def setup() -> None:
            server = broker.server
            server.state.add_vhost("capped")
            server.state.access.set_permissions("guest", "capped", Permission())
            server.state.set_vhost_limits("capped", {"max-queues": 1})
            server.state.access.set_user_limits("guest", {"max-channels": 1})

        broker.call(setup)
    finally:
        broker.stop()

    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        url = f"amqp://guest:guest@127.0.0.1:{again.server.port}/capped"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.queue_declare("only", exclusive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match=r"queue limit .* \(1\)"):
            channel.queue_declare("second", exclusive=True)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match=r"user limit of \(1\)"):
            connection.channel()
            connection.channel()
    finally:
        again.stop()


def test_topic_permissions_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:

        def setup() -> None:
            topic = TopicPermission(write="^{username}\\.", read=".*")
            broker.server.state.access.set_topic_permission("guest", "/", "amq.topic", topic)

        broker.call(setup)
    finally:
        broker.stop()

    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        url = f"amqp://guest:guest@127.0.0.1:{again.server.port}/"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", "guest.news", b"allowed")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="write access to topic"):
            channel.basic_publish("amq.topic", "other.news", b"refused")
        connection.close()
    finally:
        again.stop()


def test_operator_policies_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:

        def setup() -> None:
            body = {"pattern": "^capped$", "definition": {"max-length": 1}}
            broker.server.state.set_policy(
                parse_policy("/", "cap", body, operator=True), operator=True
            )

        broker.call(setup)
    finally:
        broker.stop()

    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        assert list(again.server.state.vhosts["/"].operator_policies) == ["cap"]
        assert again.server.state.vhosts["/"].policies == {}
        url = f"amqp://guest:guest@127.0.0.1:{again.server.port}/"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.queue_declare("capped", exclusive=True)
        for body in (b"first", b"second"):
            channel.basic_publish("", "capped", body)
        assert channel.queue_declare("capped", passive=True).method.message_count == 1
        connection.close()
    finally:
        again.stop()


def test_a_saved_user_the_configuration_no_longer_names_is_logged_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = BrokerThread(
        Config(port=0, data_dir=tmp_path, users={"guest": "guest", "bob": "b0b"})
    ).start()
    try:
        # A change made at run time writes users.json, which wins from then on.
        first.call(lambda: first.server.state.add_vhost("orders"))
    finally:
        first.stop()
    with caplog.at_level("WARNING", logger="leveret.server"):
        again = BrokerThread(Config(port=0, data_dir=tmp_path, users={"guest": "guest"})).start()
    try:
        # Still allowed (the saved database wins, as RabbitMQ seeds users once), but said.
        url = f"amqp://bob:b0b@127.0.0.1:{again.server.port}/"
        pika.BlockingConnection(pika.URLParameters(url)).close()
    finally:
        again.stop()
    warnings = [r.getMessage() for r in caplog.records if "does not name" in r.getMessage()]
    assert warnings == [
        f"{tmp_path / 'users.json'} keeps users that the configuration does not name, with "
        "their permissions: bob"
    ]


def test_a_users_hashing_algorithm_survives_a_restart(tmp_path: Path) -> None:
    """A user imported with a SHA-512 hash (RabbitMQ's password_hashing_module) keeps its
    algorithm in users.json, and logs in after a restart."""
    import base64
    import hashlib

    salt = b"\x01\x02\x03\x04"
    digest = hashlib.sha512(salt + b"long-pw").digest()
    password_hash = base64.b64encode(salt + digest).decode()
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:

        def setup() -> None:
            access = broker.server.state.access
            access.add_user(
                "s512",
                password_hash=password_hash,
                hashing_algorithm="rabbit_password_hashing_sha512",
            )
            access.set_permissions("s512", "/", Permission())

        broker.call(setup)
    finally:
        broker.stop()
    saved = json.loads((tmp_path / "users.json").read_text())
    [user] = [u for u in saved["users"] if u["name"] == "s512"]
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha512"
    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        url = f"amqp://s512:long-pw@127.0.0.1:{again.server.port}/"
        pika.BlockingConnection(pika.URLParameters(url)).close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(url.replace("long-pw", "wrong")))
    finally:
        again.stop()
