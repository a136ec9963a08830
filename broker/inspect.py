"""Run a broker inside a test process and look at its queues without sleeping.

This module needs nothing but the standard library and Leveret itself (no pytest), so it
serves unittest suites and scripts as well as :mod:`leveret.testing`, the pytest plugin:

- :class:`BrokerThread` runs a :class:`leveret.server.Server` on its own event loop in a
  daemon thread, so blocking clients (pika, kombu, Celery) and asyncio clients (aio-pika,
  on the test's own loop) can both use it;
- :class:`Inspector` reads a vhost's queues (depth, ready, unacked, consumers, counters)
  and waits for a condition with a timeout: ``wait_for_messages``, ``wait_until_acked``,
  ``wait_for_consumers``, ``wait_until`` and their ``*_async`` twins. Against an
  in-process broker it reads the queues on the broker's loop (thread-safe); against an
  external broker it reads RabbitMQ's management HTTP API (:class:`ManagementAPI`).

Example without pytest::

    with BrokerThread() as broker:
        broker.add_vhost("tests")
        inspector = Inspector(broker, vhost="tests")
        ...  # publish to broker.vhost_url("tests") with any client
        inspector.wait_for_messages("orders", 3, timeout=5)

Counters follow RabbitMQ's management API: ``messages`` (the queue depth) is ready +
unacknowledged, as ``rabbitmq_queue_messages`` ("Sum of ready and unacknowledged messages -
total queue depth"); ``published`` counts messages routed to the queue, ``delivered``
deliveries and basic.get results (``deliver_get``), ``acked`` basic.ack'ed deliveries
(automatic-ack deliveries are never "acked").
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from leveret.config import Config
    from leveret.server import Server

T = TypeVar("T")

#: Seconds a wait gives up after when the caller passes no timeout.
DEFAULT_TIMEOUT = 5.0
#: How often a wait re-checks its condition on the broker's loop (seconds): a check is a
#: dict lookup and a few attribute reads, so this costs the broker nothing measurable.
LOCAL_CHECK_INTERVAL = 0.002
#: How often a wait re-reads the management HTTP API of an external broker (seconds).
HTTP_CHECK_INTERVAL = 0.05

Condition = Callable[["QueueStats | None"], bool]


class InspectionUnavailableError(RuntimeError):
    """The broker cannot be inspected (an external broker without a management API)."""


class QueueNotFoundError(LookupError):
    """The queue does not exist in the inspected vhost."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One consistent snapshot of a queue's counters (field names as RabbitMQ's API)."""

    vhost: str
    name: str
    messages_ready: int
    messages_unacknowledged: int
    consumers: int
    published: int
    delivered: int
    acked: int

    @property
    def messages(self) -> int:
        """The queue depth: ready + unacknowledged messages."""
        return self.messages_ready + self.messages_unacknowledged

    def describe(self) -> str:
        """``ready=1 unacked=0 consumers=0 published=1 delivered=0 acked=0``."""
        return (
            f"ready={self.messages_ready} unacked={self.messages_unacknowledged} "
            f"consumers={self.consumers} published={self.published} "
            f"delivered={self.delivered} acked={self.acked}"
        )


# -- the in-process broker ----------------------------------------------------------------


