"""``leveret ctl inject_fault`` against a ``leveret serve`` process: each fault with a real
pika client, and one-line errors with rabbitmqctl's exit statuses for bad input."""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest

from tests.control.conftest import Node

pytestmark = pytest.mark.timeout(60)


def connect(node: Node, name: str | None = None) -> pika.BlockingConnection:
    params = pika.URLParameters(node.url())
    if name is not None:
        params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


def test_drop_and_close_connections(node: Node) -> None:
    victim = connect(node, "ctl-victim")
    closed = connect(node, "ctl-closed")
    try:
        dropped = node.ctl("inject_fault", "drop_connections", "--client", "ctl-victim")
        assert dropped.returncode == 0, dropped.stderr
        assert (
            dropped.stdout == "Injecting fault drop_connections into vhost '/' ...\n1 connections\n"
        )
        with pytest.raises(pika.exceptions.StreamLostError):
            victim.process_data_events(time_limit=5)
        result = node.ctl(
            "-q", "inject_fault", "close_connections", "--client", "ctl-closed", "--reason", "bye"
        )
        assert (result.returncode, result.stdout) == (0, "1 connections\n")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            closed.process_data_events(time_limit=5)
        assert (info.value.reply_code, info.value.reply_text) == (320, "CONNECTION_FORCED - bye")
    finally:
        for connection in (victim, closed):
            if connection.is_open:
                connection.close()


def test_alarms_cancel_and_delay(node: Node) -> None:
    assert node.ctl("-q", "inject_fault", "memory_alarm").returncode == 0
    alarms = node.diagnostics("-q", "check_local_alarms")
    assert alarms.returncode == 69 and "memory" in alarms.stderr
    assert node.ctl("-q", "inject_fault", "memory_alarm", "--off").returncode == 0
    assert node.ctl("-q", "inject_fault", "disk_alarm").returncode == 0
    assert "disk" in node.diagnostics("-q", "check_local_alarms").stderr
    assert node.ctl("-q", "inject_fault", "disk_alarm", "--off").returncode == 0
    assert node.diagnostics("-q", "check_local_alarms").returncode == 0

    connection = connect(node)
    try:
        channel = connection.channel()
        channel.queue_declare("ctl.cancel")
        cancelled: list[str] = []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        tag = channel.basic_consume("ctl.cancel", lambda *_: None)
        result = node.ctl("-q", "inject_fault", "cancel_consumers", "--queue", "ctl.cancel")
        assert (result.returncode, result.stdout) == (0, "1 consumers\n")
        while not cancelled:
            connection.process_data_events(time_limit=0.05)
        assert cancelled == [tag]

        assert node.ctl("-q", "inject_fault", "delay", "--ms", "200").returncode == 0
        start = time.monotonic()
        channel.queue_declare("ctl.cancel", passive=True)
        assert time.monotonic() - start >= 0.2
        assert node.ctl("-q", "inject_fault", "delay", "--ms", "0").returncode == 0
        channel.queue_delete("ctl.cancel")
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("args", "status", "error"),
    [
        (("delay", "--ms", "-1"), 64, "ms must be 0 or more, not -1.0"),
        (("delay",), 64, "delay needs ms"),
        (("explode",), 64, "unknown fault 'explode' (one of drop-connections, "),
        (("cancel_consumers", "--queue", "nope"), 65, "no queue 'nope' in vhost '/'"),
        (("-p", "nowhere", "drop_connections"), 65, "no vhost 'nowhere'"),
        (("memory_alarm", "--queue", "q"), 64, "memory-alarm takes no argument queue"),
    ],
)
def test_errors_are_one_line(node: Node, args: tuple[str, ...], status: int, error: str) -> None:
    result = node.ctl("inject_fault", *args)
    assert result.returncode == status, result.stderr
    assert result.stderr.startswith(f"leveret: error: {error}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_restart_keeps_the_node_and_its_durable_queues(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("ctl.durable", durable=True)
    channel.confirm_delivery()  # confirmed: on disk before the kill
    channel.basic_publish("", "ctl.durable", b"kept", pika.BasicProperties(delivery_mode=2))
    result = node.ctl("-q", "inject_fault", "restart")
    assert result.returncode == 0, result.stderr
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connection.process_data_events(time_limit=5)
    for _ in range(500):
        if node.diagnostics("-q", "ping").returncode == 0:
            break
        time.sleep(0.02)
    again = connect(node)  # the same port
    try:
        method, _props, body = again.channel().basic_get("ctl.durable", auto_ack=True)
        assert body == b"kept" and method is not None and method.redelivered
    finally:
        again.close()
    assert node.proc.poll() is None
