"""Policies set through the management HTTP API, observed through AMQP (pika).

Each scenario runs against Leveret (an in-process broker of this module with its management
API on a free port) and, with ``-m rabbitmq``, against a real RabbitMQ, whose management API
is at ``RABBITMQ_MANAGEMENT_URL`` (default http://127.0.0.1:15672; the
``rabbitmq_management`` plugin must be enabled). Every expectation was observed on RabbitMQ
3.10.8 first. RabbitMQ applies a policy change to its queue processes asynchronously, so
the checks poll.

Sources: rabbit_policy.erl (matching, priority), rabbit_amqqueue_process:
process_args_policy/1 (the lower of argument and policy for the limits, the argument for
the rest), rabbit_policies.erl (validation texts), rabbit_mgmt_wm_policy.erl.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ..helpers import Http, depth, poll, unique

pytestmark = pytest.mark.timeout(60)


def set_policy(api: Http, name: str, pattern: str, definition: dict[str, Any], **extra: Any) -> int:
    body = {"pattern": pattern, "definition": definition, **extra}
    status, answer = api("PUT", "/api/policies/%2F/" + name, body)
    assert status in (201, 204), answer
    return status


def drain(ch: BlockingChannel, queue: str) -> list[bytes]:
    bodies = []
    while True:
        method, _properties, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def queue(ch: BlockingChannel, prefix: str, **arguments: Any) -> str:
    name = ch.queue_declare(unique(prefix), exclusive=True, arguments=arguments or None)
    return str(name.method.queue)


def fanout_into_queue(ch: BlockingChannel, prefix: str) -> tuple[str, str]:
    """An auto-delete fanout exchange bound to an exclusive queue: (exchange, queue)."""
    exchange = unique(prefix)
    ch.exchange_declare(exchange, "fanout", auto_delete=True)
    bound = queue(ch, prefix + "-q")
    ch.queue_bind(bound, exchange)
    return exchange, bound


def publish(ch: BlockingChannel, name: str, count: int) -> None:
    for i in range(count):
        ch.basic_publish("", name, str(i).encode())


# -- the HTTP API ---------------------------------------------------------------------------


def test_put_get_list_delete(api: Http) -> None:
    name = unique("pt-crud")
    body = {"pattern": "^crud\\.", "definition": {"max-length": 2}, "apply-to": "queues"}
    assert api("PUT", f"/api/policies/%2F/{name}", body)[0] == 201
    assert api("PUT", f"/api/policies/%2F/{name}", {**body, "priority": 3})[0] == 204
    status, shown = api("GET", f"/api/policies/%2F/{name}")
    assert status == 200
    assert shown == {
        "vhost": "/",
        "name": name,
        "pattern": "^crud\\.",
        "apply-to": "queues",
        "definition": {"max-length": 2},
        "priority": 3,
    }
    low = unique("pt-low")
    set_policy(api, low, "^nothing$", {"expires": 1000}, priority=-1)
    # rabbit_mgmt_wm_policies sorts its reply by priority: the lowest first.
    listed = [p["name"] for p in api("GET", "/api/policies/%2F")[1] if p["name"] in (name, low)]
    assert listed == [low, name]
    assert shown in api("GET", "/api/policies")[1]
    assert api("DELETE", f"/api/policies/%2F/{name}")[0] == 204
    assert api("DELETE", f"/api/policies/%2F/{name}") == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )
    assert api("GET", f"/api/policies/%2F/{name}")[0] == 404


def test_policy_defaults(api: Http) -> None:
    name = unique("pt-defaults")
    set_policy(api, name, "^defaults$", {"expires": 1000})
    shown = api("GET", f"/api/policies/%2F/{name}")[1]
    assert (shown["apply-to"], shown["priority"]) == ("all", 0)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"pattern": "x", "definition": {"foo": 1}}, '[{<<"foo">>,1}] are not recognised'),
        (
            {"pattern": "x", "definition": {"expires": 1, "foo": 2, "bar": "b"}},
            '[{<<"bar">>,<<"b">>},{<<"foo">>,2}] are not recognised',
        ),
        (
            {"pattern": "x", "definition": {"message-ttl": "a"}},
            '<<"a">> is not a valid message TTL',
        ),
        ({"pattern": "x", "definition": {"message-ttl": -1}}, "-1 is not a valid message TTL"),
        ({"pattern": "x", "definition": {"expires": 0}}, "0 is not a valid queue expiry"),
        ({"pattern": "x", "definition": {"max-length": -1}}, "-1 is not a valid maximum length"),
        (
            {"pattern": "x", "definition": {"max-length-bytes": 1.5}},
            "1.5 is not a valid maximum length in bytes",
        ),
        (
            {"pattern": "x", "definition": {"overflow": "foo"}},
            '<<"foo">> is not a valid overflow value',
        ),
        (
            {"pattern": "x", "definition": {"dead-letter-exchange": 1}},
            "1 is not a valid dead letter exchange name",
        ),
        (
            {"pattern": "x", "definition": {"dead-letter-routing-key": 1}},
            "1 is not a valid dead letter routing key",
        ),
        (
            {"pattern": "x", "definition": {"alternate-exchange": 1}},
            "1 is not a valid alternate exchange name",
        ),
        (
            {"pattern": "x", "definition": {"delivery-limit": -1}},
            "-1 is not a valid delivery limit",
        ),
        ({"pattern": "x", "definition": {}}, "no policy provided"),
        (
            {"pattern": "x", "definition": {"expires": 1}, "apply-to": "foo"},
            "apply-to 'foo' unrecognised; should be 'queues', 'exchanges' or 'all'",
        ),
        (
            {"pattern": "x", "definition": {"expires": 1}, "priority": "a"},
            'priority should be a number, actually was <<"a">>',
        ),
    ],
)
def test_refused_policies_are_400_with_rabbitmq_texts(
    api: Http, body: dict[str, Any], reason: str
) -> None:
    status, answer = api("PUT", "/api/policies/%2F/" + unique("pt-bad"), body)
    assert status == 400
    assert answer["error"] == "bad_request"
    # The management plugin escapes the reason's < and >.
    escaped = reason.replace("<", "&lt;").replace(">", "&gt;")
    assert answer["reason"].startswith("Validation failed\n\n" + escaped), answer


def test_missing_keys_and_vhost(api: Http) -> None:
    assert api("PUT", "/api/policies/%2F/" + unique("pt-missing"), {}) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,pattern},{key_missing,definition}]"},
    )
    body = {"pattern": "x", "definition": {"expires": 1}}
    assert api("PUT", "/api/policies/" + unique("nohost") + "/pt-x", body) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )


# -- queues ---------------------------------------------------------------------------------


def test_max_length_policy_applies_to_an_existing_queue(api: Http, ch: BlockingChannel) -> None:
    name = queue(ch, "pol-len")
    publish(ch, name, 5)
    set_policy(api, unique("pt-len"), "^" + name + "$", {"max-length": 2}, **{"apply-to": "queues"})
    poll(lambda: depth(ch, name), 2)
    assert drain(ch, name) == [b"3", b"4"]  # drop-head: the oldest went
    publish(ch, name, 3)
    poll(lambda: depth(ch, name), 2)


@pytest.mark.parametrize(("argument", "policy", "kept"), [(1, 3, 1), (4, 2, 2)])
def test_the_lower_of_argument_and_policy_limits_the_queue(
    api: Http, ch: BlockingChannel, argument: int, policy: int, kept: int
) -> None:
    name = queue(ch, "pol-min", **{"x-max-length": argument})
    set_policy(api, unique("pt-min"), "^" + name + "$", {"max-length": policy})
    publish(ch, name, 5)
    poll(lambda: depth(ch, name), kept)


def test_deleting_the_policy_lifts_its_limit(api: Http, ch: BlockingChannel) -> None:
    name = queue(ch, "pol-lift")
    policy = unique("pt-lift")
    set_policy(api, policy, "^" + name + "$", {"max-length": 1})
    publish(ch, name, 3)
    poll(lambda: depth(ch, name), 1)
    assert api("DELETE", "/api/policies/%2F/" + policy)[0] == 204
    publish(ch, name, 3)
    poll(lambda: depth(ch, name), 4)


def test_highest_priority_policy_wins_and_apply_to_is_respected(
    api: Http, ch: BlockingChannel
) -> None:
    name = queue(ch, "pol-prio")
    pattern = "^" + name + "$"
    set_policy(api, unique("pt-lo"), pattern, {"max-length": 3}, priority=1)
    set_policy(api, unique("pt-hi"), pattern, {"max-length": 1}, priority=2)
    # A policy for exchanges only does not touch the queue, whatever its priority.
    set_policy(
        api, unique("pt-x"), pattern, {"max-length": 5}, priority=9, **{"apply-to": "exchanges"}
    )
    publish(ch, name, 4)
    poll(lambda: depth(ch, name), 1)


def test_dead_letter_exchange_by_policy_and_the_argument_wins(
    api: Http, ch: BlockingChannel
) -> None:
    dlx, dlq = fanout_into_queue(ch, "pol-dlx")
    own, own_q = fanout_into_queue(ch, "pol-own")
    by_policy = queue(ch, "pol-dl")
    by_argument = queue(ch, "pol-dl", **{"x-dead-letter-exchange": own})
    pattern = f"^({by_policy}|{by_argument})$"
    set_policy(api, unique("pt-dlx"), pattern, {"dead-letter-exchange": dlx})
    for name in (by_policy, by_argument):
        ch.basic_publish("", name, name.encode())

        def reject(name: str = name) -> bool:
            method, _properties, _body = ch.basic_get(name)
            if method is None:
                return False
            ch.basic_reject(method.delivery_tag, requeue=False)
            return True

        poll(reject, True)
    poll(lambda: drain(ch, dlq), [by_policy.encode()])
    poll(lambda: drain(ch, own_q), [by_argument.encode()])


def test_message_ttl_by_policy(api: Http, ch: BlockingChannel) -> None:
    name = queue(ch, "pol-ttl")
    set_policy(api, unique("pt-ttl"), "^" + name + "$", {"message-ttl": 50})
    # Wait until the policy is in force (a message published now expires), then check a
    # second one does too.
    poll(lambda: (publish(ch, name, 1), time.sleep(0.2), depth(ch, name))[-1], 0)
    publish(ch, name, 1)
    time.sleep(0.2)
    assert drain(ch, name) == []


# -- exchanges ------------------------------------------------------------------------------


def test_alternate_exchange_by_policy_and_the_argument_wins(api: Http, ch: BlockingChannel) -> None:
    ae, ae_q = fanout_into_queue(ch, "pol-ae")
    own, own_q = fanout_into_queue(ch, "pol-ownae")
    plain = unique("pol-x")
    ch.exchange_declare(plain, "direct")
    with_argument = unique("pol-x")
    ch.exchange_declare(with_argument, "direct", arguments={"alternate-exchange": own})
    try:
        set_policy(
            api,
            unique("pt-ae"),
            f"^({plain}|{with_argument})$",
            {"alternate-exchange": ae},
            **{"apply-to": "exchanges"},
        )

        def routed() -> tuple[list[bytes], list[bytes]]:
            ch.basic_publish(plain, "nowhere", b"p")
            ch.basic_publish(with_argument, "nowhere", b"a")
            time.sleep(0.1)
            return drain(ch, ae_q)[-1:], drain(ch, own_q)[-1:]

        poll(routed, ([b"p"], [b"a"]))
    finally:
        ch.exchange_delete(plain)
        ch.exchange_delete(with_argument)


# -- streams --------------------------------------------------------------------------------


@pytest.fixture
def stream(ch: BlockingChannel) -> Iterator[str]:
    """A stream with 1,000-byte segments (durable: deleted after the test)."""
    name = unique("pol-stream")
    arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 1000}
    ch.queue_declare(name, durable=True, arguments=arguments)
    yield name
    if ch.is_open:
        ch.queue_delete(name)


def test_a_stream_cannot_be_purged_or_read_through_the_api(api: Http, stream: str) -> None:
    path = "/api/queues/%2F/" + stream
    where = f"queue '{stream}' in vhost '/'"
    assert api("DELETE", path + "/contents") == (
        400,
        {"error": "bad_request", "reason": f"queue.purge not supported by stream queues {where}"},
    )
    body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    assert api("POST", path + "/get", body) == (
        400,
        {"error": "bad_request", "reason": f"540 basic.get not supported by stream queues {where}"},
    )


def test_max_length_bytes_policy_is_a_streams_retention(
    api: Http, ch: BlockingChannel, stream: str
) -> None:
    set_policy(api, unique("pt-stream"), "^" + stream + "$", {"max-length-bytes": 2000})
    time.sleep(0.5)  # RabbitMQ hands the policy to the stream's writer asynchronously
    ch.confirm_delivery()
    bodies = [b"%03d" % i + b"x" * 97 for i in range(100)]
    for body in bodies:
        ch.basic_publish("", stream, body)
    ch.basic_qos(prefetch_count=200)
    kept: list[bytes] = []
    ch.basic_consume(
        stream, lambda c, m, p, b: kept.append(b), arguments={"x-stream-offset": "first"}
    )
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    assert 0 < len(kept) < 50
    assert kept == bodies[-len(kept) :]
