"""The wire: AMQP 0-9-1 over sockets, and nothing else decides anything.

Frames in and out (:mod:`leveret.wire.codec`, on pamqp with struct fast paths), one
asyncio protocol per socket (:mod:`leveret.wire.connection`: the channel table, writes,
flow control, the one place errors become Close frames), the handshake
(:mod:`leveret.wire.handshake`), the wire channel (:mod:`leveret.wire.channel`: dispatch,
content assembly, publish, deliver, acks, consumers, confirms, transactions; its
``topology`` child for exchange.* and queue.* methods), the listeners' addresses and an
injected write delay.

Rule at the door: the wire may import :mod:`leveret.session`, :mod:`leveret.node`,
:mod:`leveret.config` and the domain below them; it turns frames into session and node
calls and their results into frames. Nothing in the session or the node imports it (they
see a channel and a connection as :mod:`leveret.node.peers`' protocols);
what imports it is above it: :mod:`leveret.server`, the operator packages
(:mod:`leveret.management`, :mod:`leveret.control`, :mod:`leveret.inspect`) and
:mod:`leveret.faults`. ``tests/test_layers.py`` enforces it.
"""
