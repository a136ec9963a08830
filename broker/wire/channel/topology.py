"""The channel's topology methods, as frames: exchange.declare/delete/bind/unbind,
queue.declare/bind/unbind/purge/delete.

Each turns its frame into a call of :mod:`leveret.session.topology` (the permissions and
the rules, written once there for the channel and the management API) and answers with
its -Ok. What stays here is the wire's: the name shortcuts of the channel's last queue,
server-named queues' generated names, and direct reply-to's pseudo-queue, which is no
queue at all. None of it is on the publish, deliver or ack path: the channel holds a
:class:`Topology` and its dispatch table names these methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands

from leveret.exchanges.model import DestKind
from leveret.node.errors import NOT_FOUND, AMQPChannelError
from leveret.node.vhost import generated_name
from leveret.session import topology
from leveret.session.publish import REPLY_PREFIX, REPLY_TO
from leveret.wire import codec

if TYPE_CHECKING:
    from leveret.wire.channel import Channel


class Topology:
    """A channel's exchange.* and queue.* methods (each answers with its -Ok), and the
    channel's last declared queue, which an empty queue name stands for."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.last_queue: str | None = None

    def queue_name(self, name: str) -> str:
        """``name``, or for an empty one the channel's last declared queue (404 without one)."""
        return topology.expand_queue_name(self.last_queue, name)

    def exchange_declare(self, m: commands.Exchange.Declare) -> None:
        """exchange.declare."""
        topology.declare_exchange(
            self.channel.actor,
            m.exchange,
            m.exchange_type,
            m.passive,
            m.durable,
            m.auto_delete,
            m.internal,
            m.arguments or {},
        )
        if not m.nowait:
            self.channel.send(commands.Exchange.DeclareOk())

    def exchange_delete(self, m: commands.Exchange.Delete) -> None:
        """exchange.delete."""
        topology.delete_exchange(self.channel.actor, m.exchange, m.if_unused)
        if not m.nowait:
            self.channel.send(commands.Exchange.DeleteOk())

    def _bind_exchange(
        self, m: commands.Exchange.Bind | commands.Exchange.Unbind, add: bool
    ) -> None:
        """exchange.bind (``add``) or exchange.unbind."""
        topology.bind(
            self.channel.actor,
            m.source,
            DestKind.EXCHANGE,
            m.destination,
            m.routing_key,
            m.arguments or {},
            add,
        )

    def exchange_bind(self, m: commands.Exchange.Bind) -> None:
        """exchange.bind."""
        self._bind_exchange(m, add=True)
        if not m.nowait:
            self.channel.send(commands.Exchange.BindOk())

    def exchange_unbind(self, m: commands.Exchange.Unbind) -> None:
        """exchange.unbind."""
        self._bind_exchange(m, add=False)
        if not m.nowait:
            self.channel.send(commands.Exchange.UnbindOk())

    def _declare_ok(self, name: str, messages: int, consumers: int) -> None:
        """queue.declare-ok."""
        self.channel.conn.write(
            codec.simple_method(
                self.channel.id,
                commands.Queue.DeclareOk,
                ("shortstr", name),
                ("long", messages),
                ("long", consumers),
            )
        )

    def queue_declare(self, m: commands.Queue.Declare) -> None:
        """queue.declare: a server-named, reply-to or named queue, declared or checked (passive)."""
        name = m.queue
        server_named = not name and not m.passive
        if server_named:
            name = generated_name("amq.gen")
        elif not name:
            name = self.queue_name(name)
        if name == REPLY_TO or name.startswith(REPLY_PREFIX):
            # The pseudo-queue and a live reply name declare (passive or not) as
            # (0 messages, 1 consumer), before any name check (rabbit_channel).
            if (
                name != REPLY_TO
                and name[len(REPLY_PREFIX) :] not in self.channel.vhost.reply_consumers
            ):
                raise AMQPChannelError(NOT_FOUND, f"no {self.channel.vhost.rs('queue', name)}")
            if not m.nowait:
                self._declare_ok(name, 0, 1)
            return
        queue, _created = topology.declare_queue(
            self.channel.actor,
            name,
            m.passive,
            m.durable,
            m.exclusive,
            m.auto_delete,
            m.arguments or {},
            server_named,
        )
        self.last_queue = queue.name
        if not m.nowait:
            self._declare_ok(queue.name, queue.message_count, len(queue.consumers))

    def _bind_queue(self, m: commands.Queue.Bind | commands.Queue.Unbind, add: bool) -> None:
        """queue.bind (``add``) or queue.unbind."""
        name = self.queue_name(m.queue)
        routing_key = m.routing_key
        if not m.queue and not routing_key:
            # rabbit_channel:expand_routing_key_shortcut/3
            routing_key = name
        topology.bind(
            self.channel.actor,
            m.exchange,
            DestKind.QUEUE,
            name,
            routing_key,
            m.arguments or {},
            add,
        )

    def queue_bind(self, m: commands.Queue.Bind) -> None:
        """queue.bind."""
        self._bind_queue(m, add=True)
        if not m.nowait:
            self.channel.send(commands.Queue.BindOk())

    def queue_unbind(self, m: commands.Queue.Unbind) -> None:
        """queue.unbind."""
        self._bind_queue(m, add=False)
        self.channel.send(commands.Queue.UnbindOk())

    def queue_purge(self, m: commands.Queue.Purge) -> None:
        """queue.purge."""
        count = topology.purge_queue(self.channel.actor, self.queue_name(m.queue))
        if not m.nowait:
            self.channel.send(commands.Queue.PurgeOk(message_count=count))

    def queue_delete(self, m: commands.Queue.Delete) -> None:
        """queue.delete."""
        name = self.queue_name(m.queue)
        count = topology.delete_queue(self.channel.actor, name, m.if_unused, m.if_empty)
        if not m.nowait:
            self.channel.send(commands.Queue.DeleteOk(message_count=count))
