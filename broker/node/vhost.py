"""A virtual host: its topology (through the pure projection) and its queues.

Every topology change goes event -> ``projection.apply(event)`` (recorded first when
durable); routing reads the projection through :func:`leveret.exchanges.routing.route`.
The rules of the commands that ask for a change (permissions, reserved names,
equivalence, exclusive access, with RabbitMQ's codes and texts) are the session's
(:mod:`leveret.session.topology`): the vhost applies what they allowed.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from leveret.exchanges.model import (
    PREDECLARED_EXCHANGES,
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    ExchangeType,
    ExchangeTypeCrashError,
    QueueDeclared,
    QueueDeleted,
)
from leveret.exchanges.model import Queue as QueueDef
from leveret.exchanges.policies import Policy, apply_alternates
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route, route_kept
from leveret.node.arguments import copy_args, queue_type
from leveret.node.churn import NodeCounters
from leveret.node.clock import Clock
from leveret.node.delayed import DelayedMessages
from leveret.node.errors import AMQPError, ChannelCrashError
from leveret.node.events import EventSource
from leveret.node.firehose import FirehoseTap
from leveret.node.memory import MemoryMonitor, default_watermark
from leveret.node.message import BccMessage, Message
from leveret.node.queue import Consumer, Queue
from leveret.node.stream import StreamQueue
from leveret.node.vhost_policies import VHostPolicies
from leveret.trace.recorder import TraceTap

if TYPE_CHECKING:
    from leveret.node.acktimeout import AckTimeouts
    from leveret.node.peers import ChannelPeer, ConnectionPeer
    from leveret.node.persistence import Persistence
    from leveret.trace import TraceWriter

DEFAULT_EXCHANGES = PREDECLARED_EXCHANGES
# The object each x-queue-type is (a quorum queue is a Queue with its own rules).
_QUEUE_CLASSES: dict[str, type[Queue]] = {"classic": Queue, "quorum": Queue, "stream": StreamQueue}


def generated_name(prefix: str) -> str:
    """RabbitMQ's generated names: prefix + base64url(16 random bytes), unpadded
    (rabbit_guid:binary/2), e.g. ``amq.gen-`` + 22 characters."""
    return prefix + "-" + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


class VHost(VHostPolicies, EventSource):
    """The topology and queues of one virtual host; what happens to its messages goes to
    the subscribers of its events (:mod:`leveret.node.events`)."""

    def __init__(
        self,
        name: str,
        memory: MemoryMonitor | None = None,
        persistence: Persistence | None = None,
    ) -> None:
        self.name = name
        # The one door time enters by: every timer of the vhost's queues, delayed
        # messages and consumer timeouts (leveret.clock; manual in a test).
        self.clock = Clock(name)
        self.persistence = persistence
        # Who listens to its events (leveret.events): an instance attribute, as every
        # delivery and ack reads it.
        self.events = None
        self._tracer: TraceWriter | None = None
        self._trace_tap: TraceTap | None = None
        self._firehose_tap: FirehoseTap | None = None
        # The server's delivery acknowledgement timeout checks, told of queues with a
        # timeout of their own (None: a vhost outside a server, in unit tests).
        self.ack_timeouts: AckTimeouts | None = None
        self.churn = NodeCounters()  # the server's (broker/churn.py)
        # Seconds every write to its connections is held (an injected fault,
        # broker/faults.py); 0: none.
        self.write_delay = 0.0
        self.memory = memory or MemoryMonitor(default_watermark())
        # Direct reply-to consumers by the key in their amq.rabbitmq.reply-to.* name.
        self.reply_consumers: dict[str, Consumer] = {}
        self.projection = Projection()
        self.queues: dict[str, Queue] = {}
        # Per exchange published to: [messages in, deliveries to queues out], what the
        # management API shows as publish_in and publish_out (client publishes only).
        self.exchange_stats: dict[str, list[int]] = {}
        self._headers_exchanges: set[str] = set()
        self._uses_headers: bool | None = False
        # The messages exchanges keep back (projection.keeping: x-delayed-message), until
        # they are routed from there.
        self.delayed = DelayedMessages(self)
        # Policies by name (exchanges/policies.py); persisted by the server beside the users.
        self.policies: dict[str, Policy] = {}
        # Operator policies by name: a second set, applied to queues beside the policies.
        self.operator_policies: dict[str, Policy] = {}
        # max-connections and max-queues (broker/limits.py); persisted like the policies.
        self.limits: dict[str, int] = {}
        for exchange in DEFAULT_EXCHANGES:
            # Predeclared on every start: never written to the definitions log.
            self._apply(ExchangeDeclared(exchange), replaying=True)

    def continue_from(self, old: VHost) -> None:
        """Carry on from ``old``, this vhost before an injected restart of the node
        (:mod:`leveret.faults`): its clock's time and mode (a test's frozen clock stays
        frozen where it stood) and the subscribers that outlive a restart (a test's
        journal). Called as the vhost is created, before anything is recovered into it."""
        self.clock.continue_from(old.clock)
        self.take_subscribers(old)

    # -- the subscribers the node itself adds (leveret.events) --------------------------

    @property
    def firehose(self) -> bool:
        """Whether the firehose tracer copies this vhost's traffic (broker/firehose.py)."""
        return self._firehose_tap is not None

    @firehose.setter
    def firehose(self, on: bool) -> None:
        if on and self._firehose_tap is None:
            self._firehose_tap = FirehoseTap()
            self.subscribe(self._firehose_tap)
        elif not on and self._firehose_tap is not None:
            self.unsubscribe(self._firehose_tap)
            self._firehose_tap = None

    @property
    def tracer(self) -> TraceWriter | None:
        """The traffic trace this vhost's publishes are recorded in (None: not recorded)."""
        return self._tracer

    @tracer.setter
    def tracer(self, tracer: TraceWriter | None) -> None:
        if self._trace_tap is not None:
            self.unsubscribe(self._trace_tap)
            self._trace_tap = None
        self._tracer = tracer
        if tracer is not None:
            self._trace_tap = TraceTap(self.name, tracer)
            self.subscribe(self._trace_tap)

    # -- helpers ----------------------------------------------------------------------

    def rs(self, kind: str, name: str) -> str:
        """rabbit_misc:rs/1: ``exchange 'x' in vhost '/'``."""
        return f"{kind} '{name}' in vhost '{self.name}'"

    def _apply(self, event: Event, replaying: bool = False) -> None:
        # The single mutation point of the topology, for live commands and for replay of
        # the definitions log alike. A durable change is on disk (fsynced) before it is
        # applied, and so before the client gets its *-Ok.
        if self.persistence is not None and not replaying:
            self.persistence.record(self, event)
        self.projection.apply(event)
        if isinstance(event, ExchangeDeclared):
            if event.exchange.type == ExchangeType.HEADERS:
                self._headers_exchanges.add(event.exchange.name)
            if self.policies:
                apply_alternates(self.projection, self.policies.values(), (event.exchange.name,))
        elif isinstance(event, ExchangeDeleted):
            self._headers_exchanges.discard(event.name)
            self.exchange_stats.pop(event.name, None)
        elif isinstance(event, QueueDeclared) and (self.policies or self.operator_policies):
            queue = self.queues.get(event.queue.name)
            if queue is not None:
                queue.apply_policy(*self.queue_policies(queue.name))
        self._uses_headers = None

    @property
    def projection_uses_headers(self) -> bool:
        """Whether any headers exchange has bindings, or an exchange that may keep a message
        back exists (its type's ``keeps`` reads the headers), so routing may read headers.
        Recomputed lazily after a topology change, so publishing stays cheap."""
        if self._uses_headers is None:
            has = self.projection.has_bindings_from
            self._uses_headers = bool(self.projection.keeping) or any(
                has(name) for name in self._headers_exchanges
            )
        return self._uses_headers

    # -- exchanges (the rules of their commands: leveret.session.topology) --------------

    def add_exchange(self, exchange: Exchange) -> None:
        """A new exchange, declared (recorded when durable)."""
        self._apply(ExchangeDeclared(exchange))

    def remove_exchange(self, name: str) -> None:
        """Delete the exchange ``name`` with its bindings; a source left without bindings
        that is auto-delete goes too."""
        sources = {b.source for b in self.projection.bindings_to(DestKind.EXCHANGE, name)}
        self._apply(ExchangeDeleted(name))
        self._auto_delete_sources(sources)

    def _auto_delete_sources(self, sources: set[str]) -> None:
        # An auto-delete exchange goes when its last binding as a source goes
        # (rabbit_exchange:maybe_auto_delete/2).
        for source in sources:
            exchange = self.projection.exchanges.get(source)
            if (
                exchange is not None
                and exchange.auto_delete
                and not self.projection.has_bindings_from(source)
            ):
                self.remove_exchange(source)

    # -- bindings ---------------------------------------------------------------------

    def add_binding(self, binding: Binding) -> None:
        """A new binding (both ends checked by the session)."""
        self._apply(BindingAdded(binding))

    def remove_binding(self, binding: Binding) -> None:
        """Remove a binding; its source goes too if auto-delete and now unbound."""
        self._apply(BindingRemoved(binding))
        self._auto_delete_sources({binding.source})

    # -- queues -----------------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        kind: str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        owner: ConnectionPeer | None,
    ) -> Queue:
        """A new queue of type ``kind`` (its declare checked by the session), recorded
        when durable; ``owner`` is the connection it is exclusive to (None: not
        exclusive)."""
        queue = _QUEUE_CLASSES[kind](self, name, durable, owner, auto_delete, copy_args(arguments))
        self.queues[name] = queue
        try:
            self._apply(
                QueueDeclared(QueueDef(name, durable, exclusive, auto_delete, dict(arguments)))
            )
        except AMQPError:  # not recorded (a full disk): not declared
            del self.queues[name]
            queue.deleted = True
            raise
        self.churn.queue_declared(created=True)
        if owner is not None:
            owner.exclusive_queues.add(queue)
        return queue

    def queue_redeclared(self, queue: Queue) -> None:
        """An equivalent declare of an existing queue: it is used (its expiry restarts)
        and counted as a declare."""
        queue.touch()
        self.churn.queue_declared(created=False)

    def delete_queue(self, queue: Queue) -> int:
        """Remove ``queue``: cancel its consumers, drop its bindings and messages."""
        if queue.deleted:
            return 0
        sources = {b.source for b in self.projection.bindings_to(DestKind.QUEUE, queue.name)}
        # Recorded first: when it cannot be (a full disk) the queue stays as it was.
        self._apply(QueueDeleted(queue.name))
        queue.deleted = True
        self.churn.queue_deleted(queue)
        # A stream's delete-ok counts 0 messages (observed on 3.10.8).
        count = 0 if queue.stream else queue.message_count
        for consumer in list(queue.consumers):
            consumer.channel.cancel_by_server(consumer)
        queue.consumers.clear()
        self.queues.pop(queue.name, None)
        self._auto_delete_sources(sources)
        if queue.owner is not None:
            queue.owner.exclusive_queues.discard(queue)
        queue.discard()
        return count

    def replay(self, event: Event) -> None:
        """Apply an event from the definitions log at start-up (through the same
        ``_apply`` as live commands), creating the queue objects durable queues need."""
        if isinstance(event, ExchangeDeclared):
            if event.exchange.name not in self.projection.exchanges:
                self._apply(event, replaying=True)
        elif isinstance(event, QueueDeclared):
            definition = event.queue
            if definition.exclusive or definition.name in self.queues:
                return
            kind = queue_type(definition.arguments)
            self.queues[definition.name] = _QUEUE_CLASSES[kind](
                self,
                definition.name,
                True,
                None,
                definition.auto_delete,
                copy_args(definition.arguments),
            )
            self._apply(event, replaying=True)
        elif isinstance(event, QueueDeleted):
            queue = self.queues.pop(event.name, None)
            if queue is not None:
                queue.deleted = True
            self._apply(event, replaying=True)
        else:
            self._apply(event, replaying=True)

    # -- publishing -------------------------------------------------------------------

    def publish(
        self,
        message: Message,
        origin: ChannelPeer | None = None,
        source: str | None = None,
        counted: bool = True,
    ) -> tuple[Collection[str], bool, int]:
        """Route ``message`` and enqueue it in every queue it reaches.

        Returns (the names of the queues it reached, read-only: empty when unroutable;
        rejected by an overflowing queue; group-commit generation that makes it durable or
        0). Used by channels (``origin``, which the firehose tracer
        names) and by the management API alike, and with ``source`` (the exchange to route
        from, not the one published to) for a delayed message whose delay is up; that is no
        publish, so neither tracer sees it. Publishes are counted in :attr:`exchange_stats`
        unless ``counted`` is false (the firehose's copies) or they are such a release:
        RabbitMQ counts what channels publish (the management API publishes through one),
        not what the broker publishes itself (observed on 3.10.8: firehose copies,
        dead letters). Every publish but such a release is an event (:mod:`leveret.node.events`).
        """
        payload = message.header
        headers = None
        # Decode the headers table only when routing can use it: a headers exchange
        # somewhere in the vhost, an exchange that may keep messages back, or
        # sender-selected CC/BCC keys.
        if self.projection_uses_headers or b"CC" in payload:
            headers = message.headers
        exchange = message.exchange if source is None else source
        kept: tuple[str, ...] = ()
        try:
            if self.projection.keeping:
                names, kept = route_kept(
                    self.projection, exchange, message.routing_key, headers, payload
                )
            else:
                names = route(self.projection, exchange, message.routing_key, headers, payload)
        except ExchangeTypeCrashError:  # a type's keeps hook (an x-delay the plugin crashes on)
            raise ChannelCrashError() from None
        held = self.delayed.hold(message, kept) if kept else 0
        if headers is not None and "BCC" in headers:
            # BCC is routing-only: stripped before delivery (docs/sender-selected.md).
            props = message.copy_properties()
            props.headers = {k: v for k, v in headers.items() if k != "BCC"}
            message = BccMessage.stripped(message, props)
        events = self.events
        if events is not None and source is None:
            # Before any queue has it, as rabbit_channel's tap_in: a firehose copy of the
            # publish is routed before the copies of its deliveries.
            queues = self.queues
            events.published(
                message,
                names if all(n in queues for n in names) else [n for n in names if n in queues],
                origin,
            )
        rejected = False
        reached = 0
        if names:
            queues = self.queues
            for name in names:
                queue = queues.get(name)
                if queue is not None:
                    reached += 1
                    if not queue.publish(message):
                        rejected = True
        if counted and source is None:
            stats = self.exchange_stats.get(message.exchange)
            if stats is None:
                stats = self.exchange_stats[message.exchange] = [0, 0]
            stats[0] += 1
            stats[1] += reached
        # The queues reached: the routed set itself (shared, its hash cached) when every
        # queue exists.
        routed = names if reached == len(names) else [n for n in names if n in self.queues]
        generation = max(message.sync_gen, held) if held else message.sync_gen
        return routed, rejected, generation
