"""The trace writer's files: version 2 lines, a key index per file, rolling by size.

The broker-level behaviour (what a published message records) is tested through real
clients in ``tests/pipeline/test_pipeline_broker.py`` and ``tests/management``; this module
pins the file format itself, which the Spark pipeline depends on.
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
from pathlib import Path

from pamqp import commands, header

from leveret.trace import ID_BITS, TraceWriter, key_fragment, key_id


def raw_header(body_size: int, **properties: object) -> bytes:
    """A content header frame payload, as the broker keeps it for the trace."""
    content = header.ContentHeader(0, body_size, commands.Basic.Properties(**properties))
    return content.marshal()


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_and_index(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    writer.record("/", "x", "a.b", raw_header(5, delivery_mode=2), 5, ("q2", "q1"))
    writer.record("/", "x", "a.b", raw_header(9, delivery_mode=2, message_id="m"), 9, ("q1", "q2"))
    writer.record("v", "", "k", raw_header(0, headers={"n": 1, "s": "t"}), 0, ())
    writer.close()
    (trace,) = sorted(tmp_path.glob("trace-*.jsonl"))
    (index,) = sorted(tmp_path.glob("keys-*.jsonl"))
    assert index.name == "keys-" + trace.name[len("trace-") :]
    first, second, third = read_lines(trace)
    assert {k: v for k, v in first.items() if k != "ts"} == {
        "v": 2, "id": first["id"], "size": 5, "mode": 2, "vhost": "/", "exchange": "x",
        "key": "a.b", "queues": ["q1", "q2"],
    }  # fmt: skip
    assert second["id"] == first["id"] and second["size"] == 9  # other properties: same key
    assert third["headers"] == {"n": 1, "s": "t"} and "mode" not in third
    assert third["queues"] == []
    keys = read_lines(index)
    assert [k["id"] for k in keys] == [first["id"], third["id"]]
    assert keys[1] == {
        "v": 2, "id": third["id"], "vhost": "v", "exchange": "", "key": "k",
        "headers": {"n": 1, "s": "t"}, "queues": [],
    }  # fmt: skip
    assert all(0 <= k["id"] < 2**ID_BITS for k in keys)


def test_key_id_is_stable_and_depends_on_every_field() -> None:
    base = ("/", "x", "a", None, ("q",))
    ident = key_id(key_fragment(base))
    assert ident == key_id(key_fragment(("/", "x", "a", None, ("q",))))
    for other in [
        ("v", "x", "a", None, ("q",)),
        ("/", "y", "a", None, ("q",)),
        ("/", "x", "b", None, ("q",)),
        ("/", "x", "a", "{}", ("q",)),
        ("/", "x", "a", None, ()),
    ]:
        assert key_id(key_fragment(other)) != ident


def test_every_rolled_file_has_its_own_complete_index(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, max_bytes=1, flush_interval=0.01)
    for _ in range(3):
        writer.record("/", "x", "same", raw_header(1), 1, ())
        writer.flush()
    writer.close()
    traces = sorted(tmp_path.glob("trace-*.jsonl"))
    assert len(traces) == 3
    for trace in traces:
        index = trace.with_name("keys-" + trace.name[len("trace-") :])
        used = {line["id"] for line in read_lines(trace)}
        assert used == {line["id"] for line in read_lines(index)}


def test_a_file_rolls_when_its_index_is_full(tmp_path: Path) -> None:
    """Routing keys that never repeat would grow the in-memory index without bound: the
    file rolls at max_keys keys, and each index still covers its own file."""
    writer = TraceWriter(tmp_path, max_keys=2, flush_interval=0.01)
    for key in ["a", "b", "a", "c", "d", "e"]:
        writer.record("/", "x", key, raw_header(1), 1, ())
    writer.close()
    traces = sorted(tmp_path.glob("trace-*.jsonl"))
    assert [[line["key"] for line in read_lines(trace)] for trace in traces] == [
        ["a", "b"],
        ["a", "c"],
        ["d", "e"],
    ]
    for trace in traces:
        index = read_lines(trace.with_name("keys-" + trace.name[len("trace-") :]))
        assert len(index) <= 2
        assert {line["id"] for line in read_lines(trace)} == {line["id"] for line in index}


def test_headers_read_as_the_management_api_shows_them(tmp_path: Path) -> None:
    """Timestamps as seconds, decimals as numbers (leveret.fieldtable.amqp_json)."""
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    headers = {"when": when, "price": decimal.Decimal("1.25"), "n": [1, "a"]}
    writer.record("/", "x", "k", raw_header(0, headers=headers), 0, ())
    writer.close()
    (line,) = read_lines(next(tmp_path.glob("trace-*.jsonl")))
    assert line["headers"] == {"when": int(when.timestamp()), "price": 1.25, "n": [1, "a"]}


def test_headers_that_are_not_utf8_do_not_stop_the_writer(tmp_path: Path) -> None:
    """A record whose headers pamqp cannot decode (a name that is not UTF-8; the broker
    refuses such publishes, but the writer must not depend on it) goes without headers,
    and the lines after it are written."""
    table = b"\x02\xff\xfeS\x00\x00\x00\x01a"  # a header name that is not UTF-8 -> "a"
    bad = struct.pack(">HHQH", 60, 0, 0, 0x2000) + struct.pack(">I", len(table)) + table
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    writer.record("/", "x", "bad", bad, 0, ())
    writer.record("/", "x", "good", raw_header(0, headers={"n": 1}), 0, ())
    writer.close()
    first, second = read_lines(next(tmp_path.glob("trace-*.jsonl")))
    assert first["key"] == "bad" and "headers" not in first
    assert second["key"] == "good" and second["headers"] == {"n": 1}
