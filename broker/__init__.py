"""Leveret: an AMQP 0-9-1 broker on asyncio that behaves like RabbitMQ.

``broker`` is the asyncio shell: sockets, frames, connections, channels, queues. It is
the only layer that knows the wire; routing lives in :mod:`exchanges`, durable bytes in
:mod:`storage`.
"""

__version__ = "0.1.0"
