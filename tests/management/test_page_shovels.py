"""The management UI's Shovels page (Admin > Shovels), in a real browser: a dynamic shovel
added through the form moves a message a client publishes, shows as running in the status
table, restarts from its button and is deleted from its row; a refused value shows the
API's reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
from playwright.async_api import expect

from .browser import logged_in, screenshot
from .helpers import Mgmt
from .test_page_admin import submit


async def test_shovels_page(mgmt: Mgmt, tmp_path: Path) -> None:
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        page.on("dialog", lambda dialog: dialog.accept())
        await found.open("admin/shovels")
        await submit(
            page,
            "shovels",
            name="ui",
            **{
                "src-queue": "ui-a",
                "dest-uri": "amqp://",
                "dest-queue": "ui-b",
                "src-prefetch-count": "50",
            },
        )
        await expect(page.locator("#shovels table")).to_contain_text("ui-a")
        value = (await mgmt.get("parameters", "shovel", "/", "ui"))["value"]
        assert value == {
            "src-uri": "amqp://",
            "src-queue": "ui-a",
            "src-prefetch-count": 50,
            "dest-uri": "amqp://",
            "dest-queue": "ui-b",
            "ack-mode": "on-confirm",
        }
        # "starting" first: the table shows "running" at its next refresh.
        await expect(page.locator("#shovel-status tr:has-text('ui')")).to_contain_text(
            "running", timeout=15_000
        )
        await screenshot(found, "shovels", tmp_path)
        connection = await aio_pika.connect(mgmt.amqp_url)
        async with connection:
            channel = await connection.channel()
            await channel.default_exchange.publish(aio_pika.Message(b"via the page"), "ui-a")
            queue = await channel.declare_queue("ui-b", durable=True)
            message = None
            for _ in range(200):
                message = await queue.get(fail=False)
                if message is not None:
                    break
                await asyncio.sleep(0.02)
            assert message is not None and message.body == b"via the page"

        await page.click("#shovel-status tr:has-text('ui') button:text('Restart')")
        await expect(page.locator("#shovel-status .status.ok")).to_contain_text("Restarted.")

        found.allow("/api/parameters/shovel/%2F/broken", 400)
        await submit(page, "shovels", name="broken", **{"src-queue": "", "dest-uri": "amqp://"})
        await expect(page.locator("#shovels .status.error")).to_contain_text(
            "Must specify 'src-exchange' or 'src-queue'"
        )
        await page.click("#shovels tr:has-text('ui-a') button:text('Delete')")
        await expect(page.locator("#shovels")).to_contain_text("no items")
        await expect(page.locator("#shovel-status")).to_contain_text("no shovels")
    assert await mgmt.get("shovels") == []
