"""Damaged data directories, through a real broker and a real client (pika).

The outside crash/fault test's two cases, on a data dir written by a broker:

* one flipped bit in a record in the middle of ``definitions.log`` (40 durable queues, 3,500
  persistent messages): the broker refuses to start with a one-line error naming the file,
  the offset and ``--force-recovery``; forced, it starts with every queue whose record is
  sound, and keeps the messages of the queue whose declaration was lost aside (reported,
  never acked away): the original log put back, or the queue declared again, brings every
  message back;
* one flipped bit in the length field of a message record (4,000 messages in one segment):
  every other message of the segment comes back.

The files are located with the framing each format version documents (storage/log.py,
storage/segments.py), so that these tests run against any version of the storage code.
"""

from __future__ import annotations

import logging
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from leveret.config import Config
from leveret.exchanges.model import QueueDeclared
from leveret.inspect import BrokerThread
from leveret.storage.errors import StorageError
from leveret.storage.log import scan_frames
from leveret.storage.messages import MessageStore
from leveret.storage.records import decode

QUEUES = [f"fault.q{i:02d}" for i in range(40)]
MESSAGES = 3500
DAMAGED = QUEUES[20]  # its declaration is the record hit


@dataclass(frozen=True)
class ForcedConfig(Config):
    """A Config with ``force_recovery`` (the broker reads it with getattr, so this works
    whether or not Config has the field yet)."""

    force_recovery: bool = True


def start(data_dir: Path, *, force: bool = False) -> BrokerThread:
    kind = ForcedConfig if force else Config
    config = kind(host="127.0.0.1", port=0, data_dir=data_dir, shutdown_timeout=3.0)
    return BrokerThread(config).start()


@pytest.fixture
def brokers() -> Iterator[list[BrokerThread]]:
    """Brokers started by a test, stopped at the end whatever happens."""
    started: list[BrokerThread] = []
    yield started
    for broker in started:
        broker.stop()


def body(queue: int, n: int) -> bytes:
    return b"q%02d-m%04d" % (queue, n)


def expected_bodies() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {name: [] for name in QUEUES}
    for n in range(MESSAGES):
        out[QUEUES[n % len(QUEUES)]].append(body(n % len(QUEUES), n))
    return out


