"""Vhost and user limits: list, set and clear one (rabbit_mgmt_wm_limits, _limit,
_user_limits, _user_limit in deps/rabbitmq_management/src).

``PUT /api/vhost-limits/VHOST/NAME`` and ``PUT /api/user-limits/USER/NAME`` take
``{"value": N}`` and answer 204, as DELETE does (also for a limit that was not set).
Listings hold only vhosts and users with a limit: ``[{"vhost": ..., "value": {...}}]`` and
``[{"user": ..., "value": {...}}]``. Status codes and reasons are RabbitMQ 3.10.8's, observed:
an unknown vhost is 404 ``vhost_not_found`` on PUT, an unknown user 400
``["no_such_user", NAME]``, a value without ``value`` 400 ``[{key_missing,value}]``. One
difference: DELETE on an unknown vhost is 404 here, where RabbitMQ answers 500.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management.access import require_admin
from leveret.management.api import scoped_vhosts, server_of, vhost_of
from leveret.management.errors import ApiError, bad_request, not_found
from leveret.management.query import json_response, read_json
from leveret.node.limits import LimitError, parse_limits

if TYPE_CHECKING:
    from leveret.node.auth import User

routes = web.RouteTableDef()


async def _value(request: web.Request) -> Any:
    body = await read_json(request)
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    return body["value"]


def _checked(values: dict[str, Any], user: bool = False) -> dict[str, int]:
    try:
        return parse_limits(values, user=user)
    except LimitError as exc:
        raise bad_request(exc.reason) from exc


# -- vhost limits -----------------------------------------------------------------------


@routes.get("/api/vhost-limits")
@routes.get("/api/vhost-limits/{vhost}")
async def list_vhost_limits(request: web.Request) -> web.Response:
    """GET /api/vhost-limits[/vhost]: the vhosts (visible to the user) with limits."""
    return json_response(
        [
            {"vhost": vhost.name, "value": dict(vhost.limits)}
            for vhost in scoped_vhosts(request)
            if vhost.limits
        ]
    )


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def put_vhost_limit(request: web.Request) -> web.Response:
    """PUT /api/vhost-limits/vhost/name ``{"value": N}`` (administrators)."""
    require_admin(request)
    server = server_of(request)
    vhost = server.vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    limits = {**vhost.limits, request.match_info["name"]: await _value(request)}
    server.set_vhost_limits(vhost.name, _checked(limits))
    return web.Response(status=204)


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_vhost_limit(request: web.Request) -> web.Response:
    """DELETE /api/vhost-limits/vhost/name (administrators)."""
    require_admin(request)
    vhost = vhost_of(request)
    limits = {k: v for k, v in vhost.limits.items() if k != request.match_info["name"]}
    server_of(request).set_vhost_limits(vhost.name, limits)
    return web.Response(status=204)


# -- user limits ------------------------------------------------------------------------


def _users(request: web.Request) -> list[User]:
    users = server_of(request).access.users
    name = request.match_info.get("user")
    if name is None:
        return list(users.values())
    if name not in users:
        raise not_found()
    return [users[name]]


@routes.get("/api/user-limits")
@routes.get("/api/user-limits/{user}")
async def list_user_limits(request: web.Request) -> web.Response:
    """GET /api/user-limits[/user]: the users with limits (administrators)."""
    require_admin(request)
    return json_response(
        [{"user": user.name, "value": dict(user.limits)} for user in _users(request) if user.limits]
    )


@routes.put("/api/user-limits/{user}/{name}")
async def put_user_limit(request: web.Request) -> web.Response:
    """PUT /api/user-limits/user/name ``{"value": N}`` (administrators)."""
    require_admin(request)
    access = server_of(request).access
    name = request.match_info["user"]
    value = await _value(request)
    user = access.users.get(name)
    if user is None:
        raise ApiError(400, "bad_request", ["no_such_user", name])
    limits = _checked({**user.limits, request.match_info["name"]: value}, user=True)
    access.set_user_limits(name, limits)
    return web.Response(status=204)


@routes.delete("/api/user-limits/{user}/{name}")
async def delete_user_limit(request: web.Request) -> web.Response:
    """DELETE /api/user-limits/user/name (administrators)."""
    require_admin(request)
    (user,) = _users(request)
    limits = {k: v for k, v in user.limits.items() if k != request.match_info["name"]}
    server_of(request).access.set_user_limits(user.name, limits)
    return web.Response(status=204)
