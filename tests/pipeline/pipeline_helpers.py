"""Shared topologies, traffic and trace writers for the pipeline tests (imported by file name:
no package, so that ``tests/pipeline`` never shadows the real ``pipeline`` package).

The "shop" topology has one of everything: topic, fanout, direct and headers exchanges, an
exchange-to-exchange binding, an alternate exchange, an idle queue and a binding that never
matches. ``SHOP_TRAFFIC`` is a known mix of messages over it, with the numbers every report
must show worked out by hand below.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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
)
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route
from leveret.storage.records import event_to_json

MINUTE0 = 1_763_779_980  # 2025-11-22 02:53:00 UTC, a whole minute


def q(name: str) -> Event:
    return QueueDeclared(Queue(name, durable=True))


def x(name: str, kind: ExchangeType, **arguments: Any) -> Event:
    return ExchangeDeclared(Exchange(name, kind, arguments=arguments))


def bind(
    source: str, dest: str, key: str = "", kind: DestKind = DestKind.QUEUE, **args: Any
) -> Event:
    return BindingAdded(Binding(source, dest, kind, key, args))


QUEUES = ["q.orders.all", "q.orders.created", "q.never", "q.log1", "q.log2", "q.d1", "q.d2"]
QUEUES += ["q.pdf", "q.any", "q.idle"]

SHOP_EVENTS: list[Event] = [
    *(q(name) for name in QUEUES),
    x("orders", ExchangeType.TOPIC),
    bind("orders", "q.orders.all", "order.#"),
    bind("orders", "q.orders.created", "order.*.created"),
    bind("orders", "q.never", "never.*"),
    x("logs", ExchangeType.FANOUT),
    bind("logs", "q.log1"),
    bind("logs", "q.log2"),
    x("direct", ExchangeType.DIRECT),
    bind("direct", "q.d1", "a"),
    bind("direct", "q.d2", "b"),
    bind("direct", "q.d1", "c"),
    x("hdr", ExchangeType.HEADERS),
    bind("hdr", "q.pdf", **{"x-match": "all", "format": "pdf"}),
    bind("hdr", "q.any", **{"x-match": "any", "format": "csv", "type": "report"}),
    x("front", ExchangeType.FANOUT),
    bind("front", "logs", "", DestKind.EXCHANGE),
    x("alt", ExchangeType.DIRECT, **{"alternate-exchange": "logs"}),
    # Created then removed: the dump replays deletions too.
    bind("orders", "q.idle", "idle.#"),
    BindingRemoved(Binding("orders", "q.idle", DestKind.QUEUE, "idle.#", {})),
]

# The proposal: orders stops copying everything to q.orders.all and sends shipped orders to a
# new queue; direct routes "zzz" to q.d2; the logs exchange is deleted (so front's E2E
# binding and alt's alternate exchange lead nowhere).
PROPOSED_EVENTS: list[Event] = [
    *SHOP_EVENTS,
    BindingRemoved(Binding("orders", "q.orders.all", DestKind.QUEUE, "order.#", {})),
    q("q.shipped"),
    bind("orders", "q.shipped", "order.*.shipped"),
    bind("direct", "q.d2", "zzz"),
    ExchangeDeleted("logs"),
]

# (messages, exchange, routing key, headers)
SHOP_TRAFFIC: list[tuple[int, str, str, dict[str, Any] | None]] = [
    (10, "orders", "order.1.created", None),
    (5, "orders", "order.2.shipped", None),
    (3, "orders", "invoice.9.paid", None),
    (4, "logs", "", None),
    (2, "direct", "a", None),
    (1, "direct", "c", None),
    (6, "direct", "zzz", None),
    (2, "hdr", "", {"format": "pdf"}),
    (1, "hdr", "", {"type": "report"}),
    (1, "hdr", "", {"format": "pdf", "type": "report"}),
    (1, "hdr", "", None),
    (3, "front", "x", None),
    (2, "alt", "nomatch", None),
    (7, "missing", "k.1", None),
    (2, "", "q.d2", None),
]

EXPECTED_MESSAGES = 50
EXPECTED_UNROUTABLE = 17  # invoice 3 + zzz 6 + hdr without headers 1 + missing exchange 7
EXPECTED_QUEUES = {
    "q.orders.all": 15,
    "q.orders.created": 10,
    "q.never": 0,
    "q.log1": 9,  # logs 4 + front (E2E) 3 + alt (alternate exchange) 2
    "q.log2": 9,
    "q.d1": 3,
    "q.d2": 2,
    "q.pdf": 3,
    "q.any": 2,
    "q.idle": 0,
}
EXPECTED_FANOUT = {0: 17, 1: 13, 2: 20}
# (source, destination, routing key) -> messages matched
EXPECTED_BINDINGS = {
    ("orders", "q.orders.all", "order.#"): 15,
    ("orders", "q.orders.created", "order.*.created"): 10,
    ("orders", "q.never", "never.*"): 0,
    ("logs", "q.log1", ""): 9,
    ("logs", "q.log2", ""): 9,
    ("direct", "q.d1", "a"): 2,
    ("direct", "q.d2", "b"): 0,
    ("direct", "q.d1", "c"): 1,
    ("hdr", "q.pdf", ""): 3,
    ("hdr", "q.any", ""): 2,
    ("front", "logs", ""): 3,
}
# What-if: queue -> (current, proposed, gained, lost)
EXPECTED_WHATIF = {
    "q.orders.all": (15, 0, 0, 15),
    "q.orders.created": (10, 10, 0, 0),
    "q.shipped": (0, 5, 5, 0),
    "q.d2": (2, 8, 6, 0),
    "q.log1": (9, 0, 0, 9),
    "q.log2": (9, 0, 0, 9),
}
EXPECTED_NEWLY_UNROUTABLE = 9  # logs 4 (exchange removed) + front 3 + alt 2
EXPECTED_NEWLY_ROUTABLE = 6  # direct zzz
EXPECTED_CHANGED = 30  # order.1.created 10, shipped 5, zzz 6, logs 4, front 3, alt 2


def dump_objects(events: Iterable[Event], vhost: str = "/") -> list[dict[str, Any]]:
    """What ``leveret log dump`` prints for these events, parsed back from JSON."""
    return [json.loads(json.dumps(event_to_json(vhost, e), sort_keys=True)) for e in events]


def write_dump(path: Path, events: Iterable[Event], vhost: str = "/") -> Path:
    """A ``leveret log dump`` file for ``events``."""
    lines = [json.dumps(obj, sort_keys=True) for obj in dump_objects(events, vhost)]
    path.write_text("\n".join(lines) + "\n")
    return path


def projection_of(events: Iterable[Event]) -> Projection:
    """The broker's view: predeclared exchanges, then the events."""
    from leveret.pipeline.topology import empty_projection

    projection = empty_projection()
    for event in events:
        projection.apply(event)
    return projection


