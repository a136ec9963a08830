"""An HTTP listener of the broker (the management API, rabbitmq_prometheus's endpoints):
an aiohttp application served on ``host:port``, ``::`` taking IPv4 too, port 0 any free
port. One way to start and stop them, so both listeners bind and clean up alike."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from leveret.wire.listen import dual_stack_socket


@dataclass
class HttpListener:
    """A running HTTP listener."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:15672``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        """Stop serving."""
        await self.runner.cleanup()


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port``: its runner and the port bound (``port`` 0: any free
    one). Call on the broker's running event loop; nothing is left open when it fails."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    sock = dual_stack_socket(host, port)  # ``::`` takes IPv4 too
    site: web.BaseSite = (
        web.TCPSite(runner, host, port, reuse_address=True)
        if sock is None
        else web.SockSite(runner, sock)
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])
