"""On-disk format of the message store: segment files and their mark files.

The directory (``DATA/msgs/``) holds numbered pairs::

    msgs.00000001   the segment: messages, in the order they were appended
    acks.00000001   marks (acked, delivered) for the messages *of that segment only*
    msgs.00000002   ...

Keeping each segment's marks beside it, rather than in one stream, is what makes reclaiming
simple and safe: deleting a fully acked segment deletes its marks with it, and no mark ever
has to be carried over to another file (LavinMQ's ``msgs.N`` / ``acks.N`` layout).

Segment file (integers big-endian), format version 2::

    header   8s magic b"LVRTMSGS" | u32 format version (2)                          12 bytes
    record   4s magic b"\\xfe\\xd1LM" | u32 length | u32 crc32(body) | body          12 + length
    body     u8 flags (0, reserved) | u64 msg_id | u64 expires (ms since the epoch, 0: never)
             | u8 exchange_len | u8 routing_key_len | u32 header_len | u8 vhost_len | u8 queue_len
             | vhost | queue | exchange | routing_key
             | content header payload (header_len bytes, as received) | content body (the rest)

Format version 1 (segments written before) is the same without the record magic: a record is
``u32 length | u32 crc32(body) | body``, so prefixing a version 1 record with the magic makes
it a version 2 record. Both are read; new records only go to version 2 segments (a version 1
segment is never appended to again, and rewriting one makes it version 2).

(``vhost_len`` and ``queue_len`` come right before the names, so recovery can look the
queue up by one byte slice, lengths included, and decode each queue's name only once.)

Names are AMQP short strings (at most 255 UTF-8 bytes). ``msg_id`` grows by one per append,
store-wide, so file order is publish order, ids increase strictly within a segment, and every
id is unique across segments.

Mark file (format version 1)::

    header   8s magic b"LVRTACKS" | u32 format version (1)                          12 bytes
    mark     u8 kind (1 acked, 2 delivered) | u64 msg_id | u32 crc32(kind, msg_id)   13 bytes

Marks have a fixed size, so a torn tail is cut at a multiple of 13 and a mark with a bad CRC
is skipped without losing the marks after it. Losing a mark can only cause a redelivery
(at-least-once), never a loss. Marks are written at every sync but fsynced only when the
store is compacted or closed, for the same reason.

Repair on open. A record is sound when its length is plausible and its body passes the CRC
(the magic is not needed for that: it is what resynchronisation looks for). After a bad
record, reading resumes at the next sound record (:func:`resync`), whatever field was
damaged, the length included, so one flipped bit costs one message:

* version 2: the first sound record at an occurrence of the record magic after the bad
  record's start whose ``msg_id`` is above the last good one (``bytes.find``, so a 64 MiB
  segment is searched in milliseconds; a body that happens to contain the magic only costs a
  CRC check);
* version 1 (no magic): the first sound record whose flags byte and ``msg_id`` are those of
  one of the next :data:`V1_RESYNC_IDS` ids after the last good one (ids are consecutive in a
  segment that was never rewritten); best effort;
* either way, the record the bad one's length field points to, if it is sound and no sound
  record was found before it (two flipped bits, one in the next record's magic).

The skipped bytes stay in the file (logged as an error at each open, dropped when the segment
is rewritten). A bad record with no sound record after it is the tail: truncated (a warning
for a torn write, which a crash during an append leaves; otherwise an error, and the tail is
first copied to ``msgs.N.corrupt-OFFSET``, as is a torn tail above 64 KiB). A segment or mark
file with a newer format version raises :class:`~storage.errors.LogFormatError`.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from leveret.storage.errors import LogFormatError
from leveret.storage.files import create_atomically, truncate_tail

log = logging.getLogger("leveret.storage")

SEGMENT_VERSION = 2  # written; 1 is still read
MARKS_VERSION = 1
FORMAT_VERSION = SEGMENT_VERSION
SEGMENT_MAGIC = b"LVRTMSGS"
MARKS_MAGIC = b"LVRTACKS"
RECORD_MAGIC = b"\xfe\xd1LM"  # 0xfe never occurs in UTF-8 text
HEADER = struct.Struct(">8sI")
HEADER_LEN = 12
# The frame of a record: version 2 (magic, length, CRC), and version 1 (length, CRC).
FRAME = struct.Struct(">4sII")
FRAME_LEN = 12
FRAME_V1 = struct.Struct(">II")
FRAME_V1_LEN = 8
# The fixed part of a message body, after the frame.
MSG_FIXED = struct.Struct(">BQQBBIBB")
MSG_FIXED_LEN = 25
# Frame and fixed body in one unpack (the magic skipped): the recovery loop's only struct
# call per message.
MSG_HEAD = struct.Struct(">4xIIBQQBBIBB")
MSG_HEAD_LEN = FRAME_LEN + MSG_FIXED_LEN
MSG_HEAD_V1 = struct.Struct(">IIBQQBBIBB")
MARK_BODY = struct.Struct(">BQ")
MARK = struct.Struct(">BQI")
MARK_LEN = 13
# A live message's tag in the store (``live[queue][msg_id]``): its body size shifted left by
# SIZE_SHIFT, then its segment number (NUMBER_MASK once shifted right by one), then the
# delivered bit.
SIZE_SHIFT = 41
NUMBER_MASK = (1 << 40) - 1
assert HEADER.size == HEADER_LEN
assert FRAME.size == FRAME_LEN and FRAME_V1.size == FRAME_V1_LEN
assert MSG_FIXED.size == MSG_FIXED_LEN
assert MSG_HEAD.size == MSG_HEAD_LEN and MSG_HEAD_V1.size == FRAME_V1_LEN + MSG_FIXED_LEN
assert MARK.size == MARK_LEN == MARK_BODY.size + 4
assert len(RECORD_MAGIC) == FRAME_LEN - FRAME_V1_LEN

ACKED = 1
DELIVERED = 2
MAX_RECORD = 1 << 31  # larger than any message a broker accepts; more is a bad length field
SEGMENT_HEADER = HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION)
MARKS_HEADER = HEADER.pack(MARKS_MAGIC, MARKS_VERSION)
# Version 1 segments: how many ids after the last good one resynchronisation looks for.
V1_RESYNC_IDS = 16


class Layout(NamedTuple):
    """How records are framed in a segment of one format version."""

    version: int
    frame_len: int  # bytes before the body
    head: struct.Struct  # frame and fixed body, the magic skipped
    magic: bytes  # b"" in version 1


LAYOUTS = {
    1: Layout(1, FRAME_V1_LEN, MSG_HEAD_V1, b""),
    2: Layout(2, FRAME_LEN, MSG_HEAD, RECORD_MAGIC),
}


def layout_of(data: bytes) -> Layout:
    """The layout of a segment whose (checked, complete) header starts ``data``."""
    return LAYOUTS[HEADER.unpack_from(data)[1]]


QueueKey = tuple[str, str]  # (vhost, queue name)


class StoredMessage(NamedTuple):
    """A recovered message, as :meth:`MessageStore.recover` returns it."""

    msg_id: int
    exchange: str
    routing_key: str
    header: bytes  # the content header frame payload, as the publisher sent it
    body: bytes
    redelivered: bool  # it had been delivered before the restart
    expires: int  # as given to append: ms since the epoch, 0 for never


def segment_path(directory: Path, number: int) -> Path:
    """``msgs.NNNNNNNN``."""
    return directory / f"msgs.{number:08d}"


def marks_path(directory: Path, number: int) -> Path:
    """``acks.NNNNNNNN``."""
    return directory / f"acks.{number:08d}"


def iter_numbers(directory: Path, prefix: str) -> Iterator[int]:
    """Numbers of the files named ``prefix`` + 8 digits in ``directory``."""
    for entry in os.scandir(directory):
        digits = entry.name[len(prefix) :]
        if entry.name.startswith(prefix) and len(digits) == 8 and digits.isdigit():
            yield int(digits)


# -- writing ------------------------------------------------------------------------------


def queue_prefix(queue: QueueKey) -> tuple[int, int, bytes]:
    """``(vhost_len, queue_len, vhost + queue)`` of a queue key, lengths checked."""
    vhost, name = queue[0].encode(), queue[1].encode()
    if len(vhost) > 255 or len(name) > 255:
        raise ValueError(f"vhost and queue names are short strings (255 bytes): {queue!r}")
    return len(vhost), len(name), vhost + name


def message_record(
    msg_id: int,
    expires: int,
    prefix: tuple[int, int, bytes],
    exchange: bytes,
    routing_key: bytes,
    header: bytes,
    body: bytes,
) -> bytes:
    """One framed message record (see the module doc)."""
    if len(exchange) > 255 or len(routing_key) > 255:
        raise ValueError("exchange names and routing keys are short strings (255 bytes)")
    vlen, qlen, names = prefix
    fixed = MSG_FIXED.pack(
        0, msg_id, expires, len(exchange), len(routing_key), len(header), vlen, qlen
    )
    rest = b"".join((fixed, names, exchange, routing_key, header, body))
    return FRAME.pack(RECORD_MAGIC, len(rest), zlib.crc32(rest)) + rest


def replace_segment(path: Path, records: list[memoryview | bytes]) -> int:
    """Atomically replace a segment with a version 2 one holding ``records`` (tmp, fsync,
    rename, fsync dir); returns the new file's size."""
    data = b"".join([SEGMENT_HEADER, *records])
    create_atomically(path, data)
    return len(data)


