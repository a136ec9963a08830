"""Exchanges, queues and bindings: list, show, create, delete (rabbit_mgmt_wm_exchange(s),
rabbit_mgmt_wm_queue(s), rabbit_mgmt_wm_binding(s) in deps/rabbitmq_management/src).

Status codes as cowboy_rest gives them to RabbitMQ: PUT answers 201 Created for a new
object and 204 No Content for an existing one, DELETE 204, POST of a binding 201 with a
``Location``; a path naming nothing is 404 ``Object Not Found``. The exchange ``""`` is
written ``amq.default`` in paths (rabbit_web_dispatch_access_control:id/2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_plus

from aiohttp import web

import leveret.management.ops as ops
import leveret.management.views as views
from leveret.exchanges.model import Binding, DestKind, Exchange
from leveret.management.access import actor
from leveret.management.api import scoped_vhosts, server_of, vhost_of, vhost_or_none
from leveret.management.errors import amqp_errors, bad_request, not_found, vhost_not_found
from leveret.management.paging import queue_page
from leveret.management.query import json_response, read_json, reply_list
from leveret.management.state import state_of
from leveret.management.stats import EXCHANGE_COUNTERS, QUEUE_FIELDS
from leveret.session import topology

if TYPE_CHECKING:
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

routes = web.RouteTableDef()


def exchange_name(request: web.Request, key: str = "name") -> str:
    """An exchange name from the path: ``amq.default`` is the default exchange."""
    name = request.match_info[key]
    return "" if name == "amq.default" else name


def policy_name(vhost: VHost, exchange: str) -> str | None:
    """The name of the policy that applies to an exchange, if one does."""
    policy = vhost.policy_for("exchange", exchange) if vhost.policies else None
    return policy.name if policy is not None else None


def created_or_updated(created: bool) -> web.Response:
    """201 for a new object, 204 for an existing one."""
    return web.Response(status=201 if created else 204)


# -- exchanges --------------------------------------------------------------------------


@routes.get("/api/exchanges")
@routes.get("/api/exchanges/{vhost}")
async def list_exchanges(request: web.Request) -> web.Response:
    """GET /api/exchanges[/vhost]."""
    server = server_of(request)
    items = [
        exchange_item(server, vhost, exchange)
        for vhost in scoped_vhosts(request, objects=True)
        for exchange in vhost.projection.exchanges.values()
    ]
    return reply_list(items, request, pages=True)


@routes.get("/api/exchanges/{vhost}/{name}")
async def get_exchange(request: web.Request) -> web.Response:
    """GET /api/exchanges/vhost/name."""
    vhost = vhost_of(request)
    exchange = vhost.projection.exchanges.get(exchange_name(request))
    if exchange is None:
        raise not_found()
    item = exchange_item(server_of(request), vhost, exchange)
    key = (vhost.name, exchange.name)
    sampler = state_of(server_of(request)).sampler
    stats = item.get("message_stats")
    sampler.add_samples(
        sampler.exchange_history, key, EXCHANGE_COUNTERS, request.query, stats, None
    )
    return json_response(item)


def exchange_item(server: ServerState[Connection], vhost: VHost, exchange: Exchange) -> Any:
    """An exchange as the list and the single view show it, with its message statistics."""
    return views.exchange_view(
        vhost.name,
        exchange,
        policy_name(vhost, exchange.name),
        vhost.exchange_stats.get(exchange.name),
        state_of(server).sampler.exchange_rates.get((vhost.name, exchange.name)),
    )


@routes.put("/api/exchanges/{vhost}/{name}")
async def put_exchange(request: web.Request) -> web.Response:
    """PUT /api/exchanges/vhost/name: ``{type, durable, auto_delete, internal, arguments}``
    (defaults: exchange.declare's field defaults, direct and all false)."""
    body = await read_json(request)  # first: nothing may change between lookup and use
    vhost = vhost_of(request, missing=vhost_not_found)
    name = exchange_name(request)
    type_name = body.get("type", "direct")
    if not isinstance(type_name, str):
        raise bad_request("type must be a string")
    arguments = ops.json_arguments(body.get("arguments"))
    with amqp_errors():
        created = topology.declare_exchange(
            actor(request, vhost),
            name,
            type_name,
            False,
            ops.parse_bool(body, "durable"),
            ops.parse_bool(body, "auto_delete"),
            ops.parse_bool(body, "internal"),
            arguments,
        )
    return created_or_updated(created)


@routes.delete("/api/exchanges/{vhost}/{name}")
async def delete_exchange(request: web.Request) -> web.Response:
    """DELETE /api/exchanges/vhost/name[?if-unused=true]."""
    vhost = vhost_of(request)
    name = exchange_name(request)
    if name not in vhost.projection.exchanges:
        raise not_found()
    with amqp_errors():
        topology.delete_exchange(
            actor(request, vhost), name, request.query.get("if-unused") == "true"
        )
    return web.Response(status=204)


@routes.get("/api/exchanges/{vhost}/{name}/bindings/{direction}")
async def exchange_bindings(request: web.Request) -> web.Response:
    """GET /api/exchanges/vhost/name/bindings/source|destination: a missing vhost or
    exchange has no bindings (200 ``[]``, as RabbitMQ 3.10.8 answers)."""
    vhost = vhost_or_none(request)
    if vhost is None:
        return json_response([])
    name = exchange_name(request)  # a missing exchange is the source of no binding
    direction = request.match_info["direction"]
    if direction == "source":
        found = [b for b in all_bindings(vhost) if b.source == name]
    elif direction == "destination":
        found = vhost.projection.bindings_to(DestKind.EXCHANGE, name)
    else:
        raise not_found()
    return reply_list([views.binding_view(vhost.name, b) for b in found], request)


# -- queues -----------------------------------------------------------------------------


def unacked_bytes(server: ServerState[Connection]) -> dict[int, int]:
    """Bytes of delivered, unacknowledged messages by ``id(queue)``."""
    sizes: dict[int, int] = {}
    for conn in server.connections:
        for channel in conn.channels.values():
            for queue, entry, _consumer in channel.unacked.values():
                sizes[id(queue)] = sizes.get(id(queue), 0) + entry[0].body_size
    return sizes


def queue_item(
    server: ServerState[Connection], vhost: VHost, queue: Queue, sizes: dict[int, int]
) -> Any:
    """A queue as the list and the single view show it."""
    rates = state_of(server).sampler.rates_of(queue)
    return views.queue_view(vhost.name, queue, sizes.get(id(queue), 0), rates)


@routes.get("/api/queues")
@routes.get("/api/queues/{vhost}")
async def list_queues(request: web.Request) -> web.Response:
    """GET /api/queues[/vhost]."""
    server = server_of(request)
    sampler = state_of(server).sampler
    sampler.refresh()
    sizes = unacked_bytes(server)
    vhosts = scoped_vhosts(request, objects=True)
    entries = [(vhost.name, queue) for vhost in vhosts for queue in vhost.queues.values()]
    by_name = {vhost.name: vhost for vhost in vhosts}
    # A page builds the views of its queues only (paging.py).
    paged = queue_page(
        entries, request, sampler, lambda e: queue_item(server, by_name[e[0]], e[1], sizes)
    )
    if paged is not None:
        return paged
    items = [queue_item(server, by_name[name], queue, sizes) for name, queue in entries]
    return reply_list(items, request, pages=True)


def queue_of(request: web.Request) -> tuple[VHost, Queue]:
    """The vhost and queue named in the path, or 404."""
    vhost = vhost_of(request)
    queue = vhost.queues.get(request.match_info["name"])
    if queue is None:
        raise not_found()
    return vhost, queue


@routes.get("/api/queues/{vhost}/{name}")
async def get_queue(request: web.Request) -> web.Response:
    """GET /api/queues/vhost/name, with ``consumer_details``."""
    server = server_of(request)
    vhost, queue = queue_of(request)
    state_of(server).sampler.refresh()
    item = queue_item(server, vhost, queue, unacked_bytes(server))
    item["consumer_details"] = [
        views.consumer_view(views.wire_connection(c.channel.conn), c, vhost.name)
        for c in queue.consumers
    ]
    sampler = state_of(server).sampler
    sampler.add_samples(
        sampler.queue_history, id(queue), QUEUE_FIELDS, request.query, item["message_stats"], item
    )
    return json_response(item)


@routes.put("/api/queues/{vhost}/{name}")
async def put_queue(request: web.Request) -> web.Response:
    """PUT /api/queues/vhost/name: ``{durable, auto_delete, arguments}`` (queue.declare's
    defaults: not durable, not auto-delete)."""
    body = await read_json(request)  # first: nothing may change between lookup and use
    vhost = vhost_of(request, missing=vhost_not_found)
    name = request.match_info["name"]
    arguments = ops.json_arguments(body.get("arguments"))
    with amqp_errors():
        _queue, created = topology.declare_queue(
            actor(request, vhost),
            name,
            False,
            ops.parse_bool(body, "durable"),
            False,
            ops.parse_bool(body, "auto_delete"),
            arguments,
        )
    state_of(server_of(request)).sampler.refresh()
    return created_or_updated(created)


@routes.delete("/api/queues/{vhost}/{name}")
async def delete_queue(request: web.Request) -> web.Response:
    """DELETE /api/queues/vhost/name[?if-unused=true][&if-empty=true]."""
    vhost, queue = queue_of(request)
    # The sampler sees the queue before it goes, so its counters stay in the totals.
    state_of(server_of(request)).sampler.refresh()
    with amqp_errors():  # if-unused and if-empty: 400 with queue.delete's 406 text
        topology.delete_queue(
            actor(request, vhost),
            queue.name,
            if_unused=request.query.get("if-unused") == "true",
            if_empty=request.query.get("if-empty") == "true",
        )
    return web.Response(status=204)


@routes.get("/api/queues/{vhost}/{name}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    """GET /api/queues/vhost/name/bindings: the default binding first, as RabbitMQ. It
    lists the bindings it finds without looking the queue up, so a queue that does not
    exist still has its default binding, and a vhost that does not exist none (3.10.8)."""
    vhost = vhost_or_none(request)
    if vhost is None:
        return json_response([])
    name = request.match_info["name"]
    found = [views.default_binding(name)]
    found += vhost.projection.bindings_to(DestKind.QUEUE, name)
    return json_response([views.binding_view(vhost.name, b) for b in found])


# -- bindings ---------------------------------------------------------------------------


def all_bindings(vhost: VHost) -> list[Binding]:
    """Every binding of a vhost, the implicit default-exchange ones first (rabbit_binding:
    list/1 includes them)."""
    found = [views.default_binding(name) for name in sorted(vhost.queues)]
    found += list(vhost.projection.bindings())
    return found


@routes.get("/api/bindings")
@routes.get("/api/bindings/{vhost}")
async def list_bindings(request: web.Request) -> web.Response:
    """GET /api/bindings[/vhost] (unsorted, in RabbitMQ's order)."""
    items = [
        views.binding_view(vhost.name, b)
        for vhost in scoped_vhosts(request, objects=True)
        for b in all_bindings(vhost)
    ]
    return json_response(items)


def path_ends(request: web.Request) -> tuple[str, DestKind, str]:
    """(source, destination kind, destination) as the path names them."""
    source = exchange_name(request, "source")
    kind = ops.dest_kind(request.match_info["dtype"])
    destination = request.match_info["destination"]
    if kind is DestKind.EXCHANGE and destination == "amq.default":
        destination = ""
    return source, kind, destination


def binding_ends(request: web.Request) -> tuple[VHost, str, DestKind, str]:
    """(vhost, source, destination kind, destination) from the path; 404 for a missing end."""
    vhost = vhost_of(request)
    source, kind, destination = path_ends(request)
    targets: Any = vhost.queues if kind is DestKind.QUEUE else vhost.projection.exchanges
    if source not in vhost.projection.exchanges or destination not in targets:
        raise not_found()
    return vhost, source, kind, destination


def bindings_between(vhost: VHost, source: str, kind: DestKind, destination: str) -> list[Binding]:
    """Bindings from ``source`` to one destination."""
    return [
        b
        for b in all_bindings(vhost)
        if b.source == source and b.kind is kind and b.destination == destination
    ]


@routes.get("/api/bindings/{vhost}/e/{source}/{dtype}/{destination}")
async def list_bindings_between(request: web.Request) -> web.Response:
    """GET /api/bindings/vhost/e/source/q|e/destination: none when an end or the vhost is
    missing (200 ``[]``, as RabbitMQ 3.10.8 answers)."""
    vhost = vhost_or_none(request)
    if vhost is None:
        return json_response([])
    found = bindings_between(vhost, *path_ends(request))  # missing ends have none
    return json_response([views.binding_view(vhost.name, b) for b in found])


@routes.post("/api/bindings/{vhost}/e/{source}/{dtype}/{destination}")
async def add_binding(request: web.Request) -> web.Response:
    """POST /api/bindings/vhost/e/source/q|e/destination ``{routing_key, arguments}``:
    201 with the new binding's ``Location`` (relative, as rabbit_mgmt_wm_bindings sends). A
    missing end is queue.bind's 404 (``no queue 'q' in vhost '/'``)."""
    body = await read_json(request)  # first: nothing may change between lookup and use
    vhost = vhost_of(request, missing=vhost_not_found)
    source, kind, destination = path_ends(request)
    routing_key = body.get("routing_key", "")
    if not isinstance(routing_key, str):
        raise bad_request("routing_key must be a string")
    arguments = ops.json_arguments(body.get("arguments"))
    # rabbit_mgmt_wm_bindings runs queue.bind through rabbit_mgmt_util:direct_request/6.
    with amqp_errors("direct"):
        topology.bind(
            actor(request, vhost), source, kind, destination, routing_key, arguments, add=True
        )
    props = views.properties_key(routing_key, arguments)
    location = f"{quote(destination, safe='')}/{quote(props, safe='')}"
    return web.Response(status=201, headers={"Location": location})


def find_binding(request: web.Request) -> tuple[VHost, Binding]:
    """The binding named by ``props`` (rabbit_mgmt_wm_binding:unpack_binding_props/3: the
    routing key, and for bindings with arguments ``~`` and the arguments' hash)."""
    vhost, source, kind, destination = binding_ends(request)
    props = request.match_info["props"]
    parts = props.split("~")
    if len(parts) > 1 and not parts[-1]:
        parts.pop()  # rabbit_mgmt_format:tokenise/1 drops a trailing empty token: "~" is ""
    if len(parts) > 2:
        raise bad_request(f"{{too_many_tokens,{props!r}}}")
    routing_key = unquote_plus(parts[0])
    for binding in bindings_between(vhost, source, kind, destination):
        if binding.routing_key != routing_key:
            continue
        if len(parts) == 1 and not binding.arguments:
            return vhost, binding
        if len(parts) == 2 and binding.arguments and views.args_hash(binding.arguments) == parts[1]:
            return vhost, binding
    raise not_found()


@routes.get("/api/bindings/{vhost}/e/{source}/{dtype}/{destination}/{props}")
async def get_binding(request: web.Request) -> web.Response:
    """GET one binding."""
    vhost, binding = find_binding(request)
    return json_response(views.binding_view(vhost.name, binding))


@routes.delete("/api/bindings/{vhost}/e/{source}/{dtype}/{destination}/{props}")
async def delete_binding(request: web.Request) -> web.Response:
    """DELETE one binding (queue.unbind / exchange.unbind)."""
    vhost, binding = find_binding(request)
    with amqp_errors("direct"):
        topology.bind(
            actor(request, vhost),
            binding.source,
            binding.kind,
            binding.destination,
            binding.routing_key,
            binding.arguments,
            add=False,
        )
    return web.Response(status=204)
