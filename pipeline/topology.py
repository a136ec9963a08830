"""Topology sources, read into topology events and projections. Pure Python: no Spark here.

A topology is what the broker routes with: exchanges, queues and bindings per vhost. The
pipeline reads it from:

* ``leveret log dump`` output: JSON lines as written by ``leveret.storage.records.event_to_json``,
  one event per line (``{"event": "binding.added", "vhost": "/", "source": ...}``), replayed
  in order, deletions included;
* a RabbitMQ ``definitions.json`` export (``exchanges``, ``queues``, ``bindings`` and
  ``policies`` lists, with ``vhost`` on each item, or none in a single-vhost export);
* already decoded dump objects (an iterable of dicts): what ``leveret analyze`` passes after
  reading a Leveret data dir's binding log through ``storage`` (the pipeline never reads the
  binary log itself), plus ``{"event": "policy.set", ...}`` objects for the policies saved
  beside it.

Policies matter to routing through one key, ``alternate-exchange``: the projections give
every exchange the alternate exchange its policy sets (:mod:`leveret.exchanges.policies`, the
broker's rules; an exchange's own argument wins).

Either way the result is a :class:`Topology`: ``(vhost, event)`` pairs of
:mod:`leveret.exchanges.model` events that :meth:`Topology.projections` applies to a fresh
:class:`~exchanges.projection.Projection` per vhost, after the exchanges every broker vhost
predeclares (``""``, ``amq.direct``, ... , which neither source has to list).

Argument values come back with their Python types as far as JSON allows: the dump's tagged
forms (``{"$bytes": base64}``, ``{"$decimal": "1.5"}``, ``{"$datetime": iso}``,
``{"$float": "nan"}``) are decoded; plain JSON numbers, strings, booleans, lists and objects
stay as they are.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from leveret.exchanges import fields
from leveret.exchanges.chash import hash_on
from leveret.exchanges.model import (
    PREDECLARED_EXCHANGES,
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
from leveret.exchanges.policies import Policy, PolicyError, apply_alternates
from leveret.exchanges.policies import parse as parse_policy
from leveret.exchanges.projection import Projection
from leveret.exchanges.types import TYPES, parse_type

DEFAULT_VHOST = "/"

_DEST_KINDS = {k.value: k for k in DestKind}


class SourceError(ValueError):
    """A topology source that cannot be read (the message says what to do instead)."""


@dataclass(frozen=True, slots=True)
class BindingRow:
    """One binding of the final topology, numbered for per-binding reports."""

    binding_id: int
    vhost: str
    source: str
    destination: str
    destination_type: str
    routing_key: str
    arguments: str  # JSON, for display


@dataclass(frozen=True)
class Topology:
    """Topology events per vhost, in log order, plus notes about what was left out.

    Immutable and picklable: the job broadcasts it and every partition builds its own
    projections from it.
    """

    events: tuple[tuple[str, Event], ...]
    vhost_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    name: str = ""
    policies: tuple[Policy, ...] = ()

    def vhosts(self) -> list[str]:
        """Every vhost the source mentions, in order of first appearance."""
        seen = dict.fromkeys(self.vhost_names)
        seen.update(dict.fromkeys(vhost for vhost, _ in self.events))
        seen.update(dict.fromkeys(policy.vhost for policy in self.policies))
        return list(seen) or [DEFAULT_VHOST]

    def projections(self) -> dict[str, Projection]:
        """A projection per vhost: the predeclared exchanges, then the events in order,
        then the alternate exchanges the vhost's policies set."""
        out = {vhost: empty_projection() for vhost in self.vhosts()}
        for vhost, event in self.events:
            out[vhost].apply(event)
        if self.policies:
            for vhost, projection in out.items():
                apply_alternates(projection, (p for p in self.policies if p.vhost == vhost))
        return out

    def binding_table(
        self, projections: Mapping[str, Projection] | None = None
    ) -> list[BindingRow]:
        """The bindings that exist after replay, numbered in a deterministic order.

        The order is vhosts in order of appearance, then each projection's binding order
        (insertion order), so the driver and every executor number them the same way.
        """
        projections = self.projections() if projections is None else projections
        return [
            BindingRow(
                binding_id=binding_id,
                vhost=vhost,
                source=binding.source,
                destination=binding.destination,
                destination_type=binding.kind.value,
                routing_key=binding.routing_key,
                arguments=arguments_json(binding.arguments),
            )
            for binding_id, vhost, binding in numbered_bindings(projections)
        ]

    def queue_table(
        self, projections: Mapping[str, Projection] | None = None
    ) -> list[tuple[str, str]]:
        """``(vhost, queue)`` for every queue that exists after replay."""
        projections = self.projections() if projections is None else projections
        return [(vhost, name) for vhost, p in projections.items() for name in p.queues]

    def exchange_table(
        self, projections: Mapping[str, Projection] | None = None
    ) -> list[tuple[str, str, str]]:
        """``(vhost, exchange, type)`` for every exchange after replay, predeclared included."""
        projections = self.projections() if projections is None else projections
        return [
            (vhost, name, exchange.type)
            for vhost, p in projections.items()
            for name, exchange in p.exchanges.items()
        ]

    def describe(self, projections: Mapping[str, Projection] | None = None) -> str:
        """One line for the log: vhosts, queues, bindings, notes."""
        projections = self.projections() if projections is None else projections
        queues = sum(len(p.queues) for p in projections.values())
        bindings = sum(1 for p in projections.values() for _ in p.bindings())
        text = f"{len(projections)} vhost(s), {queues:,} queues, {bindings:,} bindings"
        return text + (f", {len(self.notes)} note(s)" if self.notes else "")


