"""exchange.declare/delete/bind/unbind and queue.declare/bind/unbind/purge/delete as
rabbit_channel decides them, written once for the wire channel, the management API and the
definitions import.

Each command has two layers: the user's permissions (``rabbit_channel:check_*_permitted``,
run for an :class:`Actor`: a channel's user, or a management request's), then the rules of
the command itself (reserved names, equivalence, exclusive access, if-unused...), which a
definitions import runs without a user, as RabbitMQ's import does not go through a
channel's permissions. The vhost (:mod:`leveret.node.vhost`) only applies the result: it adds or
removes the exchange, binding or queue, records it and keeps its counters.

Sources: ``deps/rabbit/src/rabbit_channel.erl`` (handle_method/3 for each method,
binding_action/10, check_name/2, expand_queue_name_shortcut/2), ``rabbit_exchange.erl``
(declare/7, check_type/1, assert_equivalence/6), ``rabbit_amqqueue.erl``
(check_exclusive_access/3, assert_equivalence/5, delete/4); the texts were checked
against RabbitMQ 3.10.8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.exchanges.model import (
    Binding,
    DestKind,
    Exchange,
    ExchangeTypeCrashError,
)
from leveret.exchanges.types import parse_type, validate_binding, validate_exchange
from leveret.node.arguments import QUEUE_TYPE_ARGUMENTS, copy_args, declare_error, queue_type
from leveret.node.arguments import type_name as arg_type
from leveret.node.equivalence import assert_args, unknown_type
from leveret.node.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    AMQPChannelError,
    ChannelCrashError,
)
from leveret.node.limits import reached

if TYPE_CHECKING:
    from leveret.node.auth import AccessControl
    from leveret.node.queue import Queue
    from leveret.node.vhost import VHost


@dataclass(frozen=True, slots=True)
class Actor:
    """Who runs a command: ``user`` on ``vhost``, over the connection ``owner`` (the owner
    of the exclusive queues it declares, compared by identity; None for a management
    request, which owns none and may use none)."""

    access: AccessControl
    user: str
    vhost: VHost
    owner: Any = None

    def permit(self, kind: str, resource: str, name: str) -> None:
        """403 unless the user may ``kind`` (configure/write/read) the resource
        (rabbit_channel:check_resource_access/3)."""
        self.access.check(self.user, self.vhost.name, kind, resource, name)

    def permit_linked(self, resource: str, name: str, arguments: Mapping[str, Any]) -> None:
        """A new exchange's alternate exchange or a new queue's dead-letter exchange: read
        on the new object, write on the exchange it names (rabbit_channel's handle_method/3
        for exchange.declare and queue.declare; AccessControl.check_linked_exchange). An
        existing one is only compared, so it needs nothing."""
        vhost = self.vhost
        exists = name in (vhost.projection.exchanges if resource == "exchange" else vhost.queues)
        if not exists:
            self.access.check_linked_exchange(self.user, vhost.name, resource, name, arguments)


# -- lookups and the rules they carry -------------------------------------------------------


def expand_queue_name(last_queue: str | None, name: str) -> str:
    """``name``, or for an empty one the channel's last declared queue (404 without one):
    rabbit_channel:expand_queue_name_shortcut/2."""
    if name:
        return name
    if last_queue is None:
        raise AMQPChannelError(NOT_FOUND, "no previously declared queue")
    return last_queue


def lookup_exchange(vhost: VHost, name: str) -> Exchange:
    """The exchange ``name``, or 404 (rabbit_exchange:lookup_or_die/1)."""
    exchange = vhost.projection.exchanges.get(name)
    if exchange is None:
        raise AMQPChannelError(NOT_FOUND, f"no {vhost.rs('exchange', name)}")
    return exchange


def lookup_queue(vhost: VHost, name: str, owner: object | None, strict: bool = False) -> Queue:
    """The queue ``name`` checked for exclusive access by ``owner`` (None outside AMQP),
    or 404 / 405 (rabbit_amqqueue:with_exclusive_access_or_die/3)."""
    queue = vhost.queues.get(name)
    if queue is None:
        raise AMQPChannelError(NOT_FOUND, f"no {vhost.rs('queue', name)}")
    check_exclusive(vhost, queue, owner, strict)
    return queue


def check_exclusive(vhost: VHost, queue: Queue, owner: object | None, strict: bool = False) -> None:
    """rabbit_amqqueue:check_exclusive_access/3 (``lax`` lets anyone use a non-exclusive
    queue; ``strict`` also refuses an exclusive re-declare of one)."""
    if queue.owner is owner:
        return
    if queue.owner is None and not strict:
        return
    raise AMQPChannelError(
        RESOURCE_LOCKED,
        f"cannot obtain exclusive access to locked {vhost.rs('queue', queue.name)}. It could "
        "be originally declared on another connection or the exclusive property value does "
        "not match that of the original declaration.",
    )


def check_not_default(name: str) -> None:
    """rabbit_channel:check_not_default_exchange/1."""
    if name == "":
        raise AMQPChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")


def inequivalent(what: str, fields: tuple[tuple[str, object, object], ...]) -> None:
    """406 for the first property whose re-declared value differs from the current one
    (rabbit_misc:assert_field_equivalence/4)."""
    for field, new, old in fields:
        if new != old:
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{field}' for {what}: received '{str(new).lower()}' "
                f"but current is '{str(old).lower()}'",
            )


# -- exchanges ------------------------------------------------------------------------------


def declare_exchange(
    actor: Actor,
    name: str,
    type_name: str,
    passive: bool,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: Mapping[str, Any],
) -> bool:
    """exchange.declare for ``actor``: configure permission (and a new exchange's
    alternate exchange's), then :func:`exchange_declared`. Returns whether it is new."""
    if not passive and name:
        actor.permit("configure", "exchange", name)
        actor.permit_linked("exchange", name, arguments)
    return exchange_declared(
        actor.vhost, name, type_name, passive, durable, auto_delete, internal, arguments
    )


def exchange_declared(
    vhost: VHost,
    name: str,
    type_name: str,
    passive: bool,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: Mapping[str, Any],
) -> bool:
    """exchange.declare's rules, as rabbit_channel and rabbit_exchange apply them: a
    passive one finds the exchange (404); else the type is known, the name is not the
    default nor, for a new exchange, ``amq.*``; a new exchange's arguments are validated
    by its type, an existing one's are compared (406). Returns whether it is new."""
    if passive:
        check_not_default(name)
        lookup_exchange(vhost, name)
        return False
    type_ = parse_type(type_name)
    if type_ is None:
        raise unknown_type(type_name)  # rabbit_exchange:check_type/1
    check_not_default(name)
    current = vhost.projection.exchanges.get(name)
    if current is None:
        # rabbit_channel:check_name/2, for a new exchange only.
        if name.startswith("amq."):
            raise AMQPChannelError(
                ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'"
            )
        ae = arguments.get("alternate-exchange")
        if ae is not None and not isinstance(ae, str | bytes):
            raise AMQPChannelError(
                PRECONDITION_FAILED,
                f"invalid type '{arg_type(arguments, 'alternate-exchange')}' for arg "
                f"'alternate-exchange' in {vhost.rs('exchange', name)}",
            )
        # The type's validate/1, run for new exchanges only (rabbit_exchange:declare/7).
        try:
            problem = validate_exchange(type_, arguments)
        except ExchangeTypeCrashError:
            raise ChannelCrashError() from None
        if problem is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, problem)
        vhost.add_exchange(
            Exchange(name, type_, durable, auto_delete, internal, copy_args(arguments))
        )
        return True
    # rabbit_exchange:assert_equivalence/6: the type and flags, then the arguments.
    what = vhost.rs("exchange", name)
    inequivalent(
        what,
        (
            ("type", type_, current.type),
            ("durable", durable, current.durable),
            ("auto_delete", auto_delete, current.auto_delete),
            ("internal", internal, current.internal),
        ),
    )
    assert_args(what, ("alternate-exchange",), arguments, current.arguments)
    return False


