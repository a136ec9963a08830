"""Topology sources: dump lines, definitions.json and dump objects, into projections."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import SHOP_EVENTS, dump_objects, projection_of, write_dump

from leveret.exchanges.model import DestKind, ExchangeType
from leveret.exchanges.routing import route
from leveret.pipeline import topology
from leveret.pipeline.router import Router
from leveret.pipeline.topology import SourceError
from leveret.storage.records import value_to_json

DATA = Path(__file__).parent / "data"


def test_dump_objects_replay_to_the_brokers_projection() -> None:
    parsed = topology.from_dump(dump_objects(SHOP_EVENTS))
    assert parsed.notes == ()
    assert parsed.projections()["/"] == projection_of(SHOP_EVENTS)


def test_dump_file_is_read_line_by_line(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "dump.jsonl", SHOP_EVENTS)
    parsed = topology.read_source(path)
    assert parsed.projections()["/"] == projection_of(SHOP_EVENTS)
    assert parsed.name == str(path)
    # The idle binding was added then removed: replay honours deletions.
    assert ("orders", "q.idle") not in {
        (b.source, b.destination) for b in parsed.projections()["/"].bindings()
    }


@pytest.mark.parametrize(
    "value",
    [
        "text",
        7,
        -1.5,
        True,
        None,
        b"\x00\xffraw",
        Decimal("1.50"),
        datetime(2025, 11, 22, 3, 0, tzinfo=UTC),
        float("inf"),
        [1, "a", b"b", {"k": Decimal("2")}],
        {"nested": {"deep": [True, 2.0]}},
    ],
)
def test_dump_argument_values_come_back(value: object) -> None:
    back = topology.value_from_json(json.loads(json.dumps(value_to_json(value))))
    assert back == value
    assert type(back) is type(value)


def test_definitions_json_fixture() -> None:
    parsed = topology.read_source(DATA / "definitions.json")
    assert parsed.vhosts() == ["/", "staging"]
    projections = parsed.projections()
    root, staging = projections["/"], projections["staging"]
    assert {"orders", "orders.unrouted", "events", "reports"} <= set(root.exchanges)
    assert "sharded" not in root.exchanges  # x-modulus-hash: not routable here
    assert any("x-modulus-hash" in note for note in parsed.notes)
    # A consistent-hash exchange that hashes a header cannot be replayed from a trace.
    assert "by-tenant" not in root.exchanges
    assert any("'by-tenant'" in note and "header or property" in note for note in parsed.notes)
    assert root.exchanges["orders"].alternate_exchange == "orders.unrouted"
    assert root.exchanges["reports"].type is ExchangeType.HEADERS
    assert set(root.queues) == {"orders.all", "orders.eu", "audit", "pdf.reports", "unrouted"}
    assert set(staging.queues) == {"staging.orders"}
    # predeclared exchanges exist in both vhosts, though the export lists none of them
    for projection in projections.values():
        assert {"", "amq.direct", "amq.topic", "amq.headers", "amq.match"} <= set(
            projection.exchanges
        )
    e2e = [b for b in root.bindings() if b.kind is DestKind.EXCHANGE]
    assert [(b.source, b.destination, b.routing_key) for b in e2e] == [
        ("orders", "events", "order.created.*")
    ]
    assert len(list(root.bindings())) == 6  # the binding from "sharded" is dropped
    # Routing through the parsed topology, with the broker's route function:
    assert route(root, "orders", "order.created.eu") == {"orders.all", "orders.eu", "audit"}
    assert route(root, "orders", "invoice.1") == {"unrouted"}  # alternate exchange
    assert route(root, "reports", "", {"format": "pdf", "version": 2}) == {"pdf.reports"}
    assert route(root, "reports", "", {"format": "pdf", "version": 3}) == set()
    assert route(root, "", "audit") == {"audit"}
    assert route(staging, "orders", "order.created") == {"staging.orders"}


def test_definitions_without_vhost_fields_belong_to_the_default_vhost() -> None:
    parsed = topology.from_definitions(
        {
            "queues": [{"name": "a", "durable": True, "auto_delete": False, "arguments": {}}],
            "exchanges": [{"name": "x", "type": "direct", "arguments": {}}],
            "bindings": [
                {"source": "x", "destination": "a", "destination_type": "queue", "routing_key": "k"}
            ],
        }
    )
    assert route(parsed.projections()["/"], "x", "k") == {"a"}


def test_binding_table_numbers_bindings_in_replay_order() -> None:
    parsed = topology.read_source(DATA / "definitions.json")
    rows = parsed.binding_table()
    assert [r.binding_id for r in rows] == list(range(7))
    assert rows[0].source == "orders" and rows[0].routing_key == "order.#"
    assert rows[-1].vhost == "staging"
    headers = next(r for r in rows if r.source == "reports")
    assert json.loads(headers.arguments) == {"x-match": "all", "format": "pdf", "version": 2}


def test_a_data_dir_is_refused_with_advice(tmp_path: Path) -> None:
    (tmp_path / "definitions.log").write_bytes(b"LVRT")
    with pytest.raises(SourceError, match="leveret log dump --data-dir"):
        topology.read_source(tmp_path)


def test_load_takes_paths_objects_and_topologies(tmp_path: Path) -> None:
    objects = dump_objects(SHOP_EVENTS)
    from_objects = topology.load(iter(objects))
    assert topology.load(from_objects) is from_objects
    path = write_dump(tmp_path / "d.jsonl", SHOP_EVENTS)
    assert topology.load(str(path)).projections() == from_objects.projections()


def test_bad_sources_say_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"users": []}')
    with pytest.raises(SourceError, match="neither"):
        topology.read_source(bad)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"event": "queue.declared", "name": "a"}\nnot json\n')
    with pytest.raises(SourceError, match="line 2"):
        topology.read_source(garbage)


def _policy_definitions(*policies: dict[str, object]) -> dict[str, object]:
    """Two exchanges without bindings, one with its own alternate exchange, plus two
    alternate exchanges bound to a queue each."""

    def exchange(name: str, kind: str, **arguments: object) -> dict[str, object]:
        return {"name": name, "vhost": "/", "type": kind, "arguments": arguments}

    def bind(source: str, queue: str) -> dict[str, object]:
        return {"source": source, "vhost": "/", "destination": queue, "destination_type": "queue"}

    return {
        "exchanges": [
            exchange("orders", "direct"),
            exchange("billing", "direct", **{"alternate-exchange": "own-ae"}),
            exchange("policy-ae", "fanout"),
            exchange("own-ae", "fanout"),
        ],
        "queues": [{"name": q, "vhost": "/", "arguments": {}} for q in ("stray", "own-stray")],
        "bindings": [bind("policy-ae", "stray"), bind("own-ae", "own-stray")],
        "policies": list(policies),
    }


def test_alternate_exchange_set_by_a_policy_is_followed() -> None:
    # As the broker does (exchanges/policies.py): the policy's alternate exchange applies to
    # the exchanges it matches, and an exchange's own argument wins over it.
    policy = {
        "vhost": "/",
        "name": "ae",
        "pattern": "^(orders|billing)$",
        "apply-to": "exchanges",
        "definition": {"alternate-exchange": "policy-ae"},
        "priority": 0,
    }
    parsed = topology.from_definitions(_policy_definitions(policy))
    assert parsed.notes == ()
    root = parsed.projections()["/"]
    assert route(root, "orders", "nowhere") == {"stray"}
    assert route(root, "billing", "nowhere") == {"own-stray"}
    # Per-binding attribution sees the alternate exchange's binding too.
    router = Router(parsed, bindings=True)
    table = {row.binding_id: row.source for row in parsed.binding_table()}
    assert [table[i] for i in router.matched_bindings("/", "orders", "nowhere", None)] == [
        "policy-ae"
    ]
    # The same policy from a `leveret analyze` data dir: a policy.set dump object.
    dumped = topology.from_dump(
        [
            {"event": "exchange.declared", "vhost": "/", "name": "orders", "type": "direct"},
            {"event": "exchange.declared", "vhost": "/", "name": "policy-ae", "type": "fanout"},
            {"event": "queue.declared", "vhost": "/", "name": "stray"},
            {
                "event": "binding.added",
                "vhost": "/",
                "source": "policy-ae",
                "destination": "stray",
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {},
            },
            {"event": "policy.set", **policy},
        ]
    )
    assert route(dumped.projections()["/"], "orders", "nowhere") == {"stray"}


def test_a_policy_the_broker_would_refuse_is_left_out_with_a_note() -> None:
    bad = {"name": "bad", "pattern": "x", "definition": {"message-ttl": -1}}
    parsed = topology.from_definitions(_policy_definitions(bad))
    assert parsed.policies == ()
    assert parsed.notes == (
        "policy 'bad' in vhost '/' left out: Validation failed: -1 is not a valid message TTL",
    )
    assert route(parsed.projections()["/"], "orders", "nowhere") == set()


def test_consistent_hash_on_routing_keys_routes_as_the_broker(tmp_path: Path) -> None:
    # Kept: its choice depends on the routing key only, which the trace records.
    definitions = {
        "exchanges": [
            {"name": "spread", "vhost": "/", "type": "x-consistent-hash", "arguments": {}}
        ],
        "queues": [{"name": f"shard{i}", "vhost": "/"} for i in range(3)],
        "bindings": [
            {
                "source": "spread",
                "vhost": "/",
                "destination": f"shard{i}",
                "destination_type": "queue",
                "routing_key": str(weight),
                "arguments": {},
            }
            for i, weight in enumerate((1, 2, 3))
        ],
    }
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(definitions))
    root = topology.read_source(path).projections()["/"]
    # RabbitMQ 3.10.8's choices for these keys with weights 1, 2, 3
    # (tests/integration/test_consistent_hash.py BY_ROUTING_KEY).
    chosen = {key: route(root, "spread", key) for key in ("k0", "k1", "k15", "")}
    assert chosen == {
        "k0": {"shard1"},
        "k1": {"shard2"},
        "k15": {"shard0"},
        "": {"shard0"},
    }


def test_delayed_exchanges_route_as_their_type_or_are_left_out() -> None:
    # x-delayed-message routes as its x-delayed-type; messages with an x-delay route
    # nowhere from it at publish time, as the broker records them in the trace.
    def delayed(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "vhost": "/", "type": "x-delayed-message", "arguments": arguments}

    parsed = topology.from_definitions(
        {
            "exchanges": [
                delayed("later", {"x-delayed-type": "topic"}),
                delayed("untyped", {}),
            ],
            "queues": [{"name": "q", "vhost": "/"}],
            "bindings": [
                {
                    "source": "later",
                    "vhost": "/",
                    "destination": "q",
                    "destination_type": "queue",
                    "routing_key": "a.#",
                    "arguments": {},
                }
            ],
        }
    )
    root = parsed.projections()["/"]
    assert route(root, "later", "a.b") == {"q"}
    assert route(root, "later", "a.b", {"x-delay": 500}) == set()
    assert "untyped" not in root.exchanges
    assert parsed.notes == (
        "exchange 'untyped' in vhost '/' is an x-delayed-message exchange whose arguments "
        "({}) name no type it can route as: it and its bindings are left out (its traffic "
        "counts as unroutable)",
    )
