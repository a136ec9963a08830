"""Routing trace keys with the broker's own route function. Pure Python: no Spark here.

This is what every Spark partition of distinct keys runs (:func:`route_partition`): it builds
a :class:`Router` once from the broadcast :class:`~pipeline.topology.Topology` (one
:class:`~exchanges.projection.Projection` per vhost, by applying the topology events), then
calls :func:`leveret.exchanges.routing.route` for each key, so the answers are the broker's.

Per-binding attribution ("which bindings did this message match?") reuses the same route
function on an *attribution projection*: the same exchanges, and for every binding ``b`` a
marker queue ``\\0binding:<id>`` bound from ``b.source`` with ``b``'s routing key and
arguments (exchange-to-exchange bindings are kept as well, next to their marker). Routing a
key through it returns the markers of exactly the bindings that matched on the way: the walk
through exchange-to-exchange bindings, alternate exchanges (taken when nothing matched,
markers of E2E bindings included, which is the broker's rule), ``CC``/``BCC`` keys and every
exchange type's matcher (trie, dict, headers specs) are the broker's code. It costs one more
route per distinct key, and distinct keys are few.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    DestKind,
    ExchangeDeclared,
    ExchangeTypeCrashError,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route
from leveret.pipeline.topology import Topology, empty_projection, numbered_bindings

BINDING_PREFIX = "\x00binding:"

Headers = Mapping[str, Any] | None
KeyRow = Sequence[Any]  # (vhost, exchange, routing_key, headers JSON or None)


def parse_headers(raw: str | None) -> tuple[Headers, str | None]:
    """The headers table of a trace line (raw JSON text), and an error text if unusable."""
    if raw is None:
        return None, None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"headers are not JSON: {exc}"
    if value is None:
        return None, None
    if not isinstance(value, dict):
        return None, f"headers are not an object: {raw[:80]}"
    return value, None


def attribution_projection(
    projection: Projection, numbered: Iterable[tuple[int, Binding]]
) -> Projection:
    """A projection whose route result names the bindings matched (see the module doc)."""
    attribution = Projection()
    for exchange in projection.exchanges.values():
        attribution.apply(ExchangeDeclared(exchange))
        # The alternate exchange a policy sets (the exchange's own argument wins anyway).
        attribution.set_policy_alternate(exchange.name, projection.indexes[exchange.name].alternate)
    for binding_id, binding in numbered:
        marker = f"{BINDING_PREFIX}{binding_id}"
        attribution.apply(QueueDeclared(Queue(marker)))
        attribution.apply(
            BindingAdded(
                Binding(
                    binding.source, marker, DestKind.QUEUE, binding.routing_key, binding.arguments
                )
            )
        )
        if binding.kind is DestKind.EXCHANGE:
            attribution.apply(BindingAdded(binding))
    return attribution


class Router:
    """Routes ``(vhost, exchange, routing key, headers)`` through one topology.

    A vhost the topology does not know gets a fresh vhost's projection (predeclared exchanges
    only), as a broker would have.
    """

    __slots__ = ("_attribution", "_projections")

    def __init__(self, topology: Topology, bindings: bool = False) -> None:
        self._projections = topology.projections()
        self._attribution: dict[str, Projection] | None = None
        if bindings:
            per_vhost: dict[str, list[tuple[int, Binding]]] = {v: [] for v in self._projections}
            for binding_id, vhost, binding in numbered_bindings(self._projections):
                per_vhost[vhost].append((binding_id, binding))
            self._attribution = {
                vhost: attribution_projection(self._projections[vhost], numbered)
                for vhost, numbered in per_vhost.items()
            }

    def projection(self, vhost: str) -> Projection:
        """The vhost's projection (created empty, predeclared exchanges only, if unknown)."""
        projection = self._projections.get(vhost)
        if projection is None:
            projection = self._projections[vhost] = empty_projection()
        return projection

    def has_exchange(self, vhost: str, exchange: str) -> bool:
        """Whether ``exchange`` exists in ``vhost``."""
        return exchange in self.projection(vhost).exchanges

    def route(self, vhost: str, exchange: str, routing_key: str, headers: Headers) -> list[str]:
        """Queues reached, sorted: :func:`leveret.exchanges.routing.route` on the vhost's
        projection.

        A message an exchange keeps back reaches nothing from there, as the broker records
        it at publish time; one a type's module crashes on reaches nothing at all (the broker
        closes the publisher's connection)."""
        try:
            return sorted(route(self.projection(vhost), exchange, routing_key, headers))
        except ExchangeTypeCrashError:
            return []

    def matched_bindings(
        self, vhost: str, exchange: str, routing_key: str, headers: Headers
    ) -> list[int]:
        """Ids (:meth:`Topology.binding_table`) of the bindings the message matched, sorted."""
        if self._attribution is None:
            raise ValueError("this router was built without binding attribution")
        attribution = self._attribution.get(vhost)
        if attribution is None:
            return []
        try:
            names = route(attribution, exchange, routing_key, headers)
        except ExchangeTypeCrashError:
            return []
        size = len(BINDING_PREFIX)
        return sorted(int(name[size:]) for name in names if name.startswith(BINDING_PREFIX))


