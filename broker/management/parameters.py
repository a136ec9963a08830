"""GET /api/parameters[/COMPONENT[/VHOST[/NAME]]] (rabbit_mgmt_wm_parameters and
rabbit_mgmt_wm_parameter): the runtime parameters of the vhosts the user may manage
policies on (policymaker or administrator, rabbit_mgmt_util:is_authorized_policies).

Leveret's runtime parameters are the two components it implements: ``vhost-limits`` (one
parameter named ``limits`` per vhost with limits) and ``operator_policy``, listed as 3.10.8
lists them (``value``, ``vhost``, ``component``, ``name``); a component nobody has set,
such as ``federation-upstream``, lists as ``[]``, as in RabbitMQ.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.management.api import server_of
from leveret.management.errors import not_found

# The policies' access rule, in one place (policies.py): the same for parameters.
from leveret.management.policies import _may_manage, _require
from leveret.management.query import json_response, reply_list

routes = web.RouteTableDef()


def parameters(request: web.Request, component: str | None, vhost: str | None) -> list[Any]:
    """The parameters of ``component`` (all when None) in ``vhost`` (all the user may
    manage when None)."""
    server = server_of(request)
    _require(request, server, vhost)
    if vhost is not None and vhost not in server.vhosts:
        raise not_found()
    names = [vhost] if vhost is not None else sorted(server.vhosts)
    return [
        parameter
        for name in names
        if _may_manage(request, server, name)
        for parameter in server.vhosts[name].runtime_parameters()
        if component is None or parameter["component"] == component
    ]


@routes.get("/api/parameters")
async def list_all(request: web.Request) -> web.Response:
    """GET /api/parameters."""
    return reply_list(parameters(request, None, None), request)


@routes.get("/api/parameters/{component}")
async def list_component(request: web.Request) -> web.Response:
    """GET /api/parameters/COMPONENT."""
    return reply_list(parameters(request, request.match_info["component"], None), request)


@routes.get("/api/parameters/{component}/{vhost}")
async def list_in_vhost(request: web.Request) -> web.Response:
    """GET /api/parameters/COMPONENT/VHOST."""
    found = parameters(request, request.match_info["component"], request.match_info["vhost"])
    return reply_list(found, request)


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_one(request: web.Request) -> web.Response:
    """GET /api/parameters/COMPONENT/VHOST/NAME: 404 when there is none."""
    found = parameters(request, request.match_info["component"], request.match_info["vhost"])
    for parameter in found:
        if parameter["name"] == request.match_info["name"]:
            return json_response(parameter)
    raise not_found()