def delete_exchange(actor: Actor, name: str, if_unused: bool) -> None:
    """exchange.delete for ``actor``: configure permission (not asked for the default and
    ``amq.*`` exchanges, which refuse deletion with their own 403), then the rules:
    idempotent, 406 when ``if_unused`` and it is a binding's source."""
    vhost = actor.vhost
    if name and not name.startswith("amq."):
        actor.permit("configure", "exchange", name)
    check_not_default(name)
    if name.startswith("amq."):
        raise AMQPChannelError(
            ACCESS_REFUSED, f"deletion of system {vhost.rs('exchange', name)} not allowed"
        )
    if name not in vhost.projection.exchanges:
        return
    if if_unused and vhost.projection.has_bindings_from(name):
        raise AMQPChannelError(PRECONDITION_FAILED, f"{vhost.rs('exchange', name)} in use")
    vhost.remove_exchange(name)


# -- bindings -------------------------------------------------------------------------------


def bind(
    actor: Actor,
    source: str,
    kind: DestKind,
    destination: str,
    routing_key: str,
    arguments: Mapping[str, Any],
    add: bool,
) -> None:
    """queue.bind / exchange.bind (``add``) and their unbind twins for ``actor``: the
    permissions of rabbit_channel:binding_action/10 (write on the destination, read on the
    source, then, when the source is a topic exchange, the binding key against the user's
    topic permission; the default exchange refuses binding first, with its own 403), then
    :func:`binding_changed`."""
    if destination and source:
        actor.permit("write", kind.value, destination)
        actor.permit("read", "exchange", source)
        found = actor.vhost.projection.exchanges.get(source)
        actor.access.check_topic(actor.user, actor.vhost.name, "read", found, routing_key)
    binding_changed(
        actor.vhost, source, kind, destination, routing_key, arguments, actor.owner, add
    )


