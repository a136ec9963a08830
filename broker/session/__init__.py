"""The AMQP session: what RabbitMQ's rabbit_channel decides, without the wire.

Rule at the door: nothing here imports asyncio, pamqp, sockets or the wire modules
(``leveret.codec``, ``leveret.connection``, ``leveret.channel``); a session is driven by
plain calls and answers with plain values or :class:`leveret.errors.AMQPError`, so its rules
are tested without a socket or an event loop (``tests/session/``). The wire channel
(``leveret.channel``) turns frames into these calls and results into frames.

- ``ledger``: the delivery-tag ledger of a channel (unacked deliveries in tag order,
  prefetch, ack/nack/reject with ``multiple``, recover, transactional acks).
- ``publish``: basic.publish's checks in RabbitMQ's order, the routing and the publish
  counters, for the wire channel and the management API alike.
- ``get``: basic.get's checks and the delivery header, for the channel, the management get
  and the aliveness test.

The session sits on the node (vhosts, queues, messages: ``leveret.vhost``,
``leveret.queue``...), which never imports it. ``tests/test_layers.py`` enforces both rules.
"""
