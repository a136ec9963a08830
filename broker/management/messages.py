"""Messages through the management API: purge, get and publish.

- DELETE /api/queues/vhost/name/contents: queue.purge (rabbit_mgmt_wm_queue_purge).
- POST /api/queues/vhost/name/get ``{count, ackmode, encoding, truncate}``
  (rabbit_mgmt_wm_queue_get): ``count`` basic.gets in a row, then the ``ackmode``: the
  ``*_requeue_true`` modes put the messages back (redelivered, as RabbitMQ's closing
  channel does), ``ack_requeue_false`` takes them for good, ``reject_requeue_false``
  rejects them (dead-lettering where the queue has a DLX).
- POST /api/exchanges/vhost/name/publish ``{properties, routing_key, payload,
  payload_encoding}`` (rabbit_mgmt_wm_exchange_publish): a mandatory publish in confirm
  mode, answered ``{"routed": bool}`` once durable copies are on disk.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pamqp import commands

import leveret.management.ops as ops
import leveret.management.views as views
from leveret.management.access import actor, current_user
from leveret.management.api import server_of, vhost_of
from leveret.management.errors import access_refused, amqp_errors, bad_request
from leveret.management.query import erlang_integer, json_response, read_json
from leveret.management.topology import exchange_name, queue_of
from leveret.node.fieldtable import marshal_content_header
from leveret.node.message import Message
from leveret.session import topology
from leveret.session.get import readable_queue
from leveret.session.publish import Publisher, fold

if TYPE_CHECKING:
    from leveret.node.persistence import Persistence
    from leveret.node.queue import Entry, Queue
    from leveret.node.vhost import VHost

routes = web.RouteTableDef()

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


def mandatory(body: dict[str, Any], *keys: str, null_is_missing: bool = True) -> list[Any]:
    """The values of mandatory keys, or 400 listing the missing ones as RabbitMQ does
    (rabbit_mgmt_util:with_decode/5; its get and publish take a ``null`` as present, the
    callers that give ``null_is_missing=False``)."""
    missing = [key for key in keys if key not in body or (null_is_missing and body[key] is None)]
    if missing:
        raise bad_request(erlang_list([f"{{key_missing,{key}}}" for key in missing]))
    return [body[key] for key in keys]


def erlang_list(items: list[str]) -> str:
    """A list of printed Erlang terms as ``~p`` prints it: on one line when that fits in
    78 columns, else one element a line (io_lib_pretty, checked with ``erl``)."""
    text = "[" + ",".join(items) + "]"
    return text if len(text) <= 78 else "[" + ",\n ".join(items) + "]"


def parse_int(value: Any) -> int:
    """rabbit_mgmt_util:parse_int/1: an integer, a float (truncated) or a string of an
    integer; else 400 ``["not_integer", value]``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    parsed = erlang_integer(value) if isinstance(value, str) else None
    if parsed is None:
        raise bad_request(["not_integer", value])
    return parsed


@routes.delete("/api/queues/{vhost}/{name}/contents")
async def purge(request: web.Request) -> web.Response:
    """DELETE /api/queues/vhost/name/contents: 204."""
    vhost, queue = queue_of(request)
    with amqp_errors():
        topology.purge_queue(actor(request, vhost), queue.name)
    return web.Response(status=204)


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def message_item(entry: Entry, remaining: int, encoding: str, truncate: int | None) -> Any:
    """One message of a get reply."""
    message, redelivered = entry[0], entry[1]
    payload = message.body if truncate is None else message.body[:truncate]
    if encoding == "auto" and is_utf8(payload):
        text, payload_encoding = payload.decode("utf-8"), "string"
    else:
        text, payload_encoding = base64.b64encode(payload).decode("ascii"), "base64"
    return {
        "payload_bytes": message.body_size,
        "redelivered": redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": remaining,
        "properties": views.properties_view(message.properties),
        "payload": text,
        "payload_encoding": payload_encoding,
    }


@routes.post("/api/queues/{vhost}/{name}/get")
async def get_messages(request: web.Request) -> web.Response:
    """POST /api/queues/vhost/name/get, checked in rabbit_mgmt_wm_queue_get's order: the
    keys, the vhost (a channel opens on it: 401 when it does not exist), count, encoding,
    truncate, then the basic.get itself (404 ``NOT_FOUND - no queue ...``)."""
    body = await read_json(request)  # first: nothing may change between lookup and use
    if "ackmode" not in body and "requeue" in body:  # the pre-3.7 form of the request
        body["ackmode"] = (
            "ack_requeue_true" if body["requeue"] in (True, "true") else "ack_requeue_false"
        )
    ackmode, count_value, encoding = mandatory(
        body, "ackmode", "count", "encoding", null_is_missing=False
    )
    vhost = vhost_of(request, missing=access_refused)
    count = parse_int(count_value)
    if encoding not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    truncate = None if body.get("truncate") is None else parse_int(body["truncate"])
    if ackmode not in ACKMODES:  # RabbitMQ's channel crashes later on (500)
        raise bad_request(f"invalid ackmode '{ackmode}'")
    name = request.match_info["name"]
    user = current_user(request).name
    with amqp_errors("channel"):  # basic.get's checks, once for the ``count`` gets
        queue = readable_queue(server_of(request).access, user, vhost, name, None)
    no_ack = ackmode == "ack_requeue_false"  # the get is a no-ack basic.get then
    taken: list[tuple[Entry, int]] = []
    while len(taken) < count:
        entry = queue.get(no_ack)  # an empty queue counts a get-empty (observed on 3.10.8)
        if entry is None:
            break
        taken.append((entry, queue.message_count))
    items = [message_item(entry, left, encoding, truncate) for entry, left in taken]
    settle(queue, [entry for entry, _ in taken], ackmode)
    return json_response(items)


