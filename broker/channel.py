"""An AMQP channel: method dispatch, content assembly, consumers, acks, confirms, tx.

Theory of operation
-------------------
The connection hands every frame for this channel to :meth:`Channel.handle`, in order
and synchronously. Methods dispatch through one dict keyed by the method class.
``Basic.Publish`` starts content assembly, a small state table::

    IDLE --Basic.Publish--> AWAIT_HEADER --Header--> AWAIT_BODY --Body*--> IDLE

(a zero-size body completes at the header). Any other frame out of that order is a
505 UNEXPECTED_FRAME with RabbitMQ's texts (rabbit_command_assembler.erl).

What the channel holds counts against the memory watermark (leveret.memory): its
unacknowledged deliveries (from delivery until ack, reject or nack, or the channel's
close), the messages of an uncommitted transaction, and the frames of a body being
assembled.

Handlers raise :class:`leveret.errors.AMQPError`; the connection converts it (the one
place that does). Delivery tags are per channel, start at 1 and never repeat; unacked
deliveries are kept in tag order so ``multiple`` acks and requeues keep message order.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret import codec, firehose
from leveret.acktimeout import DeliveryClock
from leveret.arguments import consume_error, queue_type
from leveret.consumer import Consumer
from leveret.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    NO_ROUTE,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    AMQPChannelError,
    AMQPConnectionError,
)
from leveret.exchanges.model import DestKind, Exchange
from leveret.memory import DELIVERY_OVERHEAD, UNACKED_OVERHEAD, message_bytes
from leveret.message import Message, properties_decode, with_header
from leveret.queue import Entry, Queue
from leveret.session.get import basic_get, delivery_header
from leveret.session.ledger import Ledger
from leveret.session.publish import (
    BASIC_PUBLISH,
    CHECKED_FLAGS,
    REPLY_PREFIX,
    REPLY_TO,
    Publisher,
    size_error,
)
from leveret.vhost import generated_name

if TYPE_CHECKING:
    from leveret.connection import Connection

BASIC_CLASS = 60
# The guards of _on_full_publish's condition, by the session's publish check each stands
# for (leveret.session.publish.CHECKS, RabbitMQ's order): the fast path routes a publish
# without the checks only when every guard shows its check would pass.
# tests/session/test_publish.py holds the two lists together.
FAST_PATH_GUARDS = {
    "size": "header.body_size > self.max_message_size",
    "write": "publish.exchange not in self._writable (or permissions changed)",
    "exchange": "exchange is None",
    "internal": "exchange.internal",
    "topic": "publish.exchange not in self._writable (never cached with a topic permission)",
    "properties": "not properties_decode(payload)",
    "user_id": "flags & CHECKED_FLAGS",
    "expiration": "flags & CHECKED_FLAGS",
    "reply_to": "flags & CHECKED_FLAGS",
}
# An unacked delivery: its queue, the queue entry, the consumer (None for basic.get).
Record = tuple[Queue, Entry, Consumer | None]
B = commands.Basic


def _record_bytes(queue: Queue, message: Message) -> int:
    """What an unacknowledged delivery of ``message`` from ``queue`` holds (leveret.memory):
    the message and the record, or only the record for a stream (its log holds the
    message)."""
    if queue.stream:
        return UNACKED_OVERHEAD
    return len(message.header) + message.body_size + DELIVERY_OVERHEAD


class Content(Enum):
    IDLE = 0
    AWAIT_HEADER = 1
    AWAIT_BODY = 2


class Channel(Ledger[Record], Publisher):
    """One open channel of a connection, with the session's delivery-tag ledger and
    publish rules (inherited, so the hot path reads ``unacked``, ``next_tag`` and the
    publish permission cache as plain attributes)."""

    def __init__(self, connection: Connection, channel_id: int) -> None:
        Ledger.__init__(self)
        server = connection.server
        Publisher.__init__(
            self,
            server.access,
            connection.vhost,
            connection.user,
            server.counters,
            connection.config.max_message_size,
        )
        self.conn = connection
        self.id = channel_id
        self.memory = self.vhost.memory
        self.open = True
        self.content = Content.IDLE
        self._publish: codec.Publish | None = None
        self._header: codec.Header | None = None
        self._body: list[bytes] = []
        self._remaining = 0
        self._assembled = 0  # bytes in _body (counted against the memory watermark)
        self.consumers: dict[str, Consumer] = {}
        self.confirm = False
        self.publish_seq = 0
        self.confirmed_upto = 0
        self.nacks: list[int] = []  # sequence numbers to nack at the next flush
        # (seq, generation): persistent publishes whose confirm waits for an fsync.
        self.waiting: deque[tuple[int, int]] = deque()
        # tx.commit-oks waiting for an fsync, by generation, in order.
        self.pending_commits: deque[int] = deque()
        self.tx: list[Callable[[], object]] | None = None  # pending actions in tx mode
        self.tx_publishes = 0  # of those, publishes (the management API's uncommitted)
        self.tx_bytes = 0  # what those publishes hold (leveret.memory)
        # When deliveries went out, roughly, for the consumer timeout (overdue_ack).
        self.sent = DeliveryClock()
        self.last_queue: str | None = None
        self.reply_consumer: Consumer | None = None
        self.reply_key = ""
        self.handlers: dict[type, Callable[[Any], None]] = {
            codec.FullPublish: self._on_full_publish,
            codec.Publish: self._on_basic_publish,
            codec.Ack: self._on_basic_ack,
            B.Nack: self._on_basic_nack,
            B.Reject: self._on_basic_reject,
            B.Consume: self._on_basic_consume,
            B.Cancel: self._on_basic_cancel,
            B.Get: self._on_basic_get,
            B.Qos: self._on_basic_qos,
            B.Recover: self._on_basic_recover,
            B.RecoverAsync: self._on_basic_recover,
            commands.Channel.Flow: self._on_channel_flow,
            commands.Channel.Open: self._on_channel_reopen,
            commands.Exchange.Declare: self._on_exchange_declare,
            commands.Exchange.Delete: self._on_exchange_delete,
            commands.Exchange.Bind: self._on_exchange_bind,
            commands.Exchange.Unbind: self._on_exchange_unbind,
            commands.Queue.Declare: self._on_queue_declare,
            commands.Queue.Bind: self._on_queue_bind,
            commands.Queue.Unbind: self._on_queue_unbind,
            commands.Queue.Purge: self._on_queue_purge,
            commands.Queue.Delete: self._on_queue_delete,
            commands.Confirm.Select: self._on_confirm_select,
            commands.Tx.Select: self._on_tx_select,
            commands.Tx.Commit: self._on_tx_commit,
            commands.Tx.Rollback: self._on_tx_rollback,
        }

    # -- frame entry point ------------------------------------------------------------

    def handle(self, frame: Any) -> None:
        """Process one frame addressed to this channel."""
        if self.content is Content.IDLE:
            handler = self.handlers.get(type(frame))
            if handler is not None:
                handler(frame)
            elif isinstance(frame, codec.Header | codec.Body):
                raise AMQPConnectionError(
                    UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
                )
            else:
                raise AMQPConnectionError(COMMAND_INVALID, "unimplemented method")
        elif self.content is Content.AWAIT_BODY and type(frame) is codec.Body:
            self._on_body(frame.data)
        elif self.content is Content.AWAIT_HEADER and type(frame) is codec.Header:
            self._on_header(frame)
        elif self.content is Content.AWAIT_HEADER:
            raise AMQPConnectionError(
                UNEXPECTED_FRAME,
                f"expected content header for class {BASIC_CLASS}, "
                "got non content header frame instead",
                (BASIC_CLASS, 40),
            )
        else:
            raise AMQPConnectionError(
                UNEXPECTED_FRAME,
                "expected content body, got non content body frame instead",
                (BASIC_CLASS, 40),
            )

    def _permit(self, kind: str, resource: str, name: str) -> None:
        """403 unless the user may ``kind`` (configure/write/read) the resource."""
        self.access.check(self.conn.user, self.vhost.name, kind, resource, name)

    def _permit_topic(self, kind: str, exchange: Exchange | None, routing_key: str) -> None:
        """403 unless the user's topic permission on ``exchange`` (checked when it is a topic
        exchange the user has one for) lets it ``kind`` (write/read) ``routing_key``."""
        self.access.check_topic(self.conn.user, self.vhost.name, kind, exchange, routing_key)

    def send(self, method: Any) -> None:
        """Send a pamqp method on this channel."""
        self.conn.write(codec.method_frame(self.id, method))

    # -- content assembly and publishing ----------------------------------------------

    def _on_basic_publish(self, publish: codec.Publish) -> None:
        self._publish = publish
        self.content = Content.AWAIT_HEADER
        # A publisher from now on: the memory alarm blocks it even while its first
        # message's body is still coming (frames being assembled count against the mark).
        self.conn.published = True

    def _on_full_publish(self, frame: codec.FullPublish) -> None:
        """Publish, header and body arrived together (see codec.FrameReader).

        The common case is checked inline; anything unusual (another content class, an
        oversized or immediate message, a missing or internal exchange, properties that
        need checking, tx mode) takes the general path, which raises the right error.
        """
        publish = frame.publish
        header = frame.header
        payload = header.payload
        exchange = self.vhost.projection.exchanges.get(publish.exchange)
        if (  # FAST_PATH_GUARDS, with the wire's own (content class, immediate, tx)
            publish.exchange not in self._writable
            or self._writable_version != self.access.version
            or header.class_id != BASIC_CLASS
            or header.body_size > self.max_message_size
            or publish.immediate
            or exchange is None
            or exchange.internal
            or (payload[12] << 8 | payload[13]) & CHECKED_FLAGS
            or self.tx is not None
            or not properties_decode(payload)
        ):
            self._publish = publish
            self._on_header(header, frame.body)
            return
        # _accept and _route, inlined: once per publish.
        self.conn.published = True  # a publisher: the memory alarm blocks it
        message = Message(publish.exchange, publish.routing_key, payload, frame.body)
        routed, rejected, sync_gen = self.route(message, publish.mandatory, self)
        if not routed and publish.mandatory:
            self._return(message)
        if self.confirm:
            self._confirm(rejected, sync_gen)

    def _accept(self, message: Message, mandatory: bool) -> None:
        """Route a checked message now (not in tx mode) and number it for confirms."""
        self.conn.published = True  # a publisher: the memory alarm blocks it
        rejected, sync_gen = self._route(message, mandatory)
        if self.confirm:
            self._confirm(rejected, sync_gen)

    def _on_header(self, header: codec.Header, body: bytes | None = None) -> None:
        if header.class_id != BASIC_CLASS:
            raise AMQPConnectionError(
                UNEXPECTED_FRAME,
                f"expected content header for class {BASIC_CLASS}, "
                f"got one for class {header.class_id} instead",
                (BASIC_CLASS, 40),
            )
        too_large = size_error(header.body_size, self.max_message_size)
        if too_large is not None:
            self.content = Content.IDLE
            raise too_large
        if body is not None or header.body_size == 0:
            self.content = Content.IDLE
            self._complete(header, body or b"")
            return
        self._header = header
        self._remaining = header.body_size
        self._body = []
        self.content = Content.AWAIT_BODY

    def _on_body(self, data: bytes) -> None:
        self._remaining -= len(data)
        if self._remaining > 0:
            self._body.append(data)
            self._assembled += len(data)
            self.memory.add(len(data))
            return
        self.content = Content.IDLE
        if self._assembled:
            self._release_body()
        if self._remaining < 0:
            raise AMQPConnectionError(
                UNEXPECTED_FRAME, "body size exceeds the expected size", (BASIC_CLASS, 40)
            )
        if self._body:
            self._body.append(data)
            data = b"".join(self._body)
            self._body = []
        header = self._header
        assert header is not None
        self._complete(header, data)

    def _release_body(self) -> None:
        """The frames of a body being assembled are let go (complete, or abandoned)."""
        size, self._assembled = self._assembled, 0
        self.memory.remove(size)

    def _release_held(self) -> None:
        """Stop counting the uncommitted messages (committed, rolled back or dropped with
        the channel) and any body being assembled (the channel closes)."""
        size = self.tx_bytes + self._assembled
        self.tx_bytes = self._assembled = 0
        if size:
            self.memory.remove(size)

    def _complete(self, header: codec.Header, body: bytes) -> None:
        publish = self._publish
        assert publish is not None
        if publish.immediate:
            raise AMQPConnectionError(NOT_IMPLEMENTED, "immediate=true", BASIC_PUBLISH)
        # The session's checks, in RabbitMQ's order (the size was checked at the header).
        self.check_exchange(publish.exchange, publish.routing_key)
        message = self.check_message(
            Message(publish.exchange, publish.routing_key, header.payload, body),
            None if self.reply_consumer is None else self.reply_key,
        )
        self.conn.published = True
        if self.tx is not None:
            mandatory = publish.mandatory
            self.tx.append(lambda: self._route(message, mandatory))
            self.tx_publishes += 1
            size = message_bytes(message)
            self.tx_bytes += size
            self.memory.add(size)
            return
        self._accept(message, publish.mandatory)

    def _confirm(self, rejected: bool, sync_gen: int) -> None:
        """Number a publish in confirm mode; its ack waits for ``sync_gen``'s fsync."""
        self.publish_seq += 1
        if rejected:
            self.nacks.append(self.publish_seq)
        if sync_gen:
            self._wait_for_sync(self.publish_seq, sync_gen)
        self.conn.confirm_pending(self)

    def _wait_for_sync(self, seq: int, generation: int) -> None:
        persistence = self.vhost.persistence
        assert persistence is not None
        if generation <= persistence.synced:
            return
        if not self.waiting and not self.pending_commits:
            persistence.subscribe(self._on_synced)
        self.waiting.append((seq, generation))

    def _on_synced(self, generation: int) -> None:
        """An fsync finished: confirm what it covered, send due ``tx.commit-ok``s."""
        waiting = self.waiting
        while waiting and waiting[0][1] <= generation:
            waiting.popleft()
        self.flush_confirms()
        while self.pending_commits and self.pending_commits[0] <= generation:
            self.pending_commits.popleft()
            self.send(commands.Tx.CommitOk())
        if not waiting and not self.pending_commits and self.vhost.persistence is not None:
            self.vhost.persistence.unsubscribe(self._on_synced)

    def _route(self, message: Message, mandatory: bool) -> tuple[bool, int]:
        """Route and enqueue ``message``; return it when mandatory and unroutable.
        Returns whether a queue refused it (overflow) and the group-commit generation
        that makes it durable (0 if nothing to wait for)."""
        routed, rejected, sync_gen = self.route(message, mandatory, self)
        if not routed and mandatory:
            self._return(message)
        return rejected, sync_gen

    def _return(self, message: Message) -> None:
        self.conn.write(
            codec.return_method(
                self.id, NO_ROUTE, "NO_ROUTE", message.exchange, message.routing_key
            )
            + codec.content_frames(self.id, message.header, message.body, self.conn.frame_max)
        )

    def flush_confirms(self) -> None:
        """Confirm every publish so far: ``multiple`` acks between the (rare) nacks."""
        if not self.open:
            return
        start = self.confirmed_upto
        # Persistent publishes not yet on disk hold back every later confirm.
        upto = self.waiting[0][0] - 1 if self.waiting else self.publish_seq
        nacks = self.nacks
        while nacks and nacks[0] <= upto:
            nack = nacks.pop(0)
            if nack - 1 > start:
                self.send(B.Ack(nack - 1, nack - 1 - start > 1))
                self.counters.confirmed += nack - 1 - start
            self.send(B.Nack(nack, False, False))
            start = nack
        if upto > start:
            self.send(B.Ack(upto, upto - start > 1))
            self.counters.confirmed += upto - start
        self.confirmed_upto = max(upto, start)

    # -- delivery ---------------------------------------------------------------------

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        """Send a queue entry to ``consumer`` (called by the queue, which counted it)."""
        message = entry[0]
        redelivered = entry[1]
        tag = self.next_tag  # Ledger.record, inlined: once per delivery
        self.next_tag = tag + 1
        queue = consumer.queue
        content_header = message.header
        if redelivered and queue.quorum:  # leveret.session.get.delivery_header, inlined
            content_header = with_header(content_header, "x-delivery-count", redelivered)
            redelivered = True
        if not consumer.no_ack:
            self.unacked[tag] = (queue, entry, consumer)
            # Held until settled (leveret.memory; a stream's log keeps counting the message).
            # _record_bytes and MemoryMonitor.add, inlined: once per delivery.
            memory = self.memory
            used = memory.used = memory.used + (
                UNACKED_OVERHEAD
                if queue.stream
                else len(message.header) + message.body_size + DELIVERY_OVERHEAD
            )
            if used > memory.high:
                memory.rise()
        parts = codec.deliver_frames(
            self.id,
            consumer.tag_bytes,
            tag,
            redelivered,
            codec.route_shortstrs(message.exchange, message.routing_key),
            content_header,
            message.body,
            self.conn.frame_max,
        )
        if len(message.body) > self.conn.frame_max - codec.FRAME_OVERHEAD:
            # A body of several frames goes out as views of itself (no copy).
            self.conn.write_parts(parts)
        else:
            self.conn.write(b"".join(parts))
        if self.vhost.firehose:
            firehose.delivered(message, queue.name, bool(redelivered), self)

    def overdue_ack(self, now: float, timeout_ms: Callable[[Queue], float]) -> int | None:
        """The timeout (ms) the oldest unacknowledged delivery has outlived, or None
        (leveret.acktimeout; ``timeout_ms`` gives a queue's timeout, ``math.inf``: none)."""
        oldest = self.oldest()
        if oldest is None:
            self.sent.clear()
            return None
        sent = self.sent.sent_by(now, self.next_tag, oldest[0])
        timeout = timeout_ms(oldest[1][0])
        if timeout == math.inf or now - sent < timeout / 1000:
            return None
        return int(timeout)

    def cancel_by_server(self, consumer: Consumer) -> None:
        """The queue went away: forget the consumer and tell the client if it can hear
        it (capability ``consumer_cancel_notify``, docs/consumer-cancel.md)."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            if self.conn.client_capability("consumer_cancel_notify"):
                self.conn.write(
                    codec.simple_method(
                        self.id, B.Cancel, ("shortstr", consumer.tag), ("bit", True)
                    )
                )

    # -- basic ------------------------------------------------------------------------

    def _queue_name(self, name: str) -> str:
        # The "last declared queue" shortcut (rabbit_channel:expand_queue_name_shortcut).
        if name:
            return name
        if self.last_queue is None:
            raise AMQPChannelError(NOT_FOUND, "no previously declared queue")
        return self.last_queue

    def _on_basic_consume(self, m: commands.Basic.Consume) -> None:
        if m.consumer_tag and m.consumer_tag in self.consumers:
            raise AMQPConnectionError(
                NOT_ALLOWED, f"attempt to reuse consumer tag '{m.consumer_tag}'"
            )
        if m.queue == REPLY_TO:
            self._consume_replies(m)
            return
        queue_name = self._queue_name(m.queue)
        self._permit("read", "queue", queue_name)
        queue = self.vhost.queue(queue_name, self.conn)
        invalid = consume_error(queue_type(queue.arguments), m.arguments or {})
        if invalid is not None:
            key, why = invalid
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"invalid arg '{key}' for {self.vhost.rs('queue', queue.name)}{why}",
            )
        queue.check_consume(m.no_ack, self.prefetch_count, self.global_prefetch, m.arguments or {})
        if queue.exclusive_consumer or (m.exclusive and queue.consumers):
            raise AMQPChannelError(
                ACCESS_REFUSED, f"{self.vhost.rs('queue', queue.name)} in exclusive use"
            )
        tag = m.consumer_tag or generated_name("amq.ctag")
        consumer = Consumer(
            self,
            queue,
            tag,
            m.no_ack,
            m.exclusive,
            self.prefetch_count,
            dict(m.arguments or {}),
            codec.shortstr(tag),
        )
        self.consumers[tag] = consumer
        if not m.nowait:
            self.conn.write(codec.simple_method(self.id, B.ConsumeOk, ("shortstr", tag)))
        queue.subscribe(consumer)

    def _consume_replies(self, m: commands.Basic.Consume) -> None:
        """basic.consume on ``amq.rabbitmq.reply-to`` (docs/direct-reply-to.md)."""
        if not m.no_ack:
            raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if self.reply_consumer is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, "reply consumer already set")
        tag = m.consumer_tag or generated_name("amq.ctag")
        # A queue object that is never registered in the vhost: it only carries the
        # consumer; replies are delivered to the consumer directly.
        pseudo = Queue(self.vhost, REPLY_TO, False, None, False, {})
        consumer = Consumer(self, pseudo, tag, True, False, 0, {}, codec.shortstr(tag))
        self.consumers[tag] = consumer
        self.reply_consumer = consumer
        self.reply_key = generated_name("amq.gen")[len("amq.gen-") :]
        self.vhost.reply_consumers[self.reply_key] = consumer
        if not m.nowait:
            self.conn.write(codec.simple_method(self.id, B.ConsumeOk, ("shortstr", tag)))

    def _drop_reply_consumer(self) -> None:
        if self.reply_consumer is not None:
            self.vhost.reply_consumers.pop(self.reply_key, None)
            self.reply_consumer = None

    def _on_basic_cancel(self, m: commands.Basic.Cancel) -> None:
        consumer = self.consumers.pop(m.consumer_tag or "", None)
        if consumer is not None and consumer is self.reply_consumer:
            self._drop_reply_consumer()
        if not m.nowait:
            self.conn.write(codec.simple_method(self.id, B.CancelOk, ("shortstr", m.consumer_tag)))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def _on_basic_get(self, m: commands.Basic.Get) -> None:
        queue, entry = basic_get(
            self.access, self.user, self.vhost, self._queue_name(m.queue), m.no_ack, self.conn
        )
        if entry is None:
            self.send(B.GetEmpty())
            return
        message = entry[0]
        content_header, redelivered = delivery_header(queue, entry)
        tag = self.record(None if m.no_ack else (queue, entry, None))
        if not m.no_ack:
            self.memory.add(_record_bytes(queue, message))
        self.conn.write(
            codec.get_ok_method(
                self.id,
                tag,
                redelivered,
                message.exchange,
                message.routing_key,
                queue.message_count,
            )
            + codec.content_frames(self.id, content_header, message.body, self.conn.frame_max)
        )
        if self.vhost.firehose:
            firehose.delivered(message, queue.name, bool(redelivered), self)

    def _settle(self, tag: int, multiple: bool, requeue: bool | None) -> None:
        """Ack (``requeue`` None), or reject with or without requeue."""
        if requeue is not None:
            self._check_rejects(tag, multiple)
        taken = self.take(tag, multiple)
        if self.tx is not None:
            self.stage(taken)
            self.tx.append(lambda: self._apply_settle(taken, requeue))
            return
        self._apply_settle(taken, requeue)

    def _check_rejects(self, tag: int, multiple: bool) -> None:
        """Each covered delivery's queue type may refuse nack and reject (a stream: 540),
        checked before anything is settled (rabbit_stream_queue:settle/4)."""
        for queue, _entry, _consumer in self.covered(tag, multiple):
            queue.check_reject()

    def _apply_settle(self, taken: list[tuple[int, Record]], requeue: bool | None) -> None:
        touched: set[Queue] = set()
        requeued: dict[Queue, list[tuple[Entry, Consumer | None]]] = {}
        released = 0
        for _tag, (queue, entry, consumer) in taken:
            released += _record_bytes(queue, entry[0])
            if consumer is not None:
                touched.add(consumer.queue)
            if requeue:
                requeued.setdefault(queue, []).append((entry, consumer))
            elif requeue is None:
                queue.ack(entry[0], consumer)
            else:
                queue.reject(entry[0], consumer)
        # Released before the requeued messages count again as ready in their queues.
        self.memory.remove(released)
        for queue, returned in requeued.items():
            queue.requeue(returned)
        if self.global_prefetch:
            touched.update(c.queue for c in self.consumers.values())
        # Drained once at the end of the read, not once per ack.
        self.conn.drain_later(touched)

    def _on_basic_ack(self, m: codec.Ack) -> None:
        if not m.multiple and self.tx is None:
            # The common case inline: one tag, settled at once.
            record = self.unacked.pop(m.delivery_tag, None)
            if record is not None:
                queue = record[0]
                message = record[1][0]
                # _record_bytes and MemoryMonitor.remove, inlined: once per ack.
                memory = self.memory
                used = memory.used = memory.used - (
                    UNACKED_OVERHEAD
                    if queue.stream
                    else len(message.header) + message.body_size + DELIVERY_OVERHEAD
                )
                if used <= memory.low:
                    memory.fall()
                consumer = record[2]
                queue.ack(message, consumer)
                if consumer is not None:
                    self.conn.drain_later_one(consumer.queue)
                if self.global_prefetch:
                    self.conn.drain_later({c.queue for c in self.consumers.values()})
                return
        self._settle(m.delivery_tag, m.multiple, None)

    def _on_basic_nack(self, m: commands.Basic.Nack) -> None:
        self._settle(m.delivery_tag, m.multiple, m.requeue)

    def _on_basic_reject(self, m: commands.Basic.Reject) -> None:
        self._settle(m.delivery_tag or 0, False, m.requeue)

    def _on_basic_qos(self, m: commands.Basic.Qos) -> None:
        if m.prefetch_size != 0:
            raise AMQPConnectionError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
        self.qos(m.prefetch_count, m.global_)
        if m.global_:
            for consumer in self.consumers.values():
                consumer.queue.drain()
        self.send(B.QosOk())

    def _on_basic_recover(self, m: commands.Basic.Recover | commands.Basic.RecoverAsync) -> None:
        if not m.requeue:
            raise AMQPConnectionError(NOT_IMPLEMENTED, "requeue=false")
        self.requeue_all()
        if isinstance(m, B.Recover):
            self.send(B.RecoverOk())

    def requeue_all(self) -> None:
        """Give every unacked delivery back to its queue, in delivery order."""
        self._apply_settle(self.take_all(), True)

    # -- channel ----------------------------------------------------------------------

    def _on_channel_flow(self, m: commands.Channel.Flow) -> None:
        if not m.active:
            raise AMQPConnectionError(NOT_IMPLEMENTED, "active=false")
        self.send(commands.Channel.FlowOk(active=True))

    def _on_channel_reopen(self, _m: commands.Channel.Open) -> None:
        raise AMQPConnectionError(CHANNEL_ERROR, "second 'channel.open' seen")

    def close(self) -> None:
        """Release everything the channel holds: consumers go, unacked are requeued."""
        if not self.open:
            return
        self.open = False
        self.tx = None
        self._release_held()
        self.rollback()  # acks of an uncommitted transaction are undone
        consumers = list(self.consumers.values())
        self.consumers.clear()
        self._drop_reply_consumer()
        if self.vhost.persistence is not None:
            self.vhost.persistence.unsubscribe(self._on_synced)
        # Requeue first, then detach consumers: an auto-delete queue deleted by the
        # last consumer leaving takes the requeued messages with it, as in RabbitMQ.
        taken = self.take_all()
        requeued: dict[Queue, list[tuple[Entry, Consumer | None]]] = {}
        released = 0
        for _tag, (queue, entry, consumer) in taken:
            released += _record_bytes(queue, entry[0])
            requeued.setdefault(queue, []).append((entry, consumer))
        self.memory.remove(released)
        for consumer in consumers:
            consumer.queue.detach(consumer)
        for queue, returned in requeued.items():
            queue.requeue(returned)
        for queue in {consumer.queue for consumer in consumers}:
            queue.maybe_auto_delete()

    # -- confirm and tx ---------------------------------------------------------------

    def _on_confirm_select(self, m: commands.Confirm.Select) -> None:
        if self.tx is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        self.confirm = True
        if not m.nowait:
            self.send(commands.Confirm.SelectOk())

    def _on_tx_select(self, _m: commands.Tx.Select) -> None:
        if self.confirm:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = []
        self.send(commands.Tx.SelectOk())

    def _on_tx_commit(self, _m: commands.Tx.Commit) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional")
        actions, self.tx = self.tx, []
        self.commit()
        self.tx_publishes = 0
        # The committed messages count in their queues from here.
        self._release_held()
        generation = 0
        for action in actions:
            result = action()
            if isinstance(result, tuple):
                generation = max(generation, result[1])
        persistence = self.vhost.persistence
        if self.pending_commits or (persistence is not None and generation > persistence.synced):
            # Committed persistent messages must be on disk before commit-ok.
            if persistence is not None and not self.waiting and not self.pending_commits:
                persistence.subscribe(self._on_synced)
            self.pending_commits.append(generation)
            return
        self.send(commands.Tx.CommitOk())

    def _on_tx_rollback(self, _m: commands.Tx.Rollback) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional")
        self.tx = []
        self.tx_publishes = 0
        self._release_held()
        self.rollback()  # the deliveries whose acks are undone are unacked again
        self.send(commands.Tx.RollbackOk())

    # -- exchanges and queues ---------------------------------------------------------

    def _on_exchange_declare(self, m: commands.Exchange.Declare) -> None:
        if not m.passive and m.exchange:
            self._permit("configure", "exchange", m.exchange)
            if m.exchange not in self.vhost.projection.exchanges:
                self.access.check_linked_exchange(
                    self.conn.user, self.vhost.name, "exchange", m.exchange, m.arguments or {}
                )
        self.vhost.declare_exchange(
            m.exchange,
            m.exchange_type,
            m.passive,
            m.durable,
            m.auto_delete,
            m.internal,
            m.arguments or {},
        )
        if not m.nowait:
            self.send(commands.Exchange.DeclareOk())

    def _on_exchange_delete(self, m: commands.Exchange.Delete) -> None:
        if m.exchange and not m.exchange.startswith("amq."):
            self._permit("configure", "exchange", m.exchange)
        self.vhost.delete_exchange(m.exchange, m.if_unused)
        if not m.nowait:
            self.send(commands.Exchange.DeleteOk())

    def _on_exchange_bind(self, m: commands.Exchange.Bind) -> None:
        self._permit_binding("exchange", m.destination, m.source, m.routing_key)
        self.vhost.bind(
            m.source,
            DestKind.EXCHANGE,
            m.destination,
            m.routing_key,
            m.arguments or {},
            self.conn,
            add=True,
        )
        if not m.nowait:
            self.send(commands.Exchange.BindOk())

    def _on_exchange_unbind(self, m: commands.Exchange.Unbind) -> None:
        self._permit_binding("exchange", m.destination, m.source, m.routing_key)
        self.vhost.bind(
            m.source,
            DestKind.EXCHANGE,
            m.destination,
            m.routing_key,
            m.arguments or {},
            self.conn,
            add=False,
        )
        if not m.nowait:
            self.send(commands.Exchange.UnbindOk())

    def _on_queue_declare(self, m: commands.Queue.Declare) -> None:
        name = m.queue
        server_named = not name and not m.passive
        if server_named:
            name = generated_name("amq.gen")
        elif not name:
            name = self._queue_name(name)
        if name == REPLY_TO or name.startswith(REPLY_PREFIX):
            # The pseudo-queue and a live reply name declare (passive or not) as
            # (0 messages, 1 consumer), before any name check (rabbit_channel).
            if name != REPLY_TO and name[len(REPLY_PREFIX) :] not in self.vhost.reply_consumers:
                raise AMQPChannelError(NOT_FOUND, f"no {self.vhost.rs('queue', name)}")
            if not m.nowait:
                self.conn.write(
                    codec.simple_method(
                        self.id,
                        commands.Queue.DeclareOk,
                        ("shortstr", name),
                        ("long", 0),
                        ("long", 1),
                    )
                )
            return
        if not m.passive:
            self._permit("configure", "queue", name)
            if name not in self.vhost.queues:
                self.access.check_linked_exchange(
                    self.conn.user, self.vhost.name, "queue", name, m.arguments or {}
                )
        queue = self.vhost.declare_queue(
            name,
            m.passive,
            m.durable,
            m.exclusive,
            m.auto_delete,
            m.arguments or {},
            self.conn,
            server_named,
        )
        self.last_queue = queue.name
        if not m.nowait:
            self.conn.write(
                codec.simple_method(
                    self.id,
                    commands.Queue.DeclareOk,
                    ("shortstr", queue.name),
                    ("long", queue.message_count),
                    ("long", len(queue.consumers)),
                )
            )

    def _permit_binding(self, kind: str, destination: str, source: str, routing_key: str) -> None:
        # rabbit_channel:binding_action/10: write on the destination, read on the source
        # (the default exchange refuses binding first, with its own 403), then, when the
        # source is a topic exchange, the binding key against the user's topic permission.
        if destination and source:
            self._permit("write", kind, destination)
            self._permit("read", "exchange", source)
            self._permit_topic("read", self.vhost.projection.exchanges.get(source), routing_key)

    def _bind_queue(self, m: commands.Queue.Bind | commands.Queue.Unbind, add: bool) -> None:
        name = self._queue_name(m.queue)
        routing_key = m.routing_key
        if not m.queue and not routing_key:
            # rabbit_channel:expand_routing_key_shortcut/3
            routing_key = name
        self._permit_binding("queue", name, m.exchange, routing_key)
        self.vhost.bind(
            m.exchange, DestKind.QUEUE, name, routing_key, m.arguments or {}, self.conn, add
        )

    def _on_queue_bind(self, m: commands.Queue.Bind) -> None:
        self._bind_queue(m, add=True)
        if not m.nowait:
            self.send(commands.Queue.BindOk())

    def _on_queue_unbind(self, m: commands.Queue.Unbind) -> None:
        self._bind_queue(m, add=False)
        self.send(commands.Queue.UnbindOk())

    def _on_queue_purge(self, m: commands.Queue.Purge) -> None:
        name = self._queue_name(m.queue)
        self._permit("read", "queue", name)
        queue = self.vhost.queue(name, self.conn)
        queue.check_purge()
        count = queue.purge()
        if not m.nowait:
            self.send(commands.Queue.PurgeOk(message_count=count))

    def _on_queue_delete(self, m: commands.Queue.Delete) -> None:
        name = self._queue_name(m.queue)
        self._permit("configure", "queue", name)
        queue = self.vhost.queues.get(name)
        count = 0
        if queue is not None:
            self.vhost.check_exclusive(queue, self.conn)
            what = self.vhost.rs("queue", name)
            if m.if_unused and queue.consumers:
                raise AMQPChannelError(PRECONDITION_FAILED, f"{what} in use")
            if m.if_empty and queue.message_count:
                raise AMQPChannelError(PRECONDITION_FAILED, f"{what} not empty")
            count = self.vhost.delete_queue(queue)
        if not m.nowait:
            self.send(commands.Queue.DeleteOk(message_count=count))
