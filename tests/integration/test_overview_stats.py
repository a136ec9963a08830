"""The management overview's ``message_stats.publish``: messages received from publishers,
not queue enqueues (rabbit_mgmt_wm_overview over the channels' publish counts).

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

from .helpers import Http, unique

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