def publish_all(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for name in QUEUES:
        channel.queue_declare(name, durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for n in range(MESSAGES):
        channel.basic_publish("", QUEUES[n % len(QUEUES)], body(n % len(QUEUES), n), persistent)
    channel.queue_declare(QUEUES[0], passive=True)  # a round trip: every publish is in
    connection.close()


def depths(url: str, names: list[str]) -> dict[str, int | None]:
    """Ready messages per queue (None: the queue does not exist)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    out: dict[str, int | None] = {}
    channel = connection.channel()
    for name in names:
        try:
            out[name] = channel.queue_declare(name, passive=True).method.message_count
        except ChannelClosedByBroker as exc:
            assert exc.reply_code == 404
            out[name] = None
            channel = connection.channel()
    connection.close()
    return out


def drain(url: str, names: list[str]) -> dict[str, list[bytes]]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    out: dict[str, list[bytes]] = {}
    for name in names:
        got = out[name] = []
        while True:
            method, _, content = channel.basic_get(name, auto_ack=True)
            if method is None:
                break
            got.append(content)
    connection.close()
    return out


def stored_messages(data_dir: Path) -> int:
    """Unacked messages in the store, read directly (the broker stopped)."""
    store = MessageStore.open(data_dir / "msgs")
    try:
        return sum(len(messages) for messages in store.recover().values())
    finally:
        store.close()


def declaration_offset(log_path: Path, queue: str) -> tuple[int, int]:
    """``(offset, payload length)`` of the record declaring ``queue``."""
    for offset, payload in scan_frames(log_path.read_bytes()).payloads:
        _, event = decode(payload)
        if isinstance(event, QueueDeclared) and event.queue.name == queue:
            return offset, len(payload)
    raise AssertionError(f"no record declares {queue}")


@pytest.fixture
def written(tmp_path: Path, brokers: list[BrokerThread]) -> Path:
    """A data dir with the 40 queues and 3,500 messages, the broker cleanly stopped."""
    data_dir = tmp_path / "data"
    broker = start(data_dir)
    publish_all(broker.url)
    broker.stop()
    assert stored_messages(data_dir) == MESSAGES
    return data_dir


@pytest.mark.parametrize("where", ["payload", "length"])
def test_a_flipped_bit_in_the_definitions_log_loses_no_message(
    written: Path,
    brokers: list[BrokerThread],
    caplog: pytest.LogCaptureFixture,
    where: str,
) -> None:
    log_path = written / "definitions.log"
    original = log_path.read_bytes()
    (written.parent / "definitions.log.orig").write_bytes(original)
    offset, length = declaration_offset(log_path, DAMAGED)
    damaged = bytearray(original)
    if where == "payload":
        damaged[offset + 8 + length // 2] ^= 0x08
    else:
        damaged[offset + 2] ^= 0x01  # the length grows by 256 bytes
    log_path.write_bytes(damaged)

    # 1. A plain start refuses, with one line naming the file, the offset and the remedy.
    with pytest.raises(StorageError) as refused:
        start(written)
    message = str(refused.value)
    assert "\n" not in message
    assert str(log_path) in message
    assert f"offset {offset}" in message
    assert "--force-recovery" in message
    assert log_path.read_bytes() == damaged  # left as it was

    # 2. Forced: every queue whose record is sound is back with its messages; the damaged
    # one is missing, and its messages are kept aside and reported, not acked away.
    with caplog.at_level(logging.WARNING):
        broker = start(written, force=True)
        brokers.append(broker)
    per_queue = MESSAGES // len(QUEUES)  # 87 or 88
    found = depths(broker.url, QUEUES)
    assert found[DAMAGED] is None
    assert all(found[name] in (per_queue, per_queue + 1) for name in QUEUES if name != DAMAGED)
    kept_aside = len(expected_bodies()[DAMAGED])
    assert sum(count or 0 for count in found.values()) == MESSAGES - kept_aside
    report = [r.getMessage() for r in caplog.records if "kept aside" in r.getMessage()]
    assert len(report) == 1, caplog.text
    assert f"{kept_aside} persistent messages of 1 queue(s)" in report[0]
    assert f"'{DAMAGED}': {kept_aside}" in report[0]
    assert f"offset {offset}" in caplog.text  # the skipped record is logged too
    broker.stop()
    assert stored_messages(written) == MESSAGES  # nothing destroyed

    # A second start needs no force (the log was repaired) and still destroys nothing.
    broker = start(written)
    brokers.append(broker)
    assert depths(broker.url, [DAMAGED]) == {DAMAGED: None}
    broker.stop()
    assert stored_messages(written) == MESSAGES

    # 3. The original log put back: every queue and every message is back, in order.
    log_path.write_bytes(original)
    broker = start(written)
    brokers.append(broker)
    assert drain(broker.url, QUEUES) == expected_bodies()


def test_messages_kept_aside_come_back_when_the_queue_is_declared_again(
    written: Path, brokers: list[BrokerThread]
) -> None:
    log_path = written / "definitions.log"
    offset, length = declaration_offset(log_path, DAMAGED)
    damaged = bytearray(log_path.read_bytes())
    damaged[offset + 8 + length // 2] ^= 0x40
    log_path.write_bytes(damaged)
    broker = start(written, force=True)
    brokers.append(broker)
    mine = expected_bodies()[DAMAGED]

    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    # A transient queue of that name does not take them (it could not keep them).
    channel.queue_declare(DAMAGED, durable=False)
    assert channel.queue_declare(DAMAGED, passive=True).method.message_count == 0
    channel.queue_delete(DAMAGED)
    # A durable one does, before its Declare-Ok.
    assert channel.queue_declare(DAMAGED, durable=True).method.message_count == len(mine)
    channel.basic_publish("", DAMAGED, b"new", pika.BasicProperties(delivery_mode=2))
    connection.close()
    broker.stop()

    broker = start(written)
    brokers.append(broker)
    assert drain(broker.url, [DAMAGED]) == {DAMAGED: [*mine, b"new"]}
    broker.stop()
    assert stored_messages(written) == MESSAGES - len(mine)  # drained: acked for real


def test_purging_a_redeclared_queue_discards_what_was_kept_aside(
    written: Path, brokers: list[BrokerThread]
) -> None:
    log_path = written / "definitions.log"
    # A log that lost its last 20 declarations (cut at a record boundary: a clean log).
    log_path.write_bytes(log_path.read_bytes()[: declaration_offset(log_path, DAMAGED)[0]])
    broker = start(written)
    brokers.append(broker)
    broker.stop()
    assert stored_messages(written) == MESSAGES  # nothing acked away
    broker = start(written)
    brokers.append(broker)
    purged = QUEUES[25]
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    declared = channel.queue_declare(purged, durable=True)
    assert declared.method.message_count == len(expected_bodies()[purged])
    channel.queue_purge(purged)
    connection.close()
    broker.stop()
    assert stored_messages(written) == MESSAGES - len(expected_bodies()[purged])


# -- a flipped bit in a message record's length field ---------------------------------------


def segment_records(data: bytes) -> list[tuple[int, int]]:
    """``(offset, frame length)`` of each record, for either segment format version: version 1
    frames are ``length | crc``, version 2 ones ``magic | length | crc``."""
    version = struct.unpack_from(">I", data, 8)[0]
    frame = 8 if version == 1 else 12
    out, pos = [], 12
    while pos < len(data):
        out.append((pos, frame))
        pos += frame + struct.unpack_from(">I", data, pos + frame - 8)[0]
    return out


@pytest.mark.parametrize("bit", [3, 11, 20, 31])
def test_a_flipped_bit_in_a_message_length_costs_one_message(
    tmp_path: Path, brokers: list[BrokerThread], bit: int
) -> None:
    data_dir = tmp_path / "data"
    broker = start(data_dir)
    brokers.append(broker)
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("fault.segment", durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for n in range(4000):
        channel.basic_publish("", "fault.segment", b"m%04d" % n + bytes(100), persistent)
    channel.queue_declare("fault.segment", passive=True)
    connection.close()
    broker.stop()

    [segment] = sorted((data_dir / "msgs").glob("msgs.*"))
    data = bytearray(segment.read_bytes())
    records = segment_records(bytes(data))
    assert len(records) == 4000
    offset, frame = records[2000]
    length_at = offset + frame - 8
    data[length_at + bit // 8] ^= 0x80 >> (bit % 8)
    segment.write_bytes(data)

    broker = start(data_dir)
    brokers.append(broker)
    got = drain(broker.url, ["fault.segment"])["fault.segment"]
    assert [m[:5] for m in got] == [b"m%04d" % n for n in range(4000) if n != 2000]


def test_the_command_line_refuses_a_damaged_log_in_one_line_until_forced(
    written: Path, tmp_path: Path
) -> None:
    log_path = written / "definitions.log"
    offset, length = declaration_offset(log_path, DAMAGED)
    damaged = bytearray(log_path.read_bytes())
    damaged[offset + 8 + length // 2] ^= 0x08
    log_path.write_bytes(damaged)
    serve = [sys.executable, "-m", "leveret", "serve", "--port", "0"]
    serve += ["--management-port", "-1", "--data-dir", str(written)]
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("leveret: error: "), refused.stderr
    assert str(log_path) in lines[0] and "--force-recovery" in lines[0]
    forced = subprocess.Popen(
        [*serve, "--force-recovery"], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert forced.stderr is not None
        for line in forced.stderr:  # started: its listening line comes last
            if "Leveret listening on" in line:
                break
        else:
            raise AssertionError(f"exited {forced.wait()} without listening")
    finally:
        forced.terminate()
        forced.wait(timeout=30)


@pytest.mark.parametrize("content", [b'{"users": [', b"\xff\xfe", b"[1, 2]"])
def test_a_damaged_user_database_is_named_in_one_line(tmp_path: Path, content: bytes) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "users.json").write_bytes(content)
    serve = [sys.executable, "-m", "leveret", "serve", "--port", "0"]
    serve += ["--management-port", "-1", "--data-dir", str(data_dir)]
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith(f"leveret: error: {data_dir / 'users.json'}: not a saved user")
