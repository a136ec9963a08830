"""The node: what a RabbitMQ node holds and what happens to messages in it.

Vhosts and their topology (:mod:`leveret.node.vhost`, the single mutation point of the
routing projection), queues and their types and features (:mod:`leveret.node.queue`,
:mod:`leveret.node.stream`, dead-lettering, delayed messages, priorities, consumer
timeouts), messages, the vhost's clock and events, durability
(:mod:`leveret.node.persistence` over :mod:`leveret.storage`), the memory and disk
monitors, users and permissions, limits, counters, and the state every connection and the
management API share (:mod:`leveret.node.state`).

Rule at the door: the node imports neither :mod:`leveret.session` nor :mod:`leveret.wire`,
not even for a type name; it may import :mod:`leveret.config`, :mod:`leveret.trace` (the
traffic trace's recorder is one of its event subscribers), :mod:`leveret.storage` and
:mod:`leveret.exchanges`. A consumer holds its channel and the state its
connections as :mod:`leveret.node.peers`' ``ChannelPeer`` and ``ConnectionPeer``: the
protocols the node owns and the wire implements.
``tests/test_layers.py`` enforces it.
"""
