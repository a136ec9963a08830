"""Operator policies set through the management HTTP API and definitions, observed through
AMQP (pika) and the queue listing.

Each scenario runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ and
its management plugin. Every expectation was observed on RabbitMQ 3.10.8 first. RabbitMQ
applies a policy change to its queue processes asynchronously and shows a queue's policies
in its listing only after the next statistics emission (every 5 s), so those checks poll.
Fixtures (``api``, which clears ``opt-*`` policies, and a pika ``ch``) are in this
directory's conftest.

Sources: rabbit_policy.erl (merge_operator_definitions/2, merge_policy_value/3: the lower
value where a policy and an operator policy both set a key), rabbit_policies.erl
(operator_policy_validator: the keys an operator policy may set),
rabbit_mgmt_wm_operator_policy.erl; docs: parameters.md "Operator Policies".
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ..helpers import Http, depth, poll, unique

pytestmark = pytest.mark.timeout(90)

OPERATOR = "/api/operator-policies/%2F/"
POLICY = "/api/policies/%2F/"


def put(api: Http, path: str, pattern: str, definition: dict[str, Any], **extra: Any) -> int:
    status, answer = api("PUT", path, {"pattern": pattern, "definition": definition, **extra})
    assert status in (201, 204), answer
    return status


def only(name: str) -> str:
    """A pattern matching the queue ``name`` alone."""
    return "^" + re.escape(name) + "$"


def fill(ch: BlockingChannel, queue: str, count: int = 20) -> None:
    for _ in range(count):
        ch.basic_publish("", queue, b"m")


def policies_of(api: Http, queue: str) -> tuple[Any, Any, Any]:
    """(policy, operator_policy, effective_policy_definition) in the queue's listing."""
    status, item = api("GET", "/api/queues/%2F/" + urllib.parse.quote(queue, safe=""))
    assert status == 200, item
    return item.get("policy"), item.get("operator_policy"), item.get("effective_policy_definition")


def test_put_get_list_delete(api: Http) -> None:
    low, high = unique("opt-low"), unique("opt-high")
    assert put(api, OPERATOR + high, "^zz", {"expires": 5000}, priority=3) == 201
    assert put(api, OPERATOR + high, "^zz", {"expires": 5000}, priority=3) == 204
    assert put(api, OPERATOR + low, "^zz", {"max-length": 5}, priority=1) == 201
    shown = {
        "vhost": "/",
        "name": high,
        "pattern": "^zz",
        "apply-to": "all",
        "definition": {"expires": 5000},
        "priority": 3,
    }
    assert api("GET", OPERATOR + high) == (200, shown)
    status, listed = api("GET", "/api/operator-policies/%2F")
    mine = [p["name"] for p in listed if p["name"] in (low, high)]
    assert (status, mine) == (200, [low, high])  # by priority, lowest first
    status, everywhere = api("GET", "/api/operator-policies")
    assert status == 200 and shown in everywhere
    # Operator policies are not policies.
    assert api("GET", POLICY + high)[0] == 404
    assert api("DELETE", OPERATOR + high) == (204, None)
    not_found = (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert api("GET", OPERATOR + high) == not_found
    assert api("DELETE", OPERATOR + high) == not_found
    assert api("GET", "/api/operator-policies/" + unique("opt-nowhere")) == not_found


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        # Policy keys an operator policy may not set; unlike a policy's, the reason comes
        # unescaped.
        (
            {"dead-letter-exchange": "x"},
            '[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings',
        ),
        ({"overflow": "drop-head"}, '[{<<"overflow">>,<<"drop-head">>}] are not recognised'),
        ({"queue-mode": "lazy"}, '[{<<"queue-mode">>,<<"lazy">>}] are not recognised'),
        ({"max-length": "x"}, '<<"x">> is not a valid maximum length'),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"message-ttl": -1}, "-1 is not a valid message TTL"),
        ({"delivery-limit": "x"}, '<<"x">> is not a valid delivery limit'),
        ({}, "no policy provided"),
    ],
)
def test_refused_operator_policies(api: Http, definition: dict[str, Any], reason: str) -> None:
    status, answer = api(
        "PUT", OPERATOR + unique("opt-bad"), {"pattern": "^zz", "definition": definition}
    )
    assert (status, answer["error"]) == (400, "bad_request"), answer
    assert answer["reason"].startswith("Validation failed\n\n" + reason), answer


