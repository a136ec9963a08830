"""A virtual host: its topology (through the pure projection) and its queues.

Every topology command goes validate -> event -> ``projection.apply(event)``; routing
reads the projection through :func:`leveret.exchanges.routing.route`. Validation raises
:class:`leveret.errors.AMQPChannelError` with RabbitMQ's reply codes and texts (sources:
``deps/rabbit/src/rabbit_channel.erl``, ``rabbit_exchange.erl``, ``rabbit_amqqueue.erl``
and ``rabbit_misc.erl`` in rabbitmq-server).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from leveret import firehose
from leveret.arguments import (
    QUEUE_TYPE_ARGUMENTS,
    copy_args,
    declare_error,
    queue_type,
)
from leveret.arguments import type_name as arg_type
from leveret.churn import NodeCounters
from leveret.consumer import Consumer
from leveret.delayed import DelayedMessages
from leveret.equivalence import assert_args, unknown_type
from leveret.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    AMQPChannelError,
    AMQPError,
    ChannelCrashError,
)
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
from leveret.exchanges.types import validate_binding, validate_exchange
from leveret.limits import reached
from leveret.memory import MemoryMonitor, default_watermark
from leveret.message import BccMessage, Message
from leveret.queue import Queue
from leveret.stream import StreamQueue
from leveret.vhost_policies import VHostPolicies

if TYPE_CHECKING:
    from leveret.acktimeout import AckTimeouts
    from leveret.connection import Connection
    from leveret.firehose import Origin
    from leveret.persistence import Persistence
    from leveret.trace import TraceWriter

DEFAULT_EXCHANGES = PREDECLARED_EXCHANGES
# The object each x-queue-type is (a quorum queue is a Queue with its own rules).
_QUEUE_CLASSES: dict[str, type[Queue]] = {"classic": Queue, "quorum": Queue, "stream": StreamQueue}


def generated_name(prefix: str) -> str:
    """RabbitMQ's generated names: prefix + base64url(16 random bytes), unpadded
    (rabbit_guid:binary/2), e.g. ``amq.gen-`` + 22 characters."""
    return prefix + "-" + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


class VHost(VHostPolicies):
    """The topology and queues of one virtual host."""

    def __init__(
        self,
        name: str,
        memory: MemoryMonitor | None = None,
        persistence: Persistence | None = None,
    ) -> None:
        self.name = name
        self.persistence = persistence
        self.tracer: TraceWriter | None = None
        # The server's delivery acknowledgement timeout checks, told of queues with a
        # timeout of their own (None: a vhost outside a server, in unit tests).
        self.ack_timeouts: AckTimeouts | None = None
        self.churn = NodeCounters()  # the server's (broker/churn.py)
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
        # Whether the firehose tracer copies this vhost's traffic (broker/firehose.py).
        self.firehose = False
        for exchange in DEFAULT_EXCHANGES:
            # Predeclared on every start: never written to the definitions log.
            self._apply(ExchangeDeclared(exchange), replaying=True)

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
            if event.exchange.type is ExchangeType.HEADERS:
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

    def exchange(self, name: str) -> Exchange:
        """The exchange ``name``, or 404 (rabbit_exchange:lookup_or_die/1)."""
        exchange = self.projection.exchanges.get(name)
        if exchange is None:
            raise AMQPChannelError(NOT_FOUND, f"no {self.rs('exchange', name)}")
        return exchange

    def queue(self, name: str, connection: object | None, strict: bool = False) -> Queue:
        """The queue ``name`` checked for exclusive access (``connection``: the one
        asking, compared by identity; None outside AMQP), or 404 / 405."""
        queue = self.queues.get(name)
        if queue is None:
            raise AMQPChannelError(NOT_FOUND, f"no {self.rs('queue', name)}")
        self.check_exclusive(queue, connection, strict)
        return queue

    def check_exclusive(
        self, queue: Queue, connection: object | None, strict: bool = False
    ) -> None:
        """rabbit_amqqueue:check_exclusive_access/3 (``lax`` lets anyone use a
        non-exclusive queue; ``strict`` also refuses an exclusive re-declare of one)."""
        if queue.owner is connection:
            return
        if queue.owner is None and not strict:
            return
        raise AMQPChannelError(
            RESOURCE_LOCKED,
            f"cannot obtain exclusive access to locked {self.rs('queue', queue.name)}. It could "
            "be originally declared on another connection or the exclusive property value does "
            "not match that of the original declaration.",
        )

    @staticmethod
    def check_not_default(name: str) -> None:
        """rabbit_channel:check_not_default_exchange/1."""
        if name == "":
            raise AMQPChannelError(
                ACCESS_REFUSED, "operation not permitted on the default exchange"
            )

    # -- exchanges --------------------------------------------------------------------

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
    ) -> None:
        """exchange.declare, as rabbit_channel handles it."""
        if passive:
            self.check_not_default(name)
            self.exchange(name)
            return
        try:
            type_ = ExchangeType(type_name)
        except ValueError:
            raise unknown_type(type_name) from None
        self.check_not_default(name)
        current = self.projection.exchanges.get(name)
        if current is None:
            if name.startswith("amq."):
                raise AMQPChannelError(
                    ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'"
                )
            ae = arguments.get("alternate-exchange")
            if ae is not None and not isinstance(ae, str | bytes):
                raise AMQPChannelError(
                    PRECONDITION_FAILED,
                    f"invalid type '{arg_type(arguments, 'alternate-exchange')}' for arg "
                    f"'alternate-exchange' in {self.rs('exchange', name)}",
                )
            # The type's validate/1, run for new exchanges only (rabbit_exchange:declare/7).
            try:
                problem = validate_exchange(type_, arguments)
            except ExchangeTypeCrashError:
                raise ChannelCrashError() from None
            if problem is not None:
                raise AMQPChannelError(PRECONDITION_FAILED, problem)
            self._apply(
                ExchangeDeclared(
                    Exchange(name, type_, durable, auto_delete, internal, copy_args(arguments))
                )
            )
            return
        what = self.rs("exchange", name)
        for field, new, old in (
            ("type", type_.value, current.type.value),
            ("durable", durable, current.durable),
            ("auto_delete", auto_delete, current.auto_delete),
            ("internal", internal, current.internal),
        ):
            if new != old:
                raise AMQPChannelError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg '{field}' for {what}: received '{str(new).lower()}' "
                    f"but current is '{str(old).lower()}'",
                )
        assert_args(what, ("alternate-exchange",), arguments, current.arguments)

    def delete_exchange(self, name: str, if_unused: bool) -> None:
        """exchange.delete: idempotent; 403 for the default and ``amq.*`` exchanges."""
        self.check_not_default(name)
        if name.startswith("amq."):
            raise AMQPChannelError(
                ACCESS_REFUSED,
                f"deletion of system {self.rs('exchange', name)} not allowed",
            )
        if name not in self.projection.exchanges:
            return
        if if_unused and self.projection.has_bindings_from(name):
            raise AMQPChannelError(PRECONDITION_FAILED, f"{self.rs('exchange', name)} in use")
        self._delete_exchange(name)

    def _delete_exchange(self, name: str) -> None:
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
                self._delete_exchange(source)

    # -- bindings ---------------------------------------------------------------------

    def bind(
        self,
        source: str,
        kind: DestKind,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any],
        connection: Connection | None,
        add: bool,
    ) -> None:
        """queue.bind / exchange.bind (``add``) and their unbind twins."""
        if kind is DestKind.EXCHANGE:
            self.check_not_default(destination)
        self.check_not_default(source)
        binding = Binding(source, destination, kind, routing_key, dict(arguments))
        if not add and not self.projection.has_binding(binding):
            # Unbinding what is not bound is unbind-ok, whether the binding, its exchange or
            # its queue is missing, and before the queue's exclusivity is checked (observed
            # on RabbitMQ 3.10.8; clients rely on it: aio-pika's RPC unbinds after its
            # auto-delete queue went).
            return
        exchange = self.exchange(source)
        if kind is DestKind.QUEUE:
            self.queue(destination, connection)
        else:
            self.exchange(destination)
        if add:
            problem = validate_binding(exchange, binding.arguments, routing_key)
            if problem is not None:
                raise AMQPChannelError(PRECONDITION_FAILED, problem)
            self._apply(BindingAdded(binding))
        else:
            self._apply(BindingRemoved(binding))
            self._auto_delete_sources({source})

    # -- queues -----------------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        connection: Connection,
        server_named: bool = False,
    ) -> Queue:
        """queue.declare (``name`` already generated for a server-named queue)."""
        if passive:
            found = self.queue(name, connection)
            found.touch()
            return found
        kind = queue_type(arguments)
        if server_named and kind != "classic":
            # rabbit_channel: rabbit_amqqueue:is_server_named_allowed/1 is false for the
            # replicated types.
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"Cannot declare a server-named queue for type rabbit_{kind}_queue",
            )
        if name.startswith("amq.") and not server_named:
            # Checked before the existence lookup, so even an existing amq.* queue
            # is refused (rabbit_channel:check_name/2).
            raise AMQPChannelError(
                ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        owner = connection if exclusive else None
        durable = durable and not exclusive
        queue = self.queues.get(name)
        if queue is not None:
            self.check_exclusive(queue, owner, strict=True)
            what = self.rs("queue", name)
            for field, new, old in (
                ("durable", durable, queue.durable),
                ("auto_delete", auto_delete, queue.auto_delete),
            ):
                if new != old:
                    raise AMQPChannelError(
                        PRECONDITION_FAILED,
                        f"inequivalent arg '{field}' for {what}: received '{str(new).lower()}' "
                        f"but current is '{str(old).lower()}'",
                    )
            # The queue type's arguments (rabbit_amqqueue:assert_args_equivalence/2).
            compared = QUEUE_TYPE_ARGUMENTS[queue_type(queue.arguments)]
            assert_args(what, compared, arguments, queue.arguments)
            queue.touch()
            self.churn.queue_declared(created=False)
            return queue
        limit = reached(self.limits, "max-queues", len(self.queues))
        if limit is not None:
            # rabbit_channel:check_vhost_queue_limit/2, for a queue that does not exist yet,
            # before its arguments are looked at.
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"cannot declare queue '{name}': queue limit in vhost '{self.name}' ({limit}) "
                "is reached",
            )
        # Arguments are validated when the queue is created (rabbit_amqqueue:declare/6).
        dlx = arguments.get("x-dead-letter-exchange")
        if dlx is not None and not isinstance(dlx, str | bytes):
            # rabbit_channel checks the DLX name itself (for permissions) first.
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"invalid type '{arg_type(arguments, 'x-dead-letter-exchange')}' for arg "
                f"'x-dead-letter-exchange' in {self.rs('queue', name)}",
            )
        invalid = declare_error(kind, arguments)
        if invalid is not None:
            key, why = invalid
            raise AMQPChannelError(
                PRECONDITION_FAILED, f"invalid arg '{key}' for {self.rs('queue', name)}{why}"
            )
        if kind != "classic":
            # rabbit_quorum_queue:declare/2: a quorum queue is durable, not exclusive and
            # not auto-delete, checked in this order; a stream too (rabbit_stream_queue).
            for refused, bad in (
                ("auto-delete", auto_delete),
                ("exclusive-owner", exclusive),
                ("non-durable", not durable),
            ):
                if bad:
                    raise AMQPChannelError(
                        PRECONDITION_FAILED,
                        f"invalid property '{refused}' for {self.rs('queue', name)}",
                    )
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
        origin: Origin | None = None,
        source: str | None = None,
        counted: bool = True,
    ) -> tuple[bool, bool, int]:
        """Route ``message`` and enqueue it in every queue it reaches.

        Returns (routed, rejected by an overflowing queue, group-commit generation that
        makes it durable or 0). Used by channels (``origin``, which the firehose tracer
        names) and by the management API alike, and with ``source`` (the exchange to route
        from, not the one published to) for a delayed message whose delay is up; that is no
        publish, so neither tracer sees it. Publishes are counted in :attr:`exchange_stats`
        unless ``counted`` is false (the firehose's copies) or they are such a release:
        RabbitMQ counts what channels publish (the management API publishes through one),
        not what the broker publishes itself (observed on 3.10.8: firehose copies,
        dead letters).
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
        if self.firehose and origin is not None:
            firehose.published(message, [n for n in names if n in self.queues], origin)
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
        tracer = self.tracer
        if tracer is not None and source is None:
            tracer.record(
                self.name,
                message.exchange,
                message.routing_key,
                payload,
                message.body_size,
                # The routed set itself (its hash is cached) when every queue exists.
                names if reached == len(names) else [n for n in names if n in self.queues],
            )
        generation = max(message.sync_gen, held) if held else message.sync_gen
        return reached > 0, rejected, generation
