"""Topic permissions: list, set and clear them (rabbit_mgmt_wm_topic_permissions,
_topic_permissions_user, _topic_permissions_vhost, _topic_permission in
deps/rabbitmq_management/src). All of these need the ``administrator`` tag.

Status codes and reasons are RabbitMQ 3.10.8's, observed:

- ``PUT /api/topic-permissions/VHOST/USER {"exchange", "write", "read"}`` sets the user's
  permission on that exchange (one per exchange): 201 when the user had no topic permission
  in the vhost, else 204. A missing key is 400 ``[{key_missing,exchange}]``; an unknown
  vhost or user 400 ``vhost_or_user_not_found``; an invalid pattern 400
  ``["invalid_regexp", PATTERN, ...]`` (RabbitMQ's last element is PCRE's message and
  offset; here Python's).
- ``GET /api/topic-permissions/VHOST/USER`` lists them (404 when there are none), as do
  ``/api/topic-permissions``, ``/api/users/USER/topic-permissions`` and
  ``/api/vhosts/VHOST/topic-permissions`` (404 for an unknown user or vhost, else a list).
- ``DELETE /api/topic-permissions/VHOST/USER`` clears all of them (404 when there are none):
  RabbitMQ ignores an ``exchange`` in the body or the query string.
"""

from __future__ import annotations

from aiohttp import web

from leveret.management.access import require_admin
from leveret.management.api import server_of, vhost_of
from leveret.management.errors import bad_request, not_found
from leveret.management.messages import mandatory
from leveret.management.query import read_json, reply_list
from leveret.node.auth import TopicPermission, invalid_regexp

routes = web.RouteTableDef()


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    """GET /api/topic-permissions."""
    require_admin(request)
    return reply_list(server_of(request).access.topic_permission_rows(), request)


@routes.get("/api/users/{user}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    """GET /api/users/user/topic-permissions."""
    require_admin(request)
    server = server_of(request)
    name = request.match_info["user"]
    if name not in server.access.users:
        raise not_found()
    return reply_list(server.access.topic_permission_rows(user=name), request)


@routes.get("/api/vhosts/{vhost}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
    """GET /api/vhosts/vhost/topic-permissions (``vhost`` first, as RabbitMQ lists them)."""
    require_admin(request)
    vhost = vhost_of(request)
    items = [
        {"vhost": item.pop("vhost"), **item}
        for item in server_of(request).access.topic_permission_rows(vhost=vhost.name)
    ]
    return reply_list(items, request)


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    """GET /api/topic-permissions/vhost/user: the user's topic permissions in the vhost."""
    require_admin(request)
    server = server_of(request)
    items = server.access.topic_permission_rows(
        user=request.match_info["user"], vhost=request.match_info["vhost"]
    )
    if not items:
        raise not_found()
    return reply_list(items, request)


def _valid_pattern(pattern: str) -> str:
    reason = invalid_regexp(pattern)
    if reason is not None:
        raise bad_request(reason)
    return pattern


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permission(request: web.Request) -> web.Response:
    """PUT /api/topic-permissions/vhost/user ``{exchange, write, read}``."""
    require_admin(request)
    server = server_of(request)
    access = server.access
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    body = await read_json(request)
    exchange, write, read = mandatory(body, "exchange", "write", "read")
    if not all(isinstance(value, str) for value in (exchange, write, read)):
        # RabbitMQ 3.10.8 keeps a number as the exchange and answers 500 to a number as a
        # pattern.
        raise bad_request("exchange, write and read must be strings")
    if vhost not in server.vhosts or user not in access.users:
        raise bad_request("vhost_or_user_not_found")
    permission = TopicPermission(_valid_pattern(write), _valid_pattern(read))
    created = (user, vhost) not in access.topic_permissions
    access.set_topic_permission(user, vhost, exchange, permission)
    return web.Response(status=201 if created else 204)


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    """DELETE /api/topic-permissions/vhost/user: all of the user's in the vhost."""
    require_admin(request)
    access = server_of(request).access
    if not access.clear_topic_permissions(request.match_info["user"], request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=204)
