"""The web page at / in headless Chromium: its rendered DOM lists the broker's queues and
exchanges, and a screenshot of it is a real picture (decoded here, not just a file).

Needs Debian's ``chromium`` package (``apt-get install -y chromium``). Without it the test
is skipped on a developer machine but fails under CI (``CI`` set), so CI cannot pass
without having looked at the page.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from .helpers import Mgmt

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags that work on this project's machines (no sandbox as root, no network beyond
# loopback): see the machine notes of the workplace.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # Let the page's fetches and first polls finish before dumping or shooting.
    "--virtual-time-budget=5000",
)
WIDTH, HEIGHT = 1000, 760


@pytest.fixture
def chromium() -> str:
    # `make test` installs it (Makefile: system-deps); a missing browser is a failure, not
    # a skip, so the page is never silently untested.
    assert CHROMIUM is not None, "chromium is not installed (apt-get install -y chromium)"
    return CHROMIUM


async def run_chromium(binary: str, profile: Path, *args: str) -> bytes:
    """Run headless Chromium with a fresh profile; its stdout."""
    process = await asyncio.create_subprocess_exec(
        binary,
        *FLAGS,
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(45):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, stderr.decode(errors="replace")[-2000:]
    return stdout


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


async def populate(mgmt: Mgmt) -> None:
    for name in ("orders", "invoices"):
        await mgmt.request("PUT", "queues", "/", name, body={"durable": True})
    await mgmt.request("PUT", "exchanges", "/", "shop.events", body={"type": "topic"})
    body = {"properties": {}, "routing_key": "orders", "payload": "x", "payload_encoding": "string"}
    for _ in range(4):
        await mgmt.request("POST", "exchanges", "/", "amq.default", "publish", body=body)


async def test_page_lists_queues_and_exchanges(mgmt: Mgmt, chromium: str, tmp_path: Path) -> None:
    await populate(mgmt)
    url = f"{mgmt.handle.url}/#username=guest&password=guest&interval=1"
    dom = (await run_chromium(chromium, tmp_path / "dom", "--dump-dom", url)).decode()
    assert 'data-queue="orders"' in dom
    assert '<td class="name">invoices</td>' in dom
    assert 'data-exchange="shop.events"' in dom
    assert "user guest" in dom  # the status line: it logged in and polled
    assert '<main id="dashboard">' in dom  # shown (no hidden attribute)
    # The orders row shows its four ready messages.
    orders_row = dom[dom.index('data-queue="orders"') :].split("</tr>")[0]
    assert '<td class="num">4</td>' in orders_row


async def test_page_screenshot_is_a_real_picture(mgmt: Mgmt, chromium: str, tmp_path: Path) -> None:
    await populate(mgmt)
    shot = tmp_path / "page.png"
    url = f"{mgmt.handle.url}/#username=guest&password=guest&interval=1"
    await run_chromium(
        chromium, tmp_path / "shot", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", url
    )
    data = shot.read_bytes()
    assert len(data) > 20_000, "a page with tables and a chart is more than a blank PNG"
    width, height, bpp, rows = decode_png(data)
    assert (width, height) == (WIDTH, HEIGHT)
    colours = {pixel(rows, bpp, x, y) for y in range(0, height, 4) for x in range(0, width, 4)}
    assert len(colours) > 50, "the screenshot is (nearly) a single colour"
    # The style sheet applied: the dark header and its orange rule are there.
    assert pixel(rows, bpp, 5, 5) == (0x1F, 0x24, 0x30)
    orange = (0xE8, 0x59, 0x0C)
    assert any(pixel(rows, bpp, 10, y) == orange for y in range(40, 80))


async def test_page_without_credentials_shows_the_login_form(
    mgmt: Mgmt, chromium: str, tmp_path: Path
) -> None:
    dom = (
        await run_chromium(chromium, tmp_path / "a", "--dump-dom", mgmt.handle.url + "/")
    ).decode()
    assert '<form id="login">' in dom  # visible
    assert '<main id="dashboard" hidden="">' in dom
    url = f"{mgmt.handle.url}/#username=guest&password=wrong"
    dom = (await run_chromium(chromium, tmp_path / "b", "--dump-dom", url)).decode()
    assert '<form id="login">' in dom
    assert "Not_Authorized" in dom
