"""Paged queue lists build only the page (broker/management/paging.py) and give what the
full list gives: the same order for every cheap sort field, both directions, filtered by
name and by regex, with the same counts; a field without a cheap key falls back."""

from __future__ import annotations

import re

import aio_pika
import pytest

from .helpers import Mgmt

SORTS = ["", "name", "vhost", "messages", "messages_ready", "consumers"]
SORTS += ["message_stats.publish", "message_stats.publish_details.rate", "durable"]


@pytest.fixture
async def queues(mgmt: Mgmt) -> Mgmt:
    await mgmt.request("PUT", "vhosts", "other")
    await mgmt.request(
        "PUT",
        "permissions",
        "other",
        "guest",
        body={"configure": ".*", "write": ".*", "read": ".*"},
    )
    body = {"properties": {}, "payload": "x", "payload_encoding": "string"}
    for i in range(40):
        vhost = "/" if i % 3 else "other"
        name = f"{'job' if i % 2 else 'mail'}.{i % 7}.{i}"
        await mgmt.request("PUT", "queues", vhost, name, body={"durable": i % 4 == 0})
        for _ in range(i % 5):
            await mgmt.request(
                "POST",
                "exchanges",
                vhost,
                "amq.default",
                "publish",
                body={**body, "routing_key": name},
            )
    return mgmt


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


def expected(full: list[dict], name: str, regex: bool, page: int, size: int) -> list[str]:
    names = [q["name"] for q in full]
    if name:
        names = (
            [n for n in names if re.search(name, n)]
            if regex
            else [n for n in names if name.lower() in n.lower()]
        )
    return names[(page - 1) * size : page * size]


async def test_pages_match_the_full_list(queues: Mgmt) -> None:
    mgmt = queues
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:  # a consumer on some queues, for the consumers column
        channel = await connection.channel()
        for name in ("job.1.1", "job.5.5", "job.5.5", "mail.2.2"):
            queue = await channel.get_queue(name)
            await queue.consume(ignore)
        for sort in SORTS:
            for reverse in ("false", "true"):
                full = await mgmt.get("queues", params={"sort": sort, "sort_reverse": reverse})
                for name, regex in (("", False), ("JOB", False), (r"^mail\.[0-3]", True)):
                    for page in (1, 2):
                        params = {
                            "page": str(page),
                            "page_size": "7",
                            "sort": sort,
                            "sort_reverse": reverse,
                            "name": name,
                            "use_regex": "true" if regex else "false",
                        }
                        got = await mgmt.get("queues", params=params)
                        want = expected(full, name, regex, page, 7)
                        assert [q["name"] for q in got["items"]] == want, params
                        assert got["total_count"] == 40
                        assert got["item_count"] == len(want)


async def test_paged_columns_and_errors(queues: Mgmt) -> None:
    mgmt = queues
    got = await mgmt.get(
        "queues", "/", params={"page": "1", "page_size": "3", "columns": "name,messages"}
    )
    assert all(set(q) == {"name", "messages"} for q in got["items"])
    assert got["total_count"] == 26 and got["page_count"] == 9
    status, body = await mgmt.request("GET", "queues", params={"page": "0"})
    assert status == 400 and body["error"] == "invalid_pagination_parameters"
    status, body = await mgmt.request("GET", "queues", params={"page": "9"})
    assert (status, body["reason"]) == (400, "Page out of range, page: 9 page size: 100, len: 40")