def binding_changed(
    vhost: VHost,
    source: str,
    kind: DestKind,
    destination: str,
    routing_key: str,
    arguments: Mapping[str, Any],
    owner: object | None,
    add: bool,
) -> None:
    """A binding's rules: neither end the default exchange (403), both ends exist (404; a
    queue exclusive to another connection than ``owner``: 405), the source's type takes
    the binding's arguments (406); then the vhost adds or removes it."""
    if kind is DestKind.EXCHANGE:
        check_not_default(destination)
    check_not_default(source)
    binding = Binding(source, destination, kind, routing_key, dict(arguments))
    if not add and not vhost.projection.has_binding(binding):
        # Unbinding what is not bound is unbind-ok, whether the binding, its exchange or
        # its queue is missing, and before the queue's exclusivity is checked (observed
        # on RabbitMQ 3.10.8; clients rely on it: aio-pika's RPC unbinds after its
        # auto-delete queue went).
        return
    exchange = lookup_exchange(vhost, source)
    if kind is DestKind.QUEUE:
        lookup_queue(vhost, destination, owner)
    else:
        lookup_exchange(vhost, destination)
    if add:
        problem = validate_binding(exchange, binding.arguments, routing_key)
        if problem is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, problem)
        vhost.add_binding(binding)
    else:
        vhost.remove_binding(binding)


# -- queues ---------------------------------------------------------------------------------


def declare_queue(
    actor: Actor,
    name: str,
    passive: bool,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Any],
    server_named: bool = False,
) -> tuple[Queue, bool]:
    """queue.declare for ``actor`` (``name`` already generated for a server-named queue):
    configure permission (and a new queue's dead-letter exchange's), then
    :func:`queue_declared`. Returns the queue and whether it is new."""
    if not passive:
        actor.permit("configure", "queue", name)
        actor.permit_linked("queue", name, arguments)
    return queue_declared(
        actor.vhost,
        name,
        passive,
        durable,
        exclusive,
        auto_delete,
        arguments,
        actor.owner,
        server_named,
    )


