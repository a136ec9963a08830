"""The management UI in a real browser (headless Chromium driven by Playwright): log in,
a wrong password, every page, and the actions a user takes there, each checked through
what the page shows and through the HTTP API or a real AMQP client."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aio_pika
from playwright.async_api import expect

import leveret

from .browser import browser, logged_in, screenshot
from .helpers import Mgmt


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


async def test_wrong_password_says_login_failed_then_login_works(
    mgmt: Mgmt, tmp_path: Path
) -> None:
    async with browser(mgmt.handle.url) as found:
        page = found.page
        await page.goto(mgmt.handle.url + "/")
        await found.login("guest", "wrong")
        await expect(page.locator("#login-status")).to_have_text("Login failed")
        assert "Not_Authorized" not in await page.content()
        await found.login("guest", "guest")
        await expect(page.locator("#whoami")).to_have_text("guest")
        await expect(page.locator("#overview h1")).to_have_text("Overview")
        # Logged in across a reload, out after "Log out".
        await page.reload()
        await expect(page.locator("#whoami")).to_have_text("guest")
        await page.click("text=Log out")
        await expect(page.locator("#login")).to_be_visible()


async def test_overview_shows_totals_node_health_and_two_charts(mgmt: Mgmt, tmp_path: Path) -> None:
    await mgmt.request("PUT", "queues", "/", "orders", body={})
    body = {"properties": {}, "routing_key": "orders", "payload": "x", "payload_encoding": "string"}
    for _ in range(3):
        await mgmt.request("POST", "exchanges", "/", "amq.default", "publish", body=body)
    # Two points of history (5 s apart: the UI's range is the last minute every 5 s).
    query = {"lengths_age": "60", "lengths_incr": "5", "msg_rates_age": "60", "msg_rates_incr": "5"}
    for _ in range(60):
        overview = await mgmt.get("overview", params=query)
        if len(overview["queue_totals"]["messages_details"]["samples"]) >= 2:
            break
        await asyncio.sleep(0.2)
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await expect(page.locator("[data-total='Queues'] .value")).to_have_text("1")
        await expect(page.locator("[data-total='Total messages'] .value")).to_have_text("3")
        # Counts and rates on separate charts, each drawn (uPlot's canvas).
        await expect(page.locator("[data-chart='Queued messages'] canvas")).to_have_count(1)
        await expect(page.locator("[data-chart='Message rates'] canvas")).to_have_count(1)
        memory = page.locator("[data-gauge='Memory']")
        await expect(memory).to_contain_text(" of ")  # used of the watermark
        await expect(page.locator("#node-health")).to_contain_text("Disk space")
        await expect(page.locator("#listeners")).to_contain_text("amqp")
        # Which build serves, beside the version (make test runs this on both builds).
        build = os.environ.get("LEVERET_TEST_BUILD", "pure Python")
        assert overview["leveret_build"] == build
        await expect(page.locator("#overview")).to_contain_text(
            f"Leveret {leveret.__version__} ({build})"
        )
        await screenshot(found, "overview", tmp_path)


async def test_declare_publish_get_purge_delete_a_queue(mgmt: Mgmt, tmp_path: Path) -> None:
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        page.on("dialog", lambda dialog: dialog.accept())
        await found.open("queues")
        form = page.locator("form[name=add-queue]")
        await form.locator("input[name=name]").fill("jobs")
        # A typed row (args.js): the Number type sends an integer, as RabbitMQ's UI does.
        row = form.locator("[data-rows=arguments] [data-row='0']")
        await row.locator("input.key").fill("x-max-length")
        await row.locator("input.value").fill("10")
        await row.locator("select.type").select_option("number")
        await form.locator("button[type=submit]").click()
        await expect(page.locator("text=Queue 'jobs' added.")).to_be_visible()
        await expect(page.locator("[data-list=queues] a", has_text="jobs")).to_be_visible()
        queue = await mgmt.get("queues", "/", "jobs")
        assert queue["arguments"] == {"x-max-length": 10} and queue["durable"] is True

        await page.click("[data-list=queues] a:text-is('jobs')")
        await expect(page.locator("#queue-page h1")).to_contain_text("jobs")
        publish = page.locator("form[name=publish]")
        await publish.locator("textarea[name=payload]").fill("hello from the page")
        header = publish.locator("[data-rows=headers] [data-row='0']")
        await header.locator("input.key").fill("trace")
        await header.locator("input.value").fill("t1")
        for _ in range(2):
            await publish.locator("button[type=submit]").click()
            await expect(page.locator("#publish .status")).to_have_text("Message published.")
        await expect(page.locator("#total")).to_have_text("2")

        get = page.locator("form[name=get]")
        await get.locator("select[name=ackmode]").select_option("ack_requeue_false")
        await get.locator("button[type=submit]").click()
        message = page.locator("[data-message='1']")
        await expect(message.locator("pre.payload")).to_have_text("hello from the page")
        await expect(message).to_contain_text("The server reported 1 messages remaining.")
        await expect(message).to_contain_text('"trace":"t1"')
        await expect(page.locator("#total")).to_have_text("1")  # automatic ack took it

        await page.click("text=Purge Messages")
        await expect(page.locator("text=Queue purged")).to_be_visible()
        assert (await mgmt.get("queues", "/", "jobs"))["messages"] == 0
        await screenshot(found, "queue", tmp_path)

        await page.click("text=Delete Queue")
        await expect(page.locator("#queue-page")).to_have_count(0)  # back on the list
        status, _ = await mgmt.request("GET", "queues", "/", "jobs")
        assert status == 404


async def test_get_with_requeue_keeps_the_message(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "queues", "/", "keep", body={})
    body = {
        "properties": {},
        "routing_key": "keep",
        "payload": "again",
        "payload_encoding": "string",
    }
    await mgmt.request("POST", "exchanges", "/", "amq.default", "publish", body=body)
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("queues/%2F/keep")
        await page.locator("form[name=get] button[type=submit]").click()  # Nack requeue true
        await expect(page.locator("[data-message='1'] pre.payload")).to_have_text("again")
        queue = await mgmt.get("queues", "/", "keep")
        assert queue["messages"] == 1
        await page.locator("form[name=get] button[type=submit]").click()
        await expect(page.locator("[data-message='1'] table")).to_contain_text("Redelivered●")


async def test_exchange_page_binds_and_publishes(mgmt: Mgmt, tmp_path: Path) -> None:
    await mgmt.request("PUT", "queues", "/", "audit", body={})
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("exchanges")
        form = page.locator("form[name=add-exchange]")
        await page.click("text=Add a new exchange")
        await form.locator("input[name=name]").fill("shop")
        await form.locator("select[name=type]").select_option("topic")
        await form.locator("button[type=submit]").click()
        await page.click("[data-list=exchanges] a:text-is('shop')")
        await expect(page.locator("#exchange-page h1")).to_contain_text("shop")
        bind = page.locator("form[name=bind]")
        await bind.locator("input[name=destination]").fill("audit")
        await bind.locator("input[name=routing_key]").fill("order.*")
        await bind.locator("button[type=submit]").click()
        await expect(page.locator("#bindings table")).to_contain_text("order.*")
        publish = page.locator("form[name=publish]")
        await publish.locator("input[name=routing_key]").fill("order.new")
        await publish.locator("textarea[name=payload]").fill("o1")
        await publish.locator("button[type=submit]").click()
        await expect(page.locator("#publish .status")).to_have_text("Message published.")
        await publish.locator("input[name=routing_key]").fill("nothing.here.at.all")
        await publish.locator("button[type=submit]").click()
        await expect(page.locator("#publish .status")).to_have_text(
            "Message published, but not routed."
        )
        assert (await mgmt.get("queues", "/", "audit"))["messages"] == 1
        await page.click("#bindings button:text('Unbind')")
        await expect(page.locator("#bindings")).to_contain_text("no bindings")
        page.on("dialog", lambda dialog: dialog.accept())
        await page.click("text=Delete Exchange")
        await expect(page.locator("#exchange-page")).to_have_count(0)
        status, _ = await mgmt.request("GET", "exchanges", "/", "shop")
        assert status == 404


async def test_connection_and_channel_pages_and_close(mgmt: Mgmt, tmp_path: Path) -> None:
    connection = await aio_pika.connect(mgmt.amqp_url, client_properties={"product": "shop-app"})
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=7)
    queue = await channel.declare_queue("work")
    await queue.consume(ignore, consumer_tag="worker-1")
    closed = asyncio.get_running_loop().create_future()
    connection.close_callbacks.add(lambda _conn, exc: closed.done() or closed.set_result(exc))
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        page.on("dialog", lambda dialog: dialog.accept())
        await found.open("connections")
        link = page.locator("[data-list=connections] a").first
        await expect(page.locator("[data-list=connections]")).to_contain_text("shop-app")
        await link.click()
        await expect(page.locator("#connection-page")).to_contain_text("shop-app")
        await page.click("#connection-page table.list a")  # its channel
        await expect(page.locator("#channel-page h1")).to_contain_text("(1)")
        consumers = page.locator("#channel-page #consumers")
        await expect(consumers).to_contain_text("worker-1")
        await expect(consumers.locator("td.num")).to_have_text("7")  # the prefetch count
        await found.open("channels")
        await expect(page.locator("[data-list=channels] tbody tr")).to_have_count(1)
        await found.open("queues/%2F/work")
        await expect(page.locator("#consumers")).to_contain_text("worker-1")
        await page.go_back()
        await page.go_back()
        await page.go_back()  # the connection's page again
        await page.locator("form[name=close] input[name=reason]").fill("maintenance")
        await page.click("text=Force Close")
        await expect(page.locator("text=Connection closed.")).to_be_visible()
        error = await asyncio.wait_for(closed, 5)
        assert "320" in str(error) and "maintenance" in str(error)
        assert await mgmt.get("connections") == []


async def test_definitions_export_and_import(mgmt: Mgmt, tmp_path: Path) -> None:
    await mgmt.request("PUT", "queues", "/", "exported", body={"durable": True})
    definitions = {
        "queues": [
            {
                "name": "imported",
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-message-ttl": 5000},
            },
        ],
        "exchanges": [
            {
                "name": "imported.x",
                "vhost": "/",
                "type": "fanout",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            },
        ],
    }
    upload = tmp_path / "definitions.json"
    upload.write_text(json.dumps(definitions))
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        async with page.expect_download() as download_info:
            await page.click("text=Download broker definitions")
        download = await download_info.value
        saved = await download.path()
        exported = json.loads(await asyncio.to_thread(saved.read_text))
        assert "exported" in [q["name"] for q in exported["queues"]]
        form = page.locator("form[name=import]")
        await form.locator("input[name=file]").set_input_files(str(upload))
        await form.locator("button[type=submit]").click()
        await expect(page.locator("#definitions .status")).to_have_text(
            "Your definitions were imported successfully."
        )
    queue = await mgmt.get("queues", "/", "imported")
    assert queue["arguments"] == {"x-message-ttl": 5000}
    assert (await mgmt.get("exchanges", "/", "imported.x"))["type"] == "fanout"


async def test_only_management_users_log_in_and_only_admins_see_admin(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "users", "app", body={"password": "pw", "tags": ""})
    await mgmt.request("PUT", "users", "watcher", body={"password": "pw", "tags": "monitoring"})
    async with browser(mgmt.handle.url) as found:
        page = found.page
        await page.goto(mgmt.handle.url + "/")
        await found.login("app", "pw")  # the API: 401 "Not management user"
        await expect(page.locator("#login-status")).to_have_text("Login failed")
        await found.login("watcher", "pw")
        await expect(page.locator("#whoami")).to_have_text("watcher")
        await expect(page.locator("header nav a")).to_have_text(
            ["Overview", "Connections", "Channels", "Exchanges", "Queues"]
        )


async def test_the_vhost_selector_narrows_the_lists(mgmt: Mgmt) -> None:
    await mgmt.request("PUT", "vhosts", "other")
    await mgmt.request("PUT", "queues", "other", "there", body={})
    await mgmt.request("PUT", "queues", "/", "here", body={})
    async with logged_in(mgmt.handle.url) as found:
        page = found.page
        await found.open("queues")
        rows = page.locator("[data-list=queues] tbody tr")
        await expect(rows).to_have_count(2)
        await page.select_option("select[name=vhost-filter]", "other")
        await expect(rows).to_have_count(1)
        await expect(rows).to_contain_text("there")
        await found.open("exchanges")  # the choice holds across tabs
        await expect(page.locator("[data-list=exchanges] tbody tr").first).to_contain_text("other")
        assert all(
            "/api/exchanges/other?" in url
            for url, _ in found.api_responses
            if "/api/exchanges" in url
        )
