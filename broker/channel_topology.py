"""The channel's topology methods: exchange.declare/delete/bind/unbind, queue.declare/bind/
unbind/purge/delete.

Each checks the user's permissions for the entity (configure, write, read, the topic
permission of a binding's routing key) as ``rabbit_channel`` does, then leaves the rule to the
vhost (:mod:`leveret.vhost`), and answers with its -Ok. None of it is on the publish, deliver
or ack path, so it is kept out of :mod:`leveret.channel`: functions that take the channel,
bound as its handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands

from leveret import codec
from leveret.errors import NOT_FOUND, PRECONDITION_FAILED, AMQPChannelError
from leveret.exchanges.model import DestKind
from leveret.session.publish import REPLY_PREFIX, REPLY_TO
from leveret.vhost import generated_name

if TYPE_CHECKING:
    from leveret.channel import Channel


def queue_name(channel: Channel, name: str) -> str:
    """``name``, or for an empty one the channel's last declared queue (404 without one):
    rabbit_channel:expand_queue_name_shortcut."""
    if name:
        return name
    if channel.last_queue is None:
        raise AMQPChannelError(NOT_FOUND, "no previously declared queue")
    return channel.last_queue


def exchange_declare(channel: Channel, m: commands.Exchange.Declare) -> None:
    """exchange.declare: configure permission (and a linked exchange's), then the vhost's
    declare."""
    if not m.passive and m.exchange:
        channel._permit("configure", "exchange", m.exchange)
        if m.exchange not in channel.vhost.projection.exchanges:
            channel.access.check_linked_exchange(
                channel.conn.user, channel.vhost.name, "exchange", m.exchange, m.arguments or {}
            )
    channel.vhost.declare_exchange(
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


def exchange_delete(channel: Channel, m: commands.Exchange.Delete) -> None:
    """exchange.delete: configure permission, then the vhost's delete."""
    if m.exchange and not m.exchange.startswith("amq."):
        channel._permit("configure", "exchange", m.exchange)
    channel.vhost.delete_exchange(m.exchange, m.if_unused)
    if not m.nowait:
        channel.send(commands.Exchange.DeleteOk())


def bind_exchange(
    channel: Channel, m: commands.Exchange.Bind | commands.Exchange.Unbind, add: bool
) -> None:
    """exchange.bind (``add``) or exchange.unbind on the vhost, after the permissions."""
    permit_binding(channel, "exchange", m.destination, m.source, m.routing_key)
    channel.vhost.bind(
        m.source,
        DestKind.EXCHANGE,
        m.destination,
        m.routing_key,
        m.arguments or {},
        channel.conn,
        add,
    )


def exchange_bind(channel: Channel, m: commands.Exchange.Bind) -> None:
    """exchange.bind."""
    bind_exchange(channel, m, add=True)
    if not m.nowait:
        channel.send(commands.Exchange.BindOk())


def exchange_unbind(channel: Channel, m: commands.Exchange.Unbind) -> None:
    """exchange.unbind."""
    bind_exchange(channel, m, add=False)
    if not m.nowait:
        channel.send(commands.Exchange.UnbindOk())


def queue_declare(channel: Channel, m: commands.Queue.Declare) -> None:
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
            channel.conn.write(
                codec.simple_method(
                    channel.id,
                    commands.Queue.DeclareOk,
                    ("shortstr", name),
                    ("long", 0),
                    ("long", 1),
                )
            )
        return
    if not m.passive:
        channel._permit("configure", "queue", name)
        if name not in channel.vhost.queues:
            channel.access.check_linked_exchange(
                channel.conn.user, channel.vhost.name, "queue", name, m.arguments or {}
            )
    queue = channel.vhost.declare_queue(
        name,
        m.passive,
        m.durable,
        m.exclusive,
        m.auto_delete,
        m.arguments or {},
        channel.conn,
        server_named,
    )
    channel.last_queue = queue.name
    if not m.nowait:
        channel.conn.write(
            codec.simple_method(
                channel.id,
                commands.Queue.DeclareOk,
                ("shortstr", queue.name),
                ("long", queue.message_count),
                ("long", len(queue.consumers)),
            )
        )


def permit_binding(
    channel: Channel, kind: str, destination: str, source: str, routing_key: str
) -> None:
    """The permissions a (un)bind needs: write on the destination, read on the source
    (and its topic permission for the routing key)."""
    # rabbit_channel:binding_action/10: write on the destination, read on the source
    # (the default exchange refuses binding first, with its own 403), then, when the
    # source is a topic exchange, the binding key against the user's topic permission.
    if destination and source:
        channel._permit("write", kind, destination)
        channel._permit("read", "exchange", source)
        channel._permit_topic("read", channel.vhost.projection.exchanges.get(source), routing_key)


def bind_queue(channel: Channel, m: commands.Queue.Bind | commands.Queue.Unbind, add: bool) -> None:
    """queue.bind (``add``) or queue.unbind on the vhost, after the permissions."""
    name = channel._queue_name(m.queue)
    routing_key = m.routing_key
    if not m.queue and not routing_key:
        # rabbit_channel:expand_routing_key_shortcut/3
        routing_key = name
    permit_binding(channel, "queue", name, m.exchange, routing_key)
    channel.vhost.bind(
        m.exchange, DestKind.QUEUE, name, routing_key, m.arguments or {}, channel.conn, add
    )


def queue_bind(channel: Channel, m: commands.Queue.Bind) -> None:
    """queue.bind."""
    bind_queue(channel, m, add=True)
    if not m.nowait:
        channel.send(commands.Queue.BindOk())


def queue_unbind(channel: Channel, m: commands.Queue.Unbind) -> None:
    """queue.unbind."""
    bind_queue(channel, m, add=False)
    channel.send(commands.Queue.UnbindOk())


def queue_purge(channel: Channel, m: commands.Queue.Purge) -> None:
    """queue.purge: read permission, the queue type's check, then the ready messages go."""
    name = channel._queue_name(m.queue)
    channel._permit("read", "queue", name)
    queue = channel.vhost.queue(name, channel.conn)
    queue.check_purge()
    count = queue.purge()
    if not m.nowait:
        channel.send(commands.Queue.PurgeOk(message_count=count))


def queue_delete(channel: Channel, m: commands.Queue.Delete) -> None:
    """queue.delete: configure permission, the if-unused and if-empty checks, then delete."""
    name = channel._queue_name(m.queue)
    channel._permit("configure", "queue", name)
    queue = channel.vhost.queues.get(name)
    count = 0
    if queue is not None:
        channel.vhost.check_exclusive(queue, channel.conn)
        what = channel.vhost.rs("queue", name)
        if m.if_unused and queue.consumers:
            raise AMQPChannelError(PRECONDITION_FAILED, f"{what} in use")
        if m.if_empty and queue.message_count:
            raise AMQPChannelError(PRECONDITION_FAILED, f"{what} not empty")
        count = channel.vhost.delete_queue(queue)
    if not m.nowait:
        channel.send(commands.Queue.DeleteOk(message_count=count))
