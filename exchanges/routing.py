"""Pure route functions: which queues does a published message reach?

Each exchange type has a router that reads only its own index (RabbitMQ's
``rabbit_exchange_type:route``; :mod:`leveret.exchanges.types`), kept on the exchange's index.
:func:`route` adds the rules shared by all types, once, as ``rabbit_exchange:route/3`` does:

* exchange-to-exchange bindings are walked as a work list with a visited set, so cycles are
  safe, and destinations are collected in a set, so every queue gets one copy;
* every visited exchange whose own routing found nothing hands over to its alternate
  exchange (a missing one is ignored);
* the ``CC`` and ``BCC`` headers add routing keys for the whole route
  (``mc_amqpl:message/4`` stores ``[RoutingKey | CC ++ BCC]``, which every exchange type
  reads; docs: sender-selected.md);
* the default exchange (``""``) routes to the queue named by each routing key, if it exists;
* an exchange whose type keeps the message back (its ``keeps`` hook says so) routes nowhere
  from there now, so its alternate exchange applies; :func:`route_kept` tells the caller
  which exchanges keep it, to route it from each of them later.

Nothing here does I/O or mutates the projection.
"""

from __future__ import annotations

from collections.abc import Iterable

from leveret.exchanges.model import EMPTY
from leveret.exchanges.projection import ExchangeIndex, Projection
from leveret.exchanges.types.base import Content, Headers, Names

# The queues a message reaches now, and the exchanges on the way that keep it back (each
# once, in the order reached), which it is to be routed from later.
Routed = tuple[Names, tuple[str, ...]]


def sender_selected_keys(routing_key: str, headers: Headers) -> tuple[str, ...]:
    """The routing key followed by the ``CC`` and ``BCC`` keys, without duplicates.

    As ``rabbit_basic:header_routes/1``, only string elements of the arrays count
    (pamqp decodes a longstr that is not UTF-8 to ``bytes``).
    """
    keys = [routing_key]
    if headers is not None:
        for name in ("CC", "BCC"):
            values = headers.get(name)
            if isinstance(values, list | tuple):
                for value in values:
                    if isinstance(value, str):
                        keys.append(value)
                    elif isinstance(value, bytes):
                        keys.append(value.decode("utf-8", "replace"))
    return tuple(dict.fromkeys(keys))


def route(
    projection: Projection,
    exchange_name: str,
    routing_key: str,
    headers: Headers = None,
    content: Content = None,
) -> Names:
    """Names of the queues that a message published to ``exchange_name`` reaches now.

    ``content`` (the raw content header) matters only to consistent-hash exchanges that
    hash a header or property; without it those see the message as having none. An
    exchange that keeps the message back routes nowhere from there (:func:`route_kept` also
    names it). Raises :class:`leveret.exchanges.model.ExchangeTypeCrashError` where a type's
    ``keeps`` hook crashes, as the plugin does.

    An unknown exchange reaches nothing (the broker checks existence first). The result is
    shared when it comes straight from an index: treat it as read-only.
    """
    index = projection.indexes.get(exchange_name)
    if index is None:
        return EMPTY
    if headers is not None and ("CC" in headers or "BCC" in headers):
        keys = sender_selected_keys(routing_key, headers)
        return _walk(projection, index, keys, headers, content)
    if index.plain_direct:
        # The hot path: a direct exchange without E2E bindings. Two dict lookups, and the
        # result is the index's own frozenset.
        refs = index.direct.get(routing_key)
        if refs is not None:
            return refs.frozen or refs.names()
        if index.alternate is None:
            return EMPTY
    elif index.is_default:
        return projection.queue_routes.get(routing_key, EMPTY)
    elif index.e2e == 0 and (index.keeps is None or not index.keeps(headers)):
        # One exchange, its type's router (one that may keep a message asks first).
        found = index.router(index.queues, (routing_key,), headers, content)
        if found or index.alternate is None:
            return found
    return _walk(projection, index, (routing_key,), headers, content)


def route_kept(
    projection: Projection,
    exchange_name: str,
    routing_key: str,
    headers: Headers = None,
    content: Content = None,
) -> Routed:
    """:func:`route`, and the exchanges on the way that keep the message back, which the
    caller routes it from later (each is reached once, so named once)."""
    index = projection.indexes.get(exchange_name)
    if index is None:
        return EMPTY, ()
    if index.e2e == 0 and index.alternate is None:
        # The route visits this exchange only: kept by it, or route()'s fast paths.
        keeps = index.keeps
        if keeps is not None and keeps(headers):
            return EMPTY, (exchange_name,)
        return route(projection, exchange_name, routing_key, headers, content), ()
    if headers is not None and ("CC" in headers or "BCC" in headers):
        keys = sender_selected_keys(routing_key, headers)
    else:
        keys = (routing_key,)
    kept: list[str] = []
    return _walk(projection, index, keys, headers, content, kept), tuple(kept)


def _walk(
    projection: Projection,
    first: ExchangeIndex,
    keys: tuple[str, ...],
    headers: Headers,
    content: Content,
    kept: list[str] | None = None,
) -> Names:
    """The general case: E2E bindings, alternate exchanges, several routing keys, exchanges
    that may keep the message back (appended to ``kept``, when given)."""
    indexes = projection.indexes
    queues: set[str] = set()
    seen = {first.name}
    work = [first]
    while work:
        index = work.pop()
        exchanges: Names = EMPTY
        keeps = index.keeps
        if index.is_default:
            found: Names = {key for key in keys if key in projection.queues}
        elif keeps is not None and keeps(headers):
            # Kept back (rabbit_exchange_type:route/2 gives []): routed nowhere from here now.
            found = EMPTY
            if kept is not None:
                kept.append(index.name)
        else:
            router = index.router
            found = router(index.queues, keys, headers, content)
            if index.e2e:
                exchanges = router(index.exchanges, keys, headers, content)
        queues.update(found)
        targets: Iterable[str]
        if exchanges:
            targets = exchanges
        elif not found and index.alternate is not None:
            # rabbit_exchange:process_alternate/2: only when this exchange routed nowhere.
            targets = (index.alternate,)
        else:
            continue
        for name in targets:
            if name not in seen:
                seen.add(name)
                target = indexes.get(name)
                if target is not None:  # a missing exchange (or AE) is ignored
                    work.append(target)
    return queues or EMPTY
