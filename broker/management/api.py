"""Read-only endpoints: overview, vhosts, users, permissions, connections, channels and
consumers (rabbit_mgmt_wm_overview, _vhosts, _users, _permissions, _connections,
_channels, _consumers in deps/rabbitmq_management/src).

Exchanges, queues and bindings are in :mod:`broker.management.topology`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management import views
from broker.management.access import (
    SERVER_KEY,
    current_user,
    is_monitor,
    require_admin,
    require_vhost,
    sees_user,
    visible_vhosts,
)
from broker.management.errors import ApiError, not_authorised, not_found
from broker.management.query import json_response, reply_list
from broker.management.state import state_of
from broker.management.stats import GAUGES
from exchanges.model import ExchangeType

if TYPE_CHECKING:
    from broker.channel import Channel
    from broker.connection import Connection
    from broker.server import Server
    from broker.vhost import VHost

routes = web.RouteTableDef()

EXCHANGE_TYPES = {
    ExchangeType.DIRECT: "AMQP direct exchange, as per the AMQP specification",
    ExchangeType.FANOUT: "AMQP fanout exchange, as per the AMQP specification",
    ExchangeType.TOPIC: "AMQP topic exchange, as per the AMQP specification",
    ExchangeType.HEADERS: "AMQP headers exchange, as per the AMQP specification",
    ExchangeType.RTOPIC: "Reverse topic exchange (rabbitmq-rtopic-exchange)",
}
MANAGEMENT_PORT_KEY = web.AppKey("management_port", int)


def server_of(request: web.Request) -> Server:
    """The broker this API serves."""
    return request.app[SERVER_KEY]


def vhost_of(request: web.Request, key: str = "vhost") -> VHost:
    """The vhost named in the path (access checked), or 404."""
    server = server_of(request)
    name = request.match_info[key]
    vhost = server.vhosts.get(name)
    require_vhost(request, server, name)
    if vhost is None:
        raise not_found()
    return vhost


def scoped_vhosts(request: web.Request) -> list[VHost]:
    """The vhost in the path, else every vhost the user may see."""
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    server = server_of(request)
    return [server.vhosts[name] for name in visible_vhosts(server, current_user(request))]


# -- overview ---------------------------------------------------------------------------


def object_totals(server: Server) -> dict[str, int]:
    """``object_totals`` of the overview."""
    connections = list(server.connections)
    channels = [ch for conn in connections for ch in conn.channels.values()]
    vhosts = server.vhosts.values()
    return {
        "connections": len(connections),
        "channels": len(channels),
        "exchanges": sum(len(v.projection.exchanges) for v in vhosts),
        "queues": sum(len(v.queues) for v in vhosts),
        "consumers": sum(len(ch.consumers) for ch in channels),
    }


def listeners(request: web.Request) -> list[dict[str, Any]]:
    """The AMQP, AMQPS and HTTP listeners."""
    server = server_of(request)
    config = server.config
    found = [
        {"node": views.NODE, "protocol": "amqp", "ip_address": config.host, "port": server.port}
    ]
    if getattr(config, "tls_cert", None) is not None:
        tls_port = getattr(server, "tls_port", None)
        found.append(
            {
                "node": views.NODE,
                "protocol": "amqp/ssl",
                "ip_address": config.host,
                "port": tls_port,
            }
        )
    port = request.app.get(MANAGEMENT_PORT_KEY)
    host = request.transport.get_extra_info("sockname") if request.transport else None
    found.append(
        {
            "node": views.NODE,
            "protocol": "http",
            "ip_address": host[0] if isinstance(host, tuple) else "",
            "port": port,
        }
    )
    return found


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    """GET /api/overview (rabbit_mgmt_wm_overview)."""
    server = server_of(request)
    sampler = state_of(server).sampler
    rates = sampler.global_rates
    totals = sampler.totals()
    gauges = sampler.gauges()
    return json_response(
        {
            "management_version": views.RABBITMQ_VERSION,
            "rabbitmq_version": views.RABBITMQ_VERSION,
            "product_name": views.PRODUCT_NAME,
            "product_version": views.PRODUCT_VERSION,
            "cluster_name": views.CLUSTER_NAME,
            "node": views.NODE,
            "rates_mode": "basic",
            "disable_stats": False,
            "enable_queue_totals": False,
            "statistics_db_event_queue": 0,
            "exchange_types": [
                {"name": t.value, "description": text, "enabled": True}
                for t, text in EXCHANGE_TYPES.items()
            ],
            "message_stats": views.message_stats(totals, rates),
            "queue_totals": views.message_counts(gauges, rates),
            "object_totals": object_totals(server),
            "listeners": listeners(request),
            "contexts": [
                {
                    "node": views.NODE,
                    "description": "RabbitMQ Management",
                    "path": "/",
                    "port": str(request.app.get(MANAGEMENT_PORT_KEY, "")),
                }
            ],
        }
    )


@routes.get("/api/cluster-name")
async def cluster_name(request: web.Request) -> web.Response:
    """GET /api/cluster-name."""
    return json_response({"name": views.CLUSTER_NAME})


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    """GET /api/whoami (rabbit_mgmt_wm_whoami)."""
    user = current_user(request)
    return json_response({"name": user.name, "tags": list(user.tags)})


@routes.get("/api/nodes")
async def nodes(request: web.Request) -> web.Response:
    """GET /api/nodes: the one node, with its memory watermark."""
    memory = server_of(request).memory
    node = {
        "name": views.NODE,
        "type": "disc",
        "running": True,
        "mem_used": memory.used,
        "mem_limit": memory.limit,
        "mem_alarm": memory.alarm,
        "disk_free_alarm": False,
    }
    return json_response([node])


@routes.get("/api/health/checks/alarms")
@routes.get("/api/health/checks/local-alarms")
async def health_alarms(request: web.Request) -> web.Response:
    """GET /api/health/checks/alarms (rabbit_mgmt_wm_health_check_alarms): 200 ``ok``, or
    503 while the memory alarm is in effect."""
    if server_of(request).memory.alarm:
        return json_response(
            {
                "status": "failed",
                "reason": "resource alarm(s) in effect in the cluster",
                "alarms": [{"node": views.NODE, "resource": "memory"}],
            },
            status=503,
        )
    return json_response({"status": "ok"})


# -- vhosts, users, permissions ---------------------------------------------------------


def vhost_item(server: Server, name: str) -> dict[str, Any]:
    """A vhost with its message counts."""
    meta = state_of(server).vhost_meta(name)
    item = views.vhost_view(name, meta.description, meta.tags, meta.tracing)
    vhost = server.vhosts[name]
    sums = dict.fromkeys(GAUGES, 0)
    for queue in vhost.queues.values():
        ready = queue.message_count
        sums["messages"] += ready + queue.unacked
        sums["messages_ready"] += ready
        sums["messages_unacknowledged"] += queue.unacked
    item.update(views.message_counts(sums, {}))
    return item


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    """GET /api/vhosts: the vhosts the user may see."""
    server = server_of(request)
    names = visible_vhosts(server, current_user(request))
    return reply_list([vhost_item(server, name) for name in names], request)


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    """GET /api/vhosts/name."""
    vhost = vhost_of(request)
    return json_response(vhost_item(server_of(request), vhost.name))


def permission_items(server: Server, user: str | None, vhost: str | None) -> list[dict[str, Any]]:
    """Permissions, optionally of one user and/or one vhost."""
    return [
        views.permission_view(u, v, p)
        for (u, v), p in sorted(server.access.permissions.items())
        if (user is None or u == user) and (vhost is None or v == vhost)
    ]


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    """GET /api/permissions (administrators)."""
    require_admin(request)
    return reply_list(permission_items(server_of(request), None, None), request)


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    """GET /api/vhosts/vhost/permissions."""
    require_admin(request)
    vhost = vhost_of(request)
    return reply_list(permission_items(server_of(request), None, vhost.name), request)


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    """GET /api/users/user/permissions."""
    require_admin(request)
    server = server_of(request)
    name = request.match_info["user"]
    if name not in server.access.users:
        raise not_found()
    return reply_list(permission_items(server, name, None), request)


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permission(request: web.Request) -> web.Response:
    """GET /api/permissions/vhost/user."""
    require_admin(request)
    server = server_of(request)
    key = (request.match_info["user"], request.match_info["vhost"])
    permission = server.access.permissions.get(key)
    if permission is None:
        raise not_found()
    return json_response(views.permission_view(key[0], key[1], permission))


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    """GET /api/users (administrators)."""
    require_admin(request)
    users = server_of(request).access.users.values()
    return reply_list([views.user_view(u) for u in users], request)


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    """GET /api/users/name."""
    require_admin(request)
    user = server_of(request).access.users.get(request.match_info["user"])
    if user is None:
        raise not_found()
    return json_response(views.user_view(user))


# -- connections, channels, consumers ---------------------------------------------------


def visible_connections(request: web.Request) -> list[Connection]:
    """Open connections the user may see (optionally of the vhost in the path)."""
    server = server_of(request)
    user = current_user(request)
    only = vhost_of(request).name if "vhost" in request.match_info else None
    found = []
    for conn in server.connections:
        if conn.vhost is None or not sees_user(user, conn.user):
            continue
        if only is None or conn.vhost.name == only:
            found.append(conn)
    return found


def connection_state(conn: Connection) -> str:
    """RabbitMQ's connection state: ``blocked`` under the memory alarm, else running."""
    from broker.connection import STATE_NAMES

    return "blocked" if conn.blocked else STATE_NAMES.get(conn.state, "running")


