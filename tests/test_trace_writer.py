"""The trace writer's files: version 3 segments (rows and dictionary), rolling, reading back,
converting JSON-lines traces.

The broker-level behaviour (what a published message records) is tested through real
clients in ``tests/pipeline/test_pipeline_broker.py`` and ``tests/management``; this module
pins the file format itself, which the Spark pipeline depends on.
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pamqp import commands, header

from leveret.trace import (
    ID_BITS,
    SCHEMA_VERSION,
    TraceError,
    TraceWriter,
    convert,
    key_fragment,
    key_id,
    queues_fragment,
    read_dictionary,
    read_messages,
    segment_files,
)


def raw_header(body_size: int, **properties: object) -> bytes:
    """A content header frame payload, as the broker keeps it for the trace."""
    content = header.ContentHeader(0, body_size, commands.Basic.Properties(**properties))
    return content.marshal()


def messages(directory: Path) -> list[dict[str, object]]:
    return [m for segment in segment_files([directory]) for m in read_messages(segment)]


def test_rows_and_dictionary(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    writer.record("/", "x", "a.b", raw_header(5, delivery_mode=2), 5, ("q2", "q1"))
    writer.record("/", "x", "a.b", raw_header(9, delivery_mode=2, message_id="m"), 9, ("q1", "q2"))
    writer.record("v", "", "k", raw_header(0, headers={"n": 1, "s": "t"}), 0, ())
    writer.close()
    (segment,) = sorted(tmp_path.glob("trace-*.parquet"))
    (dictionary,) = sorted(tmp_path.glob("keys-*.parquet"))
    assert dictionary.name == "keys-" + segment.name[len("trace-") :]
    assert not list(tmp_path.glob("*.part"))
    rows = pq.read_table(segment)
    assert rows.schema.names == ["ts", "key", "queues", "size", "mode"]
    assert str(rows.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert rows.schema.metadata[b"leveret.trace.version"] == str(SCHEMA_VERSION).encode()
    first, second, third = rows.to_pylist()
    assert first["key"] == second["key"]  # other properties: same key
    assert first["queues"] == second["queues"]  # the same set, in another order
    assert (first["size"], first["mode"], second["size"]) == (5, 2, 9)
    assert third["mode"] is None
    ident = key_id(key_fragment("/", "x", "a.b", None))
    assert first["key"] == ident and 0 <= ident < 2**ID_BITS
    assert first["queues"] == key_id(queues_fragment(["q1", "q2"]))
    keys, queue_sets = read_dictionary(segment)
    assert keys[third["key"]] == {
        "vhost": "v",
        "exchange": "",
        "key": "k",
        "headers": '{"n":1,"s":"t"}',
    }
    assert queue_sets == {first["queues"]: ["q1", "q2"], third["queues"]: []}
    (counts,) = sorted(tmp_path.glob("counts-*.parquet"))
    assert counts.name == "counts-" + segment.name[len("trace-") :]
    counted = pq.read_table(counts).to_pylist()
    assert sorted(
        (c["key"], c["messages"], c["bytes"], c["persistent"]) for c in counted
    ) == sorted([(first["key"], 2, 14, 2), (third["key"], 1, 0, 0)])
    assert {c["minute"] for c in counted} <= {r["ts"].timestamp() // 60 for r in (first, third)}
    entries = pq.read_table(dictionary).to_pylist()
    assert len(entries) == 4 and {e["v"] for e in entries} == {SCHEMA_VERSION}
    dumped = messages(tmp_path)
    assert [{k: v for k, v in m.items() if k != "ts"} for m in dumped] == [
        {"vhost": "/", "exchange": "x", "key": "a.b", "size": 5, "mode": 2, "queues": ["q1", "q2"]},
        {"vhost": "/", "exchange": "x", "key": "a.b", "size": 9, "mode": 2, "queues": ["q1", "q2"]},
        {"vhost": "v", "exchange": "", "key": "k", "headers": {"n": 1, "s": "t"}, "size": 0,
         "queues": []},
    ]  # fmt: skip
    assert writer.written == 3 and writer.dropped == 0 and writer.segments == 1


def test_timestamps_keep_microseconds(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    before = datetime.datetime.now(datetime.UTC).timestamp()
    writer.record("/", "x", "k", raw_header(1), 1, ())
    writer.close()
    (message,) = messages(tmp_path)
    assert before - 0.001 <= float(message["ts"]) <= before + 5  # type: ignore[arg-type]


def test_key_id_is_stable_and_depends_on_every_field() -> None:
    base = ("/", "x", "a", None)
    ident = key_id(key_fragment(*base))
    assert ident == key_id(key_fragment("/", "x", "a", None))
    for other in [("v", "x", "a", None), ("/", "y", "a", None), ("/", "x", "b", None),
                  ("/", "x", "a", "{}")]:  # fmt: skip
        assert key_id(key_fragment(*other)) != ident
    assert key_id(queues_fragment(["b", "a"])) == key_id(queues_fragment(["a", "b"]))


def test_flush_closes_the_segment_and_each_has_its_dictionary(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    for n in range(3):
        writer.record("/", "x", f"k{n % 2}", raw_header(1), 1, ())
        writer.flush()
        assert len(list(tmp_path.glob("trace-*.parquet"))) == n + 1  # readable at once
    writer.close()
    segments = sorted(tmp_path.glob("trace-*.parquet"))
    assert len(segments) == 3
    for segment in segments:
        keys, _ = read_dictionary(segment)
        assert set(pq.read_table(segment).column("key").to_pylist()) == set(keys)


def test_segments_roll_by_rows_and_by_dictionary_size(tmp_path: Path) -> None:
    """Routing keys that never repeat would grow the in-memory dictionary without bound: a
    segment rolls at max_keys keys and queue sets, and at max_rows rows."""
    writer = TraceWriter(tmp_path / "keys", max_keys=3, flush_interval=0.01)
    for key in ["a", "b", "a", "c", "d", "e"]:
        writer.record("/", "x", key, raw_header(1), 1, ())
    writer.close()
    rolled = [[m["key"] for m in read_messages(s)] for s in segment_files([tmp_path / "keys"])]
    assert rolled == [["a", "b"], ["a", "c"], ["d", "e"]]  # full at 2 keys + 1 queue set
    writer = TraceWriter(tmp_path / "rows", max_rows=2, flush_interval=0.01)
    for key in "abcde":
        writer.record("/", "x", key, raw_header(1), 1, ())
    writer.close()
    sizes = [pq.read_metadata(s).num_rows for s in segment_files([tmp_path / "rows"])]
    assert sizes == [2, 2, 1]


def test_a_full_buffer_drops_and_counts(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, buffer_limit=2, flush_interval=60)
    for _ in range(5):
        writer.record("/", "x", "k", raw_header(1), 1, ())
    assert writer.dropped == 3
    writer.close()
    assert writer.written == 2


def test_headers_read_as_the_management_api_shows_them(tmp_path: Path) -> None:
    """Timestamps as seconds, decimals as numbers (leveret.node.fieldtable.amqp_json)."""
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    headers = {"when": when, "price": decimal.Decimal("1.25"), "n": [1, "a"]}
    writer.record("/", "x", "k", raw_header(0, headers=headers), 0, ())
    writer.close()
    (message,) = messages(tmp_path)
    assert message["headers"] == {"when": int(when.timestamp()), "price": 1.25, "n": [1, "a"]}


def test_headers_that_are_not_utf8_do_not_stop_the_writer(tmp_path: Path) -> None:
    """A record whose headers pamqp cannot decode (a name that is not UTF-8; the broker
    refuses such publishes, but the writer must not depend on it) goes without headers,
    and the records after it are written."""
    table = b"\x02\xff\xfeS\x00\x00\x00\x01a"  # a header name that is not UTF-8 -> "a"
    bad = struct.pack(">HHQH", 60, 0, 0, 0x2000) + struct.pack(">I", len(table)) + table
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    writer.record("/", "x", "bad", bad, 0, ())
    writer.record("/", "x", "good", raw_header(0, headers={"n": 1}), 0, ())
    writer.close()
    first, second = messages(tmp_path)
    assert first["key"] == "bad" and "headers" not in first
    assert second["key"] == "good" and second["headers"] == {"n": 1}


def test_convert_json_lines_traces(tmp_path: Path) -> None:
    """Versions 1 and 2 lines become segments with the same messages."""
    source = tmp_path / "old"
    source.mkdir()
    v1 = {"schema_version": 1, "ts": 1763779980.5, "vhost": "/", "exchange": "x",
          "routing_key": "a", "headers": {"h": 1}, "body_size": 3, "delivery_mode": 2,
          "queues": ["q2", "q1"], "routed": True}  # fmt: skip
    v2 = {"v": 2, "ts": 1763779981.25, "id": 7, "size": 4, "vhost": "/", "exchange": "x",
          "key": "b", "queues": []}  # fmt: skip
    (source / "trace-20251122T025300-0001.jsonl").write_text(
        json.dumps(v1) + "\n\n" + json.dumps(v2) + "\n"
    )
    (source / "keys-20251122T025300-0001.jsonl").write_text('{"v": 2, "id": 7}\n')
    (segment,) = convert([source], tmp_path / "new")
    assert list(read_messages(segment)) == [
        {"ts": 1763779980.5, "vhost": "/", "exchange": "x", "key": "a", "headers": {"h": 1},
         "size": 3, "mode": 2, "queues": ["q1", "q2"]},
        {"ts": 1763779981.25, "vhost": "/", "exchange": "x", "key": "b", "size": 4, "queues": []},
    ]  # fmt: skip
    (source / "trace-20251122T025300-0002.jsonl").write_text("not json\n")
    with pytest.raises(TraceError, match=r"0002\.jsonl:1"):
        convert([source / "trace-20251122T025300-0002.jsonl"], tmp_path / "bad")


def test_leveret_trace_dump(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, flush_interval=0.01)
    writer.record("/", "x", "k", raw_header(3, delivery_mode=1), 3, ("q",))
    writer.close()
    done = subprocess.run(
        [sys.executable, "-m", "leveret", "trace", "dump", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = done.stdout.splitlines()
    assert {k: v for k, v in json.loads(line).items() if k != "ts"} == {
        "vhost": "/", "exchange": "x", "key": "k", "size": 3, "mode": 1, "queues": ["q"]
    }  # fmt: skip
    missing = subprocess.run(
        [sys.executable, "-m", "leveret", "trace", "dump", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == f"leveret: error: {tmp_path / 'nothing'}: no such file or directory"
    )