def mark_record(kind: int, msg_id: int) -> bytes:
    """One 13-byte mark."""
    body = MARK_BODY.pack(kind, msg_id)
    return body + zlib.crc32(body).to_bytes(4, "big")


# -- reading ------------------------------------------------------------------------------


def read_header(path: Path, data: bytes, magic: bytes) -> bool:
    """Whether ``data`` starts with a complete header of ours (False: cut short by a crash)."""
    if len(data) < HEADER_LEN:
        if data[: len(magic)] == magic[: len(data)]:
            return False
        raise LogFormatError(f"{path} is not a Leveret message store file")
    found, version = HEADER.unpack_from(data)
    if found != magic:
        raise LogFormatError(f"{path} is not a Leveret message store file (magic {found!r})")
    newest = SEGMENT_VERSION if magic == SEGMENT_MAGIC else MARKS_VERSION
    if version > newest or version < 1:
        raise LogFormatError(
            f"{path} has format version {version}; this Leveret reads versions 1 to "
            f"{newest}. Refusing to start rather than lose messages"
        )
    return True


def check_headers(directory: Path) -> tuple[int, int]:
    """Raise :class:`LogFormatError` if any segment or mark file is not ours or is newer;
    returns the reads made and the bytes they read (the store counts them)."""
    reads = size = 0
    for prefix, magic in (("msgs.", SEGMENT_MAGIC), ("acks.", MARKS_MAGIC)):
        for number in iter_numbers(directory, prefix):
            path = directory / f"{prefix}{number:08d}"
            with path.open("rb") as f:
                header = f.read(HEADER_LEN)
            reads, size = reads + 1, size + len(header)
            read_header(path, header, magic)
    return reads, size


