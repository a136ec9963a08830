"""Traffic a real broker records for the end-to-end pipeline tests, and what it must add up to.

The broker runs in-process with a data dir (so durable topology goes to its binding log) and
a trace dir; ``record_traffic`` declares a small shop topology, publishes ``PUBLISHED`` with
confirms, and stops the broker (which flushes the trace).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika

from leveret.config import Config
from tests.conftest import BrokerThread

# (messages, exchange, routing key, headers)
PUBLISHED: list[tuple[int, str, str, dict[str, Any] | None]] = [
    (20, "shop.orders", "order.created.eu", None),
    (15, "shop.orders", "order.paid.us", None),
    (7, "shop.orders", "invoice.1", None),
    (5, "shop.hdr", "", {"format": "pdf"}),
    (3, "shop.hdr", "", {"format": "csv"}),
    (4, "", "shop.pdf", None),
    (6, "amq.fanout", "any", None),
]
EXPECTED_QUEUES = {"shop.all": 35, "shop.eu": 20, "shop.audit.q": 20, "shop.pdf": 9}
EXPECTED_UNROUTABLE = 16  # invoice.1 7 + csv 3 + amq.fanout 6


def record_traffic(data_dir: Path, trace_dir: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=data_dir, trace_dir=trace_dir)).start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("shop.orders", "topic", durable=True)
        channel.exchange_declare("shop.audit", "fanout", durable=True)
        channel.exchange_declare("shop.hdr", "headers", durable=True)
        for name in EXPECTED_QUEUES:
            channel.queue_declare(name, durable=True)
        channel.queue_declare("shop.tmp", durable=False)  # transient: not in the binding log
        channel.queue_bind("shop.all", "shop.orders", "order.#")
        channel.queue_bind("shop.eu", "shop.orders", "order.*.eu")
        channel.exchange_bind("shop.audit", "shop.orders", "order.created.*")
        channel.queue_bind("shop.audit.q", "shop.audit")
        channel.queue_bind("shop.tmp", "shop.audit")
        channel.queue_bind("shop.pdf", "shop.hdr", arguments={"x-match": "all", "format": "pdf"})
        for count, exchange, key, headers in PUBLISHED:
            properties = pika.BasicProperties(headers=headers, delivery_mode=2)
            for i in range(count):
                channel.basic_publish(exchange, key, b"x" * (10 + i), properties)
        connection.close()
    finally:
        broker.stop()  # flushes the trace
