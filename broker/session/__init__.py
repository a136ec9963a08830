"""The AMQP session: what RabbitMQ's rabbit_channel decides, without the wire.

Rule at the door: nothing here imports asyncio, pamqp, sockets or :mod:`leveret.wire`;
the session imports only :mod:`leveret.node` (and the domain below it), and only the wire
and the operator packages import it. A session is driven by plain calls and answers with
plain values or :class:`leveret.node.errors.AMQPError`, so its rules are tested without a
socket or an event loop (``tests/session/``). The wire channel (:mod:`leveret.wire.channel`)
turns frames into these calls and results into frames.

- ``ledger``: the delivery-tag ledger of a channel (unacked deliveries in tag order,
  prefetch, ack/nack/reject with ``multiple``, recover, transactional acks).
- ``publish``: basic.publish's checks in RabbitMQ's order, the routing and the publish
  counters, for the wire channel and the management API alike.
- ``get``: basic.get's checks and the delivery header, for the channel, the management get
  and the aliveness test.
- ``topology``: exchange and queue declare/delete, bind/unbind and purge: the permissions of
  an :class:`~leveret.session.topology.Actor` (a channel's user over its connection, or a
  management request's user), then the rules (reserved names, equivalence, exclusive
  access, if-unused/if-empty); the vhost applies what they allow.
- ``consume``: basic.consume's checks in RabbitMQ's order, direct reply-to's, basic.qos and
  basic.recover.
- ``tx``: tx and confirm modes, commit and rollback of held publishes and acks, and the
  confirms' ``multiple`` acks between nacks.

A rule lives here once, whoever asks: the wire channel (:mod:`leveret.wire.channel` and its
:class:`~leveret.wire.channel.topology.Topology`) only turns a frame into a call and the result
into a frame, and the management API runs each request as its user through the same calls (as
RabbitMQ's management plugin goes through a channel). Errors are
:class:`leveret.node.errors.AMQPError` with RabbitMQ's codes and texts; each caller words them
its way (a close frame, an HTTP status, ``leveret ctl``'s message).

The session sits on the node (vhosts, queues, messages: ``leveret.vhost``,
``leveret.queue``...), which never imports it. ``tests/test_layers.py`` enforces both rules.
"""