def numbered_bindings(projections: Mapping[str, Projection]) -> Iterator[tuple[int, str, Binding]]:
    """``(binding_id, vhost, binding)`` for every binding, in :meth:`Topology.binding_table`
    order: vhosts in order, then each projection's insertion order."""
    binding_id = 0
    for vhost, projection in projections.items():
        for binding in projection.bindings():
            yield binding_id, vhost, binding
            binding_id += 1


def empty_projection() -> Projection:
    """A projection holding only the predeclared exchanges, as a fresh broker vhost."""
    return Projection.replay(ExchangeDeclared(exchange) for exchange in PREDECLARED_EXCHANGES)


# -- argument values ---------------------------------------------------------------------------


def value_from_json(value: Any) -> Any:
    """The field value of a dump's plain-JSON view (inverse of
    ``leveret.storage.records.value_to_json``).

    ``{"$bytes": b64}`` -> bytes, ``{"$decimal": s}`` -> Decimal, ``{"$datetime": iso}`` ->
    datetime, ``{"$float": "nan"}`` -> float, ``{"$amqp": b64}`` -> the deep table or array
    whose AMQP octets it holds; other objects are tables, lists are arrays.
    """
    if isinstance(value, Mapping):
        if len(value) == 1:
            ((tag, payload),) = value.items()
            if tag == "$bytes":
                return base64.b64decode(payload)
            if tag == "$decimal":
                return Decimal(payload)
            if tag == "$datetime":
                return datetime.fromisoformat(payload)
            if tag == "$float":
                return float(payload)
            if tag == "$amqp":
                return fields.decode_value(base64.b64decode(payload))
        return {str(k): value_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [value_from_json(v) for v in value]
    return value


#: Levels of tables and arrays :func:`arguments_json` writes out (json.dumps recurses).
JSON_NESTING_SHOWN = 100


def _jsonable(value: Any, depth: int = 0) -> Any:
    if isinstance(value, Mapping | list | tuple) and depth >= JSON_NESTING_SHOWN:
        return f"(nested more than {JSON_NESTING_SHOWN} levels deep)"
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Decimal | datetime):
        return str(value)
    return value


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """Binding or exchange arguments as compact, sorted JSON (for tables and the report)."""
    return json.dumps(_jsonable(arguments), sort_keys=True, separators=(",", ":"))


