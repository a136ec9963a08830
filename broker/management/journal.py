"""The traffic journal over HTTP (Leveret's own endpoint; RabbitMQ has none), for test
suites in other languages (:mod:`leveret.inspect.journal` is the Python side).

``PUT /api/leveret/journal/{vhost}`` with ``{"recording": true}`` starts recording the
vhost's events, ``{"recording": false}`` stops (the records stay readable);
``GET /api/leveret/journal/{vhost}`` is the list of records, oldest first, each as
:class:`~leveret.node.journal.Record`'s fields with ``properties`` as the management
API shows a message's and the body as ``payload`` + ``payload_encoding`` (``string`` when
it is UTF-8, else ``base64``, as ``POST /api/queues/{vhost}/{name}/get`` with
``encoding=auto``), plus ``recording``. Administrators only; an unknown vhost is
RabbitMQ's 404 ``{"error": "Object Not Found", "reason": "Not Found"}``, a body without a
boolean ``recording`` a 400.
"""

from __future__ import annotations

import base64
import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pamqp import commands

from leveret.management.access import require_admin
from leveret.management.api import server_of
from leveret.management.errors import bad_request, not_found
from leveret.management.messages import is_utf8
from leveret.management.query import json_response, read_json
from leveret.management.views import properties_view
from leveret.node.journal import Record, Recorder

if TYPE_CHECKING:
    from leveret.node.vhost import VHost

routes = web.RouteTableDef()


class ApiRecorder(Recorder):
    """A recorder the API started (told apart from a Python test's journal)."""


# The recorder the API started, per vhost object: a deleted vhost's goes with it.
_recorders: weakref.WeakKeyDictionary[VHost, Recorder] = weakref.WeakKeyDictionary()


def _recorder(vhost: VHost) -> Recorder | None:
    recorder = _recorders.get(vhost)
    if recorder is None:
        # After an injected restart the vhost is a new object; a recording journal
        # followed it there (Subscriber.outlives_restart).
        recorder = next((s for s in vhost.subscribers if isinstance(s, ApiRecorder)), None)
        if recorder is not None:
            _recorders[vhost] = recorder
    return recorder


def _vhost(request: web.Request) -> VHost:
    vhost = server_of(request).vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise not_found()
    return vhost


def record_view(record: Record) -> dict[str, Any]:
    """One record as JSON."""
    item = {
        f.name: getattr(record, f.name)
        for f in dataclasses.fields(record)
        if f.name not in ("properties", "body")
    }
    item["queues"] = list(record.queues)
    item["properties"] = properties_view(commands.Basic.Properties(**record.properties))
    if is_utf8(record.body):
        item["payload"], item["payload_encoding"] = record.body.decode("utf-8"), "string"
    else:
        item["payload"] = base64.b64encode(record.body).decode("ascii")
        item["payload_encoding"] = "base64"
    return item


@routes.get("/api/leveret/journal/{vhost}")
async def get_journal(request: web.Request) -> web.Response:
    """GET /api/leveret/journal/{vhost}: the records, oldest first."""
    require_admin(request)
    recorder = _recorder(_vhost(request))
    records = recorder.records if recorder is not None else []
    return json_response([record_view(r) for r in records])


@routes.put("/api/leveret/journal/{vhost}")
async def put_journal(request: web.Request) -> web.Response:
    """PUT /api/leveret/journal/{vhost} ``{"recording": true|false}``: start (a fresh
    journal) or stop recording."""
    require_admin(request)
    vhost = _vhost(request)
    body = await read_json(request)
    recording = body.get("recording")
    if not isinstance(recording, bool):
        raise bad_request('a boolean "recording" is needed')
    recorder = _recorder(vhost)
    if recording and (recorder is None or not recorder.recording):
        recorder = _recorders[vhost] = ApiRecorder(vhost)
        recorder.start()
    elif not recording and recorder is not None:
        recorder.stop()
    return web.Response(status=204)
