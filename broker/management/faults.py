"""Injected faults through the management API (a Leveret extension, no RabbitMQ
counterpart): ``POST /api/leveret/faults/{vhost}/{fault}`` with the fault's arguments as a
JSON body, administrators only.

========================  ===============================  =================================
fault                     body                             answer (200 JSON)
========================  ===============================  =================================
``drop-connections``      ``{"client"?}``                  ``{"connections": n}`` dropped
``close-connections``     ``{"reason"?, "client"?}``       ``{"connections": n}`` closed, 320
``restart``               ``{"kill"?: true}``              202 ``{"kill": ...}``, then it goes
``memory-alarm``          ``{"on"?: true}``                ``{"on": ...}``
``disk-alarm``            ``{"on"?: true}``                ``{"on": ...}``
``cancel-consumers``      ``{"queue"}``                    ``{"consumers": n}`` cancelled
``delay``                 ``{"ms"}``                       ``{"ms": ...}``
========================  ===============================  =================================

What each does is :mod:`leveret.faults` (shared with the inspector and ``leveret ctl
inject_fault``). A restart answers 202 before it begins: this listener stops with the
node, so the client polls (``GET /api/aliveness-test/{vhost}``) until it is back. Errors are
RabbitMQ's shapes: 404 for a vhost, queue or fault that does not exist, 400 for a bad body
(``{"error": "bad_request", "reason": ...}``), 401 for a user who is not an administrator.
"""

from __future__ import annotations

from aiohttp import web

import leveret.faults as faults
from leveret.management.access import require_admin
from leveret.management.api import server_of
from leveret.management.errors import ApiError, bad_request, not_found
from leveret.management.query import json_response, read_json

routes = web.RouteTableDef()


@routes.post("/api/leveret/faults/{vhost}/{fault}")
async def inject_fault(request: web.Request) -> web.Response:
    """POST /api/leveret/faults/vhost/fault ``{arguments}`` (see the module doc)."""
    require_admin(request)
    server = server_of(request)
    fault = request.match_info["fault"]
    if fault not in faults.FAULTS:
        raise not_found()
    body = await read_json(request)
    try:
        result = faults.inject(server, request.match_info["vhost"], fault, body)
    except (faults.UnknownVhostError, faults.UnknownQueueError) as exc:
        raise ApiError(404, "Object Not Found", str(exc)) from None
    except faults.FaultError as exc:
        raise bad_request(str(exc)) from None
    return json_response(result, status=202 if fault == "restart" else 200)
