"""``leveret ctl`` runtime parameters, topic permissions, vhost and user limits and
authenticate_user against a broker process, with what a pika client sees after each
change, and rabbitmqctl's exit statuses for bad input."""

from __future__ import annotations

import json

import pika
import pika.exceptions
import pytest

from tests.control.conftest import Node


def connect(node: Node, vhost: str = "%2F") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url(vhost=vhost)))


def test_vhost_limits_through_parameters_and_limits_commands(node: Node) -> None:
    assert node.ctl("add_vhost", "vl").returncode == 0
    assert node.ctl("set_permissions", "-p", "vl", "guest", ".*", ".*", ".*").returncode == 0
    try:
        result = node.ctl("set_vhost_limits", "-p", "vl", '{"max-queues": 1}')
        assert result.returncode == 0, result.stderr
        assert result.stdout == ('Setting vhost limits to "{"max-queues": 1}" for vhost "vl" ...\n')
        listed = node.ctl("list_vhost_limits", "-p", "vl")
        assert listed.stdout.splitlines() == [
            'Listing limits for vhost "vl" ...',
            '{"max-queues":1}',
        ]
        every = node.ctl("-q", "list_vhost_limits", "--global").stdout.splitlines()
        assert every[0] == "vhost\tlimits" and 'vl\t{"max-queues":1}' in every
        assert node.rows("list_parameters", "-p", "vl") == [
            {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 1}}
        ]
        # A client sees the limit: the second queue is refused.
        connection = connect(node, "vl")
        channel = connection.channel()
        channel.queue_declare("vl.one")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("vl.two")
        assert refused.value.reply_code == 406
        connection.close()
        assert node.ctl("clear_vhost_limits", "-p", "vl").returncode == 0
        assert node.ctl("-q", "list_vhost_limits", "-p", "vl").stdout == ""
        # The same through set_parameter / clear_parameter.
        set_parameter = node.ctl(
            "set_parameter", "-p", "vl", "vhost-limits", "limits", '{"max-connections": 0}'
        )
        assert set_parameter.returncode == 0, set_parameter.stderr
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(node, "vl")
        cleared = node.ctl("clear_parameter", "-p", "vl", "vhost-limits", "limits")
        assert cleared.returncode == 0, cleared.stderr
        connect(node, "vl").close()
        assert node.rows("list_parameters", "-p", "vl") == []
    finally:
        node.ctl("delete_vhost", "vl")


def test_operator_policy_parameter(node: Node) -> None:
    value = json.dumps({"pattern": "^op\\.", "definition": {"max-length": 2}})
    result = node.ctl("set_parameter", "operator_policy", "cap", value)
    assert result.returncode == 0, result.stderr
    try:
        rows = node.rows("list_parameters")
        assert [row["name"] for row in rows if row["component"] == "operator_policy"] == ["cap"]
        connection = connect(node)
        channel = connection.channel()
        channel.queue_declare("op.q")
        for body in (b"1", b"2", b"3"):
            channel.basic_publish("", "op.q", body)
        channel.queue_declare("op.q")  # a round trip: the publishes are in
        assert channel.queue_declare("op.q", passive=True).method.message_count == 2
        channel.queue_delete("op.q")
        connection.close()
    finally:
        assert node.ctl("clear_parameter", "operator_policy", "cap").returncode == 0


def test_topic_permissions(node: Node) -> None:
    assert node.ctl("add_user", "tp", "tp-secret").returncode == 0
    assert node.ctl("set_permissions", "tp", ".*", ".*", ".*").returncode == 0
    try:
        result = node.ctl("set_topic_permissions", "tp", "amq.topic", "^allowed", ".*")
        assert result.returncode == 0, result.stderr
        assert result.stdout == (
            'Setting topic permissions on "amq.topic" for user "tp" in vhost "/" ...\n'
        )
        node.ctl("set_topic_permissions", "tp", "other.x", "^a", "^b")
        rows = node.rows("list_topic_permissions")
        assert {"user": "tp", "exchange": "amq.topic", "write": "^allowed", "read": ".*"} in rows
        # A client of the user is held to it.
        url = f"amqp://tp:tp-secret@127.0.0.1:{node.port}/%2F"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.basic_publish("amq.topic", "allowed.key", b"ok")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_publish("amq.topic", "denied.key", b"no")
            channel.queue_declare("", exclusive=True)  # a round trip to see the close
        assert refused.value.reply_code == 403
        connection.close()
        one = node.ctl("clear_topic_permissions", "tp", "amq.topic")
        assert one.returncode == 0, one.stderr
        left = [row for row in node.rows("list_topic_permissions") if row["user"] == "tp"]
        assert [row["exchange"] for row in left] == ["other.x"]
        assert node.ctl("clear_topic_permissions", "tp").returncode == 0
        assert [row for row in node.rows("list_topic_permissions") if row["user"] == "tp"] == []
    finally:
        node.ctl("delete_user", "tp")


