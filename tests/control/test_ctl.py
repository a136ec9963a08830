"""``leveret ctl`` / ``leveret diagnostics`` against a broker process: every command, both
formatters, RabbitMQ's texts and exit statuses for the error cases, and what a client
of the broker sees after each change."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.control.conftest import Node, leveret, start_node, stop_node


def connect(
    node: Node, user: str = "guest", password: str = "guest", vhost: str = "%2F"
) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url(user, password, vhost)))


def refused(node: Node, user: str, password: str, vhost: str = "%2F") -> bool:
    try:
        connect(node, user, password, vhost).close()
    except pika.exceptions.AMQPConnectionError:
        return True
    return False


def test_ping_and_status(node: Node) -> None:
    ping = node.diagnostics("ping")
    assert ping.returncode == 0, ping.stderr
    assert ping.stdout.splitlines() == [
        "Will ping leveret@localhost. This only checks if the node answers on its control socket.",
        "Ping succeeded",
    ]
    assert node.ctl("-q", "ping").stdout == "Ping succeeded\n"
    table = node.ctl("status")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("Status of node leveret@localhost ...\nRuntime\n")
    assert f"OS PID: {node.proc.pid}" in table.stdout
    assert f"Data directory: {node.data_dir}" in table.stdout
    assert f"Interface: 127.0.0.1, port: {node.port}, protocol: amqp" in table.stdout
    status = json.loads(node.diagnostics("status", "--formatter", "json").stdout)
    assert status["pid"] == node.proc.pid
    assert status["alarms"] == []
    assert status["memory"]["high_watermark"] > 0
    alarms = node.diagnostics("check_local_alarms")
    assert alarms.returncode == 0
    assert alarms.stdout.endswith("Node leveret@localhost reported no local alarms\n")


def test_list_queues_columns_vhosts_and_formatters(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("lq.jobs", durable=True, arguments={"x-max-priority": 5})
    for body in (b"a", b"bb"):
        channel.basic_publish("", "lq.jobs", body)
    try:
        table = node.ctl("list_queues", "name", "messages", "durable", "arguments", "message_bytes")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[:3] == [
            "Timeout: 60 seconds ...",
            "Listing queues for vhost / ...",
            "name\tmessages\tdurable\targuments\tmessage_bytes",
        ]
        assert 'lq.jobs\t2\ttrue\t{"x-max-priority":5}\t3' in lines
        # The default columns are name and messages; -s drops banners and headers.
        assert "lq.jobs\t2" in node.ctl("-s", "list_queues").stdout.splitlines()
        quiet = node.ctl("list_queues", "-q", "--no-table-headers", "name").stdout.splitlines()
        assert "lq.jobs" in quiet and "name" not in quiet
        rows = node.rows("list_queues", "name", "messages_ready", "consumers", "type")
        assert {"name": "lq.jobs", "messages_ready": 2, "consumers": 0, "type": "classic"} in rows
        assert list(rows[0]) == ["name", "messages_ready", "consumers", "type"]
        # Another vhost has its own queues.
        assert node.ctl("add_vhost", "lq-other").returncode == 0
        assert node.rows("list_queues", "-p", "lq-other") == []
    finally:
        channel.queue_delete("lq.jobs")
        connection.close()
        node.ctl("delete_vhost", "lq-other")


def test_list_exchanges_and_bindings(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.exchange_declare("lx.events", "topic", durable=True)
    channel.queue_declare("lx.audit")
    channel.queue_bind("lx.audit", "lx.events", "order.#")
    try:
        exchanges = node.rows("list_exchanges", "name", "type", "durable", "internal")
        assert {
            "name": "lx.events",
            "type": "topic",
            "durable": True,
            "internal": False,
        } in exchanges
        assert {
            "name": "amq.topic",
            "type": "topic",
            "durable": True,
            "internal": False,
        } in exchanges
        assert "lx.events\ttopic" in node.ctl("list_exchanges").stdout.splitlines()
        bindings = node.ctl("-q", "list_bindings").stdout.splitlines()
        assert bindings[0] == (
            "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments"
        )
        assert "lx.events\texchange\tlx.audit\tqueue\torder.#\t{}" in bindings
        assert "\texchange\tlx.audit\tqueue\tlx.audit\t{}" in bindings  # the default exchange's
    finally:
        channel.exchange_delete("lx.events")
        channel.queue_delete("lx.audit")
        connection.close()


def test_connections_channels_consumers_and_close_connection(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=7)
    channel.queue_declare("lc.work")
    tag = channel.basic_consume("lc.work", lambda *args: None)
    local_port = connection._impl._transport._sock.getsockname()[1]
    try:
        connections = node.rows("list_connections", "pid", "user", "vhost", "peer_port", "state")
        mine = [row for row in connections if row["peer_port"] == local_port]
        assert len(mine) == 1
        assert mine[0]["user"] == "guest" and mine[0]["vhost"] == "/"
        assert mine[0]["state"] == "running"
        name = str(mine[0]["pid"])
        assert name == f"127.0.0.1:{local_port} -> 127.0.0.1:{node.port}"
        table = node.ctl("-q", "list_connections").stdout.splitlines()
        assert table[0] == "user\tpeer_host\tpeer_port\tstate"
        assert f"guest\t127.0.0.1\t{local_port}\trunning" in table
        channels = node.rows("list_channels")
        assert {
            "pid": f"{name} (1)",
            "user": "guest",
            "consumer_count": 1,
            "messages_unacknowledged": 0,
        } in channels
        consumers = node.rows(
            "list_consumers", "queue_name", "consumer_tag", "prefetch_count", "ack_required"
        )
        assert {
            "queue_name": "lc.work",
            "consumer_tag": tag,
            "prefetch_count": 7,
            "ack_required": True,
        } in consumers
        closed = node.ctl("close_connection", name, "maintenance window")
        assert closed.returncode == 0, closed.stderr
        assert closed.stdout == f"Closing connection {name}, reason: maintenance window...\n"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            connection.process_data_events(time_limit=5)
        assert info.value.reply_code == 320
        assert info.value.reply_text == "CONNECTION_FORCED - maintenance window"
        assert all(
            row["peer_port"] != local_port for row in node.rows("list_connections", "peer_port")
        )
    finally:
        if connection.is_open:
            connection.close()
        node.ctl("delete_queue", "lc.work")
    missing = node.ctl("close_connection", "127.0.0.1:1 -> 127.0.0.1:2", "x")
    assert missing.returncode == 65
    assert missing.stderr == "leveret: error: Connection '127.0.0.1:1 -> 127.0.0.1:2' not found\n"


def test_users_passwords_tags_and_permissions(node: Node) -> None:
    added = node.ctl("add_user", "alice", "first")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith('Adding user "alice" ...\nDone.')
    try:
        # No permissions yet: RabbitMQ refuses the vhost.
        assert refused(node, "alice", "first")
        granted = node.ctl("set_permissions", "-p", "/", "alice", "^alice\\.", ".*", ".*")
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout == 'Setting permissions for user "alice" in vhost "/" ...\n'
        connection = connect(node, "alice", "first")
        channel = connection.channel()
        channel.queue_declare("alice.q")  # configure allowed by the pattern
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("bob.q")
        assert info.value.reply_code == 403
        connection.close()
        assert {
            "user": "alice",
            "configure": "^alice\\.",
            "write": ".*",
            "read": ".*",
        } in node.rows("list_permissions")
        # change_password reads the password from stdin when it is not given.
        assert node.ctl("change_password", "alice", stdin="second\n").returncode == 0
        assert refused(node, "alice", "first")
        connect(node, "alice", "second").close()
        assert node.ctl("set_user_tags", "alice", "monitoring", "policymaker").returncode == 0
        users = node.ctl("-q", "list_users").stdout.splitlines()
        assert "alice\t[monitoring, policymaker]" in users
        assert "guest\t[administrator]" in users
        cleared = node.ctl("clear_permissions", "alice")
        assert cleared.returncode == 0
        assert refused(node, "alice", "second")
        exists = node.ctl("add_user", "alice", "again")
        assert (exists.returncode, exists.stderr) == (
            70,
            'leveret: error: User "alice" already exists\n',
        )
        bad = node.ctl("set_permissions", "alice", "(", ".*", ".*")
        assert bad.returncode == 65
        assert bad.stderr.startswith('leveret: error: ["invalid_regexp", "("')
        vhost = node.ctl("set_permissions", "-p", "nope", "alice", ".*", ".*", ".*")
        assert (vhost.returncode, vhost.stderr) == (
            65,
            "leveret: error: Virtual host 'nope' does not exist\n",
        )
    finally:
        deleted = node.ctl("delete_user", "alice")
    assert deleted.returncode == 0
    assert refused(node, "alice", "second")
    gone = node.ctl("delete_user", "alice")
    assert (gone.returncode, gone.stderr) == (67, 'leveret: error: User "alice" does not exist\n')
    unknown = node.ctl("set_permissions", "nobody-here", ".*", ".*", ".*")
    assert (unknown.returncode, unknown.stderr) == (
        67,
        'leveret: error: User "nobody-here" does not exist\n',
    )
    empty = node.ctl("add_user", "carol", stdin="")
    assert (empty.returncode, empty.stderr) == (
        65,
        "leveret: error: Password is not provided via argument or stdin\n",
    )


def test_vhosts(node: Node) -> None:
    added = node.ctl("add_vhost", "vh-a", "--description", "team A", "--tags", "a,b")
    assert added.returncode == 0, added.stderr
    assert added.stdout == 'Adding vhost "vh-a" ...\n'
    assert {
        "name": "vh-a",
        "description": "team A",
        "tags": ["a", "b"],
        "messages": 0,
    } in node.rows("list_vhosts", "name", "description", "tags", "messages")
    assert node.ctl("set_permissions", "-p", "vh-a", "guest", ".*", ".*", ".*").returncode == 0
    connection = connect(node, vhost="vh-a")
    deleted = node.ctl("delete_vhost", "vh-a")
    assert deleted.returncode == 0, deleted.stderr
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.process_data_events(time_limit=5)
    assert info.value.reply_code == 320
    again = node.ctl("delete_vhost", "vh-a")
    assert (again.returncode, again.stderr) == (
        65,
        "leveret: error: Virtual host 'vh-a' does not exist\n",
    )
    assert "vh-a" not in [row["name"] for row in node.rows("list_vhosts")]


def test_policies(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("pol.capped")
    try:
        set_ = node.ctl(
            "set_policy",
            "cap",
            "^pol\\.",
            '{"max-length": 2}',
            "--apply-to",
            "queues",
            "--priority",
            "4",
        )
        assert set_.returncode == 0, set_.stderr
        assert set_.stdout == (
            'Setting policy "cap" for pattern "^pol\\." to "{"max-length": 2}" with priority "4" '
            'for vhost "/" ...\n'
        )
        for body in (b"1", b"2", b"3"):
            channel.basic_publish("", "pol.capped", body)
        assert {"name": "pol.capped", "messages": 2, "policy": "cap"} in node.rows(
            "list_queues", "name", "messages", "policy"
        )
        assert {
            "vhost": "/",
            "name": "cap",
            "pattern": "^pol\\.",
            "apply_to": "queues",
            "definition": {"max-length": 2},
            "priority": 4,
        } in node.rows("list_policies")
        # Refused with the text the management API gives (exchanges/policies.py).
        bad = node.ctl("set_policy", "bad", ".*", '{"max-length": "x"}')
        assert bad.returncode == 65
        assert (
            bad.stderr
            == 'leveret: error: Validation failed <<"x">> is not a valid maximum length\n'
        )
        junk = node.ctl("set_policy", "bad", ".*", "{max")
        assert junk.returncode == 65 and junk.stderr.startswith(
            "leveret: error: definition is not valid JSON"
        )
        assert node.ctl("clear_policy", "cap").returncode == 0
        channel.basic_publish("", "pol.capped", b"4")
        assert {"name": "pol.capped", "messages": 3, "policy": ""} in node.rows(
            "list_queues", "name", "messages", "policy"
        )
        missing = node.ctl("clear_policy", "cap")
        assert (missing.returncode, missing.stderr) == (
            65,
            "leveret: error: Parameter does not exist\n",
        )
    finally:
        channel.queue_delete("pol.capped")
        connection.close()


def test_export_and_import_definitions(node: Node, tmp_path: Path) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.exchange_declare("def.x", "fanout", durable=True)
    channel.queue_declare("def.q", durable=True, arguments={"x-message-ttl": 60000})
    channel.queue_bind("def.q", "def.x")
    connection.close()
    path = tmp_path / "definitions.json"
    exported = node.ctl("export_definitions", str(path))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == f'Exporting definitions in JSON to a file at "{path}" ...\n'
    document = json.loads(path.read_text())
    assert {
        "name": "def.q",
        "vhost": "/",
        "type": "classic",
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-message-ttl": 60000},
    } in document["queues"]
    assert "guest" in [user["name"] for user in document["users"]]
    # "-" writes the document to stdout, without a banner.
    assert json.loads(node.ctl("export_definitions", "-").stdout) == document
    assert node.ctl("delete_queue", "def.q").returncode == 0
    channel = connect(node).channel()
    channel.exchange_delete("def.x")
    imported = node.ctl("import_definitions", str(path))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == f'Importing definitions in JSON from a file at "{path}" ...\n'
    assert {"source_name": "def.x", "destination_name": "def.q"} in [
        {k: row[k] for k in ("source_name", "destination_name")}
        for row in node.rows("list_bindings")
    ]
    # An inequivalent queue is refused with the management API's reason, from stdin too.
    clash = {"queues": [{"name": "def.q", "vhost": "/", "durable": False, "arguments": {}}]}
    refused_import = node.ctl("import_definitions", "-", stdin=json.dumps(clash))
    assert refused_import.returncode == 65
    assert refused_import.stderr == (
        "leveret: error: precondition_failed: inequivalent arg 'durable' for queue 'def.q' "
        "in vhost '/': received 'false' but current is 'true'\n"
    )
    absent = node.ctl("import_definitions", str(tmp_path / "none.json"))
    assert absent.returncode == 65
    missing = tmp_path / "none.json"
    assert absent.stderr == (
        f"leveret: error: import_definitions: {missing}: No such file or directory\n"
    )
    assert node.ctl("delete_queue", "def.q").returncode == 0
    channel.exchange_delete("def.x")


def test_purge_and_delete_queue(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("pq.a")
    channel.queue_declare("pq.b")
    for _ in range(3):
        channel.basic_publish("", "pq.a", b"m")
    purged = node.ctl("purge_queue", "pq.a")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout == "Purging queue 'pq.a' in vhost '/' ...\n"
    assert channel.queue_declare("pq.a", passive=True).method.message_count == 0
    channel.basic_publish("", "pq.a", b"m")
    not_empty = node.ctl("delete_queue", "pq.a", "--if-empty")
    assert (not_empty.returncode, not_empty.stderr) == (64, "leveret: error: Queue is not empty\n")
    channel.basic_consume("pq.b", lambda *args: None)
    in_use = node.ctl("delete_queue", "-u", "pq.b")
    assert (in_use.returncode, in_use.stderr) == (64, "leveret: error: Queue is in use\n")
    deleted = node.ctl("delete_queue", "pq.a")
    assert deleted.returncode == 0
    assert deleted.stdout == (
        "Deleting queue 'pq.a' on vhost '/' ...\nQueue was successfully deleted with 1 messages\n"
    )
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("pq.a", passive=True)
    assert info.value.reply_code == 404
    connection.close()
    for command in ("delete_queue", "purge_queue"):
        missing = node.ctl(command, "pq.none")
        assert (missing.returncode, missing.stderr) == (64, "leveret: error: Queue not found\n")
    assert node.ctl("delete_queue", "pq.b").returncode == 0


def test_stream_purge_is_refused(node: Node) -> None:
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("st.log", durable=True, arguments={"x-queue-type": "stream"})
    try:
        refused_purge = node.ctl("purge_queue", "st.log")
        assert refused_purge.returncode == 70
        assert refused_purge.stderr.startswith(
            "leveret: error: queue.purge not supported by stream queues"
        )
    finally:
        channel.queue_delete("st.log")
        connection.close()


def test_bad_input_is_one_line(node: Node, tmp_path: Path) -> None:
    key = node.ctl("list_queues", "name", "pid")
    assert key.returncode == 64
    assert key.stderr.startswith(
        "leveret: error: Info key(s) pid are not supported; supported info keys: name,"
    )
    assert key.stderr.count("\n") == 1
    vhost = node.ctl("list_exchanges", "-p", "nope")
    assert (vhost.returncode, vhost.stderr) == (
        65,
        "leveret: error: Virtual host 'nope' does not exist\n",
    )
    usage = node.ctl("add_vhost")
    assert usage.returncode == 64  # rabbitmqctl's usage status
    assert usage.stderr.startswith("leveret: error: the following arguments are required: name")
    # diagnostics only reads: no user commands there; an unknown command is rabbitmqctl's
    # usage error, 64, as is an unknown flag.
    unknown = leveret("diagnostics", "add_user", "x", "y")
    assert unknown.returncode == 64
    assert unknown.stderr.count("\n") == 1 and "invalid choice: 'add_user'" in unknown.stderr
    assert leveret("ctl", "list_queues", "--no-such-flag").returncode == 64
    # No node behind the socket: one line naming it, exit 69 (rabbitmqctl's nodedown).
    down = leveret("diagnostics", "ping", "--data-dir", str(tmp_path))
    assert down.returncode == 69
    assert down.stderr.startswith(
        f"leveret: error: unable to connect to node leveret@localhost: control socket "
        f"{tmp_path / 'control.sock'}: No such file or directory"
    )
    assert down.stderr.count("\n") == 1 and "Traceback" not in down.stderr


def test_a_listing_streams_while_clients_change_things(node: Node) -> None:
    """A listing is sent in batches a loop turn apart: queues deleted meanwhile do not
    break it."""
    connection = connect(node)
    channel = connection.channel()
    names = [f"churn.{i}" for i in range(600)]
    for name in names:
        channel.queue_declare(name)
    stop = threading.Event()

    def churn() -> None:
        other = connect(node)
        ch = other.channel()
        while not stop.is_set():
            for name in names[::7]:
                ch.queue_delete(name)
                ch.queue_declare(name)
        other.close()

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(3):
            result = node.ctl("-s", "list_queues", "name", "messages")
            assert result.returncode == 0, result.stderr
            assert (
                len([line for line in result.stdout.splitlines() if line.startswith("churn.")])
                >= 500
            )
    finally:
        stop.set()
        worker.join()
        for name in names:
            channel.queue_delete(name)
        connection.close()


def test_check_local_alarms_fails_under_the_memory_alarm(tmp_path: Path) -> None:
    node = start_node(tmp_path / "data", "--memory-high-watermark", "100000")
    try:
        connection = connect(node)
        channel = connection.channel()
        channel.queue_declare("alarm.q")
        # Over the mark in small messages: publishers are blocked once one completes. (One
        # 200 KB message could be cut off mid-body by the block; its bytes, held by the
        # connection, are not in the queue, so a purge would not clear the alarm.) Not much
        # over it: what is still unread when the purge unblocks the publisher must stay
        # under the mark, or it sets the alarm again.
        for _ in range(30):
            channel.basic_publish("", "alarm.q", b"x" * 4_000)
        deadline = time.monotonic() + 10
        while (alarms := node.diagnostics("-q", "check_local_alarms")).returncode == 0:
            assert time.monotonic() < deadline, alarms.stdout
            time.sleep(0.05)
        assert (alarms.returncode, alarms.stderr) == (
            69,
            "leveret: error: Node leveret@localhost reported local alarms: memory\n",
        )
        status = json.loads(node.ctl("status", "--formatter", "json").stdout)
        assert status["alarms"] == ["memory"]
        assert status["memory"]["used"] > status["memory"]["high_watermark"] == 100000
        assert "memory alarm" in node.ctl("-q", "status").stdout
        # Purging the queue releases the memory and clears the alarm.
        assert node.ctl("purge_queue", "alarm.q").returncode == 0
        while node.diagnostics("-q", "check_local_alarms").returncode != 0:
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
        connection.close()
    finally:
        stop_node(node)


def test_status_reports_free_disk_without_a_data_dir(tmp_path: Path) -> None:
    """A memory-only node still reports the free space of its working directory's file
    system, as /api/nodes does (RabbitMQ always reports disk_free)."""
    socket = tmp_path / "control.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "serve",
            "--port",
            "0",
            "--management-port",
            "-1",
            "--prometheus-port",
            "-1",
            "--control-socket",
            str(socket),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ctl = [sys.executable, "-m", "leveret", "ctl", "--control-socket", str(socket)]
        deadline = time.monotonic() + 30
        while subprocess.run([*ctl, "-q", "ping"], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the node never answered"
            time.sleep(0.05)
        out = subprocess.run(
            [*ctl, "status", "--formatter", "json"], capture_output=True, text=True
        )
        status = json.loads(out.stdout)
        assert status["data_directory"] is None
        assert isinstance(status["disk"]["free"], int) and status["disk"]["free"] > 0
    finally:
        proc.terminate()
        proc.wait(15)
