"""Shovel status (rabbitmq_shovel_management 3.10's rabbit_shovel_mgmt):
GET /api/shovels and /api/shovels/VHOST list each dynamic shovel with rabbit_shovel_status'
fields (``node``, ``timestamp``, ``name``, ``vhost``, ``type``, ``state`` running /
starting / terminated, and when running ``src_uri``, ``dest_uri``, the protocols and the
source and destination; when terminated, ``reason``), for the vhosts the user may see;
DELETE /api/shovels/vhost/VHOST/NAME/restart restarts one (the Shovels page's button).
Shovels are defined and removed as runtime parameters (parameters.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

import leveret.management.views as views
from leveret.management.access import current_user, require_vhost, visible_vhosts
from leveret.management.api import server_of
from leveret.management.errors import not_found
from leveret.management.query import reply_list

routes = web.RouteTableDef()


def _with_node(status: dict[str, Any]) -> dict[str, Any]:
    return {"node": views.NODE, **status}


def _vhost(request: web.Request) -> str:
    """The path's vhost: 404 when there is none, 401 when the user may not see it."""
    server = server_of(request)
    vhost = request.match_info["vhost"]
    if vhost not in server.vhosts:
        raise not_found()
    require_vhost(request, server, vhost)
    return vhost


@routes.get("/api/shovels")
async def list_all(request: web.Request) -> web.Response:
    """GET /api/shovels: the shovels of every vhost the user may see."""
    server = server_of(request)
    vhosts = set(visible_vhosts(server, current_user(request)))
    found = [_with_node(s) for s in server.shovels.status() if s["vhost"] in vhosts]
    return reply_list(found, request)


@routes.get("/api/shovels/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    """GET /api/shovels/VHOST."""
    vhost = _vhost(request)
    return reply_list([_with_node(s) for s in server_of(request).shovels.status(vhost)], request)


@routes.delete("/api/shovels/vhost/{vhost}/{name}/restart")
async def restart(request: web.Request) -> web.Response:
    """DELETE /api/shovels/vhost/VHOST/NAME/restart: 204, or 404 for no such shovel."""
    vhost = _vhost(request)
    if not server_of(request).shovels.restart(vhost, request.match_info["name"]):
        raise not_found()
    return web.Response(status=204)
