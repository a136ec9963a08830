"""What the node does for rabbitmq_shovel's commands (DeleteShovelCommand,
RestartShovelCommand; shovel_status is a listing, :data:`leveret.control.listing.SHOVELS`):
through the node's :class:`leveret.node.shovel.Shovels`, as the management API's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from leveret.config import NODE_NAME
from leveret.control.commands import text, vhost_named
from leveret.control.endpoint import EX_UNAVAILABLE, ControlError

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

Args = dict[str, Any]
Reply = tuple[str | None, Any]


def _not_found(vhost: str) -> ControlError:
    # DeleteShovelCommand's and RestartShovelCommand's text for an unknown shovel.
    return ControlError(
        f"Shovel with the given name was not found on the target node '{NODE_NAME}' "
        f"and / or virtual host '{vhost}'",
        EX_UNAVAILABLE,
    )


def delete_shovel(server: ServerState[Connection], args: Args) -> Reply:
    """delete_shovel [-p VHOST] NAME: stop it and clear its parameter."""
    vhost = vhost_named(server, text(args, "vhost")).name
    if not server.clear_parameter(vhost, "shovel", text(args, "name")):
        raise _not_found(vhost)
    return None, None


def restart_shovel(server: ServerState[Connection], args: Args) -> Reply:
    """restart_shovel [-p VHOST] NAME: its connections closed and opened again."""
    vhost = vhost_named(server, text(args, "vhost")).name
    if not server.shovels.restart(vhost, text(args, "name")):
        raise _not_found(vhost)
    return None, None


COMMANDS: dict[str, Callable[[ServerState[Connection], Args], Reply | Awaitable[Reply]]] = {
    "delete_shovel": delete_shovel,
    "restart_shovel": restart_shovel,
}
