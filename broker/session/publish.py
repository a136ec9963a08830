"""basic.publish as rabbit_channel decides it: the checks in RabbitMQ's order, the routing
and the publish counters, written once for every entry point (the wire channel, the
management API's publish, its aliveness test).

The order is rabbit_channel:handle_method/3 for ``basic.publish`` (3.10/3.13):
check_msg_size, check_write_permitted, rabbit_exchange:lookup_or_die,
check_internal_exchange, check_write_permitted_on_topic, ensure_content_decoded,
check_user_id_header, check_expiration_header, then the direct reply-to rewrite of
``reply_to`` (docs/direct-reply-to.md). :data:`CHECKS` names them in that order.

The wire channel's fast path (a publish, its header and body in one read) skips them all
when a guard per check shows it would pass; it names its guards after :data:`CHECKS`
(``leveret.wire.channel.FAST_PATH_GUARDS``) and a test holds the two lists together, so a check
added here without a guard there fails.

A session keeps one :class:`ExchangeStats` per exchange it published to: the permission
cache the fast path looks up anyway, and the counts rabbit_channel keeps per exchange
(``exchange_stats``), so a publish counts into its exchange with one increment and no
lookup more.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Protocol

from leveret.node.errors import (
    ACCESS_REFUSED,
    INTERNAL_ERROR,
    NOT_FOUND,
    PRECONDITION_FAILED,
    AMQPChannelError,
    AMQPConnectionError,
)
from leveret.node.message import (
    FLAG_EXPIRATION,
    FLAG_REPLY_TO,
    FLAG_USER_ID,
    Message,
    expiration_error,
    properties_decode,
)
from leveret.node.state import PublishCounters as PublishCounters  # a channel's own, too

if TYPE_CHECKING:
    from leveret.node.auth import AccessControl
    from leveret.node.peers import ChannelPeer
    from leveret.node.vhost import VHost

BASIC_PUBLISH: Final = (60, 40)
# Direct reply-to: the pseudo-queue and the prefix of the names it hands out.
REPLY_TO: Final = "amq.rabbitmq.reply-to"
REPLY_PREFIX: Final = REPLY_TO + "."
# Properties that need a look before routing: user_id, expiration, reply_to.
CHECKED_FLAGS: Final = FLAG_USER_ID | FLAG_EXPIRATION | FLAG_REPLY_TO
# The checks, in RabbitMQ's order (see the module's docstring).
CHECKS = (
    "size",
    "write",
    "exchange",
    "internal",
    "topic",
    "properties",
    "user_id",
    "expiration",
    "reply_to",
)


class Counters(Protocol):
    """Publish counters as they are read: a session's (:class:`SessionCounters`) or the
    node's (leveret.node.state.PublishCounters)."""

    confirmed: int

    @property
    def received(self) -> int:
        """Publishes counted (rabbit_channel's ``publish``)."""

    @property
    def routed(self) -> int:
        """Of those, routed to a queue."""

    @property
    def unroutable_dropped(self) -> int:
        """Unroutable and not mandatory: dropped."""

    @property
    def unroutable_returned(self) -> int:
        """Unroutable and mandatory: returned."""


PUBLISH_COUNTER_NAMES = PublishCounters.__slots__


class ExchangeStats:
    """A session's entry for one exchange: whether a publish to it may skip the permission
    checks, and its publishes counted as rabbit_channel counts them per exchange
    (``incr_stats`` of ``exchange_stats``: publish, confirm, return_unroutable,
    drop_unroutable), the row of rabbit_core_metrics' ``channel_exchange_metrics``, and per
    queue reached (``channel_queue_exchange_metrics``: rabbit_channel's
    ``incr_queue_stats`` of ``queue_exchange_stats``, publish).

    A publish that reaches queues costs one increment, of the count of its route: routes
    repeat (a direct or topic exchange's result is the index's own cached set), so the
    counts per queue are added up only when the route changes (:meth:`switch`) or when
    read (:meth:`per_queue`)."""

    __slots__ = (
        "confirmed",
        "queues",
        "route",
        "route_count",
        "routed_before",
        "unroutable_dropped",
        "unroutable_returned",
        "writable",
    )

    def __init__(self) -> None:
        # The permissions' version (AccessControl.version) under which write permission
        # was found and no topic permission applies; -1: check every publish.
        self.writable = -1
        self.confirmed = 0
        self.unroutable_returned = 0
        self.unroutable_dropped = 0
        self.route: Collection[str] = ()  # the queues the last routed publish reached
        self.route_count = 0  # publishes that reached them, since they became the route
        self.routed_before = 0  # routed publishes of the routes before it
        self.queues: dict[str, int] = {}  # publishes per queue, of the routes before it

    @property
    def published(self) -> int:
        """Publishes counted: every one was routed, returned or dropped."""
        routed = self.routed_before + self.route_count
        return routed + self.unroutable_returned + self.unroutable_dropped

    def switch(self, route: Collection[str]) -> None:
        """A routed publish reached other queues than the last: count the last route's
        publishes into its queues, and start counting ``route``'s."""
        count, queues = self.route_count, self.queues
        for name in self.route:
            queues[name] = queues.get(name, 0) + count
        self.routed_before += count
        self.route, self.route_count = route, 0

    def per_queue(self) -> dict[str, int]:
        """Publishes per queue reached (the current route's included)."""
        found = dict(self.queues)
        for name in self.route:
            found[name] = found.get(name, 0) + self.route_count
        return found