def find_connection(request: web.Request) -> Connection:
    """The connection named in the path (if the user may see it), or 404."""
    name = request.match_info["connection"]
    server = server_of(request)
    for conn in server.connections:
        if conn.vhost is not None and views.connection_name(conn) == name:
            if not sees_user(current_user(request), conn.user):
                raise not_authorised("User not authorised to access object")
            return conn
    raise not_found()


@routes.get("/api/connections")
@routes.get("/api/vhosts/{vhost}/connections")
async def list_connections(request: web.Request) -> web.Response:
    """GET /api/connections."""
    items = [views.connection_view(c, connection_state(c)) for c in visible_connections(request)]
    return reply_list(items, request)


@routes.get("/api/connections/{connection}")
async def get_connection(request: web.Request) -> web.Response:
    """GET /api/connections/name."""
    conn = find_connection(request)
    return json_response(views.connection_view(conn, connection_state(conn)))


@routes.delete("/api/connections/{connection}")
async def close_connection(request: web.Request) -> web.Response:
    """DELETE /api/connections/name: close it with 320 CONNECTION_FORCED, the reason from
    the ``X-Reason`` header (rabbit_mgmt_wm_connection:delete_resource/2)."""
    conn = find_connection(request)
    user = current_user(request)
    if "administrator" not in user.tags and conn.user != user.name:
        raise not_authorised("User not authorised to access object")
    conn.force_close(request.headers.get("X-Reason", "Closed via management plugin"))
    return web.Response(status=204)


