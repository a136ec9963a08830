"""``leveret ctl`` runtime commands and ``leveret diagnostics`` checks against a broker
process: the memory watermark and disk free limit as a pika client sees them
(connection.blocked / unblocked, amqp091-go's TestConnection_Close_WhenMemoryAlarmIsActive),
close_all_connections, the firehose, stop and await_startup, and the diagnostics."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pika
import pika.exceptions
import pytest

from leveret.node.memory import MemoryMonitor
from tests.control.conftest import ENV, Node, leveret, start_node, stop_node


def connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url()))


def wait_until(
    connection: pika.BlockingConnection, done: Callable[[], bool], seconds: float = 10.0
) -> None:
    """Serve the connection's events until ``done()`` (a failure after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        connection.process_data_events(time_limit=0.05)


def blocked_events(connection: pika.BlockingConnection) -> list[str]:
    """What the connection is told; it has published once, as RabbitMQ blocks (and tells)
    only connections that publish (docs/connection-blocked.md)."""
    events: list[str] = []
    connection.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
    connection.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
    connection.channel().basic_publish("", "nowhere", b"once")
    return events


def test_memory_watermark_blocks_and_unblocks_a_client(node: Node) -> None:
    """amqp091-go's test: set_vm_memory_high_watermark 0.0001 -> connection.blocked,
    then 0.4 -> connection.unblocked."""
    connection = connect(node)
    events = blocked_events(connection)
    try:
        low = node.ctl("set_vm_memory_high_watermark", "0.0001")
        assert low.returncode == 0, low.stderr
        assert low.stdout == "Setting memory threshold on leveret@localhost to 0.0001 ...\n"
        wait_until(connection, lambda: events == ["blocked"])
        alarms = node.diagnostics("alarms")
        assert alarms.returncode == 0
        assert "Memory alarm on node leveret@localhost" in alarms.stdout.splitlines()
        assert json.loads(node.diagnostics("alarms", "--formatter", "json").stdout) == [
            {"type": "memory", "node": "leveret@localhost"}
        ]
        assert node.diagnostics("check_local_alarms").returncode == 69
        high = node.ctl("set_vm_memory_high_watermark", "0.4")
        assert high.returncode == 0, high.stderr
        wait_until(connection, lambda: events == ["blocked", "unblocked"])
        assert node.diagnostics("check_local_alarms").returncode == 0
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
        connection.close()


def test_a_watermark_of_0_blocks_every_publisher(node: Node) -> None:
    """RabbitMQ's "disabling all publishing" (docs/memory.md): a fraction of 0 raises the
    memory alarm at once and keeps it until the mark is raised again."""
    connection = connect(node)
    events = blocked_events(connection)
    try:
        result = node.ctl("set_vm_memory_high_watermark", "0")
        assert result.returncode == 0, result.stderr
        wait_until(connection, lambda: events == ["blocked"])
        assert node.diagnostics("check_local_alarms").returncode == 69
        node.ctl("set_vm_memory_high_watermark", "0.4")
        wait_until(connection, lambda: events == ["blocked", "unblocked"])
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
        connection.close()


def test_absolute_watermark_with_units(node: Node) -> None:
    try:
        result = node.ctl("set_vm_memory_high_watermark", "absolute", "512MiB")
        assert result.returncode == 0, result.stderr
        assert (
            result.stdout == "Setting memory threshold on leveret@localhost to 512MiB bytes ...\n"
        )
        status = json.loads(node.ctl("status", "--formatter", "json").stdout)
        assert status["memory"]["high_watermark"] == 512 * 1024**2
        assert node.ctl("set_vm_memory_high_watermark", "absolute", "2GB").returncode == 0
        status = json.loads(node.ctl("status", "--formatter", "json").stdout)
        assert status["memory"]["high_watermark"] == 2 * 1000**3
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")


def test_disk_free_limit_blocks_and_unblocks_a_client(node: Node) -> None:
    connection = connect(node)
    events = blocked_events(connection)
    try:
        # More free space than any disk has: the alarm at once, from the last reading.
        huge = node.ctl("set_disk_free_limit", "1000PB")
        assert huge.returncode == 0, huge.stderr
        assert huge.stdout == "Setting disk free limit on leveret@localhost to 1000PB bytes ...\n"
        wait_until(connection, lambda: events == ["blocked"])
        status = json.loads(node.ctl("status", "--formatter", "json").stdout)
        assert status["disk"]["free_limit"] == 1000 * 1000**5
        assert status["alarms"] == ["disk"]
        assert node.ctl("set_disk_free_limit", "1MB").returncode == 0
        wait_until(connection, lambda: events == ["blocked", "unblocked"])
        relative = node.ctl("set_disk_free_limit", "mem_relative", "0.001")
        assert relative.returncode == 0, relative.stderr
        assert "to 0.001 times the total RAM ..." in relative.stdout
    finally:
        node.ctl("set_disk_free_limit", "50MB")
        connection.close()