class SessionCounters:
    """A session's publish counters: the sums of its exchanges' entries, into which alone
    the publish path counts (one increment a publish), and the confirms it sent."""

    __slots__ = ("_exchanges", "confirmed")

    def __init__(self, exchanges: dict[str, ExchangeStats]) -> None:
        self._exchanges = exchanges
        self.confirmed = 0  # publisher confirms (basic.ack) sent, one per message

    @property
    def received(self) -> int:
        """Publishes counted, to any exchange."""
        return sum(s.published for s in self._exchanges.values())

    @property
    def unroutable_returned(self) -> int:
        """Unroutable mandatory publishes (returned)."""
        return sum(s.unroutable_returned for s in self._exchanges.values())

    @property
    def unroutable_dropped(self) -> int:
        """Unroutable publishes that were not mandatory (dropped)."""
        return sum(s.unroutable_dropped for s in self._exchanges.values())

    @property
    def routed(self) -> int:
        """Publishes a queue took: every counted publish is routed, returned or dropped."""
        return self.received - self.unroutable_returned - self.unroutable_dropped


def fold(source: Counters, into: PublishCounters) -> None:
    """Add the counts of ``source`` (a closing channel's) to ``into`` (the node's)."""
    for name in PUBLISH_COUNTER_NAMES:
        setattr(into, name, getattr(into, name) + getattr(source, name))


def size_error(body_size: int, limit: int) -> AMQPChannelError | None:
    """rabbit_channel:check_msg_size/3: 406 for a body over the configured maximum."""
    if body_size <= limit:
        return None
    return AMQPChannelError(
        PRECONDITION_FAILED,
        f"message size {body_size} is larger than configured max size {limit}",
        BASIC_PUBLISH,
    )


