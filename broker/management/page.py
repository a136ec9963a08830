"""The management UI at ``/``: a page that loads Preact, htm and uPlot (vendored under
``static/vendor/``, nothing fetched from elsewhere) and the UI's modules (``static/js/``),
which do everything through the HTTP API, as RabbitMQ's own UI does. Like RabbitMQ's,
these files need no credentials: the UI asks for them and sends them with each API call.
"""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp import web

routes = web.RouteTableDef()

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
}
# A path under static/: plain names, at most one folder deep (vendor/, js/).
SAFE_PATH = re.compile(r"(?:[A-Za-z0-9_-][A-Za-z0-9._-]*/)?[A-Za-z0-9_-][A-Za-z0-9._-]*")


def static_file(name: str) -> web.Response:
    """One file of ``static/`` by its relative path (no dot files, no ``..``)."""
    path = STATIC / name
    content_type = CONTENT_TYPES.get(path.suffix)
    if not SAFE_PATH.fullmatch(name) or content_type is None or not path.is_file():
        raise web.HTTPNotFound()
    return web.Response(
        body=path.read_bytes(),
        content_type=content_type,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


@routes.get("/")
async def index(request: web.Request) -> web.Response:
    """The UI's page."""
    return static_file("index.html")


@routes.get("/static/{name:.+}")
async def asset(request: web.Request) -> web.Response:
    """Its modules, style sheets and vendored libraries."""
    return static_file(request.match_info["name"])