def trace_record(
    ts: float,
    exchange: str,
    routing_key: str,
    headers: Mapping[str, Any] | None = None,
    queues: Sequence[str] = (),
    vhost: str = "/",
    body_size: int = 100,
    delivery_mode: int | None = 1,
) -> dict[str, Any]:
    """One trace line as ``broker/trace/`` wrote it in schema version 1 (the pipeline
    still reads it; the broker now writes version 2)."""
    return {
        "schema_version": 1,
        "ts": round(ts, 6),
        "vhost": vhost,
        "exchange": exchange,
        "routing_key": routing_key,
        "headers": dict(headers) if headers is not None else None,
        "body_size": body_size,
        "delivery_mode": delivery_mode,
        "queues": sorted(queues),
        "routed": bool(queues),
    }


def shop_records() -> list[dict[str, Any]]:
    """``SHOP_TRAFFIC`` as trace records spread over three minutes, recorded queues from the
    broker's own route function (so the recorded/routed comparison finds nothing)."""
    projection = projection_of(SHOP_EVENTS)
    records = []
    n = 0
    for count, exchange, key, headers in SHOP_TRAFFIC:
        queues = sorted(route(projection, exchange, key, headers))
        for _ in range(count):
            ts = MINUTE0 + 60 * (n % 3) + 1.5
            records.append(trace_record(ts, exchange, key, headers, queues, body_size=10 + n % 7))
            n += 1
    return records