def read_marks(path: Path) -> tuple[set[int], set[int], int, int]:
    """``(acked ids, delivered ids, largest id, bytes read)`` of a mark file, its tail
    repaired."""
    acked: set[int] = set()
    delivered: set[int] = set()
    if not path.exists():
        return acked, delivered, 0, 0
    data = path.read_bytes()
    if not read_header(path, data, MARKS_MAGIC):
        path.unlink()  # created but never written to: nothing to lose
        return acked, delivered, 0, len(data)
    end = HEADER_LEN + (len(data) - HEADER_LEN) // MARK_LEN * MARK_LEN
    if end != len(data):
        truncate_tail(path, end, data[end:], "incomplete mark", torn=True)
    crc32 = zlib.crc32
    view = memoryview(data)
    top = bad = 0
    pos = HEADER_LEN
    for kind, msg_id, crc in MARK.iter_unpack(view[HEADER_LEN:end]):
        if crc32(view[pos : pos + 9]) != crc or kind not in (ACKED, DELIVERED):
            bad += 1
        else:
            (acked if kind == ACKED else delivered).add(msg_id)
            top = max(top, msg_id)
        pos += MARK_LEN
    if bad:
        log.error("%s: %d bad marks skipped (their messages may be redelivered)", path, bad)
    return acked, delivered, top, len(data)


