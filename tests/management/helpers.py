"""Helpers of the management API tests: an Authorization header, a small client, and a
Prometheus listener to scrape."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from leveret.management import ManagementHandle
from leveret.server import Server

from .prometheus_families import samples


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header (written out, independent of aiohttp's helpers)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


@dataclass
class Mgmt:
    """A running broker with its management API, and an authenticated HTTP client."""

    server: Server
    handle: ManagementHandle
    http: aiohttp.ClientSession

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.server.port}/"

    def url(self, *segments: str) -> str:
        """The URL of an API path: each segment percent-encoded (``/`` as ``%2F``)."""
        path = "/".join(quote(s, safe="") for s in segments)
        return f"{self.handle.url}/api/{path}"

    async def request(
        self,
        method: str,
        *segments: str,
        body: Any = None,
        auth: tuple[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None)."""
        headers = basic(*auth) if auth else None
        async with self.http.request(
            method, self.url(*segments), json=body, headers=headers, params=params
        ) as response:
            text = await response.text()
            return response.status, (await response.json() if text else None)

    async def get(self, *segments: str, **kwargs: Any) -> Any:
        """GET, asserting 200."""
        status, data = await self.request("GET", *segments, **kwargs)
        assert status == 200, (status, data)
        return data


@dataclass
class Target:
    """A broker to scrape: its AMQP URL and its Prometheus listener."""

    amqp_url: str
    metrics_url: str
    session: aiohttp.ClientSession

    async def text(self, path: str = "/metrics") -> str:
        async with self.session.get(self.metrics_url + path) as response:
            assert response.status == 200, path
            assert response.headers["Content-Type"] == "text/plain; version=0.0.4"
            return await response.text()

    async def values(self, path: str = "/metrics") -> dict[str, dict[str, float]]:
        return samples(await self.text(path))