@pytest.mark.parametrize(
    ("args", "status", "error"),
    [
        (("set_vm_memory_high_watermark", "0.0001x"), 65, "0.0001x"),
        (("set_vm_memory_high_watermark", "1.5"), 65, "at most 1"),
        (("set_vm_memory_high_watermark", "absolute", "2XB"), 65, "unknown unit 'XB'"),
        (("set_vm_memory_high_watermark", "absolute", "0.5"), 65, "should be an integer"),
        (("set_vm_memory_high_watermark",), 64, "not enough arguments"),
        (("set_vm_memory_high_watermark", "0.4", "0.5"), 64, "too many arguments"),
        (("set_disk_free_limit", "lots"), 65, "lots"),
        (("set_disk_free_limit", "mem_relative", "x"), 65, "multiple of the memory"),
        (("set_disk_free_limit", "mem_relative"), 64, "not enough arguments"),
        (("close_all_connections", "-p", "nowhere", "bye"), 65, "'nowhere' does not exist"),
        (("trace_on", "-p", "nowhere"), 65, "'nowhere' does not exist"),
        (("check_port_listener", "x"), 64, "port must be an integer"),
        (("check_port_listener", "1"), 69, "No listener for port 1"),
        (("memory_breakdown", "--unit", "tb"), 64, "unit must be one of"),
    ],
)
def test_bad_input_is_one_line(node: Node, args: tuple[str, ...], status: int, error: str) -> None:
    result = node.ctl(*args)
    assert result.returncode == status, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("leveret: error: "), result.stderr
    assert error in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("set_vm_memory_high_watermark", "0.4"),
        ("set_disk_free_limit", "50MB"),
        ("close_all_connections", "bye"),
        ("trace_on",),
        ("stop",),
        ("set_parameter", "vhost-limits", "limits", "{}"),
        ("set_topic_permissions", "guest", "amq.topic", ".*", ".*"),
        ("list_vhost_limits",),
        ("authenticate_user", "guest", "guest"),
    ],
)
def test_no_node_is_69(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = leveret("ctl", *args, "--data-dir", str(tmp_path))
    assert result.returncode == 69
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("leveret: error: unable to connect")


def test_close_all_connections(node: Node) -> None:
    assert node.ctl("add_vhost", "ca-other").returncode == 0
    assert node.ctl("set_permissions", "-p", "ca-other", "guest", ".*", ".*", ".*").returncode == 0
    mine = [connect(node), connect(node)]
    other = pika.BlockingConnection(pika.URLParameters(node.url(vhost="ca-other")))
    try:
        result = node.ctl("close_all_connections", "maintenance")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "Closing all connections in vhost / on node leveret@localhost ...",
            "Closed 2 connections",
        ]
        for connection in mine:
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                wait_until(connection, lambda: False)
            assert closed.value.reply_code == 320
            assert "maintenance" in closed.value.reply_text
        assert other.is_open
        other.process_data_events(time_limit=0)
        result = node.ctl("close_all_connections", "--global", "-q", "everyone")
        assert result.stdout == "Closed 1 connection\n"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            wait_until(other, lambda: False)
    finally:
        node.ctl("delete_vhost", "ca-other")


def test_trace_on_and_off(node: Node) -> None:
    on = node.ctl("trace_on")
    assert on.stdout.splitlines() == [
        'Starting tracing for vhost "/" ...',
        "Trace enabled for vhost /",
    ]
    rows = node.rows("list_vhosts", "name", "tracing")
    assert {"name": "/", "tracing": True} in rows
    connection = connect(node)
    channel = connection.channel()
    traced = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(traced, "amq.rabbitmq.trace", "publish.#")
    try:
        channel.basic_publish("", "nowhere", b"seen")
        method, _props, body = None, None, b""
        deadline = time.monotonic() + 10
        while method is None:
            assert time.monotonic() < deadline
            method, _props, body = channel.basic_get(traced, auto_ack=True)
        assert method.routing_key == "publish." and body == b"seen"
    finally:
        off = node.ctl("trace_off")
        assert off.stdout.splitlines()[-1] == "Trace disabled for vhost /"
        connection.close()
    assert {"name": "/", "tracing": False} in node.rows("list_vhosts", "name", "tracing")


