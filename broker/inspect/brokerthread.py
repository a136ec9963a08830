"""An in-process broker for tests and scripts: :class:`BrokerThread` runs a
:class:`leveret.server.Server` on its own event loop in a daemon thread (its :meth:`call`
runs a function on that loop from any thread, :mod:`.loops`)."""

from __future__ import annotations

import asyncio
import threading
import urllib.parse
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from leveret.inspect.loops import call_on_loop

if TYPE_CHECKING:
    from leveret.config import Config
    from leveret.inspect import Inspector

T = TypeVar("T")


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
        host = self.config.hosts[0]
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
        from leveret.node.auth import Permission

        def add() -> None:
            self.server.state.add_vhost(name)
            self.server.state.access.set_permissions(user, name, Permission())

        self.call(add)
        return self.vhost_url(name, user=user)

    def delete_vhost(self, name: str) -> bool:
        """Delete ``name``: its connections are closed (320), its queues deleted."""
        return self.call(lambda: self.server.state.delete_vhost(name))

    def inspector(self, vhost: str = "/") -> Inspector:
        """An :class:`Inspector` of ``vhost`` on this broker."""
        from leveret.inspect import Inspector  # the package imports this module

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