class Publisher:
    """The publish side of a session: one user on one vhost (a channel, or a management
    request). Exchanges the user may write to are remembered (the hot path), until the
    broker's permissions change (:attr:`AccessControl.version`), in the session's entry
    for the exchange (:class:`ExchangeStats`), which counts its publishes too."""

    def __init__(
        self,
        access: AccessControl,
        vhost: VHost,
        user: str,
        max_message_size: int,
    ) -> None:
        self.access = access
        self.vhost = vhost
        self.user = user
        self.max_message_size = max_message_size
        # By exchange name: the exchanges this session published to (or tried to).
        self.exchange_stats: dict[str, ExchangeStats] = {}
        # Its totals, from those (a channel's are folded into the node's when it closes).
        self.counters = SessionCounters(self.exchange_stats)

    def check_size(self, body_size: int) -> None:
        """The first check, made as soon as the content header announces the size."""
        problem = size_error(body_size, self.max_message_size)
        if problem is not None:
            raise problem

    def check_exchange(self, name: str, routing_key: str) -> ExchangeStats:
        """Write permission, the exchange, not internal, the topic permission: the
        session's entry for the exchange to route through (:meth:`route` counts the
        publish into it)."""
        access, vhost = self.access, self.vhost
        stats = self.exchange_stats.get(name)
        if stats is None:
            stats = self.exchange_stats[name] = ExchangeStats()
        # An exchange the user has a topic permission for is never cached: each publish
        # to it has its routing key checked (below).
        check_key = stats.writable != access.version
        if check_key:
            stats.writable = -1
            with _on_publish():
                access.check(self.user, vhost.name, "write", "exchange", name)
            if access.topic_permission(self.user, vhost.name, name) is None:
                stats.writable = access.version
                check_key = False
        exchange = vhost.projection.exchanges.get(name)
        if exchange is None:
            raise AMQPChannelError(NOT_FOUND, f"no {vhost.rs('exchange', name)}", BASIC_PUBLISH)
        if exchange.internal:
            raise AMQPChannelError(
                ACCESS_REFUSED,
                f"cannot publish to internal {vhost.rs('exchange', name)}",
                BASIC_PUBLISH,
            )
        if check_key:
            with _on_publish():
                access.check_topic(self.user, vhost.name, "write", exchange, routing_key)
        return stats

    def check_message(self, message: Message, reply_key: str | None) -> Message:
        """The message's properties: they decode, ``user_id`` is the user's, ``expiration``
        is valid (it sets the message's TTL), and a ``reply_to`` of the direct reply-to
        pseudo-queue becomes this session's reply name (``reply_key``: None when it has
        no reply consumer)."""
        if not properties_decode(message.header):
            # rabbit_channel decodes every publish's properties (ensure_content_decoded);
            # when they do not decode the channel process crashes and the reader closes
            # the connection with the bare constant (observed on 3.10.8).
            raise AMQPConnectionError(INTERNAL_ERROR, "", (0, 0))
        flags = message.flags
        if not flags & CHECKED_FLAGS:
            return message
        if flags & FLAG_USER_ID:
            user_id = message.properties.user_id
            if user_id != self.user:
                raise AMQPChannelError(
                    PRECONDITION_FAILED,
                    f"user_id property set to '{user_id}' but authenticated user was '{self.user}'",
                    BASIC_PUBLISH,
                )
        if flags & FLAG_EXPIRATION:
            expiration = str(message.properties.expiration)
            problem = expiration_error(expiration)
            if problem is not None:
                raise AMQPChannelError(
                    PRECONDITION_FAILED,
                    f"invalid expiration '{expiration}': {problem}",
                    BASIC_PUBLISH,
                )
            message.ttl = int(expiration)
        if flags & FLAG_REPLY_TO and message.properties.reply_to == REPLY_TO:
            if reply_key is None:
                raise AMQPChannelError(
                    PRECONDITION_FAILED, "fast reply consumer does not exist", BASIC_PUBLISH
                )
            props = message.copy_properties()
            props.reply_to = REPLY_PREFIX + reply_key
            message = message.with_properties(props)
        return message

    def route(
        self, message: Message, mandatory: bool, origin: ChannelPeer | None, stats: ExchangeStats
    ) -> tuple[bool, bool, int]:
        """Route a checked message into its queues and count the publish into ``stats``,
        its exchange's entry (from :meth:`check_exchange`), whose sums are the session's
        counters. Returns whether a queue took it, whether a queue refused it (overflow)
        and the group-commit generation that makes it durable (0: nothing to wait for); an
        unroutable mandatory message is the caller's to return. A reply to a direct
        reply-to requester goes straight to its consumer, uncounted."""
        if not message.exchange and message.routing_key.startswith(REPLY_PREFIX):
            return self._reply(message), False, 0
        reached, rejected, sync_gen = self.vhost.publish(message, origin)
        # The one increment a publish costs (ExchangeStats; SessionCounters sums them).
        if reached:
            if reached is not stats.route and reached != stats.route:
                stats.switch(reached)
            stats.route_count += 1
            return True, rejected, sync_gen
        if mandatory:
            stats.unroutable_returned += 1
        else:
            stats.unroutable_dropped += 1
        return False, rejected, sync_gen

    def _reply(self, message: Message) -> bool:
        """Deliver a reply to its requester's consumer, at most once: False (dropped, or
        returned when mandatory) when the requester has gone (docs/direct-reply-to.md)."""
        consumer = self.vhost.reply_consumers.get(message.routing_key[len(REPLY_PREFIX) :])
        if consumer is None or not consumer.channel.open:
            return False
        consumer.queue.deliver(consumer, (message, False, 0.0, 0))
        return True


@contextmanager
def _on_publish() -> Iterator[None]:
    """Refusals raised inside name basic.publish as the failing method."""
    try:
        yield
    except AMQPChannelError as exc:
        exc.method = BASIC_PUBLISH
        raise