def test_diagnostics(node: Node) -> None:
    running = node.diagnostics("check_running")
    assert running.returncode == 0
    assert running.stdout.splitlines()[-1] == (
        "RabbitMQ on node leveret@localhost is fully booted and running"
    )
    listeners = node.diagnostics("-q", "listeners")
    assert listeners.stdout == (
        f"Interface: 127.0.0.1, port: {node.port}, protocol: amqp, "
        "purpose: AMQP 0-9-1 and AMQP 1.0\n"
    )
    found = json.loads(node.diagnostics("listeners", "--formatter", "json").stdout)
    assert [item["port"] for item in found] == [node.port]
    connectivity = node.diagnostics("-q", "check_port_connectivity")
    assert connectivity.returncode == 0, connectivity.stderr
    assert connectivity.stdout == (
        f"Successfully connected to ports {node.port} on node leveret@localhost.\n"
    )
    listener = node.diagnostics("-q", "check_port_listener", str(node.port))
    assert listener.returncode == 0
    assert listener.stdout == (
        f"A listener for port {node.port} is running on node leveret@localhost.\n"
    )
    assert node.diagnostics("-q", "server_version").stdout == "3.13.7\n"
    assert node.diagnostics("-q", "alarms").stdout == (
        "Node leveret@localhost reported no alarms, local or clusterwide\n"
    )
    breakdown = json.loads(node.diagnostics("memory_breakdown", "--formatter", "json").stdout)
    assert set(breakdown) == {"queue_procs", "other_proc", "total"}
    lines = node.diagnostics("-q", "memory_breakdown", "--unit", "mb").stdout.splitlines()
    assert any(line.startswith("queue_procs: ") and line.endswith("%)") for line in lines)
    environment = json.loads(node.ctl("environment", "--formatter", "json").stdout)
    assert environment["data_dir"] == str(node.data_dir)
    assert environment["vm_memory_high_watermark_bytes"] > 0
    report = node.ctl("report")
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith("Reporting server status of node leveret@localhost ...\n")
    assert "list_queues -p /:" in report.stdout
    status = json.loads(node.diagnostics("status", "--formatter", "json").stdout)
    assert status["pid"] == node.proc.pid


def test_stop_and_await_startup(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(data_dir)
    try:
        waited = node.diagnostics("await_startup", "-t", "30")
        assert waited.returncode == 0, waited.stderr
        stopped = node.ctl("stop")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == "Stopping and halting node leveret@localhost ...\n"
        # stop returns once the node is down: its process exits cleanly (SIGTERM's path).
        assert node.proc.wait(15) == 0
        assert node.diagnostics("check_running").returncode == 69
        late = node.ctl("await_startup", "-t", "0.3")
        assert late.returncode == 75
        assert late.stderr.startswith("leveret: error: node leveret@localhost did not start")
    finally:
        stop_node(node)


def test_set_limit_judges_the_process_against_the_new_mark() -> None:
    """MemoryMonitor.set_limit: a mark under the RSS sets the alarm with no message held;
    raising it back clears it; a mark under the messages held sets it too."""
    changes: list[bool] = []
    rss = [50_000_000]
    monitor = MemoryMonitor(1 << 40, changes.append, sample_rss=lambda: rss[0], trim=None)
    monitor.set_limit(1_000_000)
    assert monitor.alarm and changes == [True]
    monitor.set_limit(1 << 40)
    assert not monitor.alarm and changes == [True, False]
    rss[0] = 1000  # now the messages alone are over the mark
    monitor.add(5000)
    monitor.set_limit(4000)
    assert monitor.alarm and changes == [True, False, True]


def test_p_before_the_command_and_on_every_listing(node: Node) -> None:
    assert node.ctl("add_vhost", "pv").returncode == 0
    try:
        node.ctl("-p", "pv", "set_vhost_limits", '{"max-queues": 4}')
        assert node.rows("-p", "pv", "list_parameters") == [
            {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 4}}
        ]
        assert node.rows("list_parameters") == []  # the default vhost, /
        for listing in ("list_connections", "list_channels", "list_users", "list_vhosts"):
            result = node.ctl("-q", listing, "-p", "pv")
            assert result.returncode == 0, (listing, result.stderr)
    finally:
        node.ctl("delete_vhost", "pv")


def test_a_rabbitmqctl_shim_drives_the_alarm(node: Node, tmp_path: Path) -> None:
    """What a client suite's helper does (amqp091-go: ``rabbitmqctl
    set_vm_memory_high_watermark 0.0001``, then ``0.4``) through a ``rabbitmqctl`` that is
    ``exec leveret ctl "$@"``, the node found by LEVERET_DATA_DIR."""
    shim = tmp_path / "rabbitmqctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m leveret ctl "$@"\n')
    shim.chmod(0o755)
    env = {**ENV, "LEVERET_DATA_DIR": str(node.data_dir)}
    connection = connect(node)
    events = blocked_events(connection)
    try:
        for value, expected in (("0.0001", ["blocked"]), ("0.4", ["blocked", "unblocked"])):
            run = subprocess.run(
                [str(shim), "set_vm_memory_high_watermark", value],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert run.returncode == 0, run.stderr
            wait_until(connection, lambda expected=expected: events == expected)
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
        connection.close()


def test_stop_refuses_a_broker_inside_another_program(tmp_path: Path) -> None:
    """A broker embedded in a test run has no graceful SIGTERM path: stop says so (70)
    instead of killing the host process."""
    from leveret.config import Config
    from leveret.inspect.brokerthread import BrokerThread

    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    socket_path = directory / "control.sock"
    config = Config(host="127.0.0.1", port=0, control=True, control_socket=socket_path)
    with BrokerThread(config):
        result = leveret("ctl", "stop", "--control-socket", str(socket_path))
        assert result.returncode == 70
        assert result.stderr == (
            "leveret: error: node leveret@localhost cannot stop itself: it was not started "
            "by `leveret serve`\n"
        )
        assert (
            leveret(
                "diagnostics", "-q", "check_running", "--control-socket", str(socket_path)
            ).returncode
            == 0
        )
