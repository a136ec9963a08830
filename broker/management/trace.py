"""The traffic-trace switch (Leveret's own endpoint; RabbitMQ has none for this trace).

``GET /api/leveret/trace`` reports the state; ``PUT /api/leveret/trace`` with
``{"enabled": true, "directory": "/path"}`` starts recording (one JSON line per publish,
schema in ``broker/trace/schema.py``) and ``{"enabled": false}`` stops it. Administrators only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from leveret.management.access import require_admin
from leveret.management.api import server_of
from leveret.management.errors import bad_request
from leveret.management.query import json_response, read_json

routes = web.RouteTableDef()


def _state(request: web.Request) -> dict[str, Any]:
    tracer = server_of(request).tracer
    if tracer is None:
        return {"enabled": False, "directory": None, "written": 0, "dropped": 0}
    return {
        "enabled": True,
        "directory": str(tracer.directory),
        "written": tracer.written,
        "dropped": tracer.dropped,
    }


@routes.get("/api/leveret/trace")
async def get_trace(request: web.Request) -> web.Response:
    """GET /api/leveret/trace: whether the trace is on, where, and its counts."""
    require_admin(request)
    return json_response(_state(request))


@routes.put("/api/leveret/trace")
async def put_trace(request: web.Request) -> web.Response:
    """PUT /api/leveret/trace ``{enabled, directory}``: switch the trace on or off."""
    require_admin(request)
    body = await read_json(request)
    server = server_of(request)
    if body.get("enabled") in (True, "true"):
        directory = body.get("directory") or (
            str(server.config.trace_dir) if server.config.trace_dir else None
        )
        if not directory:
            raise bad_request("a directory is needed to switch the trace on")
        server.set_trace(Path(str(directory)))
    else:
        server.set_trace(None)
    return json_response(_state(request))
