"""Dynamic shovels (rabbitmq_shovel 3.10): AMQP 0-9-1 clients inside the node that move
messages from a source queue or exchange to a destination, defined as runtime parameters
of the component ``shovel``.

:mod:`.uri` parses their ``amqp://`` and ``amqps://`` URIs, :mod:`.definition` checks a
definition with RabbitMQ's reasons, :mod:`.worker` runs one shovel (aiormq on both ends,
the local node too, over loopback), :mod:`.registry` holds the node's shovels.

Rule at the door: as the rest of the node, no session or wire module; the remote side is
aiormq's, the only place the node speaks AMQP as a client.
"""

from leveret.node.shovel.definition import SHOVEL_COMPONENT, ShovelError
from leveret.node.shovel.registry import Shovels

__all__ = ["SHOVEL_COMPONENT", "ShovelError", "Shovels"]