def queue_declared(
    vhost: VHost,
    name: str,
    passive: bool,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Any],
    owner: Any,
    server_named: bool = False,
) -> tuple[Queue, bool]:
    """queue.declare's rules in rabbit_channel's order: a passive one finds the queue
    (404/405); a server-named one is classic; ``amq.*`` is reserved; an existing queue is
    checked for exclusive access (strict) and equivalence (406); a new one for the vhost's
    queue limit, then its arguments and its type's properties. Returns the queue and
    whether it is new."""
    if passive:
        found = lookup_queue(vhost, name, owner)
        found.touch()
        return found, False
    kind = queue_type(arguments)
    if server_named and kind != "classic":
        # rabbit_amqqueue:is_server_named_allowed/1 is false for the replicated types.
        raise AMQPChannelError(
            PRECONDITION_FAILED,
            f"Cannot declare a server-named queue for type rabbit_{kind}_queue",
        )
    if name.startswith("amq.") and not server_named:
        # Checked before the existence lookup, so even an existing amq.* queue is refused
        # (rabbit_channel:check_name/2).
        raise AMQPChannelError(
            ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
        )
    owner = owner if exclusive else None
    durable = durable and not exclusive
    queue = vhost.queues.get(name)
    if queue is not None:
        check_exclusive(vhost, queue, owner, strict=True)
        what = vhost.rs("queue", name)
        inequivalent(
            what,
            (("durable", durable, queue.durable), ("auto_delete", auto_delete, queue.auto_delete)),
        )
        # The queue type's arguments (rabbit_amqqueue:assert_args_equivalence/2).
        compared = QUEUE_TYPE_ARGUMENTS[queue_type(queue.arguments)]
        assert_args(what, compared, arguments, queue.arguments)
        vhost.queue_redeclared(queue)
        return queue, False
    limit = reached(vhost.limits, "max-queues", len(vhost.queues))
    if limit is not None:
        # rabbit_channel:check_vhost_queue_limit/2, for a queue that does not exist yet,
        # before its arguments are looked at.
        raise AMQPChannelError(
            PRECONDITION_FAILED,
            f"cannot declare queue '{name}': queue limit in vhost '{vhost.name}' ({limit}) "
            "is reached",
        )
    # Arguments are validated when the queue is created (rabbit_amqqueue:declare/6).
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and not isinstance(dlx, str | bytes):
        # rabbit_channel checks the DLX name itself (for permissions) first.
        raise AMQPChannelError(
            PRECONDITION_FAILED,
            f"invalid type '{arg_type(arguments, 'x-dead-letter-exchange')}' for arg "
            f"'x-dead-letter-exchange' in {vhost.rs('queue', name)}",
        )
    invalid = declare_error(kind, arguments)
    if invalid is not None:
        key, why = invalid
        raise AMQPChannelError(
            PRECONDITION_FAILED, f"invalid arg '{key}' for {vhost.rs('queue', name)}{why}"
        )
    if kind != "classic":
        # rabbit_quorum_queue:declare/2: a quorum queue is durable, not exclusive and not
        # auto-delete, checked in this order; a stream too (rabbit_stream_queue).
        for refused, bad in (
            ("auto-delete", auto_delete),
            ("exclusive-owner", exclusive),
            ("non-durable", not durable),
        ):
            if bad:
                raise AMQPChannelError(
                    PRECONDITION_FAILED,
                    f"invalid property '{refused}' for {vhost.rs('queue', name)}",
                )
    return vhost.create_queue(name, kind, durable, exclusive, auto_delete, arguments, owner), True


class QueueInUseError(AMQPChannelError):
    """queue.delete with if-unused of a queue that has consumers (``in_use``)."""


class QueueNotEmptyError(AMQPChannelError):
    """queue.delete with if-empty of a queue that has messages (``not_empty``)."""


def check_delete(vhost: VHost, queue: Queue, if_unused: bool, if_empty: bool) -> None:
    """queue.delete's conditions (rabbit_amqqueue:delete/4's ``in_use`` and ``not_empty``,
    406 on a channel); their own classes, so ``leveret ctl`` words them its way."""
    what = vhost.rs("queue", queue.name)
    if if_unused and queue.consumers:
        raise QueueInUseError(PRECONDITION_FAILED, f"{what} in use")
    if if_empty and queue.message_count:
        raise QueueNotEmptyError(PRECONDITION_FAILED, f"{what} not empty")


def delete_queue(actor: Actor, name: str, if_unused: bool, if_empty: bool) -> int:
    """queue.delete for ``actor``: configure permission, then (a missing queue is deleted
    already: 0 messages) exclusive access, :func:`check_delete`, and the vhost deletes it.
    Returns the number of messages it held."""
    actor.permit("configure", "queue", name)
    vhost = actor.vhost
    queue = vhost.queues.get(name)
    if queue is None:
        return 0
    check_exclusive(vhost, queue, actor.owner)
    check_delete(vhost, queue, if_unused, if_empty)
    return vhost.delete_queue(queue)


def purge(queue: Queue) -> int:
    """Purge ``queue``'s ready messages, unless its type refuses (a stream: 540).
    Returns how many went."""
    queue.check_purge()
    return queue.purge()


def purge_queue(actor: Actor, name: str) -> int:
    """queue.purge for ``actor``: read permission, the queue (404, 405), then
    :func:`purge`."""
    actor.permit("read", "queue", name)
    return purge(lookup_queue(actor.vhost, name, actor.owner))
