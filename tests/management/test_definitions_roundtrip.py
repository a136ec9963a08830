"""Definitions that round-trip (issue 35): a rich set of definitions built through the
management API, exported (GET /api/definitions, ``leveret ctl export_definitions``) and
imported into another broker (POST /api/definitions, ``leveret ctl import_definitions``)
come out of that broker's export the same, object by object; the users log in there with
their passwords (the hashes travelled). By default between two Leveret nodes; with ``-m
rabbitmq`` both ways between Leveret and a real RabbitMQ 3.10.8 (``RABBITMQ_URL``,
``RABBITMQ_MANAGEMENT_URL``), touching only vhosts and users of the test's own, deleted
afterwards. And what a RabbitMQ export holds that Leveret cannot load is named, one line
per item.

Fields that differ between the brokers, and why (the only ones left out of a comparison):

* vhosts: RabbitMQ 3.10.8 exports a vhost as its name alone; Leveret exports the 3.11+
  shape (``description``, ``tags``, ``default_queue_type``, ``limits``, ``metadata``),
  which 3.10.8 imports (checked through its GET /api/vhosts/NAME instead);
* queues: Leveret adds ``type``, which RabbitMQ 3.10.8 does not export (the arguments'
  ``x-queue-type``, which both export and import, says the same);
* users' password hashes are compared where they were copied, never where each broker
  hashed the password itself (a random salt);
* at the top, ``product_name`` and ``product_version`` are each broker's own, and
  ``rabbit_version`` / ``rabbitmq_version`` the 3.13.7 Leveret reports everywhere: only
  the objects are compared with RabbitMQ (between two Leveret nodes, the top too).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread
from tests.control.conftest import leveret
from tests.integration.helpers import Http, unique

from .definitions_roundtrip import (
    PASSWORDS,
    UNLOADABLE,
    UNLOADABLE_LINES,
    Names,
    build,
    differences,
    drop,
    objects,
    only,
    quoted,
)

# What Leveret exports that RabbitMQ 3.10.8 does not (see the module docstring).
LEVERET_ONLY = {
    "vhosts": ("description", "tags", "default_queue_type", "limits", "metadata"),
    "queues": ("type",),
}


@dataclass
class Node:
    """An in-process Leveret with its management API and control socket."""

    broker: BrokerThread
    api: Http
    socket: Path

    def ctl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``leveret ctl ARGS --control-socket SOCKET`` as a real process."""
        return leveret("ctl", *args, "--control-socket", str(self.socket), stdin=stdin)

    def export(self) -> dict[str, Any]:
        """GET /api/definitions."""
        status, body = self.api("GET", "/api/definitions")
        assert status == 200, body
        assert isinstance(body, dict)
        return body


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    """Two Leveret nodes (the second without the default guest user's permissions on
    anything but ``/``: a broker as started)."""
    started = []
    try:
        for name in ("a", "b"):
            directory = tmp_path / name
            directory.mkdir(mode=0o700)
            socket = directory / "control.sock"
            config = Config(
                host="127.0.0.1", port=0, management_port=0, control=True, control_socket=socket
            )
            broker = BrokerThread(config).start()
            assert broker.server.management is not None
            started.append(Node(broker, Http(broker.server.management.url), socket))
        yield started[0], started[1]
    finally:
        for node in started:
            node.broker.stop()


def amqp_login(
    url: str, user: str, password: str, vhost: str, queue: str = "orders.created"
) -> None:
    """Log in with ``password`` over AMQP (pika) to ``vhost`` and declare ``queue``
    passively; a wrong password is refused."""
    parts = urllib.parse.urlsplit(url)
    credentials = pika.PlainCredentials(user, password)
    params = pika.ConnectionParameters(parts.hostname, parts.port, vhost, credentials)
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        assert channel.queue_declare(queue, passive=True).method.queue == queue
    finally:
        connection.close()
    wrong = pika.PlainCredentials(user, password + "x")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters(parts.hostname, parts.port, vhost, wrong))


