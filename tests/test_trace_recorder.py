"""The recorder's publish path and its writer thread: every row written as recorded, in
order, through batches, combo lists that start over, segments that roll mid-batch, and
drops when the writer falls behind.

The rows are read back as ``leveret trace dump`` reads them (:func:`read_messages`), so
these tests see what a user of the trace sees.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pyarrow.parquet as pq
from pamqp import commands, header

from leveret.trace import TraceWriter, read_dictionary, read_messages, segment_files


def raw_header(body_size: int, **properties: object) -> bytes:
    content = header.ContentHeader(0, body_size, commands.Basic.Properties(**properties))
    return content.marshal()


def dumped(directory: Path) -> list[dict[str, object]]:
    return [m for segment in segment_files([directory]) for m in read_messages(segment)]


def expected(
    key: str, size: int, mode: int | None, headers: dict[str, object] | None, queues: list[str]
) -> dict[str, object]:
    """A message of vhost v, exchange x, as ``leveret trace dump`` prints it (without ts)."""
    line: dict[str, object] = {"vhost": "v", "exchange": "x", "key": key}
    if headers is not None:
        line["headers"] = headers
    line["size"] = size
    if mode is not None:
        line["mode"] = mode
    line["queues"] = sorted(queues)
    return line


def test_many_rows_in_several_batches_come_back_in_order(tmp_path: Path) -> None:
    """200,000 rows (four batches), keys, sizes, modes, headers, message ids and queue sets
    varying: each row reads back as recorded, and the times are the recording times."""
    rng = random.Random(25)
    writer = TraceWriter(tmp_path, flush_interval=0.05)
    queue_sets = [frozenset(), frozenset({"a"}), frozenset({"a", "b"}), frozenset({"c"})]
    want = []
    before = time.time()
    for n in range(200_000):
        key, size, queues = f"k{rng.randrange(40)}", rng.randrange(1000), rng.choice(queue_sets)
        mode = rng.choice([None, 1, 2])
        headers = {"h": n % 3} if n % 5 == 0 else None
        properties: dict[str, object] = {"message_id": str(n)} if n % 7 == 0 else {}
        if mode is not None:
            properties["delivery_mode"] = mode
        if headers is not None:
            properties["headers"] = headers
        names = queues if n % 11 else set(queues)  # a plain set, as some routes give
        writer.record("v", "x", key, raw_header(size, **properties), size, names)
        want.append(expected(key, size, mode, headers, list(queues)))
    after = time.time()
    writer.close(timeout=None)  # the whole trace written, however loaded the machine
    got = dumped(tmp_path)
    times = [float(m.pop("ts")) for m in got]  # type: ignore[arg-type]
    assert got == want
    assert before - 1e-3 <= times[0] and times == sorted(times) and times[-1] <= after + 1e-3
    assert writer.written == 200_000 and writer.dropped == 0


def test_combo_lists_start_over_without_mixing_rows(tmp_path: Path) -> None:
    """Keys that never repeat fill the recorder's combo list: it starts a new one (the rows
    before go to the writer first), and every row keeps its own key."""
    writer = TraceWriter(tmp_path, flush_interval=60)
    writer.max_combos = 7
    writer.cache_size = 3
    keys = [f"key.{n % 23}" for n in range(500)]
    for n, key in enumerate(keys):
        writer.record("/", "ex", key, raw_header(n, delivery_mode=1 + n % 2), n, ("q",))
    writer.close(timeout=None)  # the whole trace written, however loaded the machine
    got = dumped(tmp_path)
    assert [(m["key"], m["size"], m["mode"]) for m in got] == [
        (key, n, 1 + n % 2) for n, key in enumerate(keys)
    ]


def test_segments_roll_inside_a_batch(tmp_path: Path) -> None:
    """One batch of 20,000 rows over 60 keys, segments of at most 25 dictionary entries and
    3,000 rows: the rows are cut where a row-by-row writer would cut them, and each
    segment's dictionary holds exactly the entries its rows use."""
    writer = TraceWriter(tmp_path, max_keys=25, max_rows=3_000, flush_interval=60)
    rng = random.Random(7)
    keys = [f"k{rng.randrange(60) if n > 10_000 else n % 4}" for n in range(20_000)]
    for key in keys:
        writer.record("/", "x", key, raw_header(1), 1, ("q",))
    writer.close(timeout=None)  # the whole trace written, however loaded the machine
    # The model: a segment takes rows while it holds fewer than 25 entries (keys and the
    # one queue set) and fewer than 3,000 rows.
    model: list[list[str]] = [[]]
    entries: set[str] = set()
    for key in keys:
        model[-1].append(key)
        entries |= {key, "queues"}
        if len(entries) >= 25 or len(model[-1]) >= 3_000:
            model.append([])
            entries = set()
    segments = segment_files([tmp_path])
    assert [[m["key"] for m in read_messages(s)] for s in segments] == [s for s in model if s]
    for segment in segments:
        keys_of, queue_sets = read_dictionary(segment)
        rows = pq.read_table(segment)
        assert set(rows.column("key").to_pylist()) == set(keys_of)
        assert set(rows.column("queues").to_pylist()) == set(queue_sets)
        assert len(keys_of) + len(queue_sets) <= 25


