"""Topology operations shared by the HTTP handlers and the definitions import.

They run the rules of :mod:`leveret.session.topology` (the channel's own) without a user
or a connection, for callers RabbitMQ does not run through a channel's permissions either
(the definitions import, ``leveret ctl``): validation, equivalence checks, 403/404/406
texts and persistence are the broker's own. The HTTP handlers run the same commands as
the logged-in user (:func:`leveret.management.access.actor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from leveret.exchanges.model import DestKind
from leveret.management.errors import bad_request
from leveret.management.state import state_of
from leveret.node.errors import PRECONDITION_FAILED, AMQPChannelError
from leveret.node.fieldtable import TypedTable
from leveret.session import topology

if TYPE_CHECKING:
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

# What a JSON value may be as an AMQP argument (rabbit_misc:to_amqp_table/1).
JSON_ARG_TYPES = (str, bool, int, float, list, dict, type(None))


def parse_bool(body: Mapping[str, Any], name: str) -> bool:
    """rabbit_mgmt_util:parse_bool/1 of ``body[name]``: ``true``/``false`` as JSON or as
    strings, false when the key is absent; anything else, ``null``, ``0`` and ``1``
    included, is 400 ``["not_boolean", value]`` (observed on 3.10.8)."""
    if name not in body:
        return False
    value = body[name]
    if value is True or value == "true":
        return True
    if value is False or value == "false":
        return False
    raise bad_request(["not_boolean", value])


def json_arguments(value: Any) -> dict[str, Any]:
    """An ``arguments`` object from a request body as an AMQP table (``[]`` and null are
    empty, as rabbit_mgmt_util:args/1 has them; a null inside is refused as
    rabbit_mgmt_format:to_amqp_table/1 refuses it)."""
    if value is None or value == []:
        return {}
    if not isinstance(value, dict):
        raise bad_request("arguments must be an object")
    for key, item in value.items():
        if not isinstance(item, JSON_ARG_TYPES):
            raise bad_request(f"unsupported value for argument '{key}'")
    check_no_null(value)
    # A JSON integer is a ``long`` in RabbitMQ (rabbit_misc:to_amqp_table/1), whatever its
    # size; the texts of inequivalent arguments name the type (observed on 3.10.8).
    longs = {k: "long" for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}
    return TypedTable(value, longs) if longs else dict(value)


def check_no_null(value: Any) -> None:
    """400 ``null_not_allowed`` for a JSON null anywhere in a table's values, arrays and
    nested tables included (rabbit_mgmt_format:to_amqp_table/1, observed on 3.10.8)."""
    if value is None:
        raise bad_request("null_not_allowed")
    if isinstance(value, dict):
        for item in value.values():
            check_no_null(item)
    elif isinstance(value, list):
        for item in value:
            check_no_null(item)


def declare_exchange(
    vhost: VHost,
    name: str,
    type_name: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: Mapping[str, Any],
) -> bool:
    """exchange.declare's rules without a user (the definitions import); returns whether
    the exchange is new."""
    return topology.exchange_declared(
        vhost, name, type_name, False, durable, auto_delete, internal, arguments
    )


def declare_queue(
    vhost: VHost, name: str, durable: bool, auto_delete: bool, arguments: Mapping[str, Any]
) -> tuple[Queue, bool]:
    """queue.declare's rules of a non-exclusive queue without a user (the definitions
    import); returns (queue, whether it is new)."""
    if not name:
        # A server-named queue makes no sense without a connection to own it.
        raise AMQPChannelError(PRECONDITION_FAILED, "queue name must not be empty")
    return topology.queue_declared(vhost, name, False, durable, False, auto_delete, arguments, None)


def dest_kind(text: str) -> DestKind:
    """``q``/``queue`` or ``e``/``exchange`` as a binding destination kind."""
    if text in ("q", "queue"):
        return DestKind.QUEUE
    if text in ("e", "exchange"):
        return DestKind.EXCHANGE
    raise bad_request(f"unknown destination type '{text}'")


def bind(
    vhost: VHost,
    source: str,
    kind: DestKind,
    destination: str,
    routing_key: str,
    arguments: Mapping[str, Any],
) -> None:
    """queue.bind/exchange.bind's rules without a user (the definitions import)."""
    topology.binding_changed(vhost, source, kind, destination, routing_key, arguments, None, True)


def delete_queue(
    server: ServerState[Connection],
    vhost: VHost,
    queue: Queue,
    if_unused: bool = False,
    if_empty: bool = False,
) -> int:
    """Delete ``queue`` without a user (``leveret ctl``): queue.delete's if-unused and
    if-empty conditions (:class:`leveret.session.topology.QueueInUseError`,
    ``QueueNotEmptyError``), and the statistics sampler sees the queue before it goes, so
    its counters stay in the overview's totals. Returns the number of messages it held."""
    topology.check_delete(vhost, queue, if_unused, if_empty)
    state_of(server).sampler.refresh()
    return vhost.delete_queue(queue)


def delete_vhost(server: ServerState[Connection], name: str) -> bool:
    """Delete vhost ``name`` (False: there is none) with its management metadata; the
    sampler sees its queues first, as for a deleted queue."""
    state_of(server).sampler.refresh()
    if not server.delete_vhost(name):
        return False
    state_of(server).vhosts.pop(name, None)
    return True
