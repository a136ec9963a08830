#!/usr/bin/env python3
"""CPU time of the frame codec in one process, to compare builds (issue 34's compilers).

Throughput runs on a shared machine drift with the load; this times two hot functions of
the codec alone, in process CPU time, the best of ``--runs``: ``FrameReader.feed`` on large
reads of 100-byte publishes (method + header + body frames) and ``deliver_frames`` joined
into one write. Run it under each build's PYTHONPATH, from outside the repository (so that
the build, not the checkout, is imported):

  cd /tmp && PYTHONPATH=$REPO/build/cython $REPO/.venv/bin/python $REPO/bench/codec_micro.py
"""

from __future__ import annotations

import argparse
import sys
import time

from pamqp import body, commands, frame, header

from leveret.wire import codec
from leveret.wire.codec.writer import deliver_frames, route_shortstrs, shortstr

FRAME_MAX = 131072
BODY = b"x" * 100


def publish_octets() -> bytes:
    """One publish as a client sends it: Basic.Publish, content header, one body frame."""
    octets = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    octets += frame.marshal(header.ContentHeader(0, len(BODY), commands.Basic.Properties()), 1)
    return octets + frame.marshal(body.ContentBody(BODY), 1)


def read_ns(per_read: int = 2000, reads: int = 50) -> float:
    """CPU ns per publish decoded, ``per_read`` publishes in each ``feed``."""
    chunk = publish_octets() * per_read
    reader = codec.FrameReader(FRAME_MAX)
    reader.feed(codec.PROTOCOL_HEADER)
    started = time.process_time()
    for _ in range(reads):
        reader.feed(chunk)
    return (time.process_time() - started) / (reads * per_read) * 1e9


def deliver_ns(count: int = 200_000) -> float:
    """CPU ns per delivery encoded (Basic.Deliver + header + body, joined)."""
    props = commands.Basic.Properties()
    header_payload = frame.marshal(header.ContentHeader(0, len(BODY), props), 1)[7:-1]
    tag, route = shortstr("ctag"), route_shortstrs("", "q")
    started = time.process_time()
    for delivery_tag in range(count):
        b"".join(deliver_frames(1, tag, delivery_tag, 0, route, header_payload, BODY, FRAME_MAX))
    return (time.process_time() - started) / count * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="repetitions; the best is kept")
    args = parser.parse_args()
    reader_file = sys.modules["leveret.wire.codec.reader"].__file__ or ""
    kind = "compiled" if reader_file.endswith(".so") else "pure"
    read = min(read_ns() for _ in range(args.runs))
    deliver = min(deliver_ns() for _ in range(args.runs))
    print(f"{kind} ({reader_file}): read {read:.0f} ns/publish, deliver {deliver:.0f} ns/message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