def test_the_writer_catches_up_after_drops(tmp_path: Path) -> None:
    """While buffer_limit rows wait for the writer, rows are dropped and counted (logged);
    once it has written them, recording resumes."""
    writer = TraceWriter(tmp_path, buffer_limit=100, flush_interval=60)
    for n in range(250):
        writer.record("/", "x", "k", raw_header(n), n, ())
    assert writer.dropped == 150
    writer.flush()  # the writer takes the 100 waiting rows
    for n in range(250, 260):
        writer.record("/", "x", "k", raw_header(n), n, ())
    writer.close(timeout=None)  # the whole trace written, however loaded the machine
    assert [m["size"] for m in dumped(tmp_path)] == [*range(100), *range(250, 260)]
    assert (writer.written, writer.dropped) == (110, 150)


def test_dump_of_a_recorded_trace_is_json(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    writer.record("/", "x", "k", raw_header(2, headers={"a": [1, "b"]}), 2, frozenset({"q"}))
    writer.close(timeout=None)  # the whole trace written, however loaded the machine
    (line,) = dumped(tmp_path)
    assert json.loads(json.dumps(line))["headers"] == {"a": [1, "b"]}


async def test_on_a_loop_the_rows_of_a_turn_share_its_time(tmp_path: Path) -> None:
    """The clock is read by a turn's first record: rows routed in one turn share its time,
    the next turn's rows have a later one, and a hand-off inside a turn (a flush) makes
    the next row read the clock again, so each batch's rows have times."""
    writer = TraceWriter(tmp_path, flush_interval=60)
    for n in range(3):
        writer.record("v", "x", "k", raw_header(n), n, ("q",))
    await asyncio.sleep(0.002)
    writer.record("v", "x", "k", raw_header(3), 3, ("q",))
    writer.hand_off()
    writer.record("v", "x", "k", raw_header(4), 4, ("q",))
    await asyncio.sleep(0)
    writer.record("v", "x", "k", raw_header(5), 5, ("q",))
    writer.close(timeout=None)
    got = dumped(tmp_path)
    assert [m["size"] for m in got] == list(range(6))
    times = [float(m["ts"]) for m in got]  # type: ignore[arg-type]
    assert times[0] == times[1] == times[2] < times[3] <= times[4] <= times[5]


async def test_on_a_loop_combo_lists_start_over_inside_a_turn(tmp_path: Path) -> None:
    """Keys that never repeat, many per turn: the combo list starts over in the middle of
    turns, each new batch starts at its turn's time, and every row keeps its key, size and
    place."""
    writer = TraceWriter(tmp_path, flush_interval=60)
    writer.max_combos = 5
    sent = []
    for turn in range(40):
        for n in range(turn % 7):
            key = f"k{turn}.{n}"
            size = turn * 10 + n
            writer.record("v", "x", key, raw_header(size, delivery_mode=2), size, ("q",))
            sent.append((key, size))
        await asyncio.sleep(0)
    writer.close(timeout=None)
    got = dumped(tmp_path)
    assert [(m["key"], m["size"]) for m in got] == sent
    times = [float(m["ts"]) for m in got]  # type: ignore[arg-type]
    assert times == sorted(times)


def test_the_body_size_is_the_messages_own(tmp_path: Path) -> None:
    """Row values are cached by content header, which holds the body size: a message whose
    body length differs from its header's (no path into the broker makes one: a channel
    assembles exactly the announced size, the others marshal the header from the body) keeps
    its own size and is not cached, so the messages that agree get theirs."""
    writer = TraceWriter(tmp_path)
    five = raw_header(5)
    for size in (7, 5, 5):
        writer.record("/", "x", "k", five, size, ())
    writer.close(timeout=None)
    assert [m["size"] for m in dumped(tmp_path)] == [7, 5, 5]
