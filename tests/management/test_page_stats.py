"""The UI's channel and connection pages with their rates charts (the broker's sample
history, as the queue page's), the Channels list's rates, and the typed argument rows of
the declare and publish forms (key / value / type, as RabbitMQ's UI), checked in headless
Chromium and through the HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
from playwright.async_api import expect

from .browser import logged_in, screenshot
from .helpers import Mgmt

# A non-zero rate as the page writes it (fmtRate: "12.4/s", "1,200/s"; "0/s" is not one).
NON_ZERO_RATE = re.compile(r"^(?!0/s$)[\d,.]+/s$")
SLOW = 20_000  # ms: a chart needs a point on the range's 5 s grid after the object appeared
RANGE = {
    "msg_rates_age": "60",
    "msg_rates_incr": "5",
    "data_rates_age": "60",
    "data_rates_incr": "5",
}


async def history(mgmt: Mgmt, points: int, *path: str) -> None:
    """Wait until the object at ``path`` has ``points`` samples in the UI's range (the 5 s
    grid of the last minute), so its chart draws lines rather than a lone point."""
    for _ in range(160):
        found = await mgmt.get(*path, params=RANGE)
        details = found.get("message_stats", found).get(
            "publish_details", found.get("recv_oct_details")
        )
        if len(details.get("samples", [])) >= points:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"{path}: fewer than {points} samples")


@contextlib.asynccontextmanager
async def publishing(mgmt: Mgmt, queue: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A real client publishing to ``queue`` (declared) about 100 messages a second until
    the block ends; yields its channel."""
    connection = await aio_pika.connect(mgmt.amqp_url, client_properties={"product": "feeder"})
    channel = await connection.channel()
    await channel.declare_queue(queue, auto_delete=False)

    async def feed() -> None:
        while True:
            for _ in range(10):
                await channel.default_exchange.publish(aio_pika.Message(b"tick"), queue)
            await asyncio.sleep(0.1)

    task = asyncio.create_task(feed())
    try:
        yield channel
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await connection.close()


async def test_channel_page_shows_a_publish_rate_and_its_chart(mgmt: Mgmt, tmp_path: Path) -> None:
    async with publishing(mgmt, "ticks"), logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("channels")
        rows = page.locator("[data-list=channels] tbody tr")
        await expect(rows).to_have_count(1)
        await expect(rows.first.locator("td.num").nth(4)).to_have_text(NON_ZERO_RATE, timeout=SLOW)
        await page.click("[data-list=channels] a")
        await expect(page.locator("#channel-page h1")).to_contain_text("(1)")
        await expect(page.locator("#publish-rate")).to_have_text(NON_ZERO_RATE, timeout=SLOW)
        chart = page.locator("[data-chart='Message rates'] canvas")
        await expect(chart).to_have_count(1, timeout=SLOW)
        await expect(page.locator("[data-chart='Message rates']")).to_contain_text("Publish")
        name = (await mgmt.get("channels"))[0]["name"]
        await history(mgmt, 4, "channels", name)
        await page.reload()
        await expect(chart).to_have_count(1)
        await screenshot(found, "channel", tmp_path)
    assert await mgmt.get("channels") == []  # the publisher is gone with its connection


async def test_connection_page_draws_data_rates(mgmt: Mgmt, tmp_path: Path) -> None:
    async with publishing(mgmt, "bytes"), logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("connections")
        await page.click("[data-list=connections] a")
        await expect(page.locator("#connection-page")).to_contain_text("feeder")
        chart = page.locator("[data-chart='Data rates'] canvas")
        await expect(chart).to_have_count(1, timeout=SLOW)
        await expect(page.locator("[data-chart='Data rates']")).to_contain_text("Received")
        await expect(page.locator("#connection-page table.list")).to_contain_text("/s")
        name = (await mgmt.get("connections"))[0]["name"]
        await history(mgmt, 4, "connections", name)
        await page.reload()
        await expect(chart).to_have_count(1)
        await screenshot(found, "connection", tmp_path)


async def test_declare_a_queue_with_a_number_argument_row(mgmt: Mgmt, tmp_path: Path) -> None:
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("queues")
        form = page.locator("form[name=add-queue]")
        await form.locator("input[name=name]").fill("capped")
        # The shortcut adds the key with its type, as RabbitMQ's "Add" links do.
        await form.locator(".shortcuts button", has_text="x-max-length").first.click()
        row = form.locator("[data-rows=arguments] [data-row='0']")
        await expect(row.locator("input.key")).to_have_value("x-max-length")
        await expect(row.locator("select.type")).to_have_value("number")
        await row.locator("input.value").fill("1000")
        # A second row, typed by hand: a Boolean and a String.
        second = form.locator("[data-rows=arguments] [data-row='1']")
        await second.locator("input.key").fill("x-single-active-consumer")
        await second.locator("input.value").fill("true")
        await second.locator("select.type").select_option("boolean")
        third = form.locator("[data-rows=arguments] [data-row='2']")
        await third.locator("input.key").fill("x-overflow")
        await third.locator("input.value").fill("reject-publish")
        await screenshot(found, "declare-queue", tmp_path)
        await form.locator("button[type=submit]").click()
        await expect(page.locator("text=Queue 'capped' added.")).to_be_visible()
    queue = await mgmt.get("queues", "/", "capped")
    assert queue["arguments"] == {
        "x-max-length": 1000,
        "x-single-active-consumer": True,
        "x-overflow": "reject-publish",
    }
    assert type(queue["arguments"]["x-max-length"]) is int
    assert queue["effective_policy_definition"] == {}


async def test_a_bad_number_row_is_refused_in_the_page(mgmt: Mgmt) -> None:
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("queues")
        form = page.locator("form[name=add-queue]")
        await form.locator("input[name=name]").fill("never")
        row = form.locator("[data-rows=arguments] [data-row='0']")
        await row.locator("input.key").fill("x-max-length")
        await row.locator("input.value").fill("ten")
        await row.locator("select.type").select_option("number")
        await form.locator("button[type=submit]").click()
        await expect(page.locator(".status.error")).to_contain_text("x-max-length: not a number")
    status, _ = await mgmt.request("GET", "queues", "/", "never")
    assert status == 404


async def test_publish_with_header_and_property_rows(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "inbox", body={})
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("queues/%2F/inbox")
        publish = page.locator("form[name=publish]")
        headers = publish.locator("[data-rows=headers]")
        for index, (key, value, kind) in enumerate(
            [("trace", "t1", "string"), ("attempt", "3", "number"), ("tags", "a, b", "list")]
        ):
            row = headers.locator(f"[data-row='{index}']")
            await row.locator("input.key").fill(key)
            await row.locator("input.value").fill(value)
            await row.locator("select.type").select_option(kind)
        prop = publish.locator("[data-rows=properties] [data-row='0']")
        await prop.locator("input.key").fill("priority")
        await prop.locator("input.value").fill("4")
        await publish.locator("textarea[name=payload]").fill("with headers")
        await publish.locator("button[type=submit]").click()
        await expect(page.locator("#publish .status")).to_have_text("Message published.")
    body = {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    status, (message,) = await mgmt.request("POST", "queues", "/", "inbox", "get", body=body)
    assert status == 200
    assert message["properties"]["headers"] == {"trace": "t1", "attempt": 3, "tags": ["a", "b"]}
    assert message["properties"]["priority"] == 4
    assert message["payload"] == "with headers"
