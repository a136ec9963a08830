"""A channel's ``message_stats`` and a connection's byte counters through the management
API (rabbit_mgmt_format's channel stats: publish, confirm, drop_unroutable, deliver,
deliver_no_ack, get, get_no_ack, get_empty, redeliver, ack and deliver_get, each with
``*_details``; a connection's recv_oct / send_oct with theirs).

Runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ, whose channels
emit their stats every 5 s (collect_statistics_interval): the checks poll until the counts
are in. Leveret's counts are read live.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

import pika
import pytest

from .helpers import Http, unique

pytestmark = pytest.mark.timeout(90)


def channel_of(api: Http, connection_name: str, number: int) -> dict[str, Any]:
    """The channel ``number`` of the connection the client named ``connection_name``."""
    deadline = time.monotonic() + 20
    while True:
        status, conns = api("GET", "/api/connections")
        assert status == 200
        for conn in conns:
            if conn.get("client_properties", {}).get("connection_name") == connection_name:
                path = "/api/connections/" + urllib.parse.quote(conn["name"], safe="")
                for channel in api("GET", path + "/channels")[1]:
                    if channel["number"] == number:
                        return dict(channel)
        assert time.monotonic() < deadline, "the channel never appeared"
        time.sleep(0.5)


def stats_of(api: Http, name: str) -> dict[str, Any]:
    status, channel = api("GET", "/api/channels/" + urllib.parse.quote(name, safe=""))
    assert status == 200, channel
    return dict(channel.get("message_stats", {}))


def wait_for(api: Http, name: str, expected: dict[str, int]) -> dict[str, Any]:
    """The channel's ``message_stats`` once ``expected`` counts are all in them."""
    deadline = time.monotonic() + 30
    while True:
        stats = stats_of(api, name)
        if all(stats.get(key, 0) == value for key, value in expected.items()):
            return stats
        assert time.monotonic() < deadline, (stats, expected)
        time.sleep(0.5)


def test_channel_counts_its_publishes_and_deliveries(brokers: tuple[str, Http]) -> None:
    url, api = brokers
    label = unique("chstats")
    params = pika.URLParameters(url)
    params.client_properties = {"connection_name": label}
    connection = pika.BlockingConnection(params)
    try:
        publisher = connection.channel()
        publisher.confirm_delivery()
        queue = str(publisher.queue_declare("", exclusive=True).method.queue)
        for _ in range(5):
            publisher.basic_publish("", queue, b"m")
        publisher.basic_publish("amq.fanout", "nowhere", b"dropped")  # no bindings
        auto, again = (str(publisher.queue_declare("", exclusive=True).method.queue) for _ in "ab")
        publisher.basic_publish("", auto, b"a1")
        publisher.basic_publish("", auto, b"a2")
        publisher.basic_publish("", again, b"r")
        taker = connection.channel()
        first = taker.basic_get(queue, auto_ack=False)[0]
        assert first is not None
        taker.basic_ack(first.delivery_tag)
        assert taker.basic_get(queue, auto_ack=True)[0] is not None
        got = []
        taker.basic_consume(queue, lambda ch, m, p, b: got.append(m.delivery_tag))
        while len(got) < 3:
            connection.process_data_events(time_limit=0.2)
        taker.basic_ack(got[-1], multiple=True)
        assert taker.basic_get(queue, auto_ack=True)[0] is None
        # Channel 3: a no-ack consumer; channel 4: a get nacked back, got again and acked.
        no_ack = connection.channel()
        seen: list[bytes] = []
        no_ack.basic_consume(auto, lambda ch, m, p, b: seen.append(b), auto_ack=True)
        while len(seen) < 2:
            connection.process_data_events(time_limit=0.2)
        retry = connection.channel()
        method = retry.basic_get(again, auto_ack=False)[0]
        assert method is not None
        retry.basic_nack(method.delivery_tag, requeue=True)
        method = retry.basic_get(again, auto_ack=False)[0]
        assert method is not None and method.redelivered
        retry.basic_ack(method.delivery_tag)

        stats = wait_for(api, channel_of(api, label, 1)["name"], {"publish": 9, "confirm": 9})
        assert stats["drop_unroutable"] == 1
        assert set(stats["publish_details"]) >= {"rate"}
        taken = wait_for(
            api,
            channel_of(api, label, 2)["name"],
            {"get": 1, "get_no_ack": 1, "deliver": 3, "ack": 4, "get_empty": 1},
        )
        assert taken["deliver_get"] == 5
        assert taken["deliver_no_ack"] == 0
        assert taken["redeliver"] == 0
        assert "ack_details" in taken
        wait_for(
            api,
            channel_of(api, label, 3)["name"],
            {"deliver_no_ack": 2, "deliver_get": 2, "deliver": 0, "ack": 0},
        )
        wait_for(
            api,
            channel_of(api, label, 4)["name"],
            {"get": 2, "redeliver": 1, "ack": 1, "deliver_get": 2, "deliver_no_ack": 0},
        )
    finally:
        connection.close()


def test_connection_has_byte_rates(brokers: tuple[str, Http]) -> None:
    url, api = brokers
    label = unique("connbytes")
    params = pika.URLParameters(url)
    params.client_properties = {"connection_name": label}
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.basic_publish("amq.fanout", "", b"x" * 1000)
        channel_of(api, label, 1)
        deadline = time.monotonic() + 20
        while True:  # RabbitMQ's coarse connection stats come every 5 s
            (conn,) = [
                c
                for c in api("GET", "/api/connections")[1]
                if c.get("client_properties", {}).get("connection_name") == label
            ]
            if conn.get("recv_oct", 0) > 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert conn["recv_oct"] > 1000 and conn["send_oct"] > 0
        assert set(conn["recv_oct_details"]) >= {"rate"}
        assert set(conn["send_oct_details"]) >= {"rate"}
        assert conn["recv_cnt"] > 0 and conn["send_cnt"] > 0
    finally:
        connection.close()
