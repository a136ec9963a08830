"""Shovels travel with definitions: a shovel defined on Leveret, exported with GET
/api/definitions and imported into the other broker (POST /api/definitions), is the same
parameter there and runs there, moving a message; and the other way round. The other
broker is a second Leveret, or with ``-m rabbitmq`` RabbitMQ 3.10.8 with rabbitmq_shovel
(``RABBITMQ_MANAGEMENT_URL``)."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread

from .helpers import Http, unique


@pytest.fixture(scope="module")
def here() -> Iterator[tuple[str, Http]]:
    """This Leveret: (AMQP URL, management API)."""
    broker = BrokerThread(Config(host="127.0.0.1", port=0, management_port=0)).start()
    try:
        assert broker.server.management is not None
        yield broker.url, Http(broker.server.management.url)
    finally:
        broker.stop()


def vhost_definitions(api: Http, vhost: str) -> dict[str, Any]:
    """The broker's whole export, narrowed to ``vhost``'s objects."""
    status, data = api("GET", "/api/definitions")
    assert status == 200
    mine = {
        section: [item for item in data.get(section, []) if item.get("vhost") == vhost]
        for section in ("permissions", "queues", "exchanges", "bindings", "policies", "parameters")
    }
    mine["vhosts"] = [v for v in data["vhosts"] if v["name"] == vhost]
    return mine


def running(api: Http, vhost: str, name: str, within: float = 20.0) -> None:
    quoted = urllib.parse.quote(vhost, safe="")
    deadline = time.monotonic() + within
    while True:
        _status, found = api("GET", f"/api/shovels/{quoted}")
        states = [s.get("state") for s in found or [] if s.get("name") == name]
        if states == ["running"]:
            return
        assert time.monotonic() < deadline, f"{name}: {found}"
        time.sleep(0.1)


def moves(url: str, vhost: str, src: str, dst: str) -> None:
    """A message published to ``src`` arrives in ``dst`` (same broker, same vhost)."""
    parts = urllib.parse.urlsplit(url)
    target = f"{parts.scheme}://{parts.netloc}/{urllib.parse.quote(vhost, safe='')}"
    connection = pika.BlockingConnection(pika.URLParameters(target))
    try:
        channel = connection.channel()
        channel.basic_publish("", src, b"carried")
        deadline = time.monotonic() + 20
        while True:
            _m, _p, body = channel.basic_get(dst, auto_ack=True)
            if body is not None:
                assert body == b"carried"
                return
            assert time.monotonic() < deadline, f"nothing reached {dst}"
            time.sleep(0.05)
    finally:
        connection.close()


def shovel_in(api: Http, vhost: str) -> tuple[str, dict[str, Any]]:
    """A vhost with two durable queues and a shovel between them (local URIs)."""
    quoted = urllib.parse.quote(vhost, safe="")
    assert api("PUT", f"/api/vhosts/{quoted}", {})[0] in (201, 204)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api("PUT", f"/api/permissions/{quoted}/guest", everything)[0] in (201, 204)
    for queue in ("from", "to"):
        assert api("PUT", f"/api/queues/{quoted}/{queue}", {"durable": True})[0] in (201, 204)
    local = f"amqp:///{quoted}"
    value = {"src-uri": local, "src-queue": "from", "dest-uri": local, "dest-queue": "to"}
    name = unique("carry")
    assert api("PUT", f"/api/parameters/shovel/{quoted}/{name}", {"value": value})[0] == 201
    return name, value


def carry(source: tuple[str, Http], target: tuple[str, Http]) -> None:
    (_, from_api), (target_url, to_api) = source, target
    vhost = unique("defs-shovel")
    quoted = urllib.parse.quote(vhost, safe="")
    try:
        name, value = shovel_in(from_api, vhost)
        exported = vhost_definitions(from_api, vhost)
        [parameter] = exported["parameters"]
        assert parameter == {"value": value, "vhost": vhost, "component": "shovel", "name": name}
        status, reply = to_api("POST", "/api/definitions", exported)
        assert status in (200, 201, 204), reply
        assert to_api("GET", f"/api/parameters/shovel/{quoted}/{name}") == (200, parameter)
        running(to_api, vhost, name)
        moves(target_url, vhost, "from", "to")
    finally:
        from_api("DELETE", f"/api/vhosts/{quoted}")
        to_api("DELETE", f"/api/vhosts/{quoted}")


def test_a_shovel_exported_from_leveret_runs_on_the_other_broker(
    here: tuple[str, Http], brokers: tuple[str, Http]
) -> None:
    carry(here, brokers)


def test_a_shovel_exported_from_the_other_broker_runs_on_leveret(
    here: tuple[str, Http], brokers: tuple[str, Http]
) -> None:
    carry(brokers, here)
