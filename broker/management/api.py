"""Read-only endpoints: overview, nodes, health checks, vhosts, users and permissions
(rabbit_mgmt_wm_overview, _nodes, _health_check_alarms, _vhosts, _users, _permissions in
deps/rabbitmq_management/src), and the request helpers the other handler modules share.

Connections, channels and consumers are in :mod:`leveret.management.clients`; exchanges,
queues and bindings in :mod:`leveret.management.topology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

import leveret.management.views as views
from leveret import build_kind
from leveret.exchanges.types import TYPES
from leveret.management.access import (
    SERVER_KEY,
    current_user,
    listed_vhosts,
    require_admin,
    require_vhost,
    visible_vhosts,
)
from leveret.management.errors import ApiError, not_found
from leveret.management.query import json_response, reply_list
from leveret.management.state import state_of
from leveret.management.stats import GAUGES

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

routes = web.RouteTableDef()


@dataclass
class HttpListener:
    """Where the management API listens (known once its socket is bound)."""

    port: int = 0


LISTENER_KEY = web.AppKey("http_listener", HttpListener)


def server_of(request: web.Request) -> ServerState[Connection]:
    """The broker this API serves."""
    return request.app[SERVER_KEY]


def vhost_or_none(request: web.Request, key: str = "vhost") -> VHost | None:
    """The vhost named in the path (access checked), or None when there is none."""
    server = server_of(request)
    name = request.match_info[key]
    require_vhost(request, server, name)
    return server.vhosts.get(name)


def vhost_of(
    request: web.Request, key: str = "vhost", missing: Callable[[], ApiError] = not_found
) -> VHost:
    """The vhost named in the path (access checked), or the ``missing`` error (404 ``Object
    Not Found`` unless the caller knows RabbitMQ answers otherwise)."""
    vhost = vhost_or_none(request, key)
    if vhost is None:
        raise missing()
    return vhost


def scoped_vhosts(request: web.Request, *, objects: bool = False) -> list[VHost]:
    """The vhost in the path, else every vhost the user may see: list_visible_vhosts, or
    for the lists of ``objects`` (queues, exchanges, bindings) filter_vhost's narrower rule
    (:func:`listed_vhosts`)."""
    if "vhost" in request.match_info:
        return [vhost_of(request)]
    server = server_of(request)
    rule = listed_vhosts if objects else visible_vhosts
    return [server.vhosts[name] for name in rule(server, current_user(request))]


# -- overview ---------------------------------------------------------------------------


def object_totals(server: ServerState[Connection]) -> dict[str, int]:
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
    # One entry per bound address, as RabbitMQ lists a listener per interface.
    found = [
        {"node": views.NODE, "protocol": "amqp", "ip_address": host, "port": port}
        for host, port in server.addresses
    ]
    if getattr(config, "tls_cert", None) is not None:
        found += [
            {"node": views.NODE, "protocol": "amqp/ssl", "ip_address": host, "port": port}
            for host, port in server.tls_addresses
        ]
    port = request.app[LISTENER_KEY].port
    host = request.transport.get_extra_info("sockname") if request.transport else None
    found.append(
        {
            "node": views.NODE,
            "protocol": "http",
            "ip_address": host[0] if isinstance(host, tuple) else "",
            "port": port,
        }
    )
    prometheus = server.prometheus
    if prometheus is not None:
        found.append(
            {
                "node": views.NODE,
                "protocol": "http/prometheus",
                "ip_address": config.management_host,
                "port": prometheus.port,
            }
        )
    return found


def contexts(request: web.Request) -> list[dict[str, Any]]:
    """The HTTP listeners' contexts: the management API's, and the Prometheus listener's
    when it runs (as RabbitMQ lists rabbitmq_prometheus's)."""
    found: list[dict[str, Any]] = [
        {
            "node": views.NODE,
            "description": "RabbitMQ Management",
            "path": "/",
            "port": str(request.app[LISTENER_KEY].port),
        }
    ]
    prometheus = server_of(request).prometheus
    if prometheus is not None:
        found.append(
            {
                "node": views.NODE,
                "description": "RabbitMQ Prometheus",
                "path": "/",
                "port": str(prometheus.port),
                "protocol": "'http/prometheus'",  # quoted, as RabbitMQ prints the atom
            }
        )
    return found


def exchange_types() -> list[dict[str, Any]]:
    """The exchange types the node offers (``exchange_types`` of the overview and nodes)."""
    # Descriptions as RabbitMQ's exchange type modules give them (description/0); a type
    # without one (a plugin type such as x-rtopic) is listed with a generic text.
    return [
        {
            "name": kind,
            "description": module.description or f"{kind} exchange",
            "enabled": True,
        }
        for kind, module in TYPES.items()
    ]


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    """GET /api/overview (rabbit_mgmt_wm_overview)."""
    server = server_of(request)
    sampler = state_of(server).sampler
    rates = sampler.global_rates
    totals = sampler.totals()
    gauges = sampler.gauges()
    stats = views.message_stats(totals, rates, tuple(totals))
    queue_totals = views.message_counts(gauges, rates)
    history = sampler.overview_history
    sampler.add_samples(history, None, sampler.global_names, request.query, stats, queue_totals)
    return json_response(
        {
            "management_version": views.RABBITMQ_VERSION,
            "rabbitmq_version": views.RABBITMQ_VERSION,
            "product_name": views.PRODUCT_NAME,
            "product_version": views.PRODUCT_VERSION,
            # Leveret's own: which build serves (``leveret --version`` says the same).
            "leveret_build": build_kind(),
            "cluster_name": views.CLUSTER_NAME,
            "node": views.NODE,
            "rates_mode": "basic",
            "disable_stats": False,
            "enable_queue_totals": False,
            "statistics_db_event_queue": 0,
            "exchange_types": exchange_types(),
            "message_stats": stats,
            "queue_totals": queue_totals,
            "object_totals": object_totals(server),
            "listeners": listeners(request),
            "contexts": contexts(request),
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


@routes.get("/api/health/checks/alarms")
@routes.get("/api/health/checks/local-alarms")
async def health_alarms(request: web.Request) -> web.Response:
    """GET /api/health/checks/alarms (rabbit_mgmt_wm_health_check_alarms): 200 ``ok``, or
    503 while the memory or the disk alarm is in effect."""
    server = server_of(request)
    alarms = [
        {"node": views.NODE, "resource": resource}
        for resource, on in (("memory", server.memory.alarm), ("disk", server.disk.alarm))
        if on
    ]
    if alarms:
        return json_response(
            {
                "status": "failed",
                "reason": "resource alarm(s) in effect in the cluster",
                "alarms": alarms,
            },
            status=503,
        )
    return json_response({"status": "ok"})


# -- vhosts, users, permissions ---------------------------------------------------------


def vhost_item(server: ServerState[Connection], name: str) -> dict[str, Any]:
    """A vhost with its message counts."""
    meta = state_of(server).vhost_meta(name)
    item = views.vhost_view(name, meta.description, meta.tags, server.vhosts[name].firehose)
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
    return reply_list([vhost_item(server, name) for name in names], request, pages=True)


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    """GET /api/vhosts/name."""
    vhost = vhost_of(request)
    return json_response(vhost_item(server_of(request), vhost.name))


def permission_items(
    server: ServerState[Connection], user: str | None, vhost: str | None
) -> list[dict[str, Any]]:
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


@routes.get("/api/users/without-permissions")
async def users_without_permissions(request: web.Request) -> web.Response:
    """GET /api/users/without-permissions (rabbit_mgmt_wm_users: the users with no
    permission in any vhost; registered before ``/api/users/{user}``, which would take it)."""
    require_admin(request)
    access = server_of(request).access
    granted = {user for user, _vhost in access.permissions}
    users = [u for name, u in access.users.items() if name not in granted]
    return reply_list([views.user_view(u) for u in users], request)


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    """GET /api/users/name."""
    require_admin(request)
    user = server_of(request).access.users.get(request.match_info["user"])
    if user is None:
        raise not_found()
    return json_response(views.user_view(user))
