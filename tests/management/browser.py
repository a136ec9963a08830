"""A real browser for the management UI tests: Playwright's Python API driving the
system's Chromium (Debian's ``chromium``, ``executable_path``: no browser download).

A page that logs a JavaScript error or fails a request fails its test: ``Browser.problems``
collects them and :func:`logged_in` checks it when the test ends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from playwright.async_api import Page, async_playwright

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Browser:
    page: Page
    base: str
    problems: list[str] = field(default_factory=list)
    api_responses: list[tuple[str, int]] = field(default_factory=list)  # (url, bytes)
    failed: list[tuple[str, int]] = field(default_factory=list)  # (path, status)
    allowed: set[tuple[str, int]] = field(default_factory=set)

    def allow(self, path: str, status: int) -> None:
        """A request the test makes fail on purpose (the page shows the API's reason)."""
        self.allowed.add((path, status))

    async def open(self, route: str) -> None:
        """Go to a hash route (``queues/%2F/name``) of the UI."""
        await self.page.goto(f"{self.base}/#/{route}")

    async def login(self, user: str = "guest", password: str = "guest") -> None:
        await self.page.fill("input[name=username]", user)
        await self.page.fill("input[name=password]", password)
        await self.page.click("#login button[type=submit]")


@asynccontextmanager
async def browser(base: str, width: int = 1280, height: int = 900) -> AsyncIterator[Browser]:
    """A fresh headless Chromium page on the UI at ``base`` (not logged in)."""
    # `make test` installs it (Makefile: system-deps): a missing browser fails, never skips.
    assert CHROMIUM is not None, "chromium is not installed (apt-get install -y chromium)"
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await chromium.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(10_000)
            found = Browser(page, base)
            page.on("pageerror", lambda error: found.problems.append(f"page error: {error}"))

            def console(message: object) -> None:
                text = getattr(message, "text", "")
                # A failed request is reported by its response below, with its path.
                if getattr(message, "type", "") == "error" and "Failed to load" not in text:
                    found.problems.append(f"console: {getattr(message, 'text', '')}")

            page.on("console", console)

            def response(resp: object) -> None:
                # The size the broker sent (its Content-Length: aiohttp always sets it
                # for these bodies, and nothing compresses them).
                url = getattr(resp, "url", "")
                status = getattr(resp, "status", 0)
                if status >= 400:
                    found.failed.append((urlparse(url).path, status))
                if "/api/" in url:
                    headers = getattr(resp, "headers", {})
                    found.api_responses.append((url, int(headers.get("content-length", -1))))

            page.on("response", response)
            yield found
        finally:
            await chromium.close()


@asynccontextmanager
async def logged_in(base: str, **size: int) -> AsyncIterator[Browser]:
    """A page logged in as guest; fails if the page logged errors meanwhile (401s of a
    deliberate wrong password are a test's own business: use :func:`browser`)."""
    async with browser(base, **size) as found:
        await found.page.goto(base + "/")
        await found.login()
        await found.page.wait_for_selector("#whoami")
        yield found
        assert not found.problems, found.problems
        unexpected = [f for f in found.failed if f not in found.allowed]
        assert not unexpected, unexpected


async def screenshot(found: Browser, name: str, tmp_path: Path) -> bytes:
    """A PNG of the page (kept in ``tmp_path``), checked to be a real picture of the
    viewport's size with many colours, not a blank page."""
    data = await found.page.screenshot(path=str(tmp_path / f"{name}.png"))
    # LEVERET_SCREENSHOTS=docs/screenshots keeps them where the README links them.
    keep = os.environ.get("LEVERET_SCREENSHOTS")
    if keep:
        await asyncio.to_thread(Path(keep, f"{name}.png").write_bytes, data)
    width, height, bpp, rows = decode_png(data)
    viewport = found.page.viewport_size or {}
    assert (width, height) == (viewport.get("width"), viewport.get("height"))
    colours = {pixel(rows, bpp, x, y) for y in range(0, height, 4) for x in range(0, width, 4)}
    assert len(colours) > 50, f"{name}: (nearly) a single colour"
    return data


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        chunk = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    assert len(raw) == height * (stride + 1)
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = previous[i]
                c = previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, bpp, rows


def pixel(rows: list[bytes], bpp: int, x: int, y: int) -> tuple[int, int, int]:
    row = rows[y]
    return row[bpp * x], row[bpp * x + 1], row[bpp * x + 2]
