"""Read-only tools over a definitions log: ``leveret log dump`` and ``leveret log check``.

Neither repairs anything (the broker may be running and appending): they read the file with
the framing and decoding of :mod:`leveret.storage.log` and report what :meth:`DefinitionLog.open`
would do with it.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from leveret.storage.errors import CorruptRecordError, LogFormatError
from leveret.storage.live import LiveState
from leveret.storage.log import Record, check_header, decode_all, scan_frames
from leveret.storage.records import decode

log = logging.getLogger("leveret.storage")


def read_log(path: str | os.PathLike[str]) -> list[Record]:
    """The records of a log, read-only (no repair): for ``leveret log dump``.

    Skips damaged stretches (resynchronising on the next sound record, as a forced recovery
    would), stops at a bad tail and skips undecodable records, with a logged error each;
    :func:`check` says exactly what is wrong.
    """
    path = Path(path)
    data = path.read_bytes()
    if check_header(path, data) == 0:
        return []
    scan = scan_frames(data)
    for damage in scan.damage:
        log.error(
            "%s: unreadable from offset %d to %d (%s)",
            path,
            damage.offset,
            damage.end,
            damage.reason,
        )
    if scan.error is not None:
        log.error("%s: unreadable from offset %d (%s)", path, scan.end, scan.error)
    return decode_all(path, scan.payloads)


@dataclass(frozen=True, slots=True)
class LogReport:
    """What :func:`check` found in a log file (``leveret log check``)."""

    path: str
    format_version: int
    file_size: int
    valid_bytes: int  # offset where the last good record ends (damaged stretches skipped)
    records: int  # well-framed records
    live: int
    dead: int
    events: dict[str, int]  # decoded records by event type
    problems: list[str]  # one line per problem, with its offset
    error_offset: int | None  # offset of the first problem, None when the log is clean

    @property
    def ok(self) -> bool:
        """Whether the log is clean: open() would repair nothing."""
        return not self.problems

    def __str__(self) -> str:
        lines = [
            f"{self.path}: format {self.format_version}, {self.file_size} bytes, "
            f"{self.records} records ({self.live} live, {self.dead} dead)",
            *(f"  {name}: {count}" for name, count in sorted(self.events.items())),
            *(f"  problem: {p}" for p in self.problems),
            "  OK" if self.ok else f"  NOT OK: first problem at offset {self.error_offset}",
        ]
        return "\n".join(lines)


def check(path: str | os.PathLike[str]) -> LogReport:
    """Verify a log without changing it: framing, CRCs, payloads, live and dead counts."""
    path = Path(path)
    data = path.read_bytes()
    problems: list[tuple[int, str]] = []
    try:
        version = check_header(path, data)
    except LogFormatError as exc:
        return LogReport(str(path), 0, len(data), 0, 0, 0, 0, {}, [f"0: {exc}"], 0)
    if version == 0:
        return LogReport(str(path), 0, len(data), 0, 0, 0, 0, {}, ["0: partial header"], 0)
    scan = scan_frames(data)
    for damage in scan.damage:
        problems.append(
            (
                damage.offset,
                f"corrupt record ({damage.reason}) with sound records after it: "
                f"{damage.end - damage.offset} bytes unreadable up to offset {damage.end}; "
                "the broker refuses to start without --force-recovery",
            )
        )
    if scan.error is not None:
        kind = "torn tail" if scan.torn else "corrupt"
        problems.append((scan.end, f"{kind}: {scan.error}"))
    live = LiveState()
    counts: Counter[str] = Counter()
    for offset, payload in scan.payloads:
        try:
            vhost, event = decode(payload)
        except (CorruptRecordError, LogFormatError) as exc:
            problems.append((offset, f"undecodable record: {exc}"))
            continue
        counts[type(event).__name__] += 1
        live.apply(vhost, event)
    problems.sort()
    n_live = live.count()
    return LogReport(
        path=str(path),
        format_version=version,
        file_size=len(data),
        valid_bytes=scan.end,
        records=len(scan.payloads),
        live=n_live,
        dead=len(scan.payloads) - n_live,
        events=dict(counts),
        problems=[f"{offset}: {text}" for offset, text in problems],
        error_offset=problems[0][0] if problems else None,
    )