def check_record(data: bytes, pos: int, layout: Layout) -> tuple[str | None, bool]:
    """``(None, False)`` if a sound message record starts at ``pos``, else ``(why, torn)``."""
    size = len(data)
    if size - pos < layout.head.size:
        return "incomplete record", True
    length, crc, _, _, _, xlen, rlen, hlen, vlen, qlen = layout.head.unpack_from(data, pos)
    if length > MAX_RECORD or MSG_FIXED_LEN + vlen + qlen + xlen + rlen + hlen > length:
        return f"impossible record length {length}", False
    body = pos + layout.frame_len
    end = body + length
    if end > size:
        return f"record of {length} bytes runs past the end of the file", True
    if zlib.crc32(memoryview(data)[body:end]) != crc:
        return "CRC mismatch", False
    return None, False


def _sound_after(data: bytes, pos: int, layout: Layout, last_id: int) -> bool:
    """Whether a sound record with an id above ``last_id`` starts at ``pos``."""
    if check_record(data, pos, layout)[0] is not None:
        return False
    return bool(layout.head.unpack_from(data, pos)[3] > last_id)


def resync(data: bytes, bad: int, layout: Layout, last_id: int) -> int | None:
    """Where the first sound record after the bad one at ``bad`` starts (see the module doc),
    or None when there is none. ``last_id`` is the id of the last sound record before it.

    The earliest candidate wins: a damaged length can point past sound records (with records
    of 128 bytes, one flipped bit of the length lands exactly on a later record), so the
    record its length points to only bounds the search.
    """
    size = len(data)
    frame_len = layout.frame_len
    best = size  # the earliest sound record found so far
    if size - bad >= frame_len:
        length: int = FRAME_V1.unpack_from(data, bad + frame_len - FRAME_V1_LEN)[0]
        after = bad + frame_len + length
        if after < size and _sound_after(data, after, layout, last_id):
            best = after
    find = data.find
    if layout.magic:
        candidate = find(layout.magic, bad + 1, best)
        while candidate >= 0:
            if _sound_after(data, candidate, layout, last_id):
                return candidate
            candidate = find(layout.magic, candidate + 1, best)
    elif last_id:
        # Version 1: the flags byte (0) and the id of a following record, 8 bytes into it.
        for msg_id in range(last_id + 1, last_id + 1 + V1_RESYNC_IDS):
            pattern = b"\0" + msg_id.to_bytes(8, "big")
            found = find(pattern, bad + 1 + FRAME_V1_LEN, best + FRAME_V1_LEN)
            while found >= 0:
                if _sound_after(data, found - FRAME_V1_LEN, layout, last_id):
                    best = found - FRAME_V1_LEN
                    break
                found = find(pattern, found + 1, best + FRAME_V1_LEN)
    return best if best < size else None


def skip_or_truncate(path: Path, data: bytes, pos: int, layout: Layout, last_id: int) -> int | None:
    """Handle a bad record at ``pos``: the offset to resume at when a sound record follows
    it, else None after truncating the file at ``pos`` (see the module doc)."""
    problem, torn = check_record(data, pos, layout)
    assert problem is not None
    resume = resync(data, pos, layout, last_id)
    if resume is not None:
        log.error(
            "%s: message record at offset %d skipped (%s): %d bytes up to the next sound "
            "record, at offset %d, are not used",
            path,
            pos,
            problem,
            resume - pos,
            resume,
        )
        return resume
    torn = torn or not data[pos:].strip(b"\0")  # zeros: size grew, data never came
    truncate_tail(path, pos, data[pos:], problem, torn=torn)
    return None


class Loaded(NamedTuple):
    """What :func:`load_segment` found in one segment."""

    records: int  # message records
    live: int  # of which not acked
    end: int  # file size after repair
    top: int  # largest msg_id


