"""Queues and consumers: ready messages, dispatch, prefetch, and the queue features.

A queue holds ready messages as entries ``(message, redelivered, expires)`` (``expires``
is a time of the vhost's clock, :mod:`leveret.node.clock`, 0 for never). Delivered-but-unacked
entries live in the ledger of the subscriber that took them (a channel), which settles
them through the queue's verbs (:meth:`Queue.ack`, :meth:`Queue.reject`,
:meth:`Queue.requeue`); an entry keeps its expiry when
requeued, as in RabbitMQ. The queue owns its counters (delivered, acked, unacked...) and
the consumers' unacked and no-ack delivery counts: only these verbs and :meth:`Queue.get`
and :meth:`Queue.deliver` write them.

A consumer holds its channel as a :class:`~leveret.node.peers.ChannelPeer` (what the node
needs of a channel: its flow state, its prefetch, ``deliver`` and ``cancel_by_server``), an
exclusive queue its owner as a :class:`~leveret.node.peers.ConnectionPeer`, never the
wire's classes. :class:`Consumer` and :class:`QueueCounts` live in the queue's child
:mod:`leveret.node.queue.peers`, re-exported here.

The queue's settings (its arguments and policies, applied on declare and on a policy
change), its clocks (message TTL at the head, ``x-expires``) and its side of the message
store are its own methods; dead-lettering is :mod:`leveret.node.deadletter`'s. The queue
names its vhost (:class:`~leveret.node.vhost.VHost`) as a type only, as collaborators
inside the node may.

Dispatch is synchronous: :meth:`Queue.publish` delivers straight to a consumer with
capacity when nothing is waiting, and :meth:`Queue.drain` runs whenever capacity may
have appeared (an ack, a new consumer, a resumed socket).

Queue features follow RabbitMQ (docs/ttl.md, dlx.md, maxlength, priority.md,
consumer-priority.md, consumers.md "Single Active Consumer"; peers.md 2.12) and cost the
plain path nothing: ``plain`` is true for a queue with none of them, and publish then
skips every check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from mypy_extensions import mypyc_attr

from leveret.exchanges.policies import Policy, effective_definition, queue_arguments
from leveret.node.arguments import arg_text, int_arg, queue_type
from leveret.node.consumeruse import ConsumerUse
from leveret.node.deadletter import dead_letter
from leveret.node.errors import NOT_IMPLEMENTED, AMQPConnectionError
from leveret.node.memory import MESSAGE_OVERHEAD, message_bytes
from leveret.node.message import Message
from leveret.node.prioritydeque import Entry as Entry  # a ready entry: named here too
from leveret.node.prioritydeque import PriorityDeque, merge_by_seq

# The queue's child: what it names of its neighbours, re-exported for callers.
from leveret.node.queue.peers import Consumer as Consumer
from leveret.node.queue.peers import QueueCounts as QueueCounts

if TYPE_CHECKING:
    from leveret.node.clock import Timer
    from leveret.node.peers import ConnectionPeer
    from leveret.node.vhost import VHost
    from leveret.storage.messages import MessageStore
    from leveret.storage.segments import StoredMessage


def _str_arg(arguments: dict[str, Any], key: str) -> str | None:
    return arg_text(arguments.get(key))


# A stream queue (leveret.node.stream) is a Queue; a compiled build (setup.py) compiles the
# queue and not the stream.
@mypyc_attr(allow_interpreted_subclasses=True)
class Queue:
    """A queue in a vhost."""

    # leveret.node.stream.StreamQueue: an append-only log, read by offset.
    stream: ClassVar[bool] = False

    __slots__ = (
        "_expiry_timer",
        "_last_used",
        "_prioritised_consumers",
        "_rr",
        "_ttl_timer",
        "acked_total",
        "arguments",
        "auto_delete",
        "clock",
        "consumer_timeout",
        "consumers",
        "deleted",
        "delivered_total",
        "delivery_limit",
        "dlrk",
        "dlx",
        "durable",
        "exclusive_consumer",
        "expires",
        "expiring",
        "get_empty_total",
        "get_no_ack_total",
        "get_total",
        "had_consumers",
        "held",
        "max_length",
        "max_length_bytes",
        "max_priority",
        "memory",
        "message_ttl",
        "messages",
        "name",
        "no_ack_gone",
        "operator_policy",
        "overflow",
        "owner",
        "plain",
        "policy",
        "policy_definition",
        "published_total",
        "quorum",
        "ready_bytes",
        "redeliver_total",
        "seq",
        "single_active",
        "store",
        "unacked",
        "use",
        "vhost",
    )

    # Set from the arguments and policies by _configure.
    message_ttl: int | None
    expires: int | None
    max_length: int | None
    max_length_bytes: int | None
    overflow: str
    dlx: str | None
    dlrk: str | None
    consumer_timeout: float | None
    plain: bool

    def __init__(
        self,
        vhost: VHost,
        name: str,
        durable: bool,
        owner: ConnectionPeer | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.vhost = vhost
        self.clock = vhost.clock  # the one door time enters by (leveret.clock)
        self.memory = vhost.memory
        persistence = vhost.persistence
        self.store: MessageStore | None = (
            persistence.store if persistence is not None and durable else None
        )
        self.name = name
        self.durable = durable
        self.owner = owner  # the exclusive owner's connection, or None
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.consumers: list[Consumer] = []
        self.exclusive_consumer = False
        self.had_consumers = False
        self.deleted = False
        self._rr = 0
        self.ready_bytes: int = 0  # bodies of the ready messages (x-max-length-bytes)
        # What the ready messages cost against the memory watermark (leveret.node.memory).
        self.held: int = 0
        self.seq: int = 0
        # Counters for the management API, metrics and the pytest inspection API.
        self.unacked: int = 0  # delivered, not yet acked (all channels)
        self.published_total: int = 0
        self.delivered_total: int = 0  # deliver_get: to consumers and by basic.get
        self.no_ack_gone: int = 0  # to no-ack consumers since detached (deliver_no_ack_total)
        self.get_total: int = 0  # by basic.get with acks
        self.get_no_ack_total: int = 0  # by basic.get without
        self.get_empty_total: int = 0  # basic.get-empty answers
        self.redeliver_total: int = 0  # deliveries and gets of redelivered messages
        self.acked_total: int = 0
        self.use: ConsumerUse = ConsumerUse()  # consumer capacity (leveret.node.consumeruse)
        self.max_priority = int_arg(arguments, "x-max-priority")
        self.single_active = arguments.get("x-single-active-consumer") is True
        # A quorum queue (x-queue-type) keeps every message on disk, counts deliveries
        # (x-delivery-count, x-delivery-limit), and refuses global qos consumers.
        self.quorum = queue_type(arguments) == "quorum"
        self.delivery_limit: int | None = None
        self.messages: deque[Entry] | PriorityDeque = (
            PriorityDeque(self.max_priority) if self.max_priority else deque()
        )
        self.policy: Policy | None = None
        self.operator_policy: Policy | None = None
        # The keys of both that apply (leveret.exchanges.policies.effective_definition).
        self.policy_definition: dict[str, Any] = {}
        # Whether entries may carry an expiry (a queue TTL, or a message with one seen).
        self.expiring = False
        self._configure()
        self._prioritised_consumers = False
        self._ttl_timer: Timer | None = None
        self._expiry_timer: Timer | None = None
        self._last_used = 0.0
        if self.expires is not None:
            self.touch()

    # -- arguments and policies -----------------------------------------------------------

    def _configure(self) -> None:
        """The feature settings from the queue's arguments and its policy's keys
        (rabbit_amqqueue_process:process_args_policy/1)."""
        arguments = queue_arguments(self.arguments, self.policy_definition)
        self.message_ttl = int_arg(arguments, "x-message-ttl")
        self.expires = int_arg(arguments, "x-expires")
        self.max_length = int_arg(arguments, "x-max-length")
        self.max_length_bytes = int_arg(arguments, "x-max-length-bytes")
        self.overflow = _str_arg(arguments, "x-overflow") or "drop-head"
        self.dlx = _str_arg(arguments, "x-dead-letter-exchange")
        self.dlrk = _str_arg(arguments, "x-dead-letter-routing-key")
        if self.quorum:
            self.delivery_limit = int_arg(arguments, "x-delivery-limit")
        # The queue's own delivery acknowledgement timeout (leveret.node.acktimeout): None
        # means the broker's; a value that is no integer means none at all, as RabbitMQ's
        # evaluate_consumer_timeout1/2 then never fires.
        self.consumer_timeout = None
        if "x-consumer-timeout" in arguments:
            own = int_arg(arguments, "x-consumer-timeout")
            self.consumer_timeout = math.inf if own is None else own
        ack_timeouts = self.vhost.ack_timeouts
        if self.consumer_timeout is not None and ack_timeouts is not None:
            ack_timeouts.watch(self)
        # True when no TTL, length limit or priority applies: publish skips all checks.
        self.plain = (
            self.message_ttl is None
            and self.max_length is None
            and self.max_length_bytes is None
            and not self.max_priority
        )
        self.expiring = self.expiring or self.message_ttl is not None

    def apply_policy(self, policy: Policy | None, operator_policy: Policy | None = None) -> None:
        """Take ``policy`` and ``operator_policy`` (None: none) as a classic queue does on a
        policy change: the new limits apply now (drop-head drops the excess,
        dead-lettered as ``maxlen``), the new TTL to messages published from now on, a new
        ``expires`` restarts the expiry clock."""
        if policy == self.policy and operator_policy == self.operator_policy:
            return
        expires = self.expires
        self.policy = policy
        self.operator_policy = operator_policy
        self.policy_definition = effective_definition(policy, operator_policy)
        self._configure()
        if self.deleted:
            return
        if self.overflow == "drop-head":
            self._enforce_drop_head()
        if self.expiring and self.messages:
            self._expire_head()
        if self.expires != expires:
            if self._expiry_timer is not None:
                self._expiry_timer.cancel()
                self._expiry_timer = None
            self.touch()

    # -- messages ---------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Enqueue ``message``, delivering it at once when a consumer can take it.
        Returns False when the queue refuses it (``x-overflow: reject-publish[-dlx]``)."""
        self.published_total += 1
        if self.plain and message.ttl is None and self.store is None:
            if not self.messages and self.consumers:
                consumer = self._next_consumer()
                if consumer is not None:
                    self.seq += 1
                    # deliver, inlined (a new message, never redelivered, and no store to
                    # mark it in): once a delivery.
                    self.delivered_total += 1
                    if consumer.no_ack:
                        consumer.delivered_no_ack += 1
                    else:
                        consumer.unacked += 1
                        self.unacked += 1
                    consumer.channel.deliver(consumer, (message, False, 0.0, self.seq))
                    self.use.active()
                    return True
            self.use.inactive()  # no consumer could take it at once
            # _push, inlined for the hot path.
            self.seq += 1
            self.messages.append((message, False, 0.0, self.seq))
            size = message.body_size
            self.ready_bytes += size
            size += len(message.header) + MESSAGE_OVERHEAD  # message_bytes, inlined
            self.held += size
            memory = self.memory
            used = memory.used = memory.used + size
            if used > memory.high:
                memory.rise()
            return True
        return self._publish_with_features(message)

    def _publish_with_features(self, message: Message) -> bool:
        ttl = self.message_ttl
        if message.ttl is not None and (ttl is None or message.ttl < ttl):
            ttl = message.ttl
        now = self.clock.time()
        expires = now + ttl / 1000 if ttl is not None else 0.0
        if expires:
            self.expiring = True
        if self.expiring and self.messages:
            self._expire_head(now)
        # A quorum queue stores every message, whatever its delivery mode (Raft log).
        persist = self.store is not None and (message.persistent or self.quorum)
        if not self.messages and self.consumers:
            consumer = self._next_consumer()
            if consumer is not None:
                if persist:
                    self._persist(message, ttl)
                self.seq += 1
                self.deliver(consumer, (message, False, expires, self.seq))
                self.use.active()
                return True
        self.use.inactive()  # no consumer could take it at once
        if ttl == 0:
            # TTL 0: delivered only to a consumer ready now, else expired at once
            # (the documented replacement for ``immediate``).
            dead_letter(self, message, "expired")
            return True
        if self._would_overflow(message) and self.overflow != "drop-head":
            if self.overflow == "reject-publish-dlx":
                dead_letter(self, message, "maxlen")
            return False
        if persist:
            self._persist(message, ttl)
        self.seq += 1
        self._push((message, False, expires, self.seq))
        self._enforce_drop_head()
        if expires:
            self._schedule_ttl()
        return True

    def _would_overflow(self, message: Message) -> bool:
        if self.max_length is not None and len(self.messages) + 1 > self.max_length:
            return True
        limit = self.max_length_bytes
        return limit is not None and self.ready_bytes + message.body_size > limit

    def _enforce_drop_head(self) -> None:
        # drop-head: the oldest ready messages go (dead-lettered as ``maxlen``).
        messages = self.messages
        while messages and (
            (self.max_length is not None and len(messages) > self.max_length)
            or (self.max_length_bytes is not None and self.ready_bytes > self.max_length_bytes)
        ):
            self._drop(self._pop()[0], "maxlen")

    def _push(self, entry: Entry) -> None:
        self.messages.append(entry)
        message = entry[0]
        self.ready_bytes += message.body_size
        size = message_bytes(message)
        self.held += size
        self.memory.add(size)

    def _pop(self) -> Entry:
        entry = self.messages.popleft()
        message = entry[0]
        size = message.body_size
        self.ready_bytes -= size
        # Released here; an unacknowledged delivery is counted again by its channel.
        size += len(message.header) + MESSAGE_OVERHEAD  # message_bytes, inlined
        self.held -= size
        memory = self.memory
        used = memory.used = memory.used - size
        if used <= memory.low:
            memory.fall()
        return entry

    def drain(self) -> None:
        """Deliver ready messages while some consumer has capacity."""
        messages = self.messages
        now = 0.0
        if self.expiring:
            now = self.clock.time()
            self._expire_head(now)
        while messages and self.consumers:
            consumer = self._next_consumer()
            if consumer is None:
                self.use.inactive()  # every consumer at its prefetch limit
                return
            self.use.active()
            entry = self._pop()
            if entry[2] and entry[2] <= now:
                self._drop(entry[0], "expired")
                continue
            self.deliver(consumer, entry)

    # -- message TTL and x-expires ----------------------------------------------------------

    def _expire_head(self, now: float | None = None) -> None:
        """Drop (or dead-letter) expired messages at the head: RabbitMQ expires messages
        only when they reach the head of the queue."""
        messages = self.messages
        if not messages:
            return
        if now is None:
            now = self.clock.time()
        while messages and messages[0][2] and messages[0][2] <= now:
            self._drop(self._pop()[0], "expired")

    def _schedule_ttl(self) -> None:
        """Arm the timer for the head's expiry (one at a time), so an idle queue still expires
        its messages."""
        if self._ttl_timer is not None or not self.messages or self.deleted:
            return
        head_expires = self.messages[0][2]
        if not head_expires:
            return
        self._ttl_timer = self.clock.call_at(head_expires, self._on_ttl_timer)

    def _on_ttl_timer(self) -> None:
        """The head's expiry is due: expire, deliver what is left, arm the next."""
        self._ttl_timer = None
        if self.deleted:
            return
        self._expire_head()
        self.drain()
        self._schedule_ttl()

    def touch(self) -> None:
        """The queue was used (declare, get, consume): restart its ``x-expires`` clock."""
        if self.expires is None or self.deleted:
            return
        clock = self.clock
        self._last_used = clock.time()
        if self._expiry_timer is None:
            self._expiry_timer = clock.call_later(self.expires / 1000, self._on_expiry_timer)

    def _on_expiry_timer(self) -> None:
        """``x-expires`` is due: delete the queue if it stayed unused that long, else wait on."""
        self._expiry_timer = None
        if self.deleted or self.expires is None:
            return
        if self.consumers:
            return  # in use; the last consumer to leave restarts the clock
        clock = self.clock
        remaining = self._last_used + self.expires / 1000 - clock.time()
        if remaining > 0:
            self._expiry_timer = clock.call_later(remaining, self._on_expiry_timer)
            return
        self.vhost.delete_queue(self)

    def _next_consumer(self) -> Consumer | None:
        """The consumer for the next delivery: the single active one, else the highest
        priority with capacity, round-robin among equals."""
        consumers = self.consumers
        count = len(consumers)
        if count == 1 or self.single_active:
            first = consumers[0]
            return first if first.has_capacity() else None
        if self._prioritised_consumers:
            return self._next_by_priority()
        start = self._rr
        for step in range(count):
            index = (start + step) % count
            consumer = consumers[index]
            if consumer.has_capacity():
                self._rr = index + 1
                return consumer
        return None

    def _next_by_priority(self) -> Consumer | None:
        # consumers is sorted by priority, highest first; the chosen one moves to the end
        # of its priority group so equals take turns.
        consumers = self.consumers
        for index, consumer in enumerate(consumers):
            if consumer.has_capacity():
                end = index + 1
                while end < len(consumers) and consumers[end].priority == consumer.priority:
                    end += 1
                consumers.insert(end - 1, consumers.pop(index))
                return consumer
        return None

    # -- what the queue's type refuses (rabbit_queue_type: each type its own) ----------

    def check_consume(
        self, no_ack: bool, prefetch: int, global_prefetch: int, arguments: Mapping[str, Any]
    ) -> None:
        """basic.consume's checks of the queue's type, after its arguments' and before
        the consumer exists: a quorum queue refuses a channel with a global qos
        (rabbit_quorum_queue:consume/3: a connection error, 540)."""
        if self.quorum and global_prefetch:
            raise AMQPConnectionError(
                NOT_IMPLEMENTED, f"{self.vhost.rs('queue', self.name)} does not support global qos"
            )

    def subscribe(self, consumer: Consumer) -> None:
        """Attach a consumer that passed :meth:`check_consume` (a stream reads from the
        offset its arguments ask for)."""
        self.add_consumer(consumer)

    def check_get(self) -> None:
        """basic.get: every type but a stream takes it."""

    def check_purge(self) -> None:
        """queue.purge: every type but a stream takes it."""

    def check_reject(self) -> None:
        """basic.nack and basic.reject of a delivery: every type but a stream takes them."""

    # -- the verbs that own the delivery counters ---------------------------------------

    @property
    def deliver_no_ack_total(self) -> int:
        """Deliveries to no-ack consumers: each counts its own (one increment a delivery)."""
        return self.no_ack_gone + sum(c.delivered_no_ack for c in self.consumers)

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        """Hand ``entry`` to ``consumer``'s subscriber, counted (``message_stats``:
        deliver_get, deliver_no_ack, redeliver; unacked, the consumer's too)."""
        message = entry[0]
        self.delivered_total += 1
        if entry[1]:
            self.redeliver_total += 1
        if consumer.no_ack:
            consumer.delivered_no_ack += 1
            if message.store_ids is not None:
                self.forget(message)
        else:
            consumer.unacked += 1
            self.unacked += 1
            if message.store_ids is not None:
                self.mark_delivered(message)
        consumer.channel.deliver(consumer, entry)

    def get(self, no_ack: bool) -> Entry | None:
        """Take the head message for ``basic.get`` (None: empty, counted as get-empty),
        counted as the channel's get is (deliver_get, get or get_no_ack, redeliver); with
        acks it is unacked until :meth:`ack`, :meth:`reject` or :meth:`requeue`."""
        if self.expires is not None:
            self.touch()
        if self.expiring:
            self._expire_head()
        if not self.messages:
            self.get_empty_total += 1
            return None
        entry = self._pop()
        message = entry[0]
        self.delivered_total += 1
        if entry[1]:
            self.redeliver_total += 1
        if no_ack:
            self.get_no_ack_total += 1
            if message.store_ids is not None:
                self.forget(message)
        else:
            self.get_total += 1
            self.unacked += 1
            if message.store_ids is not None:
                self.mark_delivered(message)
        return entry

    # -- settling a delivery ----------------------------------------------------------------

    def ack(self, message: Message, consumer: Consumer | None) -> None:
        """An unacked delivery (``consumer`` None: a get) was acknowledged: it is gone."""
        self.unacked -= 1
        self.acked_total += 1
        if consumer is not None:
            consumer.unacked -= 1
        if message.store_ids is not None:
            self.forget(message)
        events = self.vhost.events
        if events is not None:
            events.acked(message, self.name)

    def reject(self, message: Message, consumer: Consumer | None) -> None:
        """An unacked delivery was rejected without requeue: dead-lettered (reason
        ``rejected``) where the queue has a dead-letter exchange, and gone."""
        self.unacked -= 1
        if consumer is not None:
            consumer.unacked -= 1
        events = self.vhost.events
        if events is not None:
            events.rejected(message, self.name)
        if not self.deleted:  # counted without a DLX too (broker/churn.py)
            dead_letter(self, message, "rejected")
        if message.store_ids is not None:
            self.forget(message)

    def requeue(self, returned: Iterable[tuple[Entry, Consumer | None]]) -> None:
        """Unacked deliveries come back (nack or reject with requeue, recover, a closed
        channel, a management get that requeues): no longer unacked, and ready again."""
        entries = []
        events = self.vhost.events
        for entry, consumer in returned:
            self.unacked -= 1
            if consumer is not None:
                consumer.unacked -= 1
            entries.append(entry)
            if events is not None:
                events.requeued(entry[0], self.name)
        self._put_back(entries)

    def _put_back(self, entries: list[Entry]) -> None:
        """Put entries back in their original places, keeping their expiry, redelivered."""
        if self.deleted:
            return
        back: list[Entry] = []
        held = 0
        for message, redelivered, expires, seq in sorted(entries, key=lambda e: e[3]):
            again: int = True
            if self.quorum:
                # The entry's "redelivered" holds the delivery count here: every return
                # counts, and past x-delivery-limit the message is dead-lettered
                # (reason delivery_limit) or dropped (rabbit_fifo; observed on 3.10.8).
                again = int(redelivered) + 1
                limit = self.delivery_limit
                if limit is not None and again > limit:
                    self._drop(message, "delivery_limit")
                    continue
            back.append((message, again, expires, seq))
            self.ready_bytes += message.body_size
            held += message_bytes(message)
        self.held += held
        self.memory.add(held)
        # One merge for the whole batch (sorted above), not one insertion per entry.
        if isinstance(self.messages, deque):
            merge_by_seq(self.messages, back)
        else:
            self.messages.requeue(back)
        if self.expiring:
            self._schedule_ttl()
        self.drain()

    def _drop(self, message: Message, reason: str) -> None:
        dead_letter(self, message, reason)
        if message.store_ids is not None:
            self.forget(message)

    # -- persistence --------------------------------------------------------------------------

    def _persist(self, message: Message, ttl: int | None) -> None:
        """Write a persistent message of this durable queue to the message store."""
        store = self.store
        assert store is not None
        expires = self.clock.wall_ms() + ttl if ttl is not None else 0
        msg_id = store.append(
            (self.vhost.name, self.name),
            message.exchange,
            message.routing_key,
            message.header,
            message.body,
            expires=expires,
        )
        if message.store_ids is None:
            message.store_ids = {}
        message.store_ids[self.name] = msg_id
        persistence = self.vhost.persistence
        assert persistence is not None
        message.sync_gen = persistence.appended()

    def forget(self, message: Message) -> None:
        """The message left this queue for good: drop it from the store."""
        ids = message.store_ids
        msg_id = ids.pop(self.name, None) if ids is not None else None
        if msg_id is not None and self.store is not None and not self.deleted:
            self.store.ack((self.vhost.name, self.name), msg_id)
            assert self.vhost.persistence is not None
            self.vhost.persistence.marks_changed()

    def mark_delivered(self, message: Message) -> None:
        """A stored message went to a consumer: after a restart it comes back redelivered."""
        ids = message.store_ids
        msg_id = ids.get(self.name) if ids is not None else None
        if msg_id is not None and self.store is not None:
            self.store.delivered((self.vhost.name, self.name), msg_id)
            assert self.vhost.persistence is not None
            self.vhost.persistence.marks_changed()

    def restore(self, stored: list[StoredMessage], all_redelivered: bool = False) -> None:
        """Put messages recovered from the store back, in order (start-up).

        ``all_redelivered``: flag every message ``redelivered``, whatever its delivered mark
        says (after a kill, a mark made since the last sync may not be on disk)."""
        clock = self.clock
        now = clock.wall()
        for item in stored:
            message = Message(item.exchange, item.routing_key, item.header, item.body)
            message.store_ids = {self.name: item.msg_id}
            expires = 0.0
            if item.expires:
                expires = clock.time() + (item.expires / 1000 - now)
                self.expiring = True
            self.seq += 1
            self._push((message, all_redelivered or item.redelivered, expires, self.seq))
        if self.expiring:
            self._schedule_ttl()

    def purge(self) -> int:
        """Drop every ready message; return how many there were."""
        count = len(self.messages)
        if self.store is not None and count:
            for entry in self.messages:
                self.forget(entry[0])
            if not self.deleted and self.vhost.persistence is not None:
                self.vhost.persistence.sync_now()
        self.messages.clear()
        self.ready_bytes = 0
        held, self.held = self.held, 0
        self.memory.remove(held)
        return count

    @property
    def message_count(self) -> int:
        """Ready messages (as in ``queue.declare-ok``)."""
        return len(self.messages)

    def discard(self) -> None:
        """The queue is being deleted: release its messages and timers."""
        self.purge()
        self.deleted = True
        # Unacked deliveries of a deleted queue are gone too.
        if self.store is not None and self.store.drop_queue((self.vhost.name, self.name)):
            assert self.vhost.persistence is not None
            self.vhost.persistence.sync_now()
        for timer in (self._ttl_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()

    # -- consumers --------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach ``consumer`` and start delivering to it."""
        self.consumers.append(consumer)
        if consumer.priority or self._prioritised_consumers:
            self._prioritised_consumers = True
            # Stable sort: equal priorities keep subscription order.
            self.consumers.sort(key=lambda c: -c.priority)
        self.had_consumers = True
        self.use.active()
        if consumer.exclusive:
            self.exclusive_consumer = True
        if self.expires is not None:
            self.touch()
        self.drain()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer``; an auto-delete queue goes with its last consumer."""
        self.detach(consumer)
        self.maybe_auto_delete()

    def detach(self, consumer: Consumer) -> None:
        """Stop delivering to ``consumer`` (no auto-delete check)."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        self.no_ack_gone += consumer.delivered_no_ack
        if consumer.exclusive:
            self.exclusive_consumer = False
        if not self.consumers and self.expires is not None:
            self.touch()
        if self.single_active and self.consumers:
            # Fail-over: the next consumer in subscription order becomes active.
            self.drain()

    def maybe_auto_delete(self) -> None:
        """Delete an auto-delete queue whose last consumer has gone."""
        if self.auto_delete and self.had_consumers and not self.consumers and not self.deleted:
            self.vhost.delete_queue(self)