def _arguments(obj: Mapping[str, Any], what: str) -> dict[str, Any]:
    raw = obj.get("arguments") or {}
    if not isinstance(raw, Mapping):
        raise SourceError(f"{what}: arguments must be an object, not {raw!r}")
    return {str(k): value_from_json(v) for k, v in raw.items()}


# -- leveret log dump --------------------------------------------------------------------------


def _exchange(obj: Mapping[str, Any], notes: list[str], vhost: str) -> Exchange | None:
    name = str(obj["name"])
    kind = parse_type(str(obj.get("type", "")))
    if kind is None:
        notes.append(
            f"exchange {name!r} in vhost {vhost!r} has type {obj.get('type')!r}, which Leveret "
            "does not route: it and its bindings are left out (its traffic counts as unroutable)"
        )
        return None
    arguments = _arguments(obj, f"exchange {name!r}")
    module = TYPES[kind]
    routes_as = module if module.wraps is None else module.wraps(arguments)
    if routes_as is None:
        notes.append(
            f"exchange {name!r} in vhost {vhost!r} is an {kind} exchange whose arguments "
            f"({arguments!r}) name no type it can route as: it and its bindings are left out "
            "(its traffic counts as unroutable)"
        )
        return None
    if routes_as.kind == ExchangeType.CONSISTENT_HASH and hash_on(arguments) is not None:
        # The trace keeps no message properties, and header values without their AMQP
        # types, which the hash covers: such an exchange's choices cannot be replayed.
        notes.append(
            f"exchange {name!r} in vhost {vhost!r} hashes a message header or property, "
            "which the trace does not record with its type: it and its bindings are left "
            "out (its traffic counts as unroutable)"
        )
        return None
    return Exchange(
        name,
        kind,
        durable=bool(obj.get("durable", True)),
        auto_delete=bool(obj.get("auto_delete", False)),
        internal=bool(obj.get("internal", False)),
        arguments=arguments,
    )


def _queue(obj: Mapping[str, Any]) -> Queue:
    name = str(obj["name"])
    return Queue(
        name,
        durable=bool(obj.get("durable", True)),
        exclusive=bool(obj.get("exclusive", False)),
        auto_delete=bool(obj.get("auto_delete", False)),
        arguments=_arguments(obj, f"queue {name!r}"),
    )


def _binding(obj: Mapping[str, Any]) -> Binding:
    kind = _DEST_KINDS.get(str(obj.get("destination_type", "queue")))
    if kind is None:
        raise SourceError(f"binding {obj!r}: destination_type must be 'queue' or 'exchange'")
    return Binding(
        source=str(obj["source"]),
        destination=str(obj["destination"]),
        kind=kind,
        routing_key=str(obj.get("routing_key", "")),
        arguments=_arguments(obj, "binding"),
    )


def event_from_dump(obj: Mapping[str, Any], notes: list[str]) -> tuple[str, Event] | None:
    """``(vhost, event)`` from one ``leveret log dump`` object; None (and a note) to skip it."""
    vhost = str(obj.get("vhost", DEFAULT_VHOST))
    kind = obj.get("event")
    try:
        if kind == "exchange.declared":
            exchange = _exchange(obj, notes, vhost)
            return None if exchange is None else (vhost, ExchangeDeclared(exchange))
        if kind == "exchange.deleted":
            return vhost, ExchangeDeleted(str(obj["name"]))
        if kind == "queue.declared":
            return vhost, QueueDeclared(_queue(obj))
        if kind == "queue.deleted":
            return vhost, QueueDeleted(str(obj["name"]))
        if kind == "binding.added":
            return vhost, BindingAdded(_binding(obj))
        if kind == "binding.removed":
            return vhost, BindingRemoved(_binding(obj))
    except KeyError as exc:
        raise SourceError(f"dump event {obj!r} lacks the field {exc}") from None
    notes.append(f"unknown dump event {kind!r} skipped")
    return None


def _policy(obj: Mapping[str, Any], notes: list[str], vhost: str) -> Policy | None:
    """A policy item (definitions.json, or a ``policy.set`` dump object); None and a note
    for one the broker would refuse."""
    name = str(obj.get("name", ""))
    try:
        return parse_policy(vhost, name, obj)
    except PolicyError as exc:
        reason = exc.reason.strip().replace("\n\n", ": ")
        notes.append(f"policy {name!r} in vhost {vhost!r} left out: {reason}")
        return None