def load_segment(
    path: Path,
    data: bytes,
    number: int,
    acked: set[int],
    delivered: set[int],
    recovered: dict[QueueKey, list[StoredMessage]],
    live: dict[QueueKey, dict[int, int]],
) -> Loaded:
    """Recovery of one segment: for each unacked message, append a :class:`StoredMessage` to
    ``recovered[queue]`` and set ``live[queue][msg_id] = body size << SIZE_SHIFT | number
    << 1 | delivered``.

    The loop is the start-up cost of a store with a million messages, so the sound record is
    handled inline with one struct call; anything odd goes to :func:`skip_or_truncate`.
    """
    layout = layout_of(data)
    size = len(data)
    view = memoryview(data)
    unpack = layout.head.unpack_from
    head_len = layout.head.size
    frame_len = layout.frame_len
    key_offset = head_len - 2  # vhost_len, queue_len, vhost, queue start here
    crc32 = zlib.crc32
    new = tuple.__new__
    seg_tag = number << 1
    # Per queue key bytes (lengths included): (list to append to, live dict). Per exchange
    # bytes: the decoded name. Both spare a decode and a dict lookup per message.
    queues: dict[bytes, tuple[list[StoredMessage], dict[int, int]]] = {}
    exchanges: dict[bytes, str] = {}
    count = n_live = top = 0
    pos = HEADER_LEN
    while pos < size:
        if size - pos >= head_len:
            length, crc, _, msg_id, expires, xlen, rlen, hlen, vlen, qlen = unpack(data, pos)
            end = pos + frame_len + length
            p = pos + head_len + vlen + qlen  # the exchange name
            h = p + xlen + rlen  # the content header
            if end <= size and h + hlen <= end and crc32(view[pos + frame_len : end]) == crc:
                count += 1
                top = msg_id if msg_id > top else top
                if msg_id not in acked:
                    key = data[pos + key_offset : p]
                    slot = queues.get(key)
                    if slot is None:
                        name = (key[2 : 2 + vlen].decode(), key[2 + vlen :].decode())
                        slot = queues[key] = (
                            recovered.setdefault(name, []),
                            live.setdefault(name, {}),
                        )
                    xkey = data[p : p + xlen]
                    exchange = exchanges.get(xkey)
                    if exchange is None:
                        exchange = exchanges[xkey] = xkey.decode()
                    was_delivered = msg_id in delivered
                    slot[0].append(
                        new(
                            StoredMessage,
                            (
                                msg_id,
                                exchange,
                                data[p + xlen : h].decode(),
                                data[h : h + hlen],
                                data[h + hlen : end],
                                was_delivered,
                                expires,
                            ),
                        )
                    )
                    body_size = end - h - hlen
                    slot[1][msg_id] = body_size << SIZE_SHIFT | seg_tag | was_delivered
                    n_live += 1
                pos = end
                continue
        resume = skip_or_truncate(path, data, pos, layout, top)
        if resume is None:
            return Loaded(count, n_live, pos, top)
        pos = resume
    return Loaded(count, n_live, pos, top)


def iter_records(data: bytes) -> Iterator[tuple[QueueKey, int, int, int]]:
    """``(queue, msg_id, start, end)`` of every sound record of a segment held in ``data``,
    skipping bad records the way :func:`load_segment` does, and never repairing anything
    (for rewriting a segment, and for reading messages back)."""
    layout = layout_of(data)
    head = layout.head
    key_offset = head.size - 2
    pos = HEADER_LEN
    size = len(data)
    names: dict[bytes, QueueKey] = {}
    last_id = 0
    while pos < size:
        if check_record(data, pos, layout)[0] is not None:
            resume = resync(data, pos, layout, last_id)
            if resume is None:
                return
            pos = resume
        length, _, _, msg_id, _, _, _, _, vlen, qlen = head.unpack_from(data, pos)
        end = pos + layout.frame_len + length
        key = data[pos + key_offset : pos + head.size + vlen + qlen]
        queue = names.get(key)
        if queue is None:
            queue = names[key] = (key[2 : 2 + vlen].decode(), key[2 + vlen :].decode())
        yield queue, msg_id, pos, end
        last_id = msg_id
        pos = end


def read_message(data: bytes, start: int, redelivered: bool) -> StoredMessage:
    """The message of the sound record at ``start`` of a segment held in ``data``."""
    layout = layout_of(data)
    length, _, _, msg_id, expires, xlen, rlen, hlen, vlen, qlen = layout.head.unpack_from(
        data, start
    )
    end = start + layout.frame_len + length
    p = start + layout.head.size + vlen + qlen
    h = p + xlen + rlen
    return StoredMessage(
        msg_id,
        data[p : p + xlen].decode(),
        data[p + xlen : h].decode(),
        data[h : h + hlen],
        data[h + hlen : end],
        redelivered,
        expires,
    )


def upgrade_record(record: memoryview, version: int) -> memoryview | bytes:
    """A sound record of a version ``version`` segment as a version 2 record."""
    return record if version == SEGMENT_VERSION else RECORD_MAGIC + record
