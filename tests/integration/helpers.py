"""Small helpers shared by the integration scenarios (aio-pika and pika).

Keep this module small and stable: several test modules import it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pika

# aiormq raises a specific class per reply code with ``args == (reply_text,)``; codes it does
# not map come as the generic ChannelClosed / ConnectionClosed with ``args == (code, text)``.
_AIORMQ_CODES = {
    "ChannelAccessRefused": 403,
    "ChannelNotFoundEntity": 404,
    "ChannelLockedResource": 405,
    "ChannelPreconditionFailed": 406,
    "ConnectionFrameError": 501,
    "ConnectionSyntaxError": 502,
    "ConnectionCommandInvalid": 503,
    "ConnectionChannelError": 504,
    "ConnectionUnexpectedFrame": 505,
    "ConnectionResourceError": 506,
    "ConnectionNotAllowed": 530,
    "ConnectionNotImplemented": 540,
    "ConnectionInternalError": 541,
}


def unique(prefix: str = "t") -> str:
    """A name no other test (or earlier run) uses: ``<prefix>-<12 hex digits>``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def aio_reply(exc: BaseException) -> tuple[int, str]:
    """(reply_code, reply_text) of a channel.close / connection.close raised by aiormq."""
    code = _AIORMQ_CODES.get(type(exc).__name__)
    if code is not None:
        (text,) = exc.args
        return code, text
    code, text = exc.args
    return int(code), text


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], within: float = 5.0, interval: float = 0.02
) -> None:
    """Poll an async predicate until it is true; fail with AssertionError after ``within`` s."""
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(interval)


async def declare_queue(ch: Any, cleanup: Any, prefix: str = "q", **kwargs: Any) -> Any:
    """An aio-pika queue with a unique name, deleted after the test (``cleanup`` fixture)."""
    queue = await ch.declare_queue(unique(prefix), **kwargs)
    cleanup.queues.append(queue.name)
    return queue


async def declare_exchange(
    ch: Any, cleanup: Any, type_: Any = "direct", prefix: str = "x", **kwargs: Any
) -> Any:
    """An aio-pika exchange with a unique name, deleted after the test."""
    exchange = await ch.declare_exchange(unique(prefix), type_, **kwargs)
    cleanup.exchanges.append(exchange.name)
    return exchange


class Http:
    """Just enough of the management API (as guest, or ``user``): (status, decoded JSON
    or text)."""

    def __init__(self, base: str, user: str = "guest", password: str = "guest") -> None:
        self.base = base.rstrip("/")
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", self.auth)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                raw = answer.read()
                return answer.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


def durable_queue(
    ch: Any, cleanup: list[str], queue_type: str, prefix: str, **arguments: Any
) -> str:
    """A durable queue of ``queue_type`` with a unique name, deleted after the test."""
    name = unique(prefix)
    cleanup.append(name)
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type, **arguments})
    return name


PASSWORD = "tenant-pw"


@dataclass
class Tenant:
    """A vhost and a user of the test's own (password :data:`PASSWORD`), with full
    permissions on it and on ``/``; the ``tenant`` fixture makes and deletes them."""

    api: Http
    base: str
    vhost: str
    user: str

    def path(self, kind: str, name: str = "") -> str:
        """``/api/<kind>/<this vhost or user>[/name]``."""
        owner = self.user if kind == "user-limits" else self.vhost
        tail = "/" + name if name else ""
        return f"/api/{kind}/{urllib.parse.quote(owner, safe='')}{tail}"

    def set(self, kind: str, name: str, value: Any) -> tuple[int, Any]:
        """PUT a limit; (status, body)."""
        return self.api("PUT", self.path(kind, name), {"value": value})

    def connect(self, vhost: str | None = None, user: str | None = None) -> pika.BlockingConnection:
        """A pika connection to ``vhost`` (this one) as ``user`` (this one)."""
        parts = urllib.parse.urlsplit(self.base)
        name, password = (user, "guest") if user else (self.user, PASSWORD)
        netloc = f"{name}:{password}@{parts.hostname}:{parts.port}"
        path = "/" + urllib.parse.quote(self.vhost if vhost is None else vhost, safe="")
        url = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
        return pika.BlockingConnection(pika.URLParameters(url))


def poll(check: Callable[[], Any], expected: Any, within: float = 5.0) -> None:
    """Wait until ``check()`` returns ``expected`` (RabbitMQ applies some changes, policies
    for one, asynchronously), then assert it."""
    deadline = time.monotonic() + within
    while True:
        got = check()
        if got == expected or time.monotonic() > deadline:
            assert got == expected
            return
        time.sleep(0.05)


def depth(ch: Any, queue: str) -> int:
    """The ready messages of ``queue`` (a passive declare on a pika channel)."""
    return int(ch.queue_declare(queue, passive=True).method.message_count)
