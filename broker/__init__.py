"""Leveret: an AMQP 0-9-1 broker on asyncio that behaves like RabbitMQ.

``broker`` is the asyncio shell: sockets, frames, connections, channels, queues. It is
the only layer that knows the wire; routing lives in :mod:`exchanges`, durable bytes in
:mod:`storage`.

Inside, from the top: :mod:`leveret.server` (the composition root, which starts the
listeners), the management API and the control socket, the wire (connections, channels),
the session (what rabbit_channel decides) and the node (vhosts, queues, messages). What
every connection and the management API share (vhosts, access control, counters, the
connections) is one :class:`leveret.state.ServerState` at the top of the node, handed to
them by the server; nothing below the server imports it. No import circle closes but a
package and its own child (``tests/test_layers.py`` enforces these rules): the modules a
class's methods are split into see the class through protocols, never import it.
"""

__version__ = "0.1.0"
