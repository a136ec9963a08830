"""The management API switches the traffic trace on and off at run time."""

from __future__ import annotations

from pathlib import Path

import aio_pika

from leveret.trace import read_messages, segment_files

from .helpers import Mgmt


async def test_trace_switch_records_publishes(mgmt: Mgmt, tmp_path: Path) -> None:
    assert (await mgmt.get("leveret", "trace"))["enabled"] is False
    body = {"enabled": True, "directory": str(tmp_path / "trace")}
    status, state = await mgmt.request("PUT", "leveret", "trace", body=body)
    assert (status, state["enabled"]) == (200, True)
    connection = await aio_pika.connect(mgmt.amqp_url)
    channel = await connection.channel()
    queue = await channel.declare_queue(exclusive=True)
    await channel.default_exchange.publish(aio_pika.Message(b"x" * 7), queue.name)
    await channel.default_exchange.publish(aio_pika.Message(b"y"), "nowhere")
    await connection.close()
    # Switching off closes the writer, which writes what it buffered first.
    status, state = await mgmt.request("PUT", "leveret", "trace", body={"enabled": False})
    assert state == {"enabled": False, "directory": None, "written": 0, "dropped": 0}
    status, _ = await mgmt.request("PUT", "leveret", "trace", body={"enabled": True})
    assert status == 400  # no directory configured

    lines = [m for s in segment_files([tmp_path / "trace"]) for m in read_messages(s)]
    assert [(r["key"], r["size"], r["queues"]) for r in lines] == [
        (queue.name, 7, [queue.name]),
        ("nowhere", 1, []),
    ]
