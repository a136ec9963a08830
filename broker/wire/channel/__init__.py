"""An AMQP channel: method dispatch, content assembly, publish, delivery, acks, confirms.

Theory of operation
-------------------
The connection hands every frame for this channel to :meth:`Channel.handle`, in order
and synchronously. Methods dispatch through one dict keyed by the method class.
``Basic.Publish`` starts content assembly, a small state table::

    IDLE --Basic.Publish--> AWAIT_HEADER --Header--> AWAIT_BODY --Body*--> IDLE

(a zero-size body completes at the header). Any other frame out of that order is a
505 UNEXPECTED_FRAME with RabbitMQ's texts (rabbit_command_assembler.erl).

What the channel holds counts against the memory watermark (leveret.node.memory): its
unacknowledged deliveries (from delivery until ack, reject or nack, or the channel's
close), the messages of an uncommitted transaction, and the frames of a body being
assembled.

Handlers raise :class:`leveret.node.errors.AMQPError`; the connection converts it (the one
place that does). Delivery tags are per channel, start at 1 and never repeat; unacked
deliveries are kept in tag order so ``multiple`` acks and requeues keep message order.
Consumers, confirms and transactions are the channel's own methods; its exchange.* and
queue.* methods are a collaborator it holds, :class:`leveret.wire.channel.topology.Topology`
(the package's child, which names the channel only as a type). The channel names its
connection as a type only (a type-only import inside the wire), so at run time imports go
one way: connection -> channel -> its parts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pamqp import commands

from leveret.node.acktimeout import DeliveryClock
from leveret.node.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    NO_ROUTE,
    NOT_IMPLEMENTED,
    UNEXPECTED_FRAME,
    AMQPConnectionError,
)
from leveret.node.memory import DELIVERY_OVERHEAD, UNACKED_OVERHEAD, message_bytes
from leveret.node.message import Message, properties_decode, with_header
from leveret.node.queue import Consumer, Entry, Queue
from leveret.node.vhost import generated_name
from leveret.session import consume, tx
from leveret.session.get import basic_get, delivery_header
from leveret.session.publish import (
    BASIC_PUBLISH,
    CHECKED_FLAGS,
    REPLY_TO,
    ExchangeStats,
    Publisher,
    fold,
    size_error,
)
from leveret.session.topology import Actor
from leveret.wire import codec
from leveret.wire.channel.parts import Content, Record
from leveret.wire.channel.stats import DeliveryCounters, count_confirms
from leveret.wire.channel.stats import record_bytes as _record_bytes
from leveret.wire.channel.topology import Topology

if TYPE_CHECKING:
    from leveret.wire.connection import Connection

BASIC_CLASS: Final = 60
# The guards of _on_full_publish's condition, by the session's publish check each stands
# for (leveret.session.publish.CHECKS, RabbitMQ's order): the fast path routes a publish
# without the checks only when every guard shows its check would pass.
# tests/session/test_publish.py holds the two lists together.
FAST_PATH_GUARDS = {
    "size": "header.body_size > self.max_message_size",
    "write": "stats is None or stats.writable != self.access.version",
    "exchange": "exchange is None",
    "internal": "exchange.internal",
    "topic": "stats.writable != self.access.version (-1 with a topic permission)",
    "properties": "not properties_decode(payload)",
    "user_id": "flags & CHECKED_FLAGS",
    "expiration": "flags & CHECKED_FLAGS",
    "reply_to": "flags & CHECKED_FLAGS",
}
B = commands.Basic


class Channel(Publisher, DeliveryCounters):
    """One open channel of a connection, with the session's publish rules, delivery-tag
    ledger and message counters (inherited, so the hot path reads ``unacked``, ``next_tag``,
    the publish permission cache and the counters as plain attributes). Publisher is its one
    concrete base, the counters and the ledger they count over are mypyc traits: the compiled
    build (setup.py) compiles the channel as a native class."""

    def __init__(self, connection: Connection, channel_id: int) -> None:
        server = connection.server
        # Publishes count into the channel's own counters (leveret.wire.channel.stats), folded
        # into the node's when it closes.
        super().__init__(
            server.access,
            connection.vhost,
            connection.user,
            connection.config.max_message_size,
        )
        self.open_ledger()
        self.open_counters()
        self.node_counters = server.counters
        self.conn = connection
        self.id = channel_id
        # Who runs this channel's commands (leveret.session.topology): its user, over
        # this connection (the owner of the exclusive queues it declares).
        self.actor = Actor(self.access, self.user, self.vhost, connection)
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
        self.tx_bytes = 0  # what those publishes hold (leveret.node.memory)
        # When deliveries went out, roughly, for the consumer timeout (overdue_ack).
        self.sent = DeliveryClock()
        # Its exchange.* and queue.* methods, and its last declared queue.
        self.topology = Topology(self)
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
            commands.Exchange.Declare: self.topology.exchange_declare,
            commands.Exchange.Delete: self.topology.exchange_delete,
            commands.Exchange.Bind: self.topology.exchange_bind,
            commands.Exchange.Unbind: self.topology.exchange_unbind,
            commands.Queue.Declare: self.topology.queue_declare,
            commands.Queue.Bind: self.topology.queue_bind,
            commands.Queue.Unbind: self.topology.queue_unbind,
            commands.Queue.Purge: self.topology.queue_purge,
            commands.Queue.Delete: self.topology.queue_delete,
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
        stats = self.exchange_stats.get(publish.exchange)  # the permission cache and counts
        exchange = self.vhost.projection.exchanges.get(publish.exchange)
        if (  # FAST_PATH_GUARDS, with the wire's own (content class, immediate, tx)
            stats is None
            or stats.writable != self.access.version
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
        routed, rejected, sync_gen = self.route(message, publish.mandatory, self, stats)
        if not routed and publish.mandatory:
            self._return(message)
        if self.confirm:
            self._confirm(rejected, sync_gen, stats)

    def _accept(self, message: Message, mandatory: bool, stats: ExchangeStats) -> None:
        """Route a checked message now (not in tx mode) and number it for confirms."""
        self.conn.published = True  # a publisher: the memory alarm blocks it
        rejected, sync_gen = self._route(message, mandatory, stats)
        if self.confirm:
            self._confirm(rejected, sync_gen, stats)

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
        stats = self.check_exchange(publish.exchange, publish.routing_key)
        message = self.check_message(
            Message(publish.exchange, publish.routing_key, header.payload, body),
            None if self.reply_consumer is None else self.reply_key,
        )
        self.conn.published = True
        if self.tx is not None:
            mandatory = publish.mandatory
            self.tx.append(lambda: self._route(message, mandatory, stats))
            self.tx_publishes += 1
            size = message_bytes(message)
            self.tx_bytes += size
            self.memory.add(size)
            return
        self._accept(message, publish.mandatory, stats)

    def _confirm(self, rejected: bool, sync_gen: int, stats: ExchangeStats) -> None:
        """Number a publish in confirm mode; its ack waits for ``sync_gen``'s fsync. A
        publish into another exchange than the last starts a run (flush_confirms counts
        each confirm into its exchange by the runs: leveret.wire.channel.stats)."""
        self.publish_seq += 1
        if stats is not self.confirm_into:  # the open run's exchange
            self.confirm_into = stats
            self.confirm_runs.append((self.publish_seq, stats))
        if rejected:
            self.nacks.append(self.publish_seq)
        if sync_gen:
            self._wait_for_sync(self.publish_seq, sync_gen)
        self.conn.confirm_pending(self)

    # -- confirms and transactions ---------------------------------------------------

    def _on_confirm_select(self, m: commands.Confirm.Select) -> None:
        """confirm.select: publisher confirms from here
        (:func:`leveret.session.tx.confirm_select`)."""
        tx.confirm_select(self.tx is not None)
        self.confirm = True
        if not m.nowait:
            self.send(commands.Confirm.SelectOk())

    def _on_tx_select(self, _m: commands.Tx.Select) -> None:
        """tx.select: publishes and acks are held until tx.commit (not in confirm mode)."""
        self.tx = tx.tx_select(self.confirm, self.tx)
        self.send(commands.Tx.SelectOk())

    def _on_tx_commit(self, _m: commands.Tx.Commit) -> None:
        """tx.commit: run the held publishes and acks; commit-ok once their messages are on
        disk."""
        actions = tx.tx_commit(self, self.tx)
        self.tx = []
        self.tx_publishes = 0
        # The committed messages count in their queues from here.
        self._release_held()
        generation = tx.run(actions)
        persistence = self.vhost.persistence
        if self.pending_commits or (persistence is not None and generation > persistence.synced):
            # Committed persistent messages must be on disk before commit-ok.
            if persistence is not None and not self.waiting and not self.pending_commits:
                persistence.subscribe(self._on_synced)
            self.pending_commits.append(generation)
            return
        self.send(commands.Tx.CommitOk())

    def _on_tx_rollback(self, _m: commands.Tx.Rollback) -> None:
        """tx.rollback: drop the held publishes; the acks are undone, deliveries unacked again."""
        tx.tx_rollback(self, self.tx)
        self.tx = []
        self.tx_publishes = 0
        self._release_held()
        self.send(commands.Tx.RollbackOk())

    def _wait_for_sync(self, seq: int, generation: int) -> None:
        """Publish ``seq`` is confirmed only after ``generation``'s fsync."""
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

    def flush_confirms(self) -> None:
        """Confirm every publish so far (:func:`leveret.session.tx.confirms_due`)."""
        if not self.open:
            return
        # Persistent publishes not yet on disk hold back every later confirm.
        upto = self.waiting[0][0] - 1 if self.waiting else self.publish_seq
        start = self.confirmed_upto
        confirms, self.confirmed_upto, acked = tx.confirms_due(start, upto, self.nacks)
        events = self.vhost.events
        for tag, multiple, ack in confirms:
            self.send(B.Ack(tag, multiple) if ack else B.Nack(tag, False, False))
            if events is not None:
                events.confirmed(self, tag, multiple, ack)
        self.counters.confirmed += acked
        if confirms:
            count_confirms(self.confirm_runs, start, confirms)  # per exchange

    def _route(self, message: Message, mandatory: bool, stats: ExchangeStats) -> tuple[bool, int]:
        """Route and enqueue ``message``; return it when mandatory and unroutable.
        Returns whether a queue refused it (overflow) and the group-commit generation
        that makes it durable (0 if nothing to wait for)."""
        routed, rejected, sync_gen = self.route(message, mandatory, self, stats)
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
        events = self.vhost.events
        if events is not None:
            events.returned(message, self)

    # -- delivery ---------------------------------------------------------------------

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        """Send a queue entry to ``consumer`` (called by the queue, which counted it)."""
        message = entry[0]
        redelivered = entry[1]
        tag = self.next_tag  # Ledger.record, inlined: once per delivery
        self.next_tag = tag + 1
        queue = consumer.queue
        content_header = message.header
        if redelivered:  # leveret.session.get.delivery_header, inlined
            consumer.counts.redelivered += 1
            if queue.quorum:
                content_header = with_header(content_header, "x-delivery-count", redelivered)
                redelivered = True
        if not consumer.no_ack:
            self.unacked[tag] = (queue, entry, consumer)
            # Held until settled (leveret.node.memory; a stream's log keeps counting the message).
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
        events = self.vhost.events
        if events is not None:
            events.delivered(message, queue.name, bool(redelivered), self, tag)

    def overdue_ack(self, now: float, timeout_ms: Callable[[Queue], float]) -> int | None:
        """The timeout (ms) the oldest unacknowledged delivery has outlived, or None
        (leveret.node.acktimeout.DeliveryClock.overdue)."""
        return self.sent.overdue(now, self.next_tag, self.oldest(), timeout_ms)

    # -- basic ------------------------------------------------------------------------

    # -- consumers --------------------------------------------------------------------

    def cancel_by_server(self, consumer: Consumer) -> None:
        """The queue went away: forget the consumer and tell the client if it can hear
        it (capability ``consumer_cancel_notify``, docs/consumer-cancel.md)."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            # The queue's row goes with it, as RabbitMQ's does (rabbit_channel's
            # erase_queue_stats/1 on the queue's eol; leveret.wire.channel.stats's docstring).
            self.erase_row(consumer.queue)
            self._notify_cancel(consumer)

    def cancel_live(self, consumer: Consumer) -> None:
        """Cancel ``consumer`` from the server side while its queue stays (an injected fault,
        broker/faults.py): as a client's basic.cancel for the queue (it leaves, an auto-delete
        queue goes with its last consumer, its counts stay in the queue's row, its unacked
        deliveries stay on the channel), and basic.cancel to the client as on a queue's
        deletion."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            self._notify_cancel(consumer)
            consumer.queue.remove_consumer(consumer)
            self.cancelled(consumer)

    def _notify_cancel(self, consumer: Consumer) -> None:
        """basic.cancel to a client that can hear it (capability ``consumer_cancel_notify``,
        docs/consumer-cancel.md); rabbit_channel sends it with nowait set."""
        if self.conn.client_capability("consumer_cancel_notify"):
            self.conn.write(
                codec.simple_method(self.id, B.Cancel, ("shortstr", consumer.tag), ("bit", True))
            )

    def _on_basic_consume(self, m: commands.Basic.Consume) -> None:
        """basic.consume: the session's checks (:mod:`leveret.session.consume`), then the
        consumer exists, consume-ok goes out and only then does it subscribe (its first
        deliveries follow the -Ok)."""
        consume.check_tag(m.consumer_tag, self.consumers)
        if m.queue == REPLY_TO:
            self._consume_replies(m)
            return
        arguments = m.arguments or {}
        queue = consume.consumable_queue(
            self.actor,
            self.topology.queue_name(m.queue),
            m.no_ack,
            m.exclusive,
            self.prefetch_count,
            self.global_prefetch,
            arguments,
        )
        tag = consume.new_tag(m.consumer_tag)
        consumer = Consumer(
            self,
            queue,
            tag,
            m.no_ack,
            m.exclusive,
            self.prefetch_count,
            dict(arguments),
            codec.shortstr(tag),
        )
        consumer.counts = self.counts_of(queue)  # its acks and redeliveries: the channel's
        self.consumers[tag] = consumer
        if not m.nowait:
            self.conn.write(codec.simple_method(self.id, B.ConsumeOk, ("shortstr", tag)))
        queue.subscribe(consumer)

    def _consume_replies(self, m: commands.Basic.Consume) -> None:
        """basic.consume on ``amq.rabbitmq.reply-to`` (docs/direct-reply-to.md)."""
        consume.check_reply_consume(m.no_ack, self.reply_consumer is not None)
        tag = consume.new_tag(m.consumer_tag)
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
        """Forget the channel's direct reply-to consumer, if it has one."""
        if self.reply_consumer is not None:
            self.vhost.reply_consumers.pop(self.reply_key, None)
            self.reply_consumer = None

    def _on_basic_cancel(self, m: commands.Basic.Cancel) -> None:
        """basic.cancel: the consumer goes (an auto-delete queue with its last one)."""
        consumer = self.consumers.pop(m.consumer_tag or "", None)
        if consumer is not None and consumer is self.reply_consumer:
            self._drop_reply_consumer()
        if not m.nowait:
            self.conn.write(codec.simple_method(self.id, B.CancelOk, ("shortstr", m.consumer_tag)))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)
            self.cancelled(consumer)

    def _on_basic_qos(self, m: commands.Basic.Qos) -> None:
        """basic.qos (:func:`leveret.session.consume.qos`)."""
        consume.qos(self, self.consumers.values(), m.prefetch_size, m.prefetch_count, m.global_)
        self.send(B.QosOk())

    def _on_basic_recover(self, m: commands.Basic.Recover | commands.Basic.RecoverAsync) -> None:
        """basic.recover(-async): every unacked delivery back to its queue, redelivered."""
        self._apply_settle(consume.recover(self, m.requeue), True)
        if isinstance(m, B.Recover):
            self.send(B.RecoverOk())

    def _on_basic_get(self, m: commands.Basic.Get) -> None:
        """basic.get on a channel: take the head message (leveret.session.get), count it as
        the channel's get, get_no_ack or get_empty, and send get-ok or get-empty."""
        queue, entry = basic_get(
            self.access,
            self.user,
            self.vhost,
            self.topology.queue_name(m.queue),
            m.no_ack,
            self.conn,
        )
        counts = self.counts_of(queue)
        if entry is None:
            counts.get_empty += 1
            self.send(B.GetEmpty())
            return
        message = entry[0]
        content_header, redelivered = delivery_header(queue, entry)
        if redelivered:
            counts.redelivered += 1
        tag = self.record(None if m.no_ack else (queue, entry, None))
        if m.no_ack:
            counts.get_no_ack += 1
        else:
            counts.get_ack += 1
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
        events = self.vhost.events
        if events is not None:
            events.delivered(message, queue.name, bool(redelivered), self, tag)

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
            counts = self.counts_of(queue) if consumer is None else consumer.counts
            if consumer is not None:
                touched.add(consumer.queue)
            if requeue:
                requeued.setdefault(queue, []).append((entry, consumer))
            elif requeue is None:
                queue.ack(entry[0], consumer)
                counts.acked += 1
            else:
                queue.reject(entry[0], consumer)
            if requeue is not None:
                counts.returned += 1
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
                    consumer.counts.acked += 1  # the queue's share (leveret.wire.channel.stats)
                    self.conn.drain_later_one(consumer.queue)
                else:  # a basic.get's
                    self.counts_of(queue).acked += 1
                if self.global_prefetch:
                    self.conn.drain_later({c.queue for c in self.consumers.values()})
                return
        self._settle(m.delivery_tag, m.multiple, None)

    def _on_basic_nack(self, m: commands.Basic.Nack) -> None:
        self._settle(m.delivery_tag, m.multiple, m.requeue)

    def _on_basic_reject(self, m: commands.Basic.Reject) -> None:
        self._settle(m.delivery_tag or 0, False, m.requeue)

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
        fold(self.counters, self.node_counters)  # the node's totals keep what it counted
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
