"""The management overview's ``message_stats.publish``: messages received from publishers,
not queue enqueues (rabbit_mgmt_wm_overview over the channels' publish counts); and an
exchange's ``publish_in`` and ``publish_out``.

Runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ, where the counts
reach the overview with its statistics interval (5 s), so the check polls. Observed on
RabbitMQ 3.10.8: 11 messages to a fanout exchange bound to three queues and 4 to an exchange
without bindings add 15 to the overview's ``publish``, and 11 to each queue's.
"""

from __future__ import annotations

import time
import urllib.parse

import pika
import pytest

from .helpers import Http, Tenant, unique

pytestmark = pytest.mark.timeout(60)


def overview_publish(api: Http) -> int:
    status, overview = api("GET", "/api/overview")
    assert status == 200
    return int(overview.get("message_stats", {}).get("publish", 0))


def test_overview_counts_each_publish_once(brokers: tuple[str, Http]) -> None:
    url, api = brokers
    before = overview_publish(api)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    ch = connection.channel()
    fanout, nowhere = unique("fan3"), unique("nowhere")
    ch.exchange_declare(fanout, "fanout", auto_delete=True)
    ch.exchange_declare(nowhere, "fanout", auto_delete=True)
    queues = [str(ch.queue_declare("", exclusive=True).method.queue) for _ in range(3)]
    for queue in queues:
        ch.queue_bind(queue, fanout)
    for _ in range(11):
        ch.basic_publish(fanout, "", b"x")
    for _ in range(4):
        ch.basic_publish(nowhere, "", b"x")
    ch.queue_declare(queues[0], passive=True)  # a round trip: every publish has arrived

    deadline = time.monotonic() + 20
    while overview_publish(api) < before + 15 and time.monotonic() < deadline:
        time.sleep(0.25)
    assert overview_publish(api) == before + 15
    path = "/api/queues/%2F/" + urllib.parse.quote(queues[0], safe="")
    while api("GET", path)[1].get("message_stats", {}).get("publish", 0) < 11:
        assert time.monotonic() < deadline
        time.sleep(0.25)
    assert api("GET", path)[1]["message_stats"]["publish"] == 11
    connection.close()


def exchange_stats(api: Http, vhost: str, name: str) -> dict[str, int] | None:
    """An exchange's publish_in and publish_out, None without message_stats."""
    path = f"/api/exchanges/{urllib.parse.quote(vhost, safe='')}/{name or 'amq.default'}"
    status, exchange = api("GET", path)
    assert status == 200, (path, exchange)
    stats = exchange.get("message_stats")
    if stats is None:
        return None
    assert set(stats) == {"publish_in", "publish_in_details", "publish_out", "publish_out_details"}
    return {key: stats[key] for key in ("publish_in", "publish_out")}


def test_exchange_publish_in_and_out(tenant: Tenant) -> None:
    # Observed on RabbitMQ 3.10.8: publish_in counts the messages published to an
    # exchange (unroutable ones too, and those the management API publishes), publish_out
    # the queues they reached (once per queue, however many paths lead there); messages
    # that pass through an exchange-to-exchange binding count only for the exchange they
    # were published to, dead letters for none; an exchange nobody published to has no
    # message_stats at all.
    api = tenant.api
    connection = tenant.connect()
    ch = connection.channel()
    direct, fanout, idle, dlx = (unique(p) for p in ("xs-direct", "xs-fanout", "xs-idle", "xs-dlx"))
    for name, kind in ((direct, "direct"), (fanout, "fanout"), (idle, "direct"), (dlx, "fanout")):
        ch.exchange_declare(name, kind)
    a, b, dead = (str(ch.queue_declare("", exclusive=True).method.queue) for _ in range(3))
    rejecting = str(
        ch.queue_declare("", exclusive=True, arguments={"x-dead-letter-exchange": dlx}).method.queue
    )
    ch.queue_bind(a, direct, "k")
    ch.queue_bind(b, direct, "k")
    ch.exchange_bind(direct, fanout)  # fanout -> direct -> a and b
    ch.queue_bind(a, fanout)  # and fanout -> a directly
    ch.queue_bind(dead, dlx)
    for _ in range(3):
        ch.basic_publish(direct, "k", b"x")
    ch.basic_publish(direct, "unroutable", b"x")
    for _ in range(2):
        ch.basic_publish(fanout, "k", b"x")
    ch.basic_publish("", rejecting, b"x")
    method, _, _ = ch.basic_get(rejecting)
    ch.basic_reject(method.delivery_tag, requeue=False)
    vhost = urllib.parse.quote(tenant.vhost, safe="")
    body = {"properties": {}, "routing_key": "k", "payload": "p", "payload_encoding": "string"}
    assert api("POST", f"/api/exchanges/{vhost}/{direct}/publish", body) == (
        200,
        {"routed": True},
    )
    ch.queue_declare(a, passive=True)  # a round trip: every publish has arrived

    expected = {
        direct: {"publish_in": 5, "publish_out": 8},
        fanout: {"publish_in": 2, "publish_out": 4},
        "": {"publish_in": 1, "publish_out": 1},
    }
    deadline = time.monotonic() + 20
    while any(exchange_stats(api, tenant.vhost, n) != v for n, v in expected.items()):
        assert time.monotonic() < deadline, {
            n: exchange_stats(api, tenant.vhost, n) for n in expected
        }
        time.sleep(0.25)
    assert exchange_stats(api, tenant.vhost, idle) is None
    assert exchange_stats(api, tenant.vhost, dlx) is None
    assert ch.queue_declare(dead, passive=True).method.message_count == 1  # dead-lettered
    status, listed = api("GET", f"/api/exchanges/{vhost}?columns=name,message_stats")
    assert status == 200
    by_name = {item["name"]: item for item in listed}
    assert "message_stats" not in by_name[idle]
    assert by_name[fanout]["message_stats"]["publish_out"] == 4
    connection.close()
