"""The topology projection: what routing reads, built only by applying events.

``Projection.apply(event)`` is the single mutator, used both for live commands and for
replaying the binding log at start-up, so the two cannot drift apart. Besides the plain
tables (exchanges, queues, bindings) it keeps one routing index per exchange, split into
a queue side and an exchange side (E2E bindings): the common publish, to an exchange with
no E2E bindings, then only touches precomputed sets of queue names.

Invariant: every stored binding has an existing source and destination. Deleting a queue
or an exchange deletes the bindings that point at it, and a ``BindingAdded`` whose ends do
not exist (or that involves the default exchange) is ignored, so a route can only return
queues that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeDeleted,
    ExchangeType,
    Queue,
    QueueDeclared,
    QueueDeleted,
    freeze,
)
from leveret.exchanges.refs import RefSet
from leveret.exchanges.types import TYPES
from leveret.exchanges.types.base import BindingIndex, Keeps, Router
from leveret.exchanges.types.direct import DirectIndex

DEFAULT_EXCHANGE = ""

BindingKey = tuple[Any, ...]


class ExchangeIndex:
    """Everything routing needs about one exchange, precomputed.

    ``queues`` and ``exchanges`` are two indexes of the exchange's type, one per destination
    kind. ``plain_direct`` marks the hot case (a direct exchange with no E2E bindings) where
    ``route`` only looks up ``direct[routing_key]``. ``keeps`` is the type's hook for
    keeping a message back (None for every type that routes at once).
    """

    __slots__ = (
        "alternate",
        "direct",
        "e2e",
        "exchanges",
        "is_default",
        "keeps",
        "name",
        "plain_direct",
        "queues",
        "router",
        "type",
    )

    def __init__(self, exchange: Exchange) -> None:
        self.name = exchange.name
        self.type = exchange.type
        self.alternate = exchange.alternate_exchange
        self.is_default = exchange.name == DEFAULT_EXCHANGE
        kind = TYPES[exchange.type]
        self.queues: BindingIndex
        self.exchanges: BindingIndex
        self.queues, self.exchanges = kind.indexes(exchange.arguments)
        self.router: Router = kind.route
        self.keeps: Keeps | None = kind.keeps
        self.e2e = 0  # number of bindings to exchanges
        self.direct: dict[str, RefSet] = (
            self.queues.by_key if isinstance(self.queues, DirectIndex) else {}
        )
        self.plain_direct = False
        self._update_flags()

    def _update_flags(self) -> None:
        self.plain_direct = (
            self.type == ExchangeType.DIRECT
            and self.keeps is None
            and not self.is_default
            and self.e2e == 0
        )

    def bind(self, binding: Binding) -> None:
        """Add ``binding`` (which starts at this exchange) to the right index."""
        if binding.kind is DestKind.QUEUE:
            self.queues.bind(binding)
        else:
            self.exchanges.bind(binding)
            self.e2e += 1
            self._update_flags()

    def unbind(self, binding: Binding) -> None:
        """Remove ``binding`` (known to be present) from the right index."""
        if binding.kind is DestKind.QUEUE:
            self.queues.unbind(binding)
        else:
            self.exchanges.unbind(binding)
            self.e2e -= 1
            self._update_flags()

    def dump(self) -> Any:
        return (self.type, self.alternate, self.e2e, self.queues.dump(), self.exchanges.dump())


class Projection:
    """The in-memory topology: exchanges, queues, bindings and per-exchange routing indexes.

    Mutate only through :meth:`apply` (and :meth:`set_policy_alternate` for policies).
    Everything else is a query.
    """

    __slots__ = (
        "_bindings",
        "_from",
        "_to",
        "exchanges",
        "indexes",
        "keeping",
        "queue_routes",
        "queues",
    )

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.indexes: dict[str, ExchangeIndex] = {}
        # For the default exchange: queue name -> frozenset({name}), so that a publish
        # through it returns a shared set instead of allocating one.
        self.queue_routes: dict[str, frozenset[str]] = {}
        # Exchanges whose type may keep a message back (a ``keeps`` hook): while there is
        # none, a publish need not ask which exchanges kept it (routing.route_kept).
        self.keeping: set[str] = set()
        self._bindings: dict[BindingKey, Binding] = {}
        self._from: dict[str, dict[BindingKey, Binding]] = {}
        self._to: dict[tuple[DestKind, str], dict[BindingKey, Binding]] = {}

    @classmethod
    def replay(cls, events: Iterable[Event]) -> Projection:
        """Build a projection by applying ``events`` in order (start-up replay)."""
        projection = cls()
        for event in events:
            projection.apply(event)
        return projection

    def apply(self, event: Event) -> None:
        """Apply one topology event. This is the projection's only mutator of the
        topology (:meth:`set_policy_alternate` overlays policies on it)."""
        match event:
            case BindingAdded(binding):
                self._add_binding(binding)
            case BindingRemoved(binding):
                self._remove_binding(binding.key)
            case ExchangeDeclared(exchange):
                # Re-declaring keeps the first: the broker has checked equivalence already.
                if exchange.name not in self.exchanges:
                    index = ExchangeIndex(exchange)
                    self.exchanges[exchange.name] = exchange
                    self.indexes[exchange.name] = index
                    if index.keeps is not None:
                        self.keeping.add(exchange.name)
            case ExchangeDeleted(name):
                if name in self.exchanges:
                    for key in [
                        *self._from.get(name, ()),
                        *self._to.get((DestKind.EXCHANGE, name), ()),
                    ]:
                        self._remove_binding(key)
                    del self.exchanges[name]
                    del self.indexes[name]
                    self.keeping.discard(name)
            case QueueDeclared(queue):
                if queue.name not in self.queues:
                    self.queues[queue.name] = queue
                    self.queue_routes[queue.name] = frozenset((queue.name,))
            case QueueDeleted(name):
                if name in self.queues:
                    for key in list(self._to.get((DestKind.QUEUE, name), ())):
                        self._remove_binding(key)
                    del self.queues[name]
                    del self.queue_routes[name]
            case _:
                raise TypeError(f"not a topology event: {event!r}")

    def set_policy_alternate(self, exchange: str, alternate: str | None) -> None:
        """Give ``exchange`` the alternate exchange of its policy (None: no policy, or one
        without ``alternate-exchange``). The exchange's own argument wins
        (rabbit_policy:get_arg/3). Not a topology event: policies are kept beside the
        topology, and the broker calls this again whenever they or the exchange change."""
        index = self.indexes.get(exchange)
        if index is not None:
            index.alternate = self.exchanges[exchange].alternate_exchange or alternate

    def _add_binding(self, binding: Binding) -> None:
        key = binding.key
        if key in self._bindings:
            return  # binding twice is one binding
        index = self.indexes.get(binding.source)
        destinations = self.queues if binding.kind is DestKind.QUEUE else self.exchanges
        if index is None or index.is_default or binding.destination not in destinations:
            return  # see the module invariant
        if binding.kind is DestKind.EXCHANGE and binding.destination == DEFAULT_EXCHANGE:
            return
        self._bindings[key] = binding
        self._from.setdefault(binding.source, {})[key] = binding
        self._to.setdefault((binding.kind, binding.destination), {})[key] = binding
        index.bind(binding)

    def _remove_binding(self, key: BindingKey) -> None:
        binding = self._bindings.pop(key, None)
        if binding is None:
            return
        _pop_nested(self._from, binding.source, key)
        _pop_nested(self._to, (binding.kind, binding.destination), key)
        self.indexes[binding.source].unbind(binding)

    # -- queries ---------------------------------------------------------------------

    def has_binding(self, binding: Binding) -> bool:
        """Whether this exact binding (same key and arguments) exists."""
        return binding.key in self._bindings

    def bindings(self) -> Iterator[Binding]:
        """Every binding, in insertion order."""
        return iter(self._bindings.values())

    def bindings_from(self, exchange_name: str) -> list[Binding]:
        """Bindings whose source is ``exchange_name``."""
        return list(self._from.get(exchange_name, {}).values())

    def bindings_to(self, kind: DestKind, name: str) -> list[Binding]:
        """Bindings whose destination is the queue or exchange ``name``."""
        return list(self._to.get((kind, name), {}).values())

    def has_bindings_from(self, exchange_name: str) -> bool:
        """Whether ``exchange_name`` is the source of any binding (auto-delete, if-unused)."""
        return exchange_name in self._from

    def snapshot(self) -> Any:
        """A comparable, order-independent picture of the whole state, indexes included."""
        return (
            frozenset((name, _exchange_identity(x)) for name, x in self.exchanges.items()),
            frozenset((name, _queue_identity(q)) for name, q in self.queues.items()),
            frozenset(self._bindings),
            frozenset((name, index.dump()) for name, index in self.indexes.items()),
            frozenset(self.queue_routes.items()),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Projection):
            return NotImplemented
        return bool(self.snapshot() == other.snapshot())

    __hash__ = None  # type: ignore[assignment]  # mutable


def _pop_nested(table: dict[Any, dict[BindingKey, Binding]], outer: Any, key: BindingKey) -> None:
    inner = table.get(outer)
    if inner is not None:
        inner.pop(key, None)
        if not inner:
            del table[outer]  # keeps has_bindings_from a single membership test


def _exchange_identity(exchange: Exchange) -> Any:
    return (
        exchange.type,
        exchange.durable,
        exchange.auto_delete,
        exchange.internal,
        freeze(exchange.arguments),
    )


def _queue_identity(queue: Queue) -> Any:
    return (queue.durable, queue.exclusive, queue.auto_delete, freeze(queue.arguments))
