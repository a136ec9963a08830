"""The management HTTP server: the aiohttp application, its auth middleware, start and stop.

It runs on the broker's own event loop (aiohttp's ``AppRunner``/``TCPSite``), so handlers
call the vhost, queue and access-control objects directly, between two frames of the
AMQP connections, with no locking.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

import leveret.management.actions as actions
import leveret.management.api as api
import leveret.management.clients as clients
import leveret.management.clock as clock
import leveret.management.faults as faults
import leveret.management.health as health
import leveret.management.journal as journal
import leveret.management.limits as limits
import leveret.management.messages as messages
import leveret.management.node as node
import leveret.management.page as page
import leveret.management.parameters as parameters
import leveret.management.policies as policies
import leveret.management.shovels as shovels
import leveret.management.topic_permissions as topic_permissions
import leveret.management.topology as topology
import leveret.management.trace as trace
from leveret.management.access import SERVER_KEY, USER_KEY, authenticate
from leveret.management.errors import ApiError, from_amqp, not_found
from leveret.management.listener import HttpListener, serve
from leveret.management.query import COLUMNS_PICKED, JSON_DATA, pick_columns
from leveret.management.state import state_of
from leveret.management.stats import INTERVAL
from leveret.node.errors import AMQPError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

log = logging.getLogger(__name__)

# Paths served without credentials: the page's static files (its script asks for them)
# and the login settings a login page reads before logging in (/api/auth, observed on
# 3.10.8). Metrics are not served here: they are on the Prometheus listener
# (leveret.management.prometheus), as RabbitMQ's management port has no /metrics either.
PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = ("/", "/api/auth")


def is_public(path: str) -> bool:
    """Whether ``path`` needs no credentials."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


@web.middleware
async def guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Authenticate API requests and turn every error into RabbitMQ's JSON shape."""
    routing_error = request.match_info.http_exception
    try:
        if routing_error is not None:
            raise routing_error
        if not is_public(request.path):
            request[USER_KEY] = authenticate(request.app[SERVER_KEY], request)
        response = await handler(request)
        spec = request.query.get("columns")
        if (
            spec
            and isinstance(response, web.Response)
            and JSON_DATA in response
            and not response.get(COLUMNS_PICKED)
        ):
            # rabbit_mgmt_util:reply/3 picks the columns of every JSON reply.
            response.text = json.dumps(pick_columns(response[JSON_DATA], spec))
        return response
    except ApiError as exc:
        if exc.challenge and request.headers.get("X-Requested-With") == "XMLHttpRequest":
            # No WWW-Authenticate for scripts: browsers would pop up their own login
            # dialog over the page's form (headless ones just hang).
            exc.challenge = False
        return exc.response()
    except AMQPError as exc:
        return from_amqp(exc).response()
    except web.HTTPNotFound:
        return not_found().response()
    except web.HTTPMethodNotAllowed as exc:
        response = ApiError(405, "method_not_allowed", "Method Not Allowed").response()
        response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except web.HTTPException:
        raise
    except Exception as exc:
        log.exception("management API: %s %s failed", request.method, request.path)
        return ApiError(500, "internal_server_error", f"{type(exc).__name__}: {exc}").response()


def build_app(server: ServerState[Connection]) -> web.Application:
    """The management application for ``server``."""
    app = web.Application(middlewares=[guard], client_max_size=64 * 1024 * 1024)
    app[SERVER_KEY] = server
    app[api.LISTENER_KEY] = api.HttpListener()
    modules = (
        api,
        clients,
        topology,
        policies,
        limits,
        messages,
        actions,
        topic_permissions,
        node,
        parameters,
        shovels,
        page,
        trace,
        health,
        journal,
        clock,
        faults,
    )
    for module in modules:
        app.router.add_routes(module.routes)
        app.router.add_routes(with_trailing_slash(module.routes))
    return app


def with_trailing_slash(routes: web.RouteTableDef) -> list[web.RouteDef]:
    """The same routes at their paths plus ``/``: RabbitMQ's router (cowboy) serves
    ``/api/queues/%2F/`` as ``/api/queues/%2F`` (one trailing slash, not two; observed on
    3.10.8), and HTTP clients that build URLs by joining segments send such paths."""
    return [
        web.RouteDef(route.method, route.path + "/", route.handler, route.kwargs)
        for route in routes
        if isinstance(route, web.RouteDef) and not route.path.endswith("/")
    ]


@dataclass
class ManagementHandle(HttpListener):
    """A running management server."""

    server: ServerState[Connection]

    async def close(self) -> None:
        """Stop serving and stop the statistics sampler."""
        await state_of(self.server).sampler.stop()
        await super().close()


async def start_management(
    server: ServerState[Connection], host: str, port: int, stats_interval: float = INTERVAL
) -> ManagementHandle:
    """Serve the management API for ``server`` on ``host:port`` (0: any free port, read it
    from the handle's ``port``). Call on the broker's running event loop."""
    app = build_app(server)
    runner, actual_port = await serve(app, host, port)
    app[api.LISTENER_KEY].port = actual_port
    state_of(server).sampler.start(stats_interval)
    log.info("management API listening on http://%s:%s", host, actual_port)
    return ManagementHandle(runner, host, actual_port, server)
