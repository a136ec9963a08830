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
from typing import Any

import pika
import pytest

from .helpers import Http, Tenant, unique

pytestmark = pytest.mark.timeout(60)


def counts(api: Http, path: str) -> dict[str, int]:
    """The counters of a ``message_stats`` (no ``*_details``)."""
    status, item = api("GET", path)
    assert status == 200, (path, item)
    stats = item.get("message_stats", {})
    return {key: value for key, value in stats.items() if not key.endswith("_details")}


def overview_publish(api: Http) -> int:
    return counts(api, "/api/overview").get("publish", 0)


def settled_overview_publish(api: Http, broker_kind: str) -> int:
    """The overview's publish count once earlier traffic is in it: RabbitMQ's channels emit
    their stats every 5 s (collect_statistics_interval), so publishes of a test just before
    can land later; Leveret counts at once."""
    value = overview_publish(api)
    while broker_kind == "rabbitmq":
        time.sleep(5.5)
        value, previous = overview_publish(api), value
        if value == previous:
            break
    return value


def test_overview_counts_each_publish_once(brokers: tuple[str, Http], broker_kind: str) -> None:
    url, api = brokers
    before = settled_overview_publish(api, broker_kind)
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

    def of(name: str) -> dict[str, int]:
        """The exchange's counters ({} without message_stats)."""
        return counts(api, f"/api/exchanges/{vhost}/{name or 'amq.default'}")

    deadline = time.monotonic() + 20
    while any(of(name) != stats for name, stats in expected.items()):
        assert time.monotonic() < deadline, {name: of(name) for name in expected}
        time.sleep(0.25)
    assert of(idle) == of(dlx) == {}
    assert ch.queue_declare(dead, passive=True).method.message_count == 1  # dead-lettered
    status, listed = api("GET", f"/api/exchanges/{vhost}?columns=name,message_stats")
    assert status == 200
    by_name = {item["name"]: item for item in listed}
    assert "message_stats" not in by_name[idle]
    assert by_name[fanout]["message_stats"]["publish_out"] == 4
    connection.close()


def test_deliveries_and_gets_are_counted_by_kind(tenant: Tenant) -> None:
    # Observed on RabbitMQ 3.10.8 (rabbit_mgmt_format / rabbit_channel's incr_stats): a
    # queue's deliver_get is deliver (consumers that ack) + deliver_no_ack + get +
    # get_no_ack; a basic.get of a requeued message counts in redeliver too; get-empty
    # answers in get_empty. The overview sums them and adds confirm, drop_unroutable and
    # return_unroutable. (Gets through the management API are left out: RabbitMQ counts
    # them only when its short-lived channel lives to a statistics emission.)
    api, vhost = tenant.api, urllib.parse.quote(tenant.vhost, safe="")
    before = counts(api, "/api/overview")
    connection = tenant.connect()
    ch = connection.channel()
    ch.confirm_delivery()
    gets, acking, no_ack = (unique(p) for p in ("kind-get", "kind-ack", "kind-noack"))
    for queue in (gets, acking, no_ack):
        ch.queue_declare(queue, arguments={"x-expires": 60_000})
    for _ in range(5):
        ch.basic_publish("", gets, b"g")
    for queue in (acking, no_ack):
        for _ in range(2):
            ch.basic_publish("", queue, b"c")
    ch.basic_publish("", unique("nowhere"), b"x")  # dropped
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("", unique("nowhere"), b"x", mandatory=True)  # returned
    method, _, _ = ch.basic_get(gets)
    ch.basic_ack(method.delivery_tag)  # get
    ch.basic_get(gets, auto_ack=True)  # get_no_ack
    method, _, _ = ch.basic_get(gets)
    ch.basic_nack(method.delivery_tag, requeue=True)  # get
    method, _, _ = ch.basic_get(gets)  # get, redeliver
    assert method.redelivered
    ch.basic_ack(method.delivery_tag)
    ch.queue_purge(gets)
    assert ch.basic_get(gets) == (None, None, None)  # get_empty, twice
    assert ch.basic_get(gets) == (None, None, None)
    taken: list[int] = []
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=2)
    for queue, auto_ack in ((acking, False), (no_ack, True)):

        def take(
            chx: Any, method: Any, _props: Any, _body: bytes, ack: bool = not auto_ack
        ) -> None:
            taken.append(1)
            if ack:
                chx.basic_ack(method.delivery_tag)

        tag = consumer.basic_consume(queue, take, auto_ack=auto_ack)
        deadline = time.monotonic() + 5
        while len(taken) < (2 if queue == acking else 4):
            assert time.monotonic() < deadline
            connection.process_data_events(0.05)
        consumer.basic_cancel(tag)

    expected = {
        gets: {"publish": 5, "deliver_get": 4, "ack": 2, "deliver": 0, "deliver_no_ack": 0,
               "get": 3, "get_no_ack": 1, "get_empty": 2, "redeliver": 1},
        acking: {"publish": 2, "deliver_get": 2, "ack": 2, "deliver": 2, "deliver_no_ack": 0,
                 "get": 0, "get_no_ack": 0, "get_empty": 0, "redeliver": 0},
        no_ack: {"publish": 2, "deliver_get": 2, "ack": 0, "deliver": 0, "deliver_no_ack": 2,
                 "get": 0, "get_no_ack": 0, "get_empty": 0, "redeliver": 0},
    }  # fmt: skip
    deadline = time.monotonic() + 20
    while any(counts(api, f"/api/queues/{vhost}/{q}") != v for q, v in expected.items()):
        assert time.monotonic() < deadline, {
            q: counts(api, f"/api/queues/{vhost}/{q}") for q in expected
        }
        time.sleep(0.25)
    sums = {key: sum(v[key] for v in expected.values()) for key in expected[gets]}
    sums.update(publish=11, confirm=11, drop_unroutable=1, return_unroutable=1)
    while True:
        after = counts(api, "/api/overview")
        delta = {key: after.get(key, 0) - before.get(key, 0) for key in sums}
        if delta == sums or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert delta == sums
    connection.close()


def test_a_transaction_shows_what_it_has_not_committed(tenant: Tenant) -> None:
    # Observed on RabbitMQ 3.10.8: a channel in tx mode with three publishes and an ack
    # not yet committed lists messages_uncommitted 3 and acks_uncommitted 1 (after its
    # statistics interval), and nothing once committed.
    api, vhost = tenant.api, urllib.parse.quote(tenant.vhost, safe="")
    connection = tenant.connect()
    ch = connection.channel()
    queue = str(ch.queue_declare("", exclusive=True).method.queue)
    ch.basic_publish("", queue, b"before")
    ch.tx_select()
    for body in (b"x", b"y", b"z"):
        ch.basic_publish("", queue, body)
    method, _, _ = ch.basic_get(queue)
    ch.basic_ack(method.delivery_tag)

    def pending() -> tuple[int, int] | None:
        status, channels = api("GET", f"/api/vhosts/{vhost}/channels")
        assert status == 200
        found = [(c["messages_uncommitted"], c["acks_uncommitted"]) for c in channels]
        return found[0] if found else None

    deadline = time.monotonic() + 20
    while pending() != (3, 1):
        assert time.monotonic() < deadline, pending()
        time.sleep(0.25)
    ch.tx_commit()
    while pending() != (0, 0):
        assert time.monotonic() < deadline, pending()
        time.sleep(0.25)
    connection.close()