def assert_same(left: dict[str, Any], right: dict[str, Any], names: Names | None = None) -> None:
    """The two exports hold the same objects (all but shovels, or ``names``' objects)."""
    if names is None:
        diff = differences(objects(left), objects(right))
    else:
        diff = differences(objects(left, names.mine), objects(right, names.mine))
    assert diff == [], "\n".join(diff)


# -- Leveret to Leveret -------------------------------------------------------------------


@pytest.mark.parametrize("way", ["http", "ctl"])
def test_leveret_to_leveret(nodes: tuple[Node, Node], way: str) -> None:
    source, target = nodes
    names = Names(unique("rt"))
    build(source.api, names, plugins=True)
    exported = source.export()
    # The command line writes the very document the API serves.
    result = source.ctl("export_definitions", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == exported
    if way == "http":
        assert target.api("POST", "/api/definitions", exported) == (204, None)
    else:
        result = target.ctl("import_definitions", "-", stdin=result.stdout)
        assert result.returncode == 0, result.stderr
        assert result.stdout == 'Importing definitions in JSON from a file at "-" ...\n'
    again = target.export()
    # Everything, the guest user included, object by object and field by field: the
    # password hashes too (copied, not hashed again) and every top-level field.
    assert_same(exported, again)
    assert {k: v for k, v in again.items() if not isinstance(v, list)} == {
        k: v for k, v in exported.items() if not isinstance(v, list)
    }
    assert len(objects(again)["exchanges"]) == 10  # built, not an empty comparison
    for role, user in names.users.items():
        if role != "ops":  # no permissions: logs in to nothing
            amqp_login(target.broker.url, user, PASSWORDS[role], names.main)
    # Importing the same again changes nothing (every object is equivalent).
    assert target.api("POST", "/api/definitions", exported) == (204, None)
    assert_same(target.export(), again)


# -- Leveret and RabbitMQ -----------------------------------------------------------------


@pytest.fixture
def rabbitmq() -> tuple[str, Http]:
    """(AMQP URL, management API) of the real RabbitMQ."""
    return (
        os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"),
        Http(os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")),
    )


@pytest.fixture
def names_on_rabbitmq(rabbitmq: tuple[str, Http]) -> Iterator[Names]:
    """Names of the test's own, whose vhosts and users are deleted from RabbitMQ after
    the test (RabbitMQ is shared: it is never reset)."""
    names = Names(unique("lt-defs"))
    yield names
    api = rabbitmq[1]
    for vhost in names.vhosts:
        api("DELETE", f"/api/vhosts/{quoted(vhost)}")
    for user in names.users.values():
        api("DELETE", f"/api/users/{quoted(user)}")


def moved(export: dict[str, Any], vhost: str) -> dict[str, Any]:
    """A single vhost's export as it comes out of ``vhost`` once loaded there."""
    out = json.loads(json.dumps(export))
    for section in ("policies", "parameters"):
        for item in out.get(section, []):
            item["vhost"] = vhost
    return out


def without_leveret_only(export: dict[str, Any]) -> dict[str, Any]:
    """An export without the fields RabbitMQ 3.10.8 does not export."""
    out = json.loads(json.dumps(export))
    for section, fields in LEVERET_ONLY.items():
        drop(out, section, fields)
    return out


@pytest.mark.rabbitmq
def test_leveret_export_into_rabbitmq(
    nodes: tuple[Node, Node], rabbitmq: tuple[str, Http], names_on_rabbitmq: Names
) -> None:
    source = nodes[0]
    url, api = rabbitmq
    names = names_on_rabbitmq
    build(source.api, names)
    exported = only(source.export(), names.mine)  # never guest or / of a shared broker
    assert api("POST", "/api/definitions", exported) == (204, None)
    status, theirs = api("GET", "/api/definitions")
    assert status == 200
    assert_same(without_leveret_only(exported), theirs, names)
    # What RabbitMQ 3.10.8 does not export, it imported: its vhosts say so.
    for vhost in exported["vhosts"]:
        status, shown = api("GET", f"/api/vhosts/{quoted(vhost['name'])}")
        assert status == 200
        assert (shown["description"], shown["tags"], shown["default_queue_type"]) == (
            vhost["description"],
            vhost["tags"],
            vhost["default_queue_type"],
        )
    for role, user in names.users.items():
        if role != "ops":
            amqp_login(url, user, PASSWORDS[role], names.main)


@pytest.mark.rabbitmq
def test_rabbitmq_export_into_leveret(
    nodes: tuple[Node, Node],
    rabbitmq: tuple[str, Http],
    names_on_rabbitmq: Names,
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = nodes[1]
    api = rabbitmq[1]
    names = names_on_rabbitmq
    build(api, names)
    status, theirs = api("GET", "/api/definitions")
    assert status == 200
    # This test's objects, and RabbitMQ's global parameters (internal_cluster_id at least),
    # which Leveret names as skipped.
    exported = only(theirs, names.mine)
    exported["global_parameters"] = theirs["global_parameters"]
    with caplog.at_level(logging.WARNING, "leveret.management.definitions"):
        status, body, headers = post(target, exported)
    assert (status, body) == (204, b"")
    globals_ = [p["name"] for p in theirs["global_parameters"]]
    assert "internal_cluster_id" in globals_
    lines = [f"skipped global parameter {n}: Leveret has no global parameters" for n in globals_]
    assert skipped_lines(caplog) == lines
    assert headers["X-Leveret-Skipped-Definitions"] == str(len(lines))
    assert_same(exported, without_leveret_only(target.export()), names)
    for role, user in names.users.items():
        if role != "ops":
            amqp_login(target.broker.url, user, PASSWORDS[role], names.main)


@pytest.mark.rabbitmq
def test_single_vhost_definitions_both_ways(
    nodes: tuple[Node, Node], rabbitmq: tuple[str, Http], names_on_rabbitmq: Names
) -> None:
    """GET /api/definitions/VHOST of one broker, POST /api/definitions/OTHER of the other:
    the same objects (without their ``vhost``)."""
    node = nodes[0]
    api = rabbitmq[1]
    names = names_on_rabbitmq
    build(api, names)
    status, theirs = api("GET", f"/api/definitions/{quoted(names.main)}")
    assert status == 200
    assert node.api("PUT", f"/api/vhosts/{quoted(names.copy)}", {})[0] == 201
    status, body, _ = post(node, theirs, f"/api/definitions/{quoted(names.copy)}")
    assert (status, body) == (204, b"")
    status, ours = node.api("GET", f"/api/definitions/{quoted(names.copy)}")
    assert status == 200
    # Policies and parameters name their vhost (as RabbitMQ 3.10.8 exports them): the one
    # they were loaded into.
    assert_same(moved(theirs, names.copy), without_leveret_only(ours))
    assert len(objects(ours)["bindings"]) == 10  # built, not an empty comparison
    # And back, into an empty vhost of RabbitMQ.
    assert api("PUT", f"/api/vhosts/{quoted(names.copy)}", {})[0] == 201
    status, answer = api("POST", f"/api/definitions/{quoted(names.copy)}", ours)
    assert (status, answer) == (204, None)
    status, again = api("GET", f"/api/definitions/{quoted(names.copy)}")
    assert status == 200
    assert_same(without_leveret_only(ours), again)


# -- what Leveret cannot load ---------------------------------------------------------------


def post(node: Node, body: Any, path: str = "/api/definitions") -> tuple[int, bytes, Any]:
    """POST JSON: (status, raw body, headers)."""
    import urllib.request

    request = urllib.request.Request(
        node.api.base + path, data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Authorization", node.api.auth)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.read(), answer.headers


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The skipped-item lines the import logged."""
    prefix = "definitions: "
    return [
        r.getMessage()[len(prefix) :]
        for r in caplog.records
        if r.name == "leveret.management.definitions"
        and r.getMessage().startswith(prefix + "skipped ")
    ]


def assert_rest_loaded(node: Node) -> None:
    """What could be loaded was: the vhost, guest's permission, the vhost limits, the
    queue, the fanout exchange and its binding to the queue."""
    exported = node.export()
    assert {"name": "fed"} in [{"name": v["name"]} for v in exported["vhosts"]]
    assert {u["name"] for u in exported["users"]} == {"guest", "sha512"}
    assert [(p["user"], p["vhost"]) for p in exported["permissions"] if p["vhost"] == "fed"] == [
        ("guest", "fed"),
        ("sha512", "fed"),
    ]
    # The SHA-512 user logs in with its password (checked with its own algorithm).
    amqp_login(node.broker.url, "sha512", PASSWORDS["sha512"], "fed", queue="q")
    assert [p["component"] for p in exported["parameters"]] == ["vhost-limits"]
    assert [x["name"] for x in exported["exchanges"]] == ["fan"]
    assert [(b["source"], b["destination"]) for b in exported["bindings"]] == [("fan", "q")]


def test_what_leveret_cannot_load_is_named_over_http(
    nodes: tuple[Node, Node], caplog: pytest.LogCaptureFixture
) -> None:
    node = nodes[0]
    with caplog.at_level(logging.WARNING, "leveret.management.definitions"):
        status, body, headers = post(node, UNLOADABLE)
    # RabbitMQ's 204 without a body; the count in a header, the lines in the log.
    assert (status, body) == (204, b"")
    assert headers["X-Leveret-Skipped-Definitions"] == str(len(UNLOADABLE_LINES))
    assert skipped_lines(caplog) == UNLOADABLE_LINES
    assert_rest_loaded(node)
    # Nothing skipped: no header.
    status, body, headers = post(node, {"vhosts": [{"name": "fed"}]})
    assert (status, "X-Leveret-Skipped-Definitions" in headers) == (204, False)
    # A single vhost's file names the vhost it was loaded into.
    single = {"parameters": [{"value": {}, "component": "federation-upstream", "name": "u"}]}
    caplog.clear()
    with caplog.at_level(logging.WARNING, "leveret.management.definitions"):
        status, _, headers = post(node, single, "/api/definitions/fed")
    assert (status, headers["X-Leveret-Skipped-Definitions"]) == (204, "1")
    assert skipped_lines(caplog) == [
        "skipped parameter federation-upstream/u in vhost fed: Leveret has no federation"
    ]
    # PUT /api/users takes RabbitMQ's own modules; a custom one is refused (RabbitMQ 3.10.8
    # stores it, and the user cannot log in unless the node has that module).
    custom = {"password_hash": "AAAAAA==", "hashing_algorithm": "my_module", "tags": ""}
    assert node.api("PUT", "/api/users/custom", custom) == (
        400,
        {"error": "bad_request", "reason": "unsupported hashing_algorithm my_module"},
    )


def test_what_leveret_cannot_load_is_named_by_ctl(nodes: tuple[Node, Node]) -> None:
    node = nodes[0]
    result = node.ctl("import_definitions", "-", stdin=json.dumps(UNLOADABLE))
    assert (result.returncode, result.stderr) == (0, "")
    banner = 'Importing definitions in JSON from a file at "-" ...'
    # The exchanges and bindings go one by one (a turn of the loop apart): a binding of an
    # exchange skipped earlier is still named.
    assert result.stdout.splitlines() == [banner, *UNLOADABLE_LINES]
    assert_rest_loaded(node)
    # New tags keep the user's hash and the algorithm that made it.
    assert node.ctl("set_user_tags", "sha512", "monitoring").returncode == 0
    amqp_login(node.broker.url, "sha512", PASSWORDS["sha512"], "fed", queue="q")
    quiet = node.ctl("import_definitions", "-", "--formatter", "json", stdin=json.dumps(UNLOADABLE))
    assert quiet.returncode == 0
    assert json.loads(quiet.stdout)["message"].splitlines() == UNLOADABLE_LINES
