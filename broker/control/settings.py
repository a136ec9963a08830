"""What the node does for runtime parameters, topic permissions and vhost and user limits
(rabbitmq_cli's set_parameter, clear_parameter, set_topic_permissions,
clear_topic_permissions, set_vhost_limits, clear_vhost_limits, list_vhost_limits,
set_user_limits, clear_user_limits, list_user_limits ``*_command.ex``).

Every change goes through the node's function the management API calls for it
(:meth:`ServerState.set_parameter`, :meth:`ServerState.set_vhost_limits`,
:meth:`ServerState.delete_policy`, :class:`leveret.node.auth.AccessControl`), checked by the
same parsers (:func:`leveret.node.limits.parse_limits`, ``invalid_regexp``); the listings of
parameters and topic permissions are in :mod:`.listing`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from leveret.control.commands import text, user_must_exist, vhost_named
from leveret.control.endpoint import EX_DATAERR, ControlError

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

Args = dict[str, Any]
Reply = tuple[str | None, Any]


def _json(args: Args, key: str) -> Any:
    raw = text(args, key)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ControlError(f"{key} is not valid JSON: {raw} ({exc})", EX_DATAERR) from None


def set_parameter(server: ServerState[Connection], args: Args) -> Reply:
    """set_parameter [-p VHOST] COMPONENT NAME VALUE (VALUE: JSON): the components
    Leveret implements, ``vhost-limits``, ``operator_policy`` and ``shovel``."""
    from leveret.exchanges.policies import PolicyError
    from leveret.node.limits import LimitError
    from leveret.node.shovel import ShovelError

    vhost = vhost_named(server, text(args, "vhost")).name
    component, name = text(args, "component"), text(args, "name")
    value = _json(args, "value")
    try:
        server.set_parameter(vhost, component, name, value)
    except ShovelError as exc:
        raise ControlError(" ".join(exc.reason.split()), EX_DATAERR) from None
    except LimitError as exc:
        raise ControlError(" ".join(exc.reason.split()), EX_DATAERR) from None
    except PolicyError as exc:
        raise ControlError(" ".join(exc.reason.split()), EX_DATAERR) from None
    except ValueError:
        # rabbit_runtime_parameters' validation error for a component it does not know.
        raise ControlError(
            f"Validation failed component {component} not found", EX_DATAERR
        ) from None
    return None, None


def clear_parameter(server: ServerState[Connection], args: Args) -> Reply:
    """clear_parameter [-p VHOST] COMPONENT NAME: "Parameter does not exist" (65) when it
    is not set, as rabbit_runtime_parameters answers."""
    from leveret.node.limits import VHOST_LIMITS_COMPONENT

    vhost = vhost_named(server, text(args, "vhost"))
    component, name = text(args, "component"), text(args, "name")
    if component == VHOST_LIMITS_COMPONENT and vhost.limits:
        server.set_vhost_limits(vhost.name, {})
        return None, None
    if component == "operator_policy" and server.delete_policy(vhost.name, name, operator=True):
        return None, None
    if server.clear_parameter(vhost.name, component, name):  # a shovel
        return None, None
    raise ControlError("Parameter does not exist", EX_DATAERR)


def set_topic_permissions(server: ServerState[Connection], args: Args) -> Reply:
    """set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ."""
    from leveret.node.auth import TopicPermission, invalid_regexp

    vhost, user = text(args, "vhost"), text(args, "user")
    user_must_exist(server, user)
    vhost_named(server, vhost)
    write, read = text(args, "write"), text(args, "read")
    for pattern in (write, read):
        reason = invalid_regexp(pattern)
        if reason is not None:
            raise ControlError(json.dumps(reason), EX_DATAERR)
    permission = TopicPermission(write, read)
    server.access.set_topic_permission(user, vhost, text(args, "exchange"), permission)
    return None, None


def clear_topic_permissions(server: ServerState[Connection], args: Args) -> Reply:
    """clear_topic_permissions [-p VHOST] USER [EXCHANGE]: all of the user's in the vhost,
    or the one on EXCHANGE."""
    from leveret.node.auth import TopicPermission

    vhost, user = text(args, "vhost"), text(args, "user")
    user_must_exist(server, user)
    vhost_named(server, vhost)
    access = server.access
    exchange = args.get("exchange")
    if exchange is None:
        access.clear_topic_permissions(user, vhost)
        return None, None
    rest: dict[str, TopicPermission] = {
        name: permission
        for name, permission in (access.topic_permissions.get((user, vhost)) or {}).items()
        if name != exchange
    }
    access.clear_topic_permissions(user, vhost)
    for name, permission in rest.items():
        access.set_topic_permission(user, vhost, name, permission)
    return None, None


def _limits(server: ServerState[Connection], values: Any, user: bool) -> dict[str, int]:
    from leveret.node.limits import LimitError, parse_limits

    if not isinstance(values, dict):
        raise ControlError("limits must be a JSON object", EX_DATAERR)
    try:
        return parse_limits(values, user=user)
    except LimitError as exc:
        raise ControlError(" ".join(exc.reason.split()), EX_DATAERR) from None


def set_vhost_limits(server: ServerState[Connection], args: Args) -> Reply:
    """set_vhost_limits [-p VHOST] DEFINITION (JSON: max-connections, max-queues)."""
    vhost = vhost_named(server, text(args, "vhost"))
    limits = _limits(server, _json(args, "definition"), user=False)
    server.set_vhost_limits(vhost.name, limits)  # replaces them, as rabbit_vhost_limit:set/3
    return None, None


def clear_vhost_limits(server: ServerState[Connection], args: Args) -> Reply:
    """clear_vhost_limits [-p VHOST]: all of them."""
    vhost = vhost_named(server, text(args, "vhost"))
    server.set_vhost_limits(vhost.name, {})
    return None, None


def list_vhost_limits(server: ServerState[Connection], args: Args) -> Reply:
    """list_vhost_limits [-p VHOST] [--global]: a vhost's limits as one JSON object, or
    with --global a table of the vhosts that have some (list_vhost_limits_command.ex)."""
    if args.get("global"):
        found = [
            {"vhost": vhost.name, "limits": dict(vhost.limits)}
            for vhost in list(server.vhosts.values())
            if vhost.limits
        ]
        lines = ["vhost\tlimits"] + [
            f"{item['vhost']}\t{json.dumps(item['limits'], separators=(',', ':'))}"
            for item in found
        ]
        return "\n".join(lines), found
    vhost = vhost_named(server, text(args, "vhost"))
    limits = dict(vhost.limits)
    return (json.dumps(limits, separators=(",", ":")) if limits else None), limits


def set_user_limits(server: ServerState[Connection], args: Args) -> Reply:
    """set_user_limits USER DEFINITION (JSON: max-connections, max-channels)."""
    name = text(args, "user")
    user_must_exist(server, name)
    limits = _limits(server, _json(args, "definition"), user=True)
    server.access.set_user_limits(name, limits)  # replaces them, as in RabbitMQ
    return None, None


def clear_user_limits(server: ServerState[Connection], args: Args) -> Reply:
    """clear_user_limits USER LIMIT|all."""
    name, which = text(args, "user"), text(args, "limit")
    user_must_exist(server, name)
    limits = server.access.users[name].limits
    kept = {} if which == "all" else {k: v for k, v in limits.items() if k != which}
    server.access.set_user_limits(name, kept)
    return None, None


def list_user_limits(server: ServerState[Connection], args: Args) -> Reply:
    """list_user_limits [--user USER]: the user's limits as one JSON object, or a table of
    the users that have some (list_user_limits_command.ex)."""
    name = args.get("user")
    if name is None:
        found = [
            {"user": user.name, "limits": dict(user.limits)}
            for user in list(server.access.users.values())
            if user.limits
        ]
        lines = ["user\tlimits"] + [
            f"{item['user']}\t{json.dumps(item['limits'], separators=(',', ':'))}" for item in found
        ]
        return "\n".join(lines), found
    user_must_exist(server, str(name))
    limits = dict(server.access.users[str(name)].limits)
    return (json.dumps(limits, separators=(",", ":")) if limits else None), limits


COMMANDS: dict[str, Callable[[ServerState[Connection], Args], Reply | Awaitable[Reply]]] = {
    handler.__name__: handler
    for handler in (
        set_parameter,
        clear_parameter,
        set_topic_permissions,
        clear_topic_permissions,
        set_vhost_limits,
        clear_vhost_limits,
        list_vhost_limits,
        set_user_limits,
        clear_user_limits,
        list_user_limits,
    )
}