def write_trace(directory: Path, records: Sequence[Mapping[str, Any]], files: int = 2) -> Path:
    """Trace files ``trace-*.jsonl`` in ``directory``, records split over ``files`` files."""
    directory.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(records) // files))
    for i in range(files):
        chunk = records[i * size : (i + 1) * size]
        if chunk:
            text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in chunk)
            (directory / f"trace-20251122T000000-{i + 1:04d}.jsonl").write_text(text)
    return directory


def _v2_fragment(vhost: str, exchange: str, key: str, headers: str | None, queues: Any) -> str:
    dumps = json.dumps
    headers_part = f',"headers":{headers}' if headers is not None else ""
    return (
        f'"vhost":{dumps(vhost)},"exchange":{dumps(exchange)},"key":{dumps(key)}'
        f'{headers_part},"queues":{dumps(sorted(queues))}'
    )


def write_trace_v2(directory: Path, records: Sequence[Mapping[str, Any]], files: int = 2) -> Path:
    """The same records as :func:`write_trace`, as brokers before version 3 wrote them:
    version 2 lines and a ``keys-*.jsonl`` index per ``trace-*.jsonl`` (the pipeline reads
    the lines whole and ignores the index)."""
    import hashlib

    directory.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(records) // files))
    for i in range(files):
        chunk = records[i * size : (i + 1) * size]
        if not chunk:
            continue
        index: dict[str, int] = {}
        lines = []
        for r in chunk:
            headers = r.get("headers")
            fragment = _v2_fragment(
                r.get("vhost", "/"),
                r["exchange"],
                r["routing_key"],
                json.dumps(headers, separators=(",", ":")) if headers is not None else None,
                r.get("queues", ()),
            )
            digest = hashlib.blake2b(fragment.encode(), digest_size=8).digest()
            ident = index.setdefault(fragment, int.from_bytes(digest, "big") >> 11)
            mode = r.get("delivery_mode")
            mode_part = f',"mode":{mode}' if mode is not None else ""
            lines.append(
                f'{{"v":2,"ts":{r["ts"]:.6f},"id":{ident},"size":{r.get("body_size", 0)}'
                f"{mode_part},{fragment}}}"
            )
        name = f"20251122T000000-{i + 1:04d}.jsonl"
        (directory / f"trace-{name}").write_text("".join(line + "\n" for line in lines))
        (directory / f"keys-{name}").write_text(
            "".join(f'{{"v":2,"id":{i},{f}}}\n' for f, i in index.items())
        )
    return directory


def write_segments(directory: Path, records: Sequence[Mapping[str, Any]], files: int = 2) -> Path:
    """The same records as :func:`write_trace`, as the broker writes them now: version 3
    segments (``trace-*.parquet`` with their ``keys-*.parquet``), through the recorder's own
    ``leveret.trace.Segment``."""
    from leveret.trace import Segment

    directory.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(records) // files))
    for i in range(files):
        chunk = records[i * size : (i + 1) * size]
        if not chunk:
            continue
        segment = Segment(directory / f"trace-20251122T000000-{i + 1:04d}.parquet")
        for r in chunk:
            headers = r.get("headers")
            segment.add(
                r["ts"],
                r.get("vhost", "/"),
                r["exchange"],
                r["routing_key"],
                json.dumps(headers, separators=(",", ":")) if headers is not None else None,
                r.get("body_size", 0),
                r.get("delivery_mode"),
                r.get("queues", ()),
            )
        segment.close()
    return directory
