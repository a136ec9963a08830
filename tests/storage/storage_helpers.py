"""Shared strategies and helpers for the storage tests (imported by file name: no package,
so that ``tests/storage`` never shadows the real ``storage`` package)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

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
)
from leveret.exchanges.projection import Projection

# The broker declares these in every vhost and never logs them (broker/vhost.py).
BUILTINS = (
    Exchange("", ExchangeType.DIRECT),
    Exchange("amq.direct", ExchangeType.DIRECT),
    Exchange("amq.fanout", ExchangeType.FANOUT),
    Exchange("amq.topic", ExchangeType.TOPIC),
    Exchange("amq.headers", ExchangeType.HEADERS),
)


def same(a: Any, b: Any) -> bool:
    """Equal *and* of the same types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, Decimal):
        return str(a) == str(b)  # also the exponent: 1.0 and 1.00 are different values
    if isinstance(a, datetime):
        return bool(a == b and a.utcoffset() == b.utcoffset())
    return bool(a == b)


timezones = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30))])
scalars = st.one_of(
    st.text(),
    st.binary(),
    st.binary().map(bytearray),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=timezones),
    st.none(),
)
field_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
tables = st.dictionaries(st.text(), field_values, max_size=5)
# Binding arguments are hashed (Binding.key): a bytearray there cannot be, so it is left out.
binding_tables = st.dictionaries(
    st.text(),
    st.recursive(
        scalars.filter(lambda v: not isinstance(v, bytearray)),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=6,
    ),
    max_size=3,
)

names = st.text(max_size=12)
exchanges = st.builds(
    Exchange,
    names,
    st.sampled_from(list(ExchangeType)),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    tables,
)
queues = st.builds(Queue, names, st.booleans(), st.booleans(), st.booleans(), tables)
bindings = st.builds(Binding, names, names, st.sampled_from(list(DestKind)), names, binding_tables)
events: st.SearchStrategy[Event] = st.one_of(
    exchanges.map(ExchangeDeclared),
    names.map(ExchangeDeleted),
    queues.map(QueueDeclared),
    names.map(QueueDeleted),
    bindings.map(BindingAdded),
    bindings.map(BindingRemoved),
)

# -- broker-valid topology streams ----------------------------------------------------------

POOL = ["a", "b", "c"]
SOURCES = [*POOL, "amq.direct", "amq.topic", ""]
ops = st.lists(
    st.tuples(
        # Weighted towards declares and binds, so that streams build something to delete.
        st.sampled_from(
            ["xdecl", "qdecl", "qdecl", "bind", "bind", "bind", "unbind", "xdel", "qdel"]
        ),
        st.sampled_from(SOURCES),
        st.sampled_from(POOL),
        st.sampled_from(list(DestKind)),
        st.sampled_from(["", "k", "k.#"]),
        st.sampled_from([{}, {"x-match": "any", "h": 1}, {"h": True}]),
        st.sampled_from(["/", "other"]),
    ),
    min_size=10,
    max_size=60,
)


def fresh_projection() -> Projection:
    """A vhost's projection at start-up, before replay: the built-in exchanges."""
    projection = Projection()
    for exchange in BUILTINS:
        projection.apply(ExchangeDeclared(exchange))
    return projection


def broker_stream(
    raw: list[tuple[str, str, str, DestKind, str, dict[str, Any], str]],
) -> list[tuple[str, Event]]:
    """Turn random operations into a stream the broker could log: durable entities only,
    never a built-in declared, and bindings only while both ends exist."""
    live: dict[str, Projection] = {}
    out: list[tuple[str, Event]] = []
    # Every name declared first, so that most random operations do something.
    prelude: list[tuple[str, str, str, DestKind, str, dict[str, Any], str]] = [
        (op, "", name, DestKind.QUEUE, "", {}, "/") for op in ("xdecl", "qdecl") for name in POOL
    ]
    for op, source, name, kind, key, args, vhost in prelude + raw:
        projection = live.setdefault(vhost, fresh_projection())
        event: Event
        if op == "xdecl":
            event = ExchangeDeclared(Exchange(name, ExchangeType.TOPIC, arguments=args))
        elif op == "xdel":
            event = ExchangeDeleted(name)
        elif op == "qdecl":
            event = QueueDeclared(Queue(name, durable=True, arguments=args))
        elif op == "qdel":
            event = QueueDeleted(name)
        else:
            binding = Binding(source, name, kind, key, args)
            ends = projection.queues if kind is DestKind.QUEUE else projection.exchanges
            if source not in projection.exchanges or name not in ends:
                continue
            event = BindingAdded(binding) if op == "bind" else BindingRemoved(binding)
        projection.apply(event)
        out.append((vhost, event))
    return out


VHOSTS = ("/", "other", "v2")  # always present, so that "no events" equals "only built-ins"


def project(records: list[tuple[str, Event]]) -> dict[str, Any]:
    """Snapshots per vhost of the projections built by replaying ``records``."""
    projections = {vhost: fresh_projection() for vhost in VHOSTS}
    for vhost, event in records:
        projections.setdefault(vhost, fresh_projection()).apply(event)
    return {vhost: p.snapshot() for vhost, p in projections.items()}