def visible_channels(request: web.Request) -> list[tuple[Connection, Channel]]:
    """Channels of the connections the user may see."""
    return [
        (conn, channel)
        for conn in visible_connections(request)
        for channel in conn.channels.values()
    ]


@routes.get("/api/channels")
@routes.get("/api/vhosts/{vhost}/channels")
async def list_channels(request: web.Request) -> web.Response:
    """GET /api/channels."""
    items = [views.channel_view(conn, ch) for conn, ch in visible_channels(request)]
    return reply_list(items, request)


@routes.get("/api/connections/{connection}/channels")
async def connection_channels(request: web.Request) -> web.Response:
    """GET /api/connections/name/channels."""
    conn = find_connection(request)
    return reply_list([views.channel_view(conn, ch) for ch in conn.channels.values()], request)


@routes.get("/api/channels/{channel}")
async def get_channel(request: web.Request) -> web.Response:
    """GET /api/channels/name."""
    name = request.match_info["channel"]
    for conn, channel in visible_channels(request):
        if views.channel_name(conn, channel) == name:
            return json_response(views.channel_view(conn, channel))
    raise not_found()


@routes.get("/api/consumers")
@routes.get("/api/consumers/{vhost}")
async def list_consumers(request: web.Request) -> web.Response:
    """GET /api/consumers[/vhost] (rabbit_mgmt_wm_consumers)."""
    names = {vhost.name for vhost in scoped_vhosts(request)}
    server = server_of(request)
    items = []
    for conn in server.connections:
        if conn.vhost is None or conn.vhost.name not in names:
            continue
        for channel in conn.channels.values():
            for consumer in channel.consumers.values():
                items.append(views.consumer_view(conn, consumer, conn.vhost.name))
    return reply_list(items, request)


def check_monitor_or_self(request: web.Request, owner: str) -> None:
    """Monitors see everything; others only their own objects."""
    user = current_user(request)
    if not is_monitor(user) and user.name != owner:
        raise ApiError(401, "not_authorised", "User not authorised to access object")
