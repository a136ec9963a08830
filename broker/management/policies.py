"""Policies: list, show, set, clear (rabbit_mgmt_wm_policies, rabbit_mgmt_wm_policy).

Access as rabbit_mgmt_util:is_authorized_policies/2: administrators, and users tagged
``policymaker`` on the vhosts they may access; others get 401 "User not authorised to
access object". PUT answers 201 for a new policy and 204 for a replaced one; a refused
policy is 400 with RabbitMQ's validation text (exchanges/policies.py), HTML-escaped as the
management plugin escapes error reasons.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from aiohttp import web

from broker.management.access import can_login_vhost, current_user, is_admin
from broker.management.api import server_of
from broker.management.errors import ApiError, bad_request, not_authorised, not_found
from broker.management.query import json_response, read_json, reply_list
from exchanges.policies import PolicyError, parse

if TYPE_CHECKING:
    from broker.server import Server

routes = web.RouteTableDef()

REFUSED = "User not authorised to access object"


def _may_manage(request: web.Request, server: Server, vhost: str) -> bool:
    user = current_user(request)
    if is_admin(user):
        return True
    return "policymaker" in user.tags and can_login_vhost(server, user, vhost)


def _require(request: web.Request, server: Server, vhost: str | None = None) -> None:
    """401 unless the user may manage policies (on ``vhost``, when the path names one)."""
    user = current_user(request)
    allowed = (
        is_admin(user) or "policymaker" in user.tags
        if vhost is None
        else _may_manage(request, server, vhost)
    )
    if not allowed:
        raise not_authorised(REFUSED)


@routes.get("/api/policies")
@routes.get("/api/policies/{vhost}")
async def list_policies(request: web.Request) -> web.Response:
    """GET /api/policies[/vhost]: by priority, lowest first (rabbit_mgmt_wm_policies
    replies sorted by ``priority``)."""
    server = server_of(request)
    name = request.match_info.get("vhost")
    _require(request, server, name)
    if name is not None and name not in server.vhosts:
        raise not_found()
    names = [name] if name is not None else sorted(server.vhosts)
    found = [
        policy
        for vhost in names
        if _may_manage(request, server, vhost)
        for policy in server.vhosts[vhost].policies.values()
    ]
    return reply_list([p.to_json() for p in found], request, default_sort="priority")


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    """GET /api/policies/vhost/name."""
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require(request, server, vhost)
    host = server.vhosts.get(vhost)
    policy = host.policies.get(request.match_info["name"]) if host is not None else None
    if policy is None:
        raise not_found()
    return json_response(policy.to_json())


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    """PUT /api/policies/vhost/name ``{pattern, definition, priority, apply-to}``."""
    body = await read_json(request)
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require(request, server, vhost)
    if vhost not in server.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")
    try:
        policy = parse(vhost, request.match_info["name"], body)
    except PolicyError as exc:
        # rabbit_mgmt_util:bad_request/3 escapes the reason (the "<<" of Erlang terms).
        raise bad_request(html.escape(exc.reason, quote=False)) from exc
    created = server.set_policy(policy)
    return web.Response(status=201 if created else 204)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    """DELETE /api/policies/vhost/name."""
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require(request, server, vhost)
    if not server.delete_policy(vhost, request.match_info["name"]):
        raise not_found()
    return web.Response(status=204)
