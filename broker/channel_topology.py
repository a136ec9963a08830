"""The channel's topology methods, as frames: exchange.declare/delete/bind/unbind,
queue.declare/bind/unbind/purge/delete.

Each turns its frame into a call of :mod:`leveret.session.topology` (the permissions and
the rules, written once there for the channel and the management API) and answers with
its -Ok. What stays here is the wire's: the name shortcuts of the channel's last queue,
server-named queues' generated names, and direct reply-to's pseudo-queue, which is no
queue at all. None of it is on the publish, deliver or ack path, so it is kept out of
:mod:`leveret.channel`: functions that take the channel, bound as its handlers. They see
it as :class:`Declaring`, which lists what they use, so this module does not import
:mod:`leveret.channel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from leveret import codec
from leveret.errors import NOT_FOUND, AMQPChannelError
from leveret.exchanges.model import DestKind
from leveret.session import topology
from leveret.session.publish import REPLY_PREFIX, REPLY_TO
from leveret.vhost import generated_name

if TYPE_CHECKING:
    from leveret.channel_parts import Wire
    from leveret.session.topology import Actor
    from leveret.vhost import VHost


class Declaring(Protocol):
    """A channel as its topology commands see it (:class:`leveret.channel.Channel`
    implements it; the functions below are its handlers)."""

    last_queue: str | None

    @property
    def id(self) -> int:
        """The channel number."""

    @property
    def actor(self) -> Actor:
        """Who runs its commands (the session's)."""

    @property
    def vhost(self) -> VHost:
        """Its connection's vhost."""

    @property
    def conn(self) -> Wire:
        """Its connection."""

    def send(self, method: Any) -> None:
        """Send a pamqp method on this channel."""

    def _queue_name(self, name: str) -> str:
        """:func:`queue_name`."""


def queue_name(channel: Declaring, name: str) -> str:
    """``name``, or for an empty one the channel's last declared queue (404 without one)."""
    return topology.expand_queue_name(channel.last_queue, name)


def exchange_declare(channel: Declaring, m: commands.Exchange.Declare) -> None:
    """exchange.declare."""
    topology.declare_exchange(
        channel.actor,
        m.exchange,
        m.exchange_type,
        m.passive,
        m.durable,
        m.auto_delete,
        m.internal,
        m.arguments or {},
    )
    if not m.nowait:
        channel.send(commands.Exchange.DeclareOk())


def exchange_delete(channel: Declaring, m: commands.Exchange.Delete) -> None:
    """exchange.delete."""
    topology.delete_exchange(channel.actor, m.exchange, m.if_unused)
    if not m.nowait:
        channel.send(commands.Exchange.DeleteOk())


def bind_exchange(
    channel: Declaring, m: commands.Exchange.Bind | commands.Exchange.Unbind, add: bool
) -> None:
    """exchange.bind (``add``) or exchange.unbind."""
    topology.bind(
        channel.actor,
        m.source,
        DestKind.EXCHANGE,
        m.destination,
        m.routing_key,
        m.arguments or {},
        add,
    )


def exchange_bind(channel: Declaring, m: commands.Exchange.Bind) -> None:
    """exchange.bind."""
    bind_exchange(channel, m, add=True)
    if not m.nowait:
        channel.send(commands.Exchange.BindOk())


def exchange_unbind(channel: Declaring, m: commands.Exchange.Unbind) -> None:
    """exchange.unbind."""
    bind_exchange(channel, m, add=False)
    if not m.nowait:
        channel.send(commands.Exchange.UnbindOk())


def declare_ok(channel: Declaring, name: str, messages: int, consumers: int) -> None:
    """queue.declare-ok."""
    channel.conn.write(
        codec.simple_method(
            channel.id,
            commands.Queue.DeclareOk,
            ("shortstr", name),
            ("long", messages),
            ("long", consumers),
        )
    )


def queue_declare(channel: Declaring, m: commands.Queue.Declare) -> None:
    """queue.declare: a server-named, reply-to or named queue, declared or checked (passive)."""
    name = m.queue
    server_named = not name and not m.passive
    if server_named:
        name = generated_name("amq.gen")
    elif not name:
        name = channel._queue_name(name)
    if name == REPLY_TO or name.startswith(REPLY_PREFIX):
        # The pseudo-queue and a live reply name declare (passive or not) as
        # (0 messages, 1 consumer), before any name check (rabbit_channel).
        if name != REPLY_TO and name[len(REPLY_PREFIX) :] not in channel.vhost.reply_consumers:
            raise AMQPChannelError(NOT_FOUND, f"no {channel.vhost.rs('queue', name)}")
        if not m.nowait:
            declare_ok(channel, name, 0, 1)
        return
    queue, _created = topology.declare_queue(
        channel.actor,
        name,
        m.passive,
        m.durable,
        m.exclusive,
        m.auto_delete,
        m.arguments or {},
        server_named,
    )
    channel.last_queue = queue.name
    if not m.nowait:
        declare_ok(channel, queue.name, queue.message_count, len(queue.consumers))


def bind_queue(
    channel: Declaring, m: commands.Queue.Bind | commands.Queue.Unbind, add: bool
) -> None:
    """queue.bind (``add``) or queue.unbind."""
    name = channel._queue_name(m.queue)
    routing_key = m.routing_key
    if not m.queue and not routing_key:
        # rabbit_channel:expand_routing_key_shortcut/3
        routing_key = name
    topology.bind(
        channel.actor, m.exchange, DestKind.QUEUE, name, routing_key, m.arguments or {}, add
    )


def queue_bind(channel: Declaring, m: commands.Queue.Bind) -> None:
    """queue.bind."""
    bind_queue(channel, m, add=True)
    if not m.nowait:
        channel.send(commands.Queue.BindOk())


def queue_unbind(channel: Declaring, m: commands.Queue.Unbind) -> None:
    """queue.unbind."""
    bind_queue(channel, m, add=False)
    channel.send(commands.Queue.UnbindOk())


def queue_purge(channel: Declaring, m: commands.Queue.Purge) -> None:
    """queue.purge."""
    count = topology.purge_queue(channel.actor, channel._queue_name(m.queue))
    if not m.nowait:
        channel.send(commands.Queue.PurgeOk(message_count=count))


def queue_delete(channel: Declaring, m: commands.Queue.Delete) -> None:
    """queue.delete."""
    name = channel._queue_name(m.queue)
    count = topology.delete_queue(channel.actor, name, m.if_unused, m.if_empty)
    if not m.nowait:
        channel.send(commands.Queue.DeleteOk(message_count=count))