def route_partition(
    rows: Iterable[KeyRow],
    current: Topology,
    proposed: Topology | None = None,
    bindings: bool = True,
) -> Iterator[tuple[Any, ...]]:
    """Route every distinct key of one partition; routers are built once, here.

    Yields ``(vhost, exchange, routing_key, headers, queues, exchange_exists, bindings,
    proposed_queues, proposed_exchange_exists, error)`` (the ``ROUTE_SCHEMA`` of
    :mod:`leveret.pipeline.schema`); the proposed columns are None without a proposed topology, and
    ``bindings`` is None without attribution.
    """
    router = Router(current, bindings=bindings)
    other = Router(proposed) if proposed is not None else None
    # The routers are tens of thousands of long-lived containers: with the cyclic GC on, its
    # full collections walk them over and over (two thirds of the time at 10k bindings).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _route_rows(rows, router, other, bindings)
    finally:
        if gc_was_enabled:
            gc.enable()


def _route_rows(
    rows: Iterable[KeyRow], router: Router, other: Router | None, bindings: bool
) -> Iterator[tuple[Any, ...]]:
    for vhost, exchange, routing_key, raw_headers in rows:
        headers, error = parse_headers(raw_headers)
        queues = router.route(vhost, exchange, routing_key, headers)
        matched = (
            router.matched_bindings(vhost, exchange, routing_key, headers) if bindings else None
        )
        if other is None:
            proposed_queues, proposed_exists = None, None
        else:
            proposed_queues = other.route(vhost, exchange, routing_key, headers)
            proposed_exists = other.has_exchange(vhost, exchange)
        yield (
            vhost,
            exchange,
            routing_key,
            raw_headers,
            queues,
            router.has_exchange(vhost, exchange),
            matched,
            proposed_queues,
            proposed_exists,
            error,
        )


# -- Arrow: keys dictionaries in, routes out ---------------------------------------------------


def route_schema() -> Any:
    """The Arrow schema of routes (``leveret.pipeline.schema.ROUTE_SCHEMA``)."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    return pa.schema(
        [
            pa.field("key", pa.int64(), nullable=False),
            pa.field("queues", pa.list_(pa.string()), nullable=False),
            pa.field("exchange_exists", pa.bool_(), nullable=False),
            pa.field("bindings", pa.list_(pa.int64())),
            pa.field("proposed_queues", pa.list_(pa.string())),
            pa.field("proposed_exchange_exists", pa.bool_()),
            pa.field("error", pa.string()),
        ]
    )


def route_ids(
    rows: Iterable[Sequence[Any]],
    current: Topology,
    proposed: Topology | None = None,
    bindings: bool = True,
) -> Iterator[tuple[Any, ...]]:
    """Routes of ``(key id, vhost, exchange, routing_key, headers)`` rows: one
    ``(key id, queues, exchange_exists, bindings, proposed_queues, proposed_exchange_exists,
    error)`` tuple (``ROUTE_SCHEMA``) per row.

    What runs on the driver (:func:`route_table`) and, for many keys, in every Spark
    partition (``mapPartitions``): the routers are built once per call and every distinct key
    (several ids may name one) is routed once with :func:`leveret.exchanges.routing.route`.
    """
    router = Router(current, bindings=bindings)
    other = Router(proposed) if proposed is not None else None
    routed: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # see route_partition
    try:
        for ident, *fields in rows:
            key = tuple(fields)
            result = routed.get(key)
            if result is None:
                (full,) = _route_rows([key], router, other, bindings)
                result = routed[key] = full[4:]
            yield (ident, *result)
    finally:
        if gc_was_enabled:
            gc.enable()


def route_table(
    keys: Any, current: Topology, proposed: Topology | None = None, bindings: bool = True
) -> Any:
    """Routes (an Arrow table of :func:`route_schema`) of a keys dictionary (an Arrow table:
    ``key, vhost, exchange, routing_key, headers``), on the driver."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    schema = route_schema()
    names = ("key", "vhost", "exchange", "routing_key", "headers")
    rows = zip(*(keys.column(name).to_pylist() for name in names), strict=True)
    columns: list[list[Any]] = [[] for _ in schema.names]
    for routed in route_ids(rows, current, proposed, bindings):
        for column, value in zip(columns, routed, strict=True):
            column.append(value)
    return pa.table(
        [pa.array(column, field.type) for column, field in zip(columns, schema, strict=True)],
        schema=schema,
    )
