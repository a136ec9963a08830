"""Replay equals live application, and compaction (live_events) changes nothing routing sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import broker_stream, events, fresh_projection, ops, project

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    DestKind,
    Event,
    ExchangeDeclared,
    Queue,
    QueueDeclared,
    QueueDeleted,
)
from leveret.storage.live import live_events
from leveret.storage.log import DefinitionLog

Ops = list[tuple[Any, ...]]


@settings(max_examples=200, deadline=None)
@given(ops)
def test_live_events_is_equivalent_to_the_whole_stream(raw: Ops) -> None:
    stream = broker_stream(raw)
    live = live_events(stream)
    assert project(live) == project(stream)
    assert len(live) <= len(stream)
    assert live_events(live) == live  # already minimal


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["/", "v"]), events), max_size=30))
def test_live_events_never_raises_and_never_grows(stream: list[tuple[str, Event]]) -> None:
    live = live_events(stream)
    assert len(live) <= len(stream)
    assert not any(isinstance(e, QueueDeclared) and e.queue.exclusive for _, e in live)


@settings(max_examples=50, deadline=None)
@given(st.lists(ops, min_size=1, max_size=3))
def test_replay_of_the_log_equals_live_application(tmp_path_factory: Any, runs: list[Ops]) -> None:
    """Live: every event goes to the projection as the broker applies it, and to the log.
    Restart: a fresh projection replays the log. Twice, with a compaction in between."""
    path: Path = tmp_path_factory.mktemp("log") / "definitions.log"
    live = {vhost: fresh_projection() for vhost in ("/", "other", "v2")}
    for raw in runs:
        with DefinitionLog.open(path, compact_min_dead=0) as log:
            replayed = project(log.replay())
            assert replayed == {vhost: p.snapshot() for vhost, p in live.items()}
            for vhost, event in broker_stream(raw):
                log.append(vhost, event)
                live[vhost].apply(event)
            if log.needs_compaction():
                log.compact()
    with DefinitionLog.open(path) as log:
        assert project(log.replay()) == {vhost: p.snapshot() for vhost, p in live.items()}


def test_exclusive_queues_and_their_bindings_are_dropped() -> None:
    exclusive = Queue("ex", durable=True, exclusive=True)
    stream: list[tuple[str, Event]] = [
        ("/", QueueDeclared(exclusive)),
        ("/", BindingAdded(Binding("amq.direct", "ex", DestKind.QUEUE, "k"))),
        ("/", QueueDeclared(Queue("q", durable=True))),
        ("/", BindingAdded(Binding("amq.direct", "q", DestKind.QUEUE, "k"))),
    ]
    assert live_events(stream) == stream[2:]


def test_names_used_but_never_declared_are_built_ins() -> None:
    binding = Binding("amq.topic", "q", DestKind.QUEUE, "#")
    stream: list[tuple[str, Event]] = [
        ("/", QueueDeclared(Queue("q", durable=True))),
        ("/", BindingAdded(binding)),
        ("/", BindingAdded(Binding("", "q", DestKind.QUEUE, "q"))),  # the default exchange
    ]
    assert live_events(stream) == stream[:2]
    assert live_events([*stream, ("/", QueueDeleted("q"))]) == []


def test_declares_come_before_bindings() -> None:
    stream = broker_stream(
        [
            ("qdecl", "", "a", DestKind.QUEUE, "", {}, "/"),
            ("xdecl", "", "b", DestKind.QUEUE, "", {}, "/"),
            ("bind", "b", "a", DestKind.QUEUE, "k", {}, "/"),
            ("xdecl", "", "c", DestKind.QUEUE, "", {}, "/"),
            ("bind", "c", "b", DestKind.EXCHANGE, "k", {}, "/"),
        ]
    )
    order = {ExchangeDeclared: 0, QueueDeclared: 1, BindingAdded: 2}
    kinds = [order[type(e)] for _, e in live_events(stream)]
    assert kinds == sorted(kinds)
    assert kinds.count(2) == 2
