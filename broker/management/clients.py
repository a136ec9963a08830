"""Connections, channels and consumers (rabbit_mgmt_wm_connection(s), _channel(s),
_consumers in deps/rabbitmq_management/src). Users who are not monitors see only their own
connections and channels (rabbit_mgmt_util:filter_conn_ch_list/3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

import leveret.management.views as views
from leveret.management.access import current_user, sees_user
from leveret.management.api import scoped_vhosts, server_of, vhost_of
from leveret.management.errors import not_authorised, not_found
from leveret.management.query import json_response, reply_list
from leveret.management.state import state_of

if TYPE_CHECKING:
    from leveret.wire.channel import Channel
    from leveret.wire.connection import Connection

routes = web.RouteTableDef()


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
    """RabbitMQ's connection state: ``blocked`` under a resource alarm, else running."""
    from leveret.wire.handshake import STATE_NAMES

    return "blocked" if conn.blocked else STATE_NAMES.get(conn.state, "running")


def connection_view(request: web.Request, conn: Connection) -> views.JSON:
    """A connection's view with its rates (and samples, when the query asks for a
    ``data_rates`` range)."""
    series = state_of(server_of(request)).sampler.clients.connections
    item = views.connection_view(conn, connection_state(conn), series.rates_of(conn))
    series.add_samples(conn, item, request.query, "data_rates")
    return item


def channel_view(request: web.Request, conn: Connection, channel: Channel) -> views.JSON:
    """A channel's view with its rates (and samples, when the query asks for a
    ``msg_rates`` range)."""
    series = state_of(server_of(request)).sampler.clients.channels
    item = views.channel_view(conn, channel, series.rates_of(channel))
    series.add_samples(channel, item["message_stats"], request.query, "msg_rates")
    return item


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
    """GET /api/connections (paged; a vhost's list is not, as in RabbitMQ 3.10.8)."""
    items = [connection_view(request, c) for c in visible_connections(request)]
    return reply_list(items, request, pages="vhost" not in request.match_info)


@routes.get("/api/connections/{connection}")
async def get_connection(request: web.Request) -> web.Response:
    """GET /api/connections/name."""
    conn = find_connection(request)
    return json_response(connection_view(request, conn))


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
    """GET /api/channels (paged; a vhost's list is not, as in RabbitMQ 3.10.8)."""
    items = [channel_view(request, conn, ch) for conn, ch in visible_channels(request)]
    return reply_list(items, request, pages="vhost" not in request.match_info)


@routes.get("/api/connections/{connection}/channels")
async def connection_channels(request: web.Request) -> web.Response:
    """GET /api/connections/name/channels."""
    conn = find_connection(request)
    return reply_list([channel_view(request, conn, ch) for ch in conn.channels.values()], request)


@routes.get("/api/channels/{channel}")
async def get_channel(request: web.Request) -> web.Response:
    """GET /api/channels/name, with ``consumer_details``."""
    name = request.match_info["channel"]
    for conn, channel in visible_channels(request):
        if views.channel_name(conn, channel) == name:
            item = channel_view(request, conn, channel)
            # The single channel lists its consumers, as rabbit_mgmt_db:get_channel does.
            item["consumer_details"] = [
                views.consumer_view(conn, consumer, channel.vhost.name)
                for consumer in channel.consumers.values()
            ]
            return json_response(item)
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
