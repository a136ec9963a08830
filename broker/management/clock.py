"""A vhost's clock over HTTP, for test suites in any language (Leveret's own endpoints;
RabbitMQ has none, so they live under ``/api/leveret/``).

- ``GET /api/leveret/clock/{vhost}``: ``{"vhost", "mode", "now", "skew",
  "pending_timers"}`` (``now`` in seconds since the epoch, on the vhost's clock);
- ``PUT /api/leveret/clock/{vhost}`` ``{"mode": "manual" | "real"}``: freeze or resume, 204;
- ``POST /api/leveret/clock/{vhost}/advance`` ``{"seconds": N}``: move a (then) manual
  clock forward, firing what comes due; answers when their effects have settled, with
  ``{"fired": n}`` and the clock as GET shows it.

Errors as the rest of the API: 404 for a vhost that does not exist, 400 with a reason for
a bad body, 401 for a user without the ``administrator`` tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from leveret.management.access import require_admin
from leveret.management.api import vhost_of
from leveret.management.errors import bad_request
from leveret.management.query import json_response, read_json
from leveret.node.clock import checked_mode, checked_seconds

if TYPE_CHECKING:
    from leveret.node.vhost import VHost

routes = web.RouteTableDef()
T = TypeVar("T")


def described(vhost: VHost) -> dict[str, Any]:
    """The clock of ``vhost`` as the API shows it."""
    return {"vhost": vhost.name, **vhost.clock.describe()}


@routes.get("/api/leveret/clock/{vhost}")
async def get_clock(request: web.Request) -> web.Response:
    """The vhost's clock: its mode and time."""
    require_admin(request)
    return json_response(described(vhost_of(request)))


async def checked_body(
    request: web.Request, key: str, expected: str, check: Callable[[Any], T]
) -> tuple[VHost, T]:
    """The vhost in the path (administrators only) and the body's ``key`` passed through
    ``check``; 400 naming ``key`` when it is missing, with ``check``'s ValueError text when
    it is bad."""
    require_admin(request)
    vhost = vhost_of(request)
    body = await read_json(request)
    if key not in body:
        raise bad_request(f"{key} missing: {expected}")
    try:
        return vhost, check(body[key])
    except ValueError as exc:
        raise bad_request(str(exc)) from None


@routes.put("/api/leveret/clock/{vhost}")
async def put_clock(request: web.Request) -> web.Response:
    """``{"mode": "manual"}`` stops the vhost's time, ``{"mode": "real"}`` lets it run."""
    vhost, mode = await checked_body(request, "mode", '"manual" or "real"', checked_mode)
    vhost.clock.set_mode(mode)
    return web.Response(status=204)


@routes.post("/api/leveret/clock/{vhost}/advance")
async def advance_clock(request: web.Request) -> web.Response:
    """``{"seconds": N}``: advance the vhost's clock (manual from then on)."""
    vhost, seconds = await checked_body(request, "seconds", "a number >= 0", checked_seconds)
    fired = await vhost.clock.advance(seconds)
    return json_response({"fired": fired, **described(vhost)})