def from_dump(objects: Iterable[Mapping[str, Any]], name: str = "") -> Topology:
    """A topology from ``leveret log dump`` objects (already parsed JSON), in log order."""
    notes: list[str] = []
    events = []
    policies: dict[tuple[str, str], Policy] = {}
    for obj in objects:
        if not isinstance(obj, Mapping):
            raise SourceError(f"dump line is not a JSON object: {obj!r}")
        if obj.get("event") == "policy.set":
            policy = _policy(obj, notes, str(obj.get("vhost", DEFAULT_VHOST)))
            if policy is not None:
                policies[(policy.vhost, policy.name)] = policy
            continue
        event = event_from_dump(obj, notes)
        if event is not None:
            events.append(event)
    return Topology(tuple(events), notes=tuple(notes), name=name, policies=tuple(policies.values()))


# -- RabbitMQ definitions.json -----------------------------------------------------------------


def from_definitions(document: Mapping[str, Any], name: str = "") -> Topology:
    """A topology from a RabbitMQ ``definitions.json`` export.

    Exchanges come first, then queues, then bindings (a binding needs both ends). Items without
    a ``vhost`` (a single-vhost export) belong to ``/``.
    """
    notes: list[str] = []
    events: list[tuple[str, Event]] = []
    vhosts = [str(v["name"]) for v in document.get("vhosts", ()) if "name" in v]
    for obj in document.get("exchanges", ()):
        vhost = str(obj.get("vhost", DEFAULT_VHOST))
        exchange = _exchange(obj, notes, vhost)
        if exchange is not None:
            events.append((vhost, ExchangeDeclared(exchange)))
    for obj in document.get("queues", ()):
        events.append((str(obj.get("vhost", DEFAULT_VHOST)), QueueDeclared(_queue(obj))))
    for obj in document.get("bindings", ()):
        events.append((str(obj.get("vhost", DEFAULT_VHOST)), BindingAdded(_binding(obj))))
    policies = []
    for obj in document.get("policies", ()):
        policy = _policy(obj, notes, str(obj.get("vhost", DEFAULT_VHOST)))
        if policy is not None:
            policies.append(policy)
    return Topology(
        tuple(events),
        vhost_names=tuple(vhosts),
        notes=tuple(notes),
        name=name,
        policies=tuple(policies),
    )


# -- files -------------------------------------------------------------------------------------


def parse_json_lines(lines: Iterable[str]) -> Iterator[Any]:
    """JSON values from JSON lines, skipping blank lines."""
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(f"line {number}: not JSON ({exc})") from None


def read_source(path: str | Path) -> Topology:
    """A topology from a file: a ``definitions.json`` export or ``leveret log dump`` lines.

    A Leveret data dir is refused with advice: the binding log is binary and belongs to
    ``storage``; ``leveret analyze`` converts it, or run ``leveret log dump`` first.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "definitions.log").exists():
            raise SourceError(
                f"{path} is a Leveret data dir: use `leveret analyze` (which reads it), or "
                f"`leveret log dump --data-dir {path} > topology.jsonl` and pass that file"
            )
        raise SourceError(f"{path} is a directory, not a topology file")
    text = path.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None  # several lines: a dump
    if isinstance(document, Mapping) and "event" not in document:
        if not any(key in document for key in ("exchanges", "queues", "bindings")):
            raise SourceError(f"{path}: neither a definitions.json export nor a log dump")
        return from_definitions(document, name=str(path))
    return from_dump(parse_json_lines(text.splitlines()), name=str(path))


TopologySource = str | Path | Topology | Iterable[Mapping[str, Any]]


def load(source: TopologySource) -> Topology:
    """A topology from a path, dump objects, or a :class:`Topology` (returned as it is)."""
    if isinstance(source, Topology):
        return source
    if isinstance(source, str | Path):
        return read_source(source)
    return from_dump(source, name="dump")