class BrokerThread:
    """A Leveret server running on its own event loop in a daemon thread.

    ``BrokerThread()`` listens on 127.0.0.1 on a free port (see :attr:`url`);
    pass a :class:`leveret.config.Config` for anything else. Use ``start()`` / ``stop()``
    or a ``with`` block. The broker's state belongs to :attr:`loop`: touch it from other
    threads only through :meth:`call` (or ``asyncio.run_coroutine_threadsafe``).
    """

    def __init__(self, config: Config | None = None, *, name: str = "leveret-broker") -> None:
        # Imported here: ``import leveret.testing`` (every pytest start-up, through the
        # pytest11 entry point) must not pay for importing the whole broker.
        from leveret.config import Config
        from leveret.server import Server

        self.config = config if config is not None else Config(host="127.0.0.1", port=0)
        self.loop = asyncio.new_event_loop()
        self.server = Server(self.config)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._running = False

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.start())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the thread calling start()
            self._error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            # Whatever is left (connection tasks of clients that never closed) is
            # cancelled, so closing the loop does not warn about pending tasks.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def start(self, timeout: float = 10.0) -> BrokerThread:
        """Start the thread and wait until the broker listens; returns ``self``."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError(f"the broker did not start within {timeout} s")
        if self._error is not None:
            raise self._error
        self._running = True
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the broker (clients get 320 CONNECTION_FORCED) and its thread. Idempotent."""
        if not self._running:
            return
        self._running = False
        if timeout is None:
            timeout = self.config.shutdown_timeout + 5.0
        fut = asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop)
        try:
            fut.result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the broker has started and not been stopped."""
        return self._running

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``amqp://guest:guest@127.0.0.1:PORT/`` (the default vhost)."""
        return f"amqp://guest:guest@{self._host}:{self.server.port}/"

    @property
    def _host(self) -> str:
        host = self.config.host
        if host in ("", "0.0.0.0"):
            return "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def vhost_url(self, vhost: str, user: str = "guest", password: str = "guest") -> str:
        """The URL of ``vhost`` (percent-encoded, so ``/`` is ``%2F``)."""
        return amqp_url_with(
            f"amqp://{self._host}:{self.server.port}/", vhost, user=user, password=password
        )

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn()`` on the broker's loop and return its result (from any thread)."""
        return call_on_loop(self.loop, fn, timeout)

    def add_vhost(self, name: str, user: str = "guest") -> str:
        """Create ``name`` and give ``user`` full permissions on it; returns its URL."""
        from leveret.auth import Permission

        def add() -> None:
            self.server.add_vhost(name)
            self.server.access.set_permissions(user, name, Permission())

        self.call(add)
        return self.vhost_url(name, user=user)

    def delete_vhost(self, name: str) -> bool:
        """Delete ``name``: its connections are closed (320), its queues deleted."""
        return self.call(lambda: self.server.delete_vhost(name))

    def inspector(self, vhost: str = "/") -> Inspector:
        """An :class:`Inspector` of ``vhost`` on this broker."""
        return Inspector(self, vhost=vhost)


def amqp_url_with(
    url: str, vhost: str, user: str | None = None, password: str | None = None
) -> str:
    """``url`` with its path replaced by the percent-encoded ``vhost`` (and, when given,
    its credentials replaced); the query string is kept."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        host = netloc.rpartition("@")[2]
        cred = urllib.parse.quote(user, safe="")
        if password is not None:
            cred += ":" + urllib.parse.quote(password, safe="")
        netloc = f"{cred}@{host}"
    path = "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def call_on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn()`` on ``loop`` (directly when already on it) and return its result."""
    if _running_loop() is loop:
        return fn()
    return _schedule(loop, fn).result(timeout)


