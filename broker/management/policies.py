"""Policies and operator policies: list, show, set, clear (rabbit_mgmt_wm_policies,
rabbit_mgmt_wm_policy, rabbit_mgmt_wm_operator_policies, rabbit_mgmt_wm_operator_policy).

Access as rabbit_mgmt_util:is_authorized_policies/2: administrators, and users tagged
``policymaker`` on the vhosts they may access; others get 401 "User not authorised to
access object". Setting or clearing an operator policy needs ``administrator`` (401 "Not
administrator user", observed on 3.10.8). PUT answers 201 for a new policy and 204 for a
replaced one; a refused policy is 400 with RabbitMQ's validation text
(exchanges/policies.py), HTML-escaped as the management plugin escapes error reasons.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.exchanges.policies import PolicyError, parse
from leveret.management.access import can_login_vhost, current_user, is_admin, require_admin
from leveret.management.api import server_of
from leveret.management.errors import ApiError, bad_request, not_authorised, not_found
from leveret.management.query import json_response, read_json, reply_list

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

routes = web.RouteTableDef()

REFUSED = "User not authorised to access object"


def _may_manage(request: web.Request, server: ServerState[Connection], vhost: str) -> bool:
    user = current_user(request)
    if is_admin(user):
        return True
    return "policymaker" in user.tags and can_login_vhost(server, user, vhost)


def _require(
    request: web.Request, server: ServerState[Connection], vhost: str | None = None
) -> None:
    """401 unless the user may manage policies (on ``vhost``, when the path names one)."""
    user = current_user(request)
    allowed = (
        is_admin(user) or "policymaker" in user.tags
        if vhost is None
        else _may_manage(request, server, vhost)
    )
    if not allowed:
        raise not_authorised(REFUSED)


def _require_change(
    request: web.Request, server: ServerState[Connection], vhost: str, operator: bool
) -> None:
    """401 unless the user may set or clear a policy on ``vhost`` (an operator policy:
    administrators only)."""
    if operator:
        require_admin(request)
    else:
        _require(request, server, vhost)


def _listed(request: web.Request, operator: bool) -> web.Response:
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
        for policy in server.vhosts[vhost].policy_set(operator).values()
    ]
    return reply_list([p.to_json() for p in found], request, default_sort="priority")


def _one(request: web.Request, operator: bool) -> web.Response:
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require(request, server, vhost)
    host = server.vhosts.get(vhost)
    name = request.match_info["name"]
    policy = host.policy_set(operator).get(name) if host is not None else None
    if policy is None:
        raise not_found()
    return json_response(policy.to_json())


async def _put(request: web.Request, operator: bool) -> web.Response:
    body = await read_json(request)
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require_change(request, server, vhost, operator)
    if vhost not in server.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")
    try:
        policy = parse(vhost, request.match_info["name"], body, operator)
    except PolicyError as exc:
        # rabbit_mgmt_util:bad_request/3 escapes a policy's reason (the "<<" of Erlang
        # terms); an operator policy's comes unescaped (both observed on 3.10.8).
        reason = exc.reason if operator else html.escape(exc.reason, quote=False)
        raise bad_request(reason) from exc
    created = server.set_policy(policy, operator)
    return web.Response(status=201 if created else 204)


def _delete(request: web.Request, operator: bool) -> web.Response:
    server = server_of(request)
    vhost = request.match_info["vhost"]
    _require_change(request, server, vhost, operator)
    if not server.delete_policy(vhost, request.match_info["name"], operator):
        raise not_found()
    return web.Response(status=204)


@routes.get("/api/policies")
@routes.get("/api/policies/{vhost}")
async def list_policies(request: web.Request) -> web.Response:
    """GET /api/policies[/vhost]: by priority, lowest first (rabbit_mgmt_wm_policies
    replies sorted by ``priority``)."""
    return _listed(request, operator=False)


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    """GET /api/policies/vhost/name."""
    return _one(request, operator=False)


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    """PUT /api/policies/vhost/name ``{pattern, definition, priority, apply-to}``."""
    return await _put(request, operator=False)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    """DELETE /api/policies/vhost/name."""
    return _delete(request, operator=False)


@routes.get("/api/operator-policies")
@routes.get("/api/operator-policies/{vhost}")
async def list_operator_policies(request: web.Request) -> web.Response:
    """GET /api/operator-policies[/vhost]: as policies are listed."""
    return _listed(request, operator=True)


@routes.get("/api/operator-policies/{vhost}/{name}")
async def get_operator_policy(request: web.Request) -> web.Response:
    """GET /api/operator-policies/vhost/name."""
    return _one(request, operator=True)


@routes.put("/api/operator-policies/{vhost}/{name}")
async def put_operator_policy(request: web.Request) -> web.Response:
    """PUT /api/operator-policies/vhost/name (administrators)."""
    return await _put(request, operator=True)


@routes.delete("/api/operator-policies/{vhost}/{name}")
async def delete_operator_policy(request: web.Request) -> web.Response:
    """DELETE /api/operator-policies/vhost/name (administrators)."""
    return _delete(request, operator=True)
