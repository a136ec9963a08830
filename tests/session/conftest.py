"""Fixtures of the session tests: a vhost in process (an event loop runs, as queues keep
timers; no socket is opened)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leveret.node.vhost import VHost


@pytest.fixture
async def vhost() -> Iterator[VHost]:
    vhost = VHost("/")
    yield vhost
    for queue in list(vhost.queues.values()):
        vhost.delete_queue(queue)