async def call_on_loop_async(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
    """:func:`call_on_loop` for a coroutine on any loop: awaits instead of blocking."""
    if _running_loop() is loop:
        return fn()
    return await asyncio.wrap_future(_schedule(loop, fn))


def _schedule(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
    if loop.is_closed():
        raise RuntimeError("the broker's event loop is closed (was the broker stopped?)")
    if not loop.is_running():
        raise RuntimeError("the broker's event loop is not running (was the broker started?)")
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not result.set_running_or_notify_cancel():
            return
        try:
            result.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            result.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return result


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# -- the management HTTP API of an external broker -----------------------------------------


class ManagementError(RuntimeError):
    """An HTTP error answer of the management API."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status} {body[:200]}")
        self.status = status


class ManagementAPI:
    """A small client of RabbitMQ's management HTTP API (``/api``), on the standard
    library: vhosts, permissions and queue statistics, what the test fixtures need."""

    def __init__(
        self, base_url: str, username: str = "guest", password: str = "guest", timeout: float = 5
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.timeout = timeout
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._auth = f"Basic {token}"

    def __repr__(self) -> str:
        return f"ManagementAPI({self.base_url!r}, user={self.username!r})"

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """Send one request; returns the decoded JSON answer (None when empty)."""
        # Imported here: http.client and email cost ~3 ms, paid only with an external broker.
        import urllib.error
        import urllib.request

        url = self.base_url + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise ManagementError(method, url, exc.code, body) from None
        return json.loads(raw) if raw.strip() else None

    def probe(self, timeout: float = 1.0) -> str | None:
        """None when ``GET /api/overview`` answers, else why it does not."""
        try:
            self.request("GET", "/api/overview", timeout=timeout)
        except ManagementError as exc:
            return str(exc)
        except (OSError, ValueError) as exc:  # refused, unreachable, timeout, not JSON
            return f"GET {self.base_url}/api/overview: {exc}"
        return None

    @staticmethod
    def _q(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    def create_vhost(self, name: str) -> None:
        """``PUT /api/vhosts/{name}``."""
        self.request("PUT", f"/api/vhosts/{self._q(name)}", {})

    def delete_vhost(self, name: str) -> None:
        """``DELETE /api/vhosts/{name}`` (absent is fine)."""
        try:
            self.request("DELETE", f"/api/vhosts/{self._q(name)}")
        except ManagementError as exc:
            if exc.status != 404:
                raise

    def set_permissions(
        self, vhost: str, user: str, configure: str = ".*", write: str = ".*", read: str = ".*"
    ) -> None:
        """``PUT /api/permissions/{vhost}/{user}``."""
        self.request(
            "PUT",
            f"/api/permissions/{self._q(vhost)}/{self._q(user)}",
            {"configure": configure, "write": write, "read": read},
        )

    def queue(self, vhost: str, name: str) -> dict[str, Any] | None:
        """``GET /api/queues/{vhost}/{name}``, or None when the queue does not exist."""
        try:
            answer = self.request("GET", f"/api/queues/{self._q(vhost)}/{self._q(name)}")
        except ManagementError as exc:
            if exc.status == 404:
                return None
            raise
        return answer if isinstance(answer, dict) else None

    def queue_names(self, vhost: str) -> list[str]:
        """Names of the queues in ``vhost`` (``GET /api/queues/{vhost}``)."""
        answer = self.request("GET", f"/api/queues/{self._q(vhost)}?columns=name")
        items = answer.get("items", []) if isinstance(answer, dict) else answer
        return sorted(str(item["name"]) for item in items or [])


# -- inspection backends -------------------------------------------------------------------


class _Backend(Protocol):
    """Where an :class:`Inspector` reads queues from."""

    def describe(self) -> str: ...

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None: ...

    def queue_names(self, vhost: str) -> list[str]: ...

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats: ...

    def snapshot_async(self, vhost: str, queue: str) -> Awaitable[QueueStats | None]: ...

    def wait_async(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> Awaitable[QueueStats]: ...


def _timeout_message(
    vhost: str, queue: str, what: str, timeout: float, last: QueueStats | None, names: list[str]
) -> str:
    text = f"timed out after {timeout:g} s waiting for queue '{queue}' in vhost '{vhost}' {what}"
    if last is not None:
        return f"{text}; last seen: {last.describe()}"
    shown = ", ".join(f"'{n}'" for n in names[:20]) or "none"
    return f"{text}; the queue does not exist (queues in the vhost: {shown})"


class _LocalBackend:
    """Reads a :class:`~broker.server.Server` on its loop; waits run there too."""

    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    def describe(self) -> str:
        return f"in-process Leveret on port {self.server.port}"

    def _read(self, vhost: str, queue: str) -> QueueStats | None:
        host = self.server.vhosts.get(vhost)
        q = host.queues.get(queue) if host is not None else None
        if q is None:
            return None
        return QueueStats(
            vhost=vhost,
            name=queue,
            messages_ready=q.message_count,
            messages_unacknowledged=q.unacked,
            consumers=len(q.consumers),
            published=q.published_total,
            delivered=q.delivered_total,
            acked=q.acked_total,
        )

    def _names(self, vhost: str) -> list[str]:
        host = self.server.vhosts.get(vhost)
        return sorted(host.queues) if host is not None else []

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        return call_on_loop(self.loop, lambda: self._read(vhost, queue), 10.0)

    def queue_names(self, vhost: str) -> list[str]:
        return call_on_loop(self.loop, lambda: self._names(vhost), 10.0)

    async def _wait_here(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        # Runs on the broker's loop: each check is consistent with the broker's state.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            stats = self._read(vhost, queue)
            if condition(stats):
                if stats is None:  # a condition satisfied by an absent queue
                    return QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
                return stats
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    _timeout_message(vhost, queue, what, timeout, stats, self._names(vhost))
                )
            await asyncio.sleep(min(LOCAL_CHECK_INTERVAL, remaining))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise RuntimeError("the broker's event loop is not running (was it started? stopped?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        if _running_loop() is self.loop:
            raise RuntimeError(
                "a blocking wait on the broker's own event loop would deadlock it: "
                "await the *_async variant instead"
            )
        fut = self._submit(self._wait_here(vhost, queue, condition, timeout, what))
        try:
            return fut.result(timeout + 10.0)
        except TimeoutError as exc:
            fut.cancel()
            # Raised again here, so the traceback shows the test, not the broker's loop.
            raise TimeoutError(str(exc) or f"waiting for queue '{queue}' {what}") from None

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        return await call_on_loop_async(self.loop, lambda: self._read(vhost, queue))

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        coro = self._wait_here(vhost, queue, condition, timeout, what)
        if _running_loop() is self.loop:
            return await coro
        try:
            return await asyncio.wrap_future(self._submit(coro))
        except TimeoutError as exc:
            raise TimeoutError(str(exc)) from None


def _stats_from_json(vhost: str, queue: str, item: dict[str, Any]) -> QueueStats:
    stats = item.get("message_stats") or {}

    def count(value: Any) -> int:
        return int(value) if isinstance(value, int | float) else 0

    return QueueStats(
        vhost=vhost,
        name=queue,
        messages_ready=count(item.get("messages_ready")),
        messages_unacknowledged=count(item.get("messages_unacknowledged")),
        consumers=count(item.get("consumers")),
        published=count(stats.get("publish")),
        delivered=count(stats.get("deliver_get")),
        acked=count(stats.get("ack")),
    )


class _ManagementBackend:
    """Reads queues through the management HTTP API; waits re-read it every 50 ms."""

    def __init__(self, api: ManagementAPI) -> None:
        self.api = api

    def describe(self) -> str:
        return f"management API {self.api.base_url}"

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        item = self.api.queue(vhost, queue)
        return _stats_from_json(vhost, queue, item) if item is not None else None

    def queue_names(self, vhost: str) -> list[str]:
        return self.api.queue_names(vhost)

    def _timed_out(
        self, vhost: str, queue: str, what: str, timeout: float, last: QueueStats | None
    ) -> TimeoutError:
        try:
            names = self.queue_names(vhost) if last is None else []
        except (OSError, ManagementError):
            names = []
        return TimeoutError(_timeout_message(vhost, queue, what, timeout, last, names))

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        deadline = time.monotonic() + timeout
        while True:
            stats = self.snapshot(vhost, queue)
            if condition(stats):
                return stats if stats is not None else QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(vhost, queue, what, timeout, stats)
            time.sleep(min(HTTP_CHECK_INTERVAL, remaining))

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        return await asyncio.to_thread(self.snapshot, vhost, queue)

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        deadline = time.monotonic() + timeout
        while True:
            stats = await self.snapshot_async(vhost, queue)
            if condition(stats):
                return stats if stats is not None else QueueStats(vhost, queue, 0, 0, 0, 0, 0, 0)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise await asyncio.to_thread(self._timed_out, vhost, queue, what, timeout, stats)
            await asyncio.sleep(min(HTTP_CHECK_INTERVAL, remaining))


class _Unavailable:
    """Every read raises :class:`InspectionUnavailableError` with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def describe(self) -> str:
        return "unavailable"

    def _fail(self) -> InspectionUnavailableError:
        return InspectionUnavailableError(self.reason)

    def snapshot(self, vhost: str, queue: str) -> QueueStats | None:
        raise self._fail()

    def queue_names(self, vhost: str) -> list[str]:
        raise self._fail()

    def wait(
        self, vhost: str, queue: str, condition: Condition, timeout: float, what: str
    ) -> QueueStats:
        raise self._fail()

    async def snapshot_async(self, vhost: str, queue: str) -> QueueStats | None:
        raise self._fail()

    async def wait_async(
        self,
        vhost: str,
        queue: str,
        condition: Condition,
        timeout: float,  # noqa: ASYNC109 - the sync twin's signature
        what: str,
    ) -> QueueStats:
        raise self._fail()


# -- the inspector -------------------------------------------------------------------------


def _at_least(field: str, n: int) -> Condition:
    """``field >= n``; for ``n == 0``: the queue exists and ``field == 0``."""

    def check(stats: QueueStats | None) -> bool:
        if stats is None:
            return False
        value: int = getattr(stats, field)
        return value == 0 if n == 0 else value >= n

    return check


class Inspector:
    """Assertions on a vhost's queues without sleeping; thread-safe.

    ``Inspector(broker_thread, vhost=...)`` reads an in-process broker (a
    :class:`BrokerThread`, or a :class:`~broker.server.Server` with its ``loop``);
    ``Inspector(ManagementAPI(...), vhost=...)`` an external one. Every method takes an
    optional ``vhost=`` to look at another vhost than the bound one. Waits return the
    :class:`QueueStats` that satisfied them and raise :class:`TimeoutError` with the last
    state seen; their ``*_async`` variants are awaitable from any event loop, including the
    broker's own.
    """

    _backend: _Backend
    vhost: str
    timeout: float

    def __init__(
        self,
        source: BrokerThread | ManagementAPI | Server,
        vhost: str = "/",
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        backend: _Backend
        if isinstance(source, BrokerThread):
            backend = _LocalBackend(source.server, source.loop)
        elif isinstance(source, ManagementAPI):
            backend = _ManagementBackend(source)
        else:
            if loop is None:
                raise TypeError("Inspector(server) needs loop=: the loop the server runs on")
            backend = _LocalBackend(source, loop)
        self._backend = backend
        self.vhost = vhost
        self.timeout = timeout

    @classmethod
    def unavailable(cls, reason: str, vhost: str = "/") -> Inspector:
        """An inspector whose every method raises :class:`InspectionUnavailableError`."""
        inspector = cls.__new__(cls)
        inspector._backend = _Unavailable(reason)
        inspector.vhost = vhost
        inspector.timeout = DEFAULT_TIMEOUT
        return inspector

    def for_vhost(self, vhost: str) -> Inspector:
        """The same broker, bound to another vhost."""
        other = Inspector.__new__(Inspector)
        other._backend = self._backend
        other.vhost = vhost
        other.timeout = self.timeout
        return other

    def __repr__(self) -> str:
        return f"<Inspector vhost={self.vhost!r} via {self._backend.describe()}>"

    # -- reads ------------------------------------------------------------------------

    def queues(self, *, vhost: str | None = None) -> list[str]:
        """Names of the queues in the vhost, sorted."""
        return self._backend.queue_names(vhost or self.vhost)

    def queue_exists(self, queue: str, *, vhost: str | None = None) -> bool:
        """Whether ``queue`` exists."""
        return self._backend.snapshot(vhost or self.vhost, queue) is not None

    def stats(self, queue: str, *, vhost: str | None = None) -> QueueStats:
        """All of ``queue``'s counters at one instant; :class:`QueueNotFoundError` if absent."""
        vhost = vhost or self.vhost
        stats = self._backend.snapshot(vhost, queue)
        if stats is None:
            raise QueueNotFoundError(f"no queue '{queue}' in vhost '{vhost}'")
        return stats

    async def stats_async(self, queue: str, *, vhost: str | None = None) -> QueueStats:
        """:meth:`stats`, awaitable."""
        vhost = vhost or self.vhost
        stats = await self._backend.snapshot_async(vhost, queue)
        if stats is None:
            raise QueueNotFoundError(f"no queue '{queue}' in vhost '{vhost}'")
        return stats

    def queue_depth(self, queue: str, *, vhost: str | None = None) -> int:
        """Ready + unacknowledged messages (RabbitMQ's ``messages``)."""
        return self.stats(queue, vhost=vhost).messages

    def messages_ready(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages waiting for a consumer."""
        return self.stats(queue, vhost=vhost).messages_ready

    def messages_unacked(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages delivered and not yet acknowledged."""
        return self.stats(queue, vhost=vhost).messages_unacknowledged

    def consumers(self, queue: str, *, vhost: str | None = None) -> int:
        """Number of consumers."""
        return self.stats(queue, vhost=vhost).consumers

    def published(self, queue: str, *, vhost: str | None = None) -> int:
        """Messages routed to the queue since it was declared."""
        return self.stats(queue, vhost=vhost).published

    def delivered(self, queue: str, *, vhost: str | None = None) -> int:
        """Deliveries and basic.get results since the queue was declared."""
        return self.stats(queue, vhost=vhost).delivered

    def acked(self, queue: str, *, vhost: str | None = None) -> int:
        """Deliveries acknowledged (basic.ack) since the queue was declared."""
        return self.stats(queue, vhost=vhost).acked

    # -- waits --------------------------------------------------------------------------

    def wait_until(
        self,
        queue: str,
        condition: Callable[[QueueStats], bool],
        timeout: float | None = None,
        *,
        description: str = "to satisfy the condition",
        vhost: str | None = None,
    ) -> QueueStats:
        """Wait until ``queue`` exists and ``condition(stats)`` is true.

        ``condition`` runs on the broker's loop for an in-process broker: keep it a quick,
        side-effect-free test of the :class:`QueueStats` it gets.
        """
        return self._backend.wait(
            vhost or self.vhost, queue, _existing(condition), self._t(timeout), description
        )

    async def wait_until_async(
        self,
        queue: str,
        condition: Callable[[QueueStats], bool],
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        description: str = "to satisfy the condition",
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_until`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost, queue, _existing(condition), self._t(timeout), description
        )

    def wait_for_queue(
        self, queue: str, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has been declared."""
        return self._backend.wait(
            vhost or self.vhost, queue, _exists, self._t(timeout), "to be declared"
        )

    async def wait_for_queue_async(
        self,
        queue: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_queue`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost, queue, _exists, self._t(timeout), "to be declared"
        )

    def wait_for_messages(
        self, queue: str, count: int, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has at least ``count`` ready messages (exactly none for
        ``count=0``: wait until consumers have taken everything)."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("messages_ready", count),
            self._t(timeout),
            _what(count, "ready message"),
        )

    async def wait_for_messages_async(
        self,
        queue: str,
        count: int,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_messages`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("messages_ready", count),
            self._t(timeout),
            _what(count, "ready message"),
        )

    def wait_until_acked(
        self, queue: str, n: int, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until message ``n`` is acked: ``n`` deliveries of ``queue`` acknowledged."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("acked", n),
            self._t(timeout),
            _what(n, "acknowledged message"),
        )

    async def wait_until_acked_async(
        self,
        queue: str,
        n: int,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_until_acked`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("acked", n),
            self._t(timeout),
            _what(n, "acknowledged message"),
        )

    def wait_for_consumers(
        self, queue: str, n: int = 1, timeout: float | None = None, *, vhost: str | None = None
    ) -> QueueStats:
        """Wait until ``queue`` has at least ``n`` consumers (none at all for ``n=0``)."""
        return self._backend.wait(
            vhost or self.vhost,
            queue,
            _at_least("consumers", n),
            self._t(timeout),
            _what(n, "consumer"),
        )

    async def wait_for_consumers_async(
        self,
        queue: str,
        n: int = 1,
        timeout: float | None = None,  # noqa: ASYNC109 - the sync twin's signature
        *,
        vhost: str | None = None,
    ) -> QueueStats:
        """:meth:`wait_for_consumers`, awaitable."""
        return await self._backend.wait_async(
            vhost or self.vhost,
            queue,
            _at_least("consumers", n),
            self._t(timeout),
            _what(n, "consumer"),
        )

    def _t(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout


def _exists(stats: QueueStats | None) -> bool:
    return stats is not None


def _existing(condition: Callable[[QueueStats], bool]) -> Condition:
    return lambda stats: stats is not None and condition(stats)


def _what(n: int, noun: str) -> str:
    if n == 0:
        return f"to have no {noun}s"
    return f"to have at least {n} {noun}{'s' if n != 1 else ''}"
