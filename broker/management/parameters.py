"""GET /api/parameters[/COMPONENT[/VHOST[/NAME]]] (rabbit_mgmt_wm_parameters and
rabbit_mgmt_wm_parameter): the runtime parameters of the vhosts the user may manage
policies on (policymaker or administrator, rabbit_mgmt_util:is_authorized_policies).

Leveret's runtime parameters are the components it implements: ``vhost-limits`` (one
parameter named ``limits`` per vhost with limits), ``operator_policy`` and ``shovel``
(dynamic shovels, set and cleared here as rabbitmq_shovel's are), listed as 3.10.8 lists
them (``value``, ``vhost``, ``component``, ``name``); a component nobody has set, such as
``federation-upstream``, lists as ``[]``, as in RabbitMQ.

PUT /api/parameters/shovel/VHOST/NAME ``{"value": {...}}`` answers 201 for a new shovel
and 204 for a replaced one, 400 with rabbit_shovel_parameters' reasons for a refused
value (HTML-escaped, as the management plugin escapes reasons), 404 ``vhost_not_found``;
any other component is 400 "component X not found" (observed on 3.10.8).
"""

from __future__ import annotations

import html
from typing import Any

from aiohttp import web

from leveret.management.access import current_user
from leveret.management.api import server_of
from leveret.management.errors import ApiError, bad_request, not_found

# The policies' access rule, in one place (policies.py): the same for parameters.
from leveret.management.policies import _may_manage, _require
from leveret.management.query import json_response, read_json, reply_list
from leveret.node.shovel import SHOVEL_COMPONENT, ShovelError

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
        for parameter in server.runtime_parameters(name)
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


def _settable(request: web.Request) -> tuple[str, str, str]:
    """The component, vhost and name of a PUT or DELETE, checked: who may (policymakers
    and administrators, as for every parameter), a known component, an existing vhost."""
    server = server_of(request)
    component, vhost = request.match_info["component"], request.match_info["vhost"]
    _require(request, server, vhost)
    if vhost not in server.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")
    if component != SHOVEL_COMPONENT:
        # vhost-limits and operator policies have their own endpoints here.
        raise bad_request(f"Validation failed\n\ncomponent {component} not found\n")
    return component, vhost, request.match_info["name"]


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put_one(request: web.Request) -> web.Response:
    """PUT /api/parameters/shovel/VHOST/NAME ``{"value": ...}``: define a shovel."""
    component, vhost, name = _settable(request)
    body = await read_json(request)
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    try:
        created = server_of(request).set_parameter(
            vhost, component, name, body["value"], current_user(request).name
        )
    except ShovelError as exc:
        raise bad_request(html.escape(exc.reason, quote=False)) from exc
    return web.Response(status=201 if created else 204)


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete_one(request: web.Request) -> web.Response:
    """DELETE /api/parameters/shovel/VHOST/NAME: stop and remove a shovel (404: none)."""
    component, vhost, name = _settable(request)
    if not server_of(request).clear_parameter(vhost, component, name):
        raise not_found()
    return web.Response(status=204)