def settle(queue: Queue, entries: list[Entry], ackmode: str) -> None:
    """Finish a get as the channel would: requeue, or reject (``ack_requeue_false`` was a
    no-ack get: nothing to settle)."""
    if ackmode.endswith("requeue_true"):
        if entries:
            queue.requeue([(entry, None) for entry in entries])
    elif ackmode == "reject_requeue_false":
        for entry in entries:
            queue.reject(entry[0], None)


def basic_properties(value: Any) -> commands.Basic.Properties:
    """rabbit_mgmt_format:to_basic_properties/1: a JSON object as Basic properties."""
    if value == []:
        value = {}
    if not isinstance(value, dict):  # RabbitMQ 3.10.8 answers 500 here
        raise bad_request("properties must be an object")
    fields: dict[str, Any] = {}
    for json_name, attribute in (
        (name, "message_type" if name == "type" else name)
        for name in (
            "content_type",
            "content_encoding",
            "headers",
            "delivery_mode",
            "priority",
            "correlation_id",
            "reply_to",
            "expiration",
            "message_id",
            "timestamp",
            "type",
            "user_id",
            "app_id",
            "cluster_id",
        )
    ):
        if json_name not in value:
            continue
        item = value[json_name]
        if json_name == "headers":
            if item is None:  # RabbitMQ 3.10.8 answers 500; taken as no headers
                continue
            if not isinstance(item, dict):
                raise bad_request(["not_table", "headers"])
            ops.check_no_null(item)
            fields[attribute] = item
        elif json_name in ("delivery_mode", "priority", "timestamp"):
            if not isinstance(item, int) or isinstance(item, bool):
                raise bad_request(["not_int", json_name])
            if json_name == "timestamp":
                fields[attribute] = datetime.datetime.fromtimestamp(item, datetime.UTC)
            else:
                fields[attribute] = item
        elif isinstance(item, str):
            fields[attribute] = item
        else:
            raise bad_request(["not_string", json_name])
    try:
        return commands.Basic.Properties(**fields)
    except (TypeError, ValueError) as exc:
        raise bad_request(str(exc)) from None


def decode_payload(payload: str, encoding: Any) -> bytes:
    """The body from ``payload`` and ``payload_encoding`` (``string`` or ``base64``)."""
    if encoding == "string":
        return payload.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(["not_base64", payload]) from None
    raise bad_request(["unsupported_encoding", encoding])


async def wait_synced(persistence: Persistence | None, generation: int) -> None:
    """Wait until the group commit ``generation`` is on disk (a publisher confirm)."""
    if not generation or persistence is None or generation <= persistence.synced:
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def listener(synced: int) -> None:
        if synced >= generation and not done.done():
            done.set_result(None)

    persistence.subscribe(listener)
    try:
        await done
    finally:
        persistence.unsubscribe(listener)


@routes.post("/api/exchanges/{vhost}/{name}/publish")
async def publish(request: web.Request) -> web.Response:
    """POST /api/exchanges/vhost/name/publish, checked in rabbit_mgmt_wm_exchange_publish's
    order: the keys, the payload's type, the vhost (a channel opens on it: 401 when it
    does not exist), properties, payload, then the publish itself (a missing exchange is
    400 ``404 NOT_FOUND - no exchange ...``)."""
    body = await read_json(request)  # first: nothing may change between lookup and use
    routing_key, props, payload, encoding = mandatory(
        body, "routing_key", "properties", "payload", "payload_encoding", null_is_missing=False
    )
    if not isinstance(payload, str):
        raise bad_request("payload_not_string")
    vhost = vhost_of(request, missing=access_refused)
    name = exchange_name(request)
    if not isinstance(routing_key, str):
        raise bad_request("routing_key must be a string")
    properties = basic_properties(props)
    data = decode_payload(payload, encoding)
    publisher = session_publisher(request, vhost)
    with amqp_errors("publish"):  # basic.publish's checks, in RabbitMQ's order
        publisher.check_size(len(data))
        stats = publisher.check_exchange(name, routing_key)
        header = marshal_content_header(len(data), properties)
        message = publisher.check_message(Message(name, routing_key, header, data), None)
    # The API publishes as mandatory: an unroutable message counts as returned.
    routed, rejected, generation = publisher.route(message, True, None, stats)
    fold(publisher.counters, server_of(request).counters)  # the node counts the API's
    if rejected:
        raise bad_request("rejected Unable to publish message. Check queue limits.")
    await wait_synced(vhost.persistence, generation)
    return json_response({"routed": routed})


def session_publisher(request: web.Request, vhost: VHost) -> Publisher:
    """The publish side of a session for the logged-in user on ``vhost``, as RabbitMQ's
    management plugin publishes through a channel of its own."""
    server = server_of(request)
    return Publisher(
        server.access,
        vhost,
        current_user(request).name,
        server.config.max_message_size,
    )
