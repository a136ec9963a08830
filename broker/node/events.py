"""What happens to messages in a vhost, as one stream of events (DESIGN.md, "Time and
events (one door each)").

The node calls one method of ``vhost.events`` at each point a message passes: published
(with the queues it reached, none when unroutable), returned, delivered, acked, rejected
(nack or reject without requeue), requeued, dead-lettered (with its reason: ``expired``,
``rejected``, ``maxlen``, ``delivery_limit``) and confirmed. ``vhost.events`` is None while
nobody listens, so an absent subscriber costs each point one check::

    events = vhost.events
    if events is not None:
        events.delivered(message, queue.name, redelivered, channel, tag)

The subscribers are the firehose (:mod:`leveret.node.firehose`), the traffic trace
(:mod:`leveret.trace`) and the test journal (:mod:`leveret.inspect.journal`). A vhost with
one subscriber calls it directly; with several, a :class:`Fanout` calls each in the order
they subscribed, those that publish into the vhost as they handle one (the firehose) last.
Every call happens on the broker's loop, synchronously at the point it
describes, so a subscriber sees events in the order they happened.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.node.clock import Clock
    from leveret.node.message import Message
    from leveret.node.peers import ChannelPeer


# Who an event names: the channel, its connection and vhost, as the firehose's trace
# messages name them (rabbit_trace's tap_in/tap_out fields).


class Subscriber:
    """Receives a vhost's events; every method does nothing unless overridden, so a
    subscriber implements only the events it wants."""

    #: Whether it publishes into the vhost while it handles an event (the firehose's
    #: copies): such subscribers are called after the others, so that those see an event
    #: before the publishes it causes.
    publishes = False

    #: Whether it goes on listening to the vhost of the same name when the node restarts
    #: (an injected restart, :mod:`leveret.faults`): a test's journal does; the firehose
    #: and the trace do not, as RabbitMQ's tracing is off after a node restart.
    outlives_restart = False

    def moved(self, source: EventSource) -> None:
        """The node restarted and ``source`` (the vhost of the same name) now sends it
        the events (only called when :attr:`outlives_restart`)."""

    def published(
        self, message: Message, queues: Collection[str], origin: ChannelPeer | None
    ) -> None:
        """``message`` was published (``origin``: the channel, None for the management API
        or the firehose's own copies) and reached ``queues`` (empty: unroutable); called
        after routing and before any queue has it, as rabbit_channel's tap_in."""

    def returned(self, message: Message, origin: ChannelPeer) -> None:
        """An unroutable mandatory ``message`` went back to its publisher (basic.return)."""

    def delivered(
        self, message: Message, queue: str, redelivered: bool, origin: ChannelPeer, tag: int
    ) -> None:
        """``message`` went from ``queue`` to a client on ``origin`` under delivery ``tag``
        (a consumer's delivery or a basic.get-ok)."""

    def acked(self, message: Message, queue: str) -> None:
        """A delivery of ``message`` from ``queue`` was acknowledged."""

    def rejected(self, message: Message, queue: str) -> None:
        """A delivery of ``message`` from ``queue`` was nacked or rejected without requeue."""

    def requeued(self, message: Message, queue: str) -> None:
        """An unacked delivery of ``message`` came back to ``queue`` (nack or reject with
        requeue, basic.recover, its channel closed)."""

    def dead_lettered(
        self,
        message: Message,
        queue: str,
        reason: str,
        copy: Message | None,
        queues: Collection[str],
    ) -> None:
        """``message`` left ``queue`` for ``reason`` (``expired``, ``rejected``, ``maxlen``,
        ``delivery_limit``); its ``copy`` (with x-death) went to the dead-letter exchange
        and reached ``queues`` (``copy`` None: the queue has no usable DLX, the message is
        gone). Called before any queue has the copy."""

    def confirmed(self, origin: ChannelPeer, tag: int, multiple: bool, ack: bool) -> None:
        """A publisher confirm went out on ``origin``: basic.ack (``ack``) or basic.nack of
        publish ``tag`` (and every one before it when ``multiple``)."""


class Fanout(Subscriber):
    """Several subscribers of one vhost, called in order (EventSource._set orders them)."""

    def __init__(self, subscribers: tuple[Subscriber, ...]) -> None:
        self.subscribers = subscribers

    def published(
        self, message: Message, queues: Collection[str], origin: ChannelPeer | None
    ) -> None:
        for subscriber in self.subscribers:
            subscriber.published(message, queues, origin)

    def returned(self, message: Message, origin: ChannelPeer) -> None:
        for subscriber in self.subscribers:
            subscriber.returned(message, origin)

    def delivered(
        self, message: Message, queue: str, redelivered: bool, origin: ChannelPeer, tag: int
    ) -> None:
        for subscriber in self.subscribers:
            subscriber.delivered(message, queue, redelivered, origin, tag)

    def acked(self, message: Message, queue: str) -> None:
        for subscriber in self.subscribers:
            subscriber.acked(message, queue)

    def rejected(self, message: Message, queue: str) -> None:
        for subscriber in self.subscribers:
            subscriber.rejected(message, queue)

    def requeued(self, message: Message, queue: str) -> None:
        for subscriber in self.subscribers:
            subscriber.requeued(message, queue)

    def dead_lettered(
        self,
        message: Message,
        queue: str,
        reason: str,
        copy: Message | None,
        queues: Collection[str],
    ) -> None:
        for subscriber in self.subscribers:
            subscriber.dead_lettered(message, queue, reason, copy, queues)

    def confirmed(self, origin: ChannelPeer, tag: int, multiple: bool, ack: bool) -> None:
        for subscriber in self.subscribers:
            subscriber.confirmed(origin, tag, multiple, ack)


class EventSource:
    """The subscriber list of a vhost (:class:`leveret.node.vhost.VHost` inherits it): the node
    reads :attr:`events`, None while nobody listens."""

    events: Subscriber | None = None
    _subscribers: tuple[Subscriber, ...] = ()
    #: The vhost's clock, which stamps what subscribers record.
    clock: Clock

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        """The subscribers, in the order they are called."""
        return self._subscribers

    def subscribe(self, subscriber: Subscriber) -> None:
        """Send the vhost's events to ``subscriber`` too (no-op if it already listens)."""
        if subscriber not in self._subscribers:
            self._set((*self._subscribers, subscriber))

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Stop sending events to ``subscriber`` (no-op if it does not listen)."""
        if subscriber in self._subscribers:
            self._set(tuple(s for s in self._subscribers if s is not subscriber))

    def take_subscribers(self, old: EventSource) -> None:
        """Listen for ``old``'s subscribers that outlive a restart (``old`` is this vhost
        before the node restarted)."""
        for subscriber in old.subscribers:
            if subscriber.outlives_restart:
                self.subscribe(subscriber)
                subscriber.moved(self)

    def unsubscribe_all(self) -> None:
        """Stop sending events to anyone (the vhost is deleted)."""
        self._set(())

    def _set(self, subscribers: tuple[Subscriber, ...]) -> None:
        subscribers = tuple(sorted(subscribers, key=lambda s: s.publishes))  # stable
        self._subscribers = subscribers
        # One subscriber is called directly: the common case (the firehose, the trace or
        # a test's journal alone) pays no loop.
        if not subscribers:
            self.events = None
        elif len(subscribers) == 1:
            self.events = subscribers[0]
        else:
            self.events = Fanout(subscribers)
