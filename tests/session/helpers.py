"""What the session tests share: an in-process subscriber that keeps its own
delivery-tag ledger, as the wire channel does (leveret.queue.Subscriber), and
shortcuts for declares, publishes and refusals."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pamqp import commands

from leveret.node.auth import AccessControl
from leveret.node.errors import AMQPError
from leveret.node.fieldtable import marshal_content_header
from leveret.node.message import Message
from leveret.node.queue import Consumer, Entry, Queue
from leveret.node.vhost import VHost
from leveret.session.ledger import StandaloneLedger
from leveret.session.publish import Publisher
from leveret.session.topology import queue_declared

MAX_SIZE = 1000


class Collector(StandaloneLedger[tuple[Queue, Entry, Consumer]]):
    """An in-process subscriber: what the wire channel would write, kept in a list."""

    def __init__(self, prefetch: int = 0) -> None:
        super().__init__()
        self.id = 1
        self.open = True
        self.conn = SimpleNamespace(writable=True)
        self.prefetch_count = prefetch
        self.delivered: list[tuple[int, bytes, bool]] = []
        self.cancelled: list[str] = []

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        tag = self.record(None if consumer.no_ack else (consumer.queue, entry, consumer))
        self.delivered.append((tag, entry[0].body, bool(entry[1])))

    def cancel_by_server(self, consumer: Consumer) -> None:
        self.cancelled.append(consumer.tag)

    def consume(self, queue: Queue, tag: str = "c", no_ack: bool = False) -> Consumer:
        consumer = Consumer(self, queue, tag, no_ack, False, self.prefetch_count, {}, b"")
        queue.add_consumer(consumer)
        return consumer

    def ack(self, tag: int, multiple: bool = False) -> None:
        for _tag, (queue, entry, consumer) in self.take(tag, multiple):
            queue.ack(entry[0], consumer)
            queue.drain()

    def nack(self, tag: int) -> None:
        for _tag, (queue, entry, consumer) in self.take(tag, False):
            queue.requeue([(entry, consumer)])


def publisher(access: AccessControl, vhost: VHost, user: str = "guest") -> Publisher:
    return Publisher(access, vhost, user, MAX_SIZE)


def message(exchange: str, key: str, body: bytes = b"x", **props: Any) -> Message:
    header = marshal_content_header(len(body), commands.Basic.Properties(**props))
    return Message(exchange, key, header, body)


def publish(p: Publisher, exchange: str, key: str, body: bytes = b"x", **props: Any) -> Any:
    """basic.publish through the session's checks, in order, then routed (mandatory)."""
    p.check_size(len(body))
    stats = p.check_exchange(exchange, key)
    return p.route(p.check_message(message(exchange, key, body, **props), None), True, None, stats)


def refusal(action: Any) -> tuple[int, str]:
    with pytest.raises(AMQPError) as raised:
        action()
    return raised.value.code, raised.value.text


def declare(vhost: VHost, name: str, **arguments: Any) -> Queue:
    return queue_declared(vhost, name, False, False, False, False, arguments, None)[0]
