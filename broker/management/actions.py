"""Administrator endpoints: vhosts, users, permissions and definitions
(rabbit_mgmt_wm_vhost, _user, _permission, _definitions in deps/rabbitmq_management/src).

PUT answers 201 for a new object and 204 for an existing one; DELETE 204; a path naming
nothing 404. All of these need the ``administrator`` tag.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

import leveret.management.ops as ops
from leveret.management.access import require_admin
from leveret.management.api import server_of, vhost_of
from leveret.management.definitions import (
    SKIPPED_HEADER,
    DefinitionsError,
    Skipped,
    export_definitions,
    load_definitions,
)
from leveret.management.errors import bad_request, not_found
from leveret.management.messages import mandatory
from leveret.management.query import json_response, read_json
from leveret.management.state import state_of
from leveret.management.views import HASHING_ALGORITHM
from leveret.node.auth import HASHING, Permission, invalid_regexp

routes = web.RouteTableDef()


def tags_of(value: Any) -> list[str]:
    """``tags``: a comma-separated string (the documented form) or a list."""
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return list(value)
    raise bad_request("tags must be a comma-separated string or a list of strings")


# -- vhosts -----------------------------------------------------------------------------


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    """PUT /api/vhosts/name ``{description, tags, default_queue_type, tracing}``. A new
    vhost gives the user who created it full permissions on it (rabbit_mgmt_wm_vhost, as
    3.10.8 does: observed; an update grants nothing)."""
    user = require_admin(request)
    server = server_of(request)
    name = request.match_info["vhost"]
    body = await read_json(request)
    created = name not in server.vhosts
    server.add_vhost(name)
    if created:
        server.access.set_permissions(user.name, name, Permission(".*", ".*", ".*"))
    meta = state_of(server).vhost_meta(name)
    if "description" in body:
        meta.description = str(body["description"])
    if "tags" in body:
        meta.tags = tags_of(body["tags"])
    if body.get("default_queue_type"):
        meta.default_queue_type = str(body["default_queue_type"])
    if "tracing" in body:
        # The firehose tracer (broker/firehose.py), as rabbitmqctl trace_on / trace_off.
        server.vhosts[name].firehose = body["tracing"] in (True, "true")
    return web.Response(status=201 if created else 204)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    """DELETE /api/vhosts/name: its connections are closed, its queues deleted."""
    require_admin(request)
    server = server_of(request)
    if not ops.delete_vhost(server, request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=204)


# -- users ------------------------------------------------------------------------------


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    """PUT /api/users/name ``{password | password_hash, tags}``
    (rabbit_auth_backend_internal:put_user/3: ``tags`` is mandatory, a password and a
    hash together are refused, neither leaves a user that cannot log in by password)."""
    require_admin(request)
    access = server_of(request).access
    name = request.match_info["user"]
    body = await read_json(request)
    if "tags" not in body and "administrator" not in body:
        raise bad_request("tags_not_present")
    tags = tags_of(body.get("tags", "administrator" if body.get("administrator") else ""))
    if "password" in body and "password_hash" in body:
        raise bad_request("both_password_and_password_hash_are_provided")
    algorithm = body.get("hashing_algorithm", HASHING_ALGORITHM)
    if algorithm not in HASHING:
        raise bad_request(f"unsupported hashing_algorithm {algorithm}")
    created = name not in access.users
    if "password" in body:
        access.add_user(name, password=str(body["password"]), tags=tags)
    else:
        password_hash = str(body.get("password_hash") or "")
        access.add_user(name, password_hash=password_hash, tags=tags, hashing_algorithm=algorithm)
    return web.Response(status=201 if created else 204)


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    """DELETE /api/users/name (and the user's permissions)."""
    require_admin(request)
    if not server_of(request).access.delete_user(request.match_info["user"]):
        raise not_found()
    return web.Response(status=204)


@routes.post("/api/users/bulk-delete")
async def bulk_delete_users(request: web.Request) -> web.Response:
    """POST /api/users/bulk-delete ``{"users": [names]}`` (rabbit_mgmt_wm_users_bulk_delete):
    deleted in order, up to the first that does not exist, which is 400 ``["no_such_user",
    name]`` (observed on 3.10.8: the names before it are gone)."""
    require_admin(request)
    body = await read_json(request)
    [names] = mandatory(body, "users")
    if not isinstance(names, list):  # RabbitMQ 3.10.8 answers 500
        raise bad_request("users must be a list of names")
    access = server_of(request).access
    for name in names:
        if not isinstance(name, str) or not access.delete_user(name):
            raise bad_request(["no_such_user", name])
    return web.Response(status=204)


# -- permissions ------------------------------------------------------------------------


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permission(request: web.Request) -> web.Response:
    """PUT /api/permissions/vhost/user ``{configure, write, read}`` (all mandatory)."""
    require_admin(request)
    access = server_of(request).access
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    body = await read_json(request)
    configure, write, read = (str(v) for v in mandatory(body, "configure", "write", "read"))
    if vhost not in server_of(request).vhosts or user not in access.users:
        raise bad_request("vhost_or_user_not_found")
    for pattern in (configure, write, read):
        reason = invalid_regexp(pattern)
        if reason is not None:
            raise bad_request(reason)
    created = (user, vhost) not in access.permissions
    access.set_permissions(user, vhost, Permission(configure, write, read))
    return web.Response(status=201 if created else 204)


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permission(request: web.Request) -> web.Response:
    """DELETE /api/permissions/vhost/user."""
    require_admin(request)
    access = server_of(request).access
    if not access.clear_permissions(request.match_info["user"], request.match_info["vhost"]):
        raise not_found()
    return web.Response(status=204)


# -- definitions ------------------------------------------------------------------------


def definitions_response(request: web.Request, data: dict[str, Any]) -> web.Response:
    """The export, as an attachment when ``?download=NAME`` is given."""
    response = json_response(data)
    download = request.query.get("download")
    if download:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", download)
        response.headers["Content-Disposition"] = f'attachment; filename="{safe}"'
    return response


@routes.get("/api/definitions")
@routes.get("/api/all-configuration")
async def get_definitions(request: web.Request) -> web.Response:
    """GET /api/definitions."""
    require_admin(request)
    return definitions_response(request, export_definitions(server_of(request)))


@routes.get("/api/definitions/{vhost}")
async def get_vhost_definitions(request: web.Request) -> web.Response:
    """GET /api/definitions/vhost."""
    require_admin(request)
    vhost = vhost_of(request)
    return definitions_response(request, export_definitions(server_of(request), vhost.name))


async def uploaded(request: web.Request) -> dict[str, Any]:
    """The definitions in the body: JSON, or a form upload in the field ``file``."""
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        form = await request.post()
        field = form.get("file")
        raw = field.file.read() if isinstance(field, web.FileField) else field
        try:
            data = json.loads(raw or "{}")
        except ValueError:
            raise bad_request("not_json") from None
        if not isinstance(data, dict):
            raise bad_request("not_json")
        return data
    return await read_json(request)


@routes.post("/api/definitions")
@routes.post("/api/all-configuration")
async def post_definitions(request: web.Request) -> web.Response:
    """POST /api/definitions: merge the definitions in; 204, or 400 with the reason."""
    require_admin(request)
    data = await uploaded(request)
    try:
        skipped = load_definitions(server_of(request), data)
    except DefinitionsError as exc:
        raise bad_request(exc.reason) from None
    return imported(skipped)


def imported(skipped: Skipped) -> web.Response:
    """RabbitMQ's 204 without a body, which its clients expect; what was skipped is named
    in the broker's log, one line each, and counted in a header (the lines themselves could
    outgrow what HTTP clients take in one header)."""
    response = web.Response(status=204)
    if skipped.lines:
        response.headers[SKIPPED_HEADER] = str(len(skipped.lines))
    return response


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    """POST /api/definitions/vhost: exchanges, queues and bindings into one vhost."""
    require_admin(request)
    data = await uploaded(request)  # first: nothing may change between lookup and use
    vhost = vhost_of(request)
    try:
        skipped = load_definitions(server_of(request), data, vhost.name)
    except DefinitionsError as exc:
        raise bad_request(exc.reason) from None
    return imported(skipped)