def test_user_limits_and_authenticate_user(node: Node) -> None:
    assert node.ctl("add_user", "ul", "ul-secret").returncode == 0
    assert node.ctl("set_permissions", "ul", ".*", ".*", ".*").returncode == 0
    try:
        result = node.ctl("set_user_limits", "ul", '{"max-channels": 1}')
        assert result.returncode == 0, result.stderr
        assert node.ctl("-q", "list_user_limits", "--user", "ul").stdout == ('{"max-channels":1}\n')
        table = node.ctl("-q", "list_user_limits").stdout.splitlines()
        assert table[0] == "user\tlimits" and 'ul\t{"max-channels":1}' in table
        url = f"amqp://ul:ul-secret@127.0.0.1:{node.port}/%2F"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            connection.channel()
        assert node.ctl("clear_user_limits", "ul", "max-channels").returncode == 0
        assert node.ctl("-q", "list_user_limits", "--user", "ul").stdout == ""
        ok = node.ctl("authenticate_user", "ul", "ul-secret")
        assert ok.returncode == 0
        assert ok.stdout.splitlines() == ['Authenticating user "ul" ...', "Success"]
        assert node.ctl("-q", "authenticate_user", "ul", stdin="ul-secret\n").returncode == 0
        bad = node.ctl("authenticate_user", "ul", "wrong")
        assert bad.returncode == 65
        assert bad.stderr == (
            "leveret: error: failed to authenticate user \"ul\": user 'ul' - invalid credentials\n"
        )
    finally:
        node.ctl("delete_user", "ul")


@pytest.mark.parametrize(
    ("args", "status", "error"),
    [
        (("set_parameter", "-p", "nowhere", "vhost-limits", "limits", "{}"), 65, "'nowhere'"),
        (("set_parameter", "federation-upstream", "x", "{}"), 65, "component"),
        (("set_parameter", "vhost-limits", "limits", "{oops"), 65, "not valid JSON"),
        (("set_parameter", "vhost-limits", "limits", '{"max-x": 1}'), 65, "Unrecognised"),
        (("clear_parameter", "vhost-limits", "limits"), 65, "Parameter does not exist"),
        (("clear_parameter", "operator_policy", "none"), 65, "Parameter does not exist"),
        (("list_parameters", "-p", "nowhere"), 65, "'nowhere' does not exist"),
        (("set_topic_permissions", "nobody", "amq.topic", ".*", ".*"), 67, '"nobody"'),
        (("set_topic_permissions", "guest", "amq.topic", "(", ".*"), 65, "invalid_regexp"),
        (("set_topic_permissions", "-p", "nowhere", "guest", "x", ".*", ".*"), 65, "'nowhere'"),
        (("clear_topic_permissions", "nobody"), 67, '"nobody"'),
        (("list_topic_permissions", "-p", "nowhere"), 65, "'nowhere' does not exist"),
        (("set_vhost_limits", "{oops"), 65, "not valid JSON"),
        (("set_vhost_limits", '{"max-queues": "x"}'), 65, "max-queues"),
        (("set_vhost_limits", "[1]"), 65, "JSON object"),
        (("clear_vhost_limits", "-p", "nowhere"), 65, "'nowhere' does not exist"),
        (("list_vhost_limits", "-p", "nowhere"), 65, "'nowhere' does not exist"),
        (("set_user_limits", "nobody", "{}"), 67, '"nobody"'),
        (("set_user_limits", "guest", '{"max-queues": 1}'), 65, "Unrecognised"),
        (("clear_user_limits", "nobody", "all"), 67, '"nobody"'),
        (("list_user_limits", "--user", "nobody"), 67, '"nobody"'),
        (("authenticate_user", "nobody", "x"), 65, "failed to authenticate"),
    ],
)
def test_bad_input_is_one_line(node: Node, args: tuple[str, ...], status: int, error: str) -> None:
    result = node.ctl(*args)
    assert result.returncode == status, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("leveret: error: "), result.stderr
    assert error in lines[0]