def test_operator_policy_keys_and_access(api: Http) -> None:
    name = unique("opt-keys")
    keys = {
        "delivery-limit": 3,
        "max-length-bytes": 100,
        "max-in-memory-length": 4,
        "max-in-memory-bytes": 5,
        "message-ttl": 1000,
        "expires": 60000,
        "max-length": 9,
    }
    assert put(api, OPERATOR + name, "^zz", keys) == 201
    assert api(
        "PUT",
        "/api/operator-policies/" + unique("opt-nowhere") + "/x",
        {"pattern": "^zz", "definition": {"expires": 5}},
    ) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert api("PUT", OPERATOR + name, {"pattern": "^zz"}) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,definition}]"},
    )
    # A policymaker may set policies, not operator policies.
    user = unique("opt-user")
    assert api("PUT", f"/api/users/{user}", {"password": "pw", "tags": "policymaker"})[0] == 201
    try:
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api("PUT", f"/api/permissions/%2F/{user}", everything)[0] == 201
        as_user = Http(api.base, user, "pw")
        body = {"pattern": "^zz", "definition": {"expires": 5}}
        assert as_user("PUT", OPERATOR + unique("opt-refused"), body) == (
            401,
            {"error": "not_authorised", "reason": "Not administrator user"},
        )
        assert as_user("DELETE", OPERATOR + name) == (
            401,
            {"error": "not_authorised", "reason": "Not administrator user"},
        )
    finally:
        api("DELETE", f"/api/users/{user}")


def test_the_lowest_of_argument_policy_and_operator_policy_applies(
    api: Http, ch: BlockingChannel
) -> None:
    prefix = unique("opt-q")
    op_name, policy_name = unique("opt-operator"), unique("opt-policy")
    put(api, OPERATOR + op_name, "^" + re.escape(prefix), {"max-length": 5, "message-ttl": 60000})
    put(
        api,
        POLICY + policy_name,
        "^" + re.escape(prefix + ".a"),
        {"max-length": 3, "dead-letter-exchange": "dlx"},
        **{"apply-to": "queues"},
    )
    queues = {
        prefix + ".a1": ({"x-max-length": 10}, 3),  # the policy's 3
        prefix + ".b2": ({"x-max-length": 10}, 5),  # the operator policy's 5
        prefix + ".b3": ({"x-max-length": 2}, 2),  # the queue's own 2
        prefix + ".b4": ({}, 5),
    }
    try:
        for queue, (arguments, _expected) in queues.items():
            ch.queue_declare(queue, arguments=arguments)
            fill(ch, queue)
        for queue, (_arguments, expected) in queues.items():
            poll(lambda queue=queue: depth(ch, queue), expected)
        # The listing shows them after RabbitMQ's next statistics emission (5 s).
        poll(
            lambda: policies_of(api, prefix + ".a1"),
            (
                policy_name,
                op_name,
                {"dead-letter-exchange": "dlx", "max-length": 3, "message-ttl": 60000},
            ),
            within=12,
        )
        poll(
            lambda: policies_of(api, prefix + ".b3"),
            (None, op_name, {"max-length": 5, "message-ttl": 60000}),
            within=12,
        )
        # Without the operator policy, the queue's own limit applies again.
        assert api("DELETE", OPERATOR + op_name) == (204, None)
        fill(ch, prefix + ".b2")
        poll(lambda: depth(ch, prefix + ".b2"), 10)
    finally:
        for queue in queues:
            ch.queue_delete(queue)


def test_an_operator_policy_applies_to_queues_declared_later(
    api: Http, ch: BlockingChannel
) -> None:
    queue = unique("opt-later")
    put(api, OPERATOR + unique("opt-operator"), only(queue), {"max-length": 2})
    try:
        ch.queue_declare(queue)
        fill(ch, queue, 5)
        poll(lambda: depth(ch, queue), 2)
    finally:
        ch.queue_delete(queue)


def test_operator_policies_in_definitions(api: Http) -> None:
    name = unique("opt-defs")
    parameter = {
        "value": {
            "pattern": "^zz",
            "definition": {"max-length": 5},
            "priority": 0,
            "apply-to": "queues",
        },
        "vhost": "/",
        "component": "operator_policy",
        "name": name,
    }
    assert api("POST", "/api/definitions", {"parameters": [parameter]}) == (204, None)
    assert api("GET", OPERATOR + name)[1]["definition"] == {"max-length": 5}
    status, exported = api("GET", "/api/definitions")
    assert status == 200 and parameter in exported["parameters"]
    assert "operator_policies" not in exported

    def load(**changes: Any) -> tuple[int, Any]:
        item = {**parameter, **changes, "name": unique("opt-defs")}
        status, answer = api("POST", "/api/definitions", {"parameters": [item]})
        return status, answer["reason"]

    assert load(vhost=unique("opt-nowhere"))[1][0] == "no_such_vhost"
    status, reason = load(value={**parameter["value"], "definition": {"overflow": "drop-head"}})
    # Escaped here, as every reason of a definitions import.
    assert status == 400
    assert reason.startswith(
        'Validation failed\n\n[{&lt;&lt;"overflow"&gt;&gt;,&lt;&lt;"drop-head"&gt;&gt;}] are not '
        "recognised policy settings\n (//operator_policy/opt-defs-"
    ), reason
    value = {key: v for key, v in parameter["value"].items() if key != "priority"}
    status, reason = load(value=value)
    assert status == 400 and reason.startswith('Validation failed\n\nKey "priority" not found')
