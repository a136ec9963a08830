"""The server lifecycle: listen, serve, shut down gracefully.

``Server.start()`` binds the listener; ``Server.stop()`` closes it, sends every client
``Connection.Close`` 320 CONNECTION_FORCED and waits (bounded) for them to go.
"""

from __future__ import annotations

import asyncio
import logging

from broker.config import Config
from broker.connection import Connection
from broker.memory import MemoryMonitor, default_watermark
from broker.vhost import VHost

log = logging.getLogger(__name__)


class Server:
    """A Leveret broker instance."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.memory = MemoryMonitor(
            config.memory_high_watermark or default_watermark(), self._on_memory_alarm
        )
        self.vhosts: dict[str, VHost] = {name: VHost(name, self.memory) for name in config.vhosts}
        self.connections: set[Connection] = set()
        self._listener: asyncio.Server | None = None
        self.port = config.port

    def _on_memory_alarm(self, alarm: bool) -> None:
        log.warning(
            "memory alarm %s: %d bytes of messages, high watermark %d",
            "set" if alarm else "cleared",
            self.memory.used,
            self.memory.limit,
        )
        for connection in list(self.connections):
            connection.memory_alarm(alarm)

    async def start(self) -> None:
        """Bind the listening socket (port 0 picks a free port, see :attr:`port`)."""
        loop = asyncio.get_running_loop()
        if self.config.data_dir is not None:
            self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self._listener = await loop.create_server(
            lambda: Connection(self),
            self.config.host,
            self.config.port,
            reuse_address=True,
            backlog=1024,
        )
        self.port = self._listener.sockets[0].getsockname()[1]
        log.info("Leveret listening on %s:%s", self.config.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection with 320, wait for them."""
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            connection.shutdown()
        pending = [c.closed.wait() for c in list(self.connections)]
        if pending:
            try:
                async with asyncio.timeout(self.config.shutdown_timeout):
                    await asyncio.gather(*pending)
            except TimeoutError:
                log.warning("%d connections did not close in time", len(self.connections))
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
