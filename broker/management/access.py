"""Who may use the management API, and what they may see: RabbitMQ's rules.

Source: ``deps/rabbitmq_web_dispatch/src/rabbit_web_dispatch_access_control.erl``.

- HTTP basic auth against the broker's user database; loopback-only users (``guest``) only
  from loopback addresses.
- Only users tagged ``administrator``, ``monitoring``, ``policymaker`` or ``management`` may
  log in (is_mgmt_user); otherwise 401 "Not management user".
- Users, permissions, vhost changes and definitions need ``administrator``
  (is_authorized_admin). Everything scoped to a vhost needs access to it (permissions on it)
  unless the user is an administrator (is_authorized_vhost). Lists show only the vhosts a
  user may see: every vhost for ``monitoring``/``administrator``, else the vhosts the user
  has permissions on (list_visible_vhosts). Connections and channels of other users are
  visible to monitors only (rabbit_mgmt_util:filter_conn_ch_list/3).
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.management.errors import not_authenticated, not_authorised
from leveret.node.auth import User, is_loopback
from leveret.session.topology import Actor

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})
# Where the auth middleware keeps the logged-in user on the request (aiohttp >= 3.14).
USER_KEY = web.RequestKey("user", User)
SERVER_KEY: web.AppKey[ServerState[Connection]] = web.AppKey("server")


def is_admin(user: User) -> bool:
    """rabbit_web_dispatch_access_control:is_admin/1."""
    return "administrator" in user.tags


def is_monitor(user: User) -> bool:
    """is_monitor/1: administrators are monitors too."""
    return bool({"administrator", "monitoring"} & set(user.tags))


def credentials(request: web.Request) -> tuple[str, str] | None:
    """The (user, password) of a Basic ``Authorization`` header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    return (name, password) if sep else None


def authenticate(server: ServerState[Connection], request: web.Request) -> User:
    """The logged-in management user, or raise the 401 RabbitMQ sends."""
    given = credentials(request)
    if given is None:
        raise not_authenticated()
    user = server.access.authenticate(*given)
    if user is None:
        raise not_authenticated()
    if user.name in server.config.loopback_users and not is_loopback(request.remote):
        raise not_authorised("User can only log in via localhost")
    if not MANAGEMENT_TAGS & set(user.tags):
        raise not_authorised("Not management user")
    return user


def current_user(request: web.Request) -> User:
    """The user the auth middleware stored on the request."""
    return request[USER_KEY]


def require_admin(request: web.Request) -> User:
    """is_authorized_admin: 401 "Not administrator user" for others."""
    user = current_user(request)
    if not is_admin(user):
        raise not_authorised("Not administrator user")
    return user


def can_login_vhost(server: ServerState[Connection], user: User, vhost: str) -> bool:
    """list_login_vhosts: the user has permissions on ``vhost``."""
    return server.access.can_access_vhost(user.name, vhost)


def require_vhost(request: web.Request, server: ServerState[Connection], vhost: str) -> User:
    """is_authorized_vhost: administrators, or users with access to ``vhost``."""
    user = current_user(request)
    if not is_admin(user) and not can_login_vhost(server, user, vhost):
        raise not_authorised("User not authorised to access virtual host")
    return user


def visible_vhosts(server: ServerState[Connection], user: User) -> list[str]:
    """list_visible_vhosts: every vhost for monitors, else the user's login vhosts."""
    names = sorted(server.vhosts)
    if is_monitor(user):
        return names
    return [name for name in names if can_login_vhost(server, user, name)]


def listed_vhosts(server: ServerState[Connection], user: User) -> list[str]:
    """rabbit_mgmt_util:filter_vhost/3, the narrower rule of the queue, exchange and binding
    lists: every vhost for administrators only; monitors, like everyone else, see the vhosts
    they have permissions on (observed on 3.10.8: a ``monitoring`` user without permissions
    on a vhost does not see its queues in ``GET /api/queues``)."""
    names = sorted(server.vhosts)
    if is_admin(user):
        return names
    return [name for name in names if can_login_vhost(server, user, name)]


def sees_user(viewer: User, owner: str) -> bool:
    """filter_conn_ch_list: monitors see every connection, others only their own."""
    return is_monitor(viewer) or viewer.name == owner


def actor(request: web.Request, vhost: VHost) -> Actor:
    """The logged-in user on ``vhost`` as the session sees a management request (no
    connection: it owns no exclusive queue and may use none). Management operations run
    as that user, with the permission checks the operation would get on a channel
    (rabbit_mgmt_util:direct_request/6 and with_channel/5 open one for it)."""
    server: ServerState[Connection] = request.app[SERVER_KEY]
    return Actor(server.access, current_user(request).name, vhost, None)
