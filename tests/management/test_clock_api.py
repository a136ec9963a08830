"""``/api/leveret/clock/{vhost}``: a vhost's virtual clock over HTTP, for test suites in any
language (broker/management/clock.py), with aio-pika as the client whose messages expire."""

from __future__ import annotations

import aio_pika
import pytest

from .helpers import Mgmt

pytestmark = pytest.mark.timeout(20)


async def test_freeze_advance_and_resume(mgmt: Mgmt) -> None:
    status, clock = await mgmt.request("GET", "leveret", "clock", "/")
    assert status == 200
    assert clock["vhost"] == "/"
    assert clock["mode"] == "real"

    assert await mgmt.request("PUT", "leveret", "clock", "/", body={"mode": "manual"}) == (
        204,
        None,
    )
    connection = await aio_pika.connect(mgmt.amqp_url)
    async with connection:
        channel = await connection.channel()
        dead = await channel.declare_queue("dead")
        await dead.bind("amq.fanout")
        await channel.declare_queue(
            "work",
            arguments={"x-message-ttl": 120_000, "x-dead-letter-exchange": "amq.fanout"},
        )
        await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="work")
        await channel.declare_queue("work", passive=True)  # a round trip: it is queued
        frozen = (await mgmt.get("leveret", "clock", "/"))["now"]
        assert frozen >= clock["now"]

        status, advanced = await mgmt.request(
            "POST", "leveret", "clock", "/", "advance", body={"seconds": 121}
        )
        assert status == 200
        assert advanced["fired"] == 1  # the head's TTL timer
        assert advanced["mode"] == "manual"
        assert advanced["now"] == pytest.approx(frozen + 121, abs=0.01)
        message = await dead.get(no_ack=True)
        assert message.body == b"m"

    assert await mgmt.request("PUT", "leveret", "clock", "/", body={"mode": "real"}) == (
        204,
        None,
    )
    resumed = await mgmt.get("leveret", "clock", "/")
    assert resumed["mode"] == "real"
    # It runs on from where the advance left it, ahead of the machine's time by the 121 s
    # less the real time it stood still.
    assert resumed["now"] >= advanced["now"]
    assert 100 < resumed["skew"] <= 121


async def test_errors_as_the_rest_of_the_api(mgmt: Mgmt) -> None:
    not_found = (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert await mgmt.request("GET", "leveret", "clock", "nowhere") == not_found
    assert (
        await mgmt.request("POST", "leveret", "clock", "nowhere", "advance", body={"seconds": 1})
        == not_found
    )
    assert await mgmt.request("POST", "leveret", "clock", "/", "advance", body={"seconds": -1}) == (
        400,
        {"error": "bad_request", "reason": "seconds must be a finite number >= 0, not -1"},
    )
    assert await mgmt.request(
        "POST", "leveret", "clock", "/", "advance", body={"seconds": "ten"}
    ) == (400, {"error": "bad_request", "reason": "seconds must be a number, not 'ten'"})
    assert await mgmt.request("POST", "leveret", "clock", "/", "advance", body={}) == (
        400,
        {"error": "bad_request", "reason": "seconds missing: a number >= 0"},
    )
    assert await mgmt.request("PUT", "leveret", "clock", "/", body={"mode": "slow"}) == (
        400,
        {"error": "bad_request", "reason": 'mode must be "manual" or "real", not \'slow\''},
    )
    assert await mgmt.request("PUT", "leveret", "clock", "/", body=[1]) == (
        400,
        {"error": "bad_request", "reason": "not_json"},
    )
    # Only administrators: a monitoring user is refused as everywhere else (401).
    mgmt.server.state.access.add_user("watcher", password="pw", tags=["monitoring"])
    mgmt.server.state.access.set_permissions("watcher", "/", _full())
    assert await mgmt.request("GET", "leveret", "clock", "/", auth=("watcher", "pw")) == (
        401,
        {"error": "not_authorised", "reason": "Not administrator user"},
    )
    status, _ = await mgmt.request("GET", "leveret", "clock", "/", auth=("guest", "wrong"))
    assert status == 401
    # Nothing broke: the clock still answers, and still runs.
    assert (await mgmt.get("leveret", "clock", "/"))["mode"] == "real"


def _full() -> object:
    from leveret.node.auth import Permission

    return Permission(".*", ".*", ".*")
