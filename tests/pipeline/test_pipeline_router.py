"""Routing in the pipeline is the broker's routing: ``leveret.exchanges.routing.route``, per key."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import EXPECTED_BINDINGS, SHOP_EVENTS, SHOP_TRAFFIC, projection_of
from pyspark.sql import SparkSession

from leveret.exchanges.model import (
    PREDECLARED_EXCHANGES,
    BindingAdded,
    DestKind,
    ExchangeDeclared,
    QueueDeclared,
)
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route
from leveret.pipeline import router, topology, transforms
from leveret.pipeline.router import Router, parse_headers, route_partition
from leveret.pipeline.topology import Topology

DATA = Path(__file__).parent / "data"

# The first Spark test of a session also starts Spark (seconds, more on a busy machine).
pytestmark = pytest.mark.timeout(180)


def shop() -> Topology:
    return Topology(tuple(("/", e) for e in SHOP_EVENTS))


def test_router_answers_equal_route() -> None:
    router = Router(shop(), bindings=True)
    projection = projection_of(SHOP_EVENTS)
    for _, exchange, key, headers in SHOP_TRAFFIC:
        assert router.route("/", exchange, key, headers) == sorted(
            route(projection, exchange, key, headers)
        )


def test_matched_bindings_on_the_shop_traffic() -> None:
    current = shop()
    rows = {r.binding_id: r for r in current.binding_table()}
    router = Router(current, bindings=True)
    counts = dict.fromkeys(EXPECTED_BINDINGS, 0)
    for n, exchange, key, headers in SHOP_TRAFFIC:
        for binding_id in router.matched_bindings("/", exchange, key, headers):
            row = rows[binding_id]
            counts[(row.source, row.destination, row.routing_key)] += n
    assert counts == EXPECTED_BINDINGS


def test_matched_bindings_agree_with_single_binding_routing() -> None:
    """Without E2E bindings or alternate exchanges, a binding matched exactly when a
    projection holding only that binding routes the message to its destination."""
    rng = random.Random(7)
    words = ["a", "b", "c", "*", "#"]
    events = [ExchangeDeclared(e) for e in PREDECLARED_EXCHANGES]
    from leveret.exchanges.model import Binding, Exchange, ExchangeType, Queue

    events.append(ExchangeDeclared(Exchange("t", ExchangeType.TOPIC)))
    bindings = []
    for i in range(60):
        key = ".".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        events.append(QueueDeclared(Queue(f"q{i % 9}")))
        binding = Binding("t", f"q{i % 9}", DestKind.QUEUE, key)
        events.append(BindingAdded(binding))
        bindings.append(binding)
    current = Topology(tuple(("/", e) for e in events))
    router = Router(current, bindings=True)
    table = current.binding_table()
    keys = {
        ".".join(p) for n in range(4) for p in itertools.product(["a", "b", "c", "d"], repeat=n)
    }
    for key in sorted(keys):
        matched = {
            table[i].routing_key + "->" + table[i].destination
            for i in router.matched_bindings("/", "t", key, None)
        }
        expected = set()
        for b in current.projections()["/"].bindings():
            single = Projection.replay(
                [
                    ExchangeDeclared(Exchange("t", ExchangeType.TOPIC)),
                    QueueDeclared(Queue(b.destination)),
                    BindingAdded(b),
                ]
            )
            if route(single, "t", key):
                expected.add(b.routing_key + "->" + b.destination)
        assert matched == expected, key


def test_parse_headers() -> None:
    assert parse_headers(None) == (None, None)
    assert parse_headers('{"a": 1, "b": [true, 1.0]}') == ({"a": 1, "b": [True, 1.0]}, None)
    assert parse_headers("null") == (None, None)
    assert parse_headers("[1]")[1] is not None
    assert parse_headers("{")[1] is not None


def test_route_partition_with_a_proposal() -> None:
    from pipeline_helpers import PROPOSED_EVENTS

    proposed = Topology(tuple(("/", e) for e in PROPOSED_EVENTS))
    rows = list(
        route_partition(
            [("/", "logs", "", None), ("/", "direct", "zzz", None), ("other", "", "x", None)],
            shop(),
            proposed,
        )
    )
    assert rows[0][4:6] == (["q.log1", "q.log2"], True)
    assert rows[0][7:9] == ([], False)  # logs is deleted in the proposal
    assert rows[1][4] == [] and rows[1][7] == ["q.d2"]
    assert rows[2][4:6] == ([], True)  # an unknown vhost still has the default exchange


ROUTED_KEYS = [
    ("/", "orders", "order.created.eu", None),
    ("/", "orders", "order.1.us", None),
    ("/", "orders", "nothing", None),
    ("/", "reports", "", json.dumps({"format": "pdf", "version": 2})),
    ("/", "reports", "", json.dumps({"format": "pdf", "version": 2.0})),
    ("/", "", "audit", None),
    ("/", "sharded", "10", None),
    ("/", "events", "", json.dumps({"CC": ["x"]})),
    ("staging", "orders", "order.created", None),
    ("nowhere", "amq.topic", "a", None),
]


def _check_routes(current: Topology, routes: list[dict[str, Any]]) -> None:
    """Every route is ``route``'s answer for the key whose id (its index) it carries."""
    projections = current.projections()
    assert sorted(r["key"] for r in routes) == list(range(len(ROUTED_KEYS)))
    by_key = {}
    for row in routes:
        vhost, exchange, routing_key, raw = ROUTED_KEYS[row["key"]]
        headers = json.loads(raw) if raw else None
        projection = projections.get(vhost) or topology.empty_projection()
        assert row["queues"] == sorted(route(projection, exchange, routing_key, headers)), row
        by_key[ROUTED_KEYS[row["key"]]] = row
    assert by_key[("/", "orders", "order.created.eu", None)]["queues"] == [
        "audit",
        "orders.all",
        "orders.eu",
    ]
    # The binding's version 2 matches a header 2.0: RabbitMQ's headers exchange compares
    # values with Erlang's == (rabbit_exchange_type_headers:headers_match/5).
    assert by_key[("/", "reports", "", '{"format": "pdf", "version": 2.0}')]["queues"] == [
        "pdf.reports"
    ]
    assert by_key[("/", "sharded", "10", None)]["exchange_exists"] is False


def _keys_table() -> Any:
    import pyarrow as pa

    columns = list(zip(*ROUTED_KEYS, strict=True))
    return pa.table(
        {
            "key": pa.array(range(len(ROUTED_KEYS)), pa.int64()),
            **{
                name: pa.array(values, pa.string())
                for name, values in zip(
                    ["vhost", "exchange", "routing_key", "headers"], columns, strict=True
                )
            },
        }
    )


def test_route_table_on_the_driver_equals_route() -> None:
    current = topology.read_source(DATA / "definitions.json")
    _check_routes(current, router.route_table(_keys_table(), current).to_pylist())


def test_route_keys_in_spark_equals_route(spark: SparkSession) -> None:
    current = topology.read_source(DATA / "definitions.json")
    frame = spark.createDataFrame(_keys_table())
    sc = spark.sparkContext
    routes = transforms.route_keys(frame, sc.broadcast(current), partitions=2).collect()
    _check_routes(current, [row.asDict() for row in routes])


def test_several_ids_of_one_key_are_routed_once() -> None:
    current = topology.read_source(DATA / "definitions.json")
    rows = [(1, "/", "orders", "order.1.us", None), (2, "/", "orders", "order.1.us", None)]
    first, second = router.route_ids(rows, current)
    assert first[0] == 1 and second[0] == 2 and first[1:] == second[1:]
