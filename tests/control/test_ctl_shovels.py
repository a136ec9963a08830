"""``leveret ctl`` for dynamic shovels against a broker process: set_parameter shovel,
shovel_status, restart_shovel and delete_shovel (rabbitmq_shovel's commands: their banners,
their JSON keys, their exit status for an unknown shovel), with what pika clients see."""

from __future__ import annotations

import json
import time

import pika

from tests.control.conftest import Node

MOVE = {"src-uri": "amqp://", "src-queue": "ctl-a", "dest-uri": "amqp://", "dest-queue": "ctl-b"}


def status_of(
    node: Node, name: str, within: float = 15.0, state: str = "running"
) -> dict[str, object]:
    deadline = time.monotonic() + within
    while True:
        rows = [r for r in node.rows("shovel_status") if r["name"] == name]
        if rows and rows[0]["state"] == state:
            return rows[0]
        assert time.monotonic() < deadline, f"{name} never {state}: {rows}"
        time.sleep(0.05)


def test_a_shovel_from_the_command_line(node: Node) -> None:
    result = node.ctl("set_parameter", "shovel", "mv", json.dumps(MOVE))
    assert result.returncode == 0, result.stderr
    row = status_of(node, "mv")
    assert (row["source"], row["destination"], row["vhost"], row["type"]) == (
        "amqp://",
        "amqp://",
        "/",
        "dynamic",
    )
    table = node.ctl("shovel_status").stdout.splitlines()
    assert table[:2] == [
        "Shovel status on node leveret@localhost",
        "destination\tlast_changed\tname\tsource\tstate\ttermination_reason\ttype\tvhost",
    ]
    wide = node.rows("shovel_status", "name", "source_queue", "destination_queue", "state")
    assert {
        "name": "mv",
        "source_queue": "ctl-a",
        "destination_queue": "ctl-b",
        "state": "running",
    } in wide
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    try:
        channel = connection.channel()
        channel.basic_publish("", "ctl-a", b"moved")
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:
            _m, _p, got = channel.basic_get("ctl-b", auto_ack=True)
            time.sleep(0.02)
        assert got == b"moved"
    finally:
        connection.close()
    assert {"component": "shovel", "name": "mv", "value": MOVE} in node.rows("list_parameters")
    restarted = node.ctl("restart_shovel", "mv")
    assert restarted.returncode == 0
    assert (
        restarted.stdout
        == "Restarting dynamic Shovel mv in virtual host / on node leveret@localhost\n"
    )
    status_of(node, "mv")
    deleted = node.ctl("delete_shovel", "mv")
    assert (deleted.returncode, deleted.stdout) == (0, "Deleting shovel mv in vhost /\n")
    assert [r for r in node.rows("shovel_status") if r["name"] == "mv"] == []


def test_unknown_shovels_and_refused_values(node: Node) -> None:
    for command in ("delete_shovel", "restart_shovel"):
        result = node.ctl(command, "-q", "nope")
        assert result.returncode == 69
        assert result.stderr == (
            "leveret: error: Shovel with the given name was not found on the target node "
            "'leveret@localhost' and / or virtual host '/'\n"
        )
    refused = node.ctl("set_parameter", "shovel", "bad", json.dumps({"src-uri": "amqp://"}))
    assert refused.returncode == 65
    assert refused.stderr.startswith(
        "leveret: error: Validation failed Must specify 'src-exchange' or 'src-queue'"
    )
    assert node.ctl("clear_parameter", "shovel", "bad").returncode == 65
