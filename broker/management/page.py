"""The web page at ``/``: a static HTML/JS/CSS dashboard listing queues, exchanges and
message rates. The files are in ``static/`` beside this module; they load nothing from
elsewhere. Like RabbitMQ's own UI the files need no credentials: the script asks for
them and sends them with each API call."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

routes = web.RouteTableDef()

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
}


def static_file(name: str) -> web.Response:
    """One file of ``static/`` (only the files that are there, no subdirectories)."""
    path = STATIC / name
    content_type = CONTENT_TYPES.get(path.suffix)
    if "/" in name or name.startswith(".") or content_type is None or not path.is_file():
        raise web.HTTPNotFound()
    return web.Response(
        body=path.read_bytes(),
        content_type=content_type,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


@routes.get("/")
async def index(request: web.Request) -> web.Response:
    """The dashboard."""
    return static_file("index.html")


@routes.get("/static/{name}")
async def asset(request: web.Request) -> web.Response:
    """Its script and style sheet."""
    return static_file(request.match_info["name"])
