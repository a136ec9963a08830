"""A shovel's value as rabbitmq_shovel 3.10 checks it: PUT /api/parameters/shovel/VHOST/NAME
answers 400 with rabbit_shovel_parameters' reason (every fault, one per line, HTML-escaped as
the management plugin escapes reasons), the same on Leveret and (``-m rabbitmq``, a node with
rabbitmq_shovel and rabbitmq_shovel_management enabled) on RabbitMQ 3.10.8; a refused value
defines nothing."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from .helpers import Tenant, unique

LOCAL = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}


def _without(*keys: str, **extra: Any) -> dict[str, Any]:
    value = {k: v for k, v in LOCAL.items() if k not in keys}
    value.update({k.replace("_", "-"): v for k, v in extra.items()})
    return value


# (value, the reason after "Validation failed\n\n"), each observed on RabbitMQ 3.10.8.
REFUSED = [
    (_without("src-queue"), "Must specify 'src-exchange' or 'src-queue'"),
    (_without(src_exchange="x"), "Cannot specify 'src-exchange' and 'src-queue'"),
    (_without(dest_exchange="x"), "Cannot specify 'dest-exchange' and 'dest-queue'"),
    (_without("dest-uri"), 'Key "dest-uri" not found in {name}'),
    (
        _without(ack_mode="sometimes"),
        'ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,'
        '&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"sometimes"&gt;&gt;',
    ),
    (
        _without(src_delete_after="soon"),
        'src-delete-after should be a number greater than or equal to 0, "never" or '
        '"queue-length", actually was &lt;&lt;"soon"&gt;&gt;',
    ),
    (
        _without(src_delete_after=-1),
        'src-delete-after should be a number greater than or equal to 0, "never" or '
        '"queue-length", actually was -1',
    ),
    (
        _without(src_delete_after=5, ack_mode="no-ack"),
        "Cannot specify 'no-ack' and numerical 'delete-after'",
    ),
    (
        _without(reconnect_delay="x"),
        'reconnect-delay should be a number, actually was &lt;&lt;"x"&gt;&gt;',
    ),
    (
        _without(src_prefetch_count="x"),
        'src-prefetch-count should be a number, actually was &lt;&lt;"x"&gt;&gt;',
    ),
    (
        _without(dest_add_forward_headers="yes"),
        'dest-add-forward-headers should be boolean, actually was &lt;&lt;"yes"&gt;&gt;',
    ),
    (
        _without(dest_publish_properties="x"),
        'dest-publish-properties not a list &lt;&lt;"x"&gt;&gt;',
    ),
    (_without("src-uri", src_uri=5), "src-uri should be list, actually was 5"),
    (_without("src-queue", src_queue=5), "src-queue should be binary, actually was 5"),
    (
        {**LOCAL, "bogus": 1, "other": "x"},
        'Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1},{&lt;&lt;"other"&gt;&gt;,'
        '&lt;&lt;"x"&gt;&gt;}] in {name}',
    ),
    (
        _without("src-uri", src_uri="foo://x"),
        '"foo://x" not a valid URI: {{unexpected_uri_scheme,"foo"},"foo://x"}',
    ),
]


def _put(tenant: Tenant, name: str, body: Any) -> tuple[int, Any]:
    vhost = urllib.parse.quote(tenant.vhost, safe="")
    return tenant.api("PUT", f"/api/parameters/shovel/{vhost}/{name}", body)


@pytest.mark.parametrize(("value", "reason"), REFUSED, ids=[r for _, r in REFUSED])
def test_refused_values(tenant: Tenant, value: dict[str, Any], reason: str) -> None:
    name = unique("shovel")
    status, body = _put(tenant, name, {"value": value})
    assert (status, body["error"]) == (400, "bad_request")
    assert body["reason"] == "Validation failed\n\n" + reason.replace("{name}", name) + "\n"
    vhost = urllib.parse.quote(tenant.vhost, safe="")
    assert tenant.api("GET", f"/api/parameters/shovel/{vhost}") == (200, [])


def test_malformed_uris_name_the_uri(tenant: Tenant) -> None:
    # The Erlang term after "not a valid URI:" holds a stack trace in RabbitMQ's answer;
    # Leveret's holds the same reason without it.
    for uri, start in [
        ("amqp://h:notaport", "{{unable_to_parse_uri,"),
        ("amqp://h?heartbeat=x", "{{invalid_amqp_params_parameter,"),
    ]:
        status, body = _put(tenant, unique("shovel"), {"value": _without("dest-uri", dest_uri=uri)})
        assert status == 400
        prefix = f'Validation failed\n\n"{uri}" not a valid URI: {start}'
        assert body["reason"].startswith(prefix)


def test_every_fault_in_one_answer(tenant: Tenant) -> None:
    name = unique("shovel")
    status, body = _put(tenant, name, {"value": {"src-uri": "amqp://", "ack-mode": "x"}})
    assert status == 400
    lines = body["reason"].split("\n")
    assert lines[:2] == ["Validation failed", ""]
    assert "Must specify 'src-exchange' or 'src-queue'" in lines
    assert f'Key "dest-uri" not found in {name}' in lines


def test_a_local_uri_needs_a_vhost_the_user_may_use(tenant: Tenant) -> None:
    missing = unique("nowhere")
    value = _without("src-uri", src_uri=f"amqp:///{missing}")
    status, body = _put(tenant, unique("shovel"), {"value": value})
    assert status == 400
    assert (
        body["reason"]
        == f'Validation failed\n\nuser "guest" may not connect to vhost "{missing}"\n'
    )


def test_unknown_component_and_vhost(tenant: Tenant) -> None:
    vhost = urllib.parse.quote(tenant.vhost, safe="")
    status, body = tenant.api("PUT", f"/api/parameters/nosuch/{vhost}/x", {"value": LOCAL})
    assert (status, body["reason"]) == (400, "Validation failed\n\ncomponent nosuch not found\n")
    status, body = tenant.api("PUT", f"/api/parameters/shovel/{unique('v')}/x", {"value": LOCAL})
    assert (status, body["reason"]) == (404, "vhost_not_found")


def test_an_accepted_value_is_listed_as_given(tenant: Tenant) -> None:
    name = unique("shovel")
    value = {**LOCAL, "src-queue": unique("src"), "dest-queue": unique("dst"), "reconnect-delay": 1}
    assert _put(tenant, name, {"value": value})[0] == 201
    vhost = urllib.parse.quote(tenant.vhost, safe="")
    try:
        status, listed = tenant.api("GET", f"/api/parameters/shovel/{vhost}/{name}")
        assert status == 200
        assert listed == {
            "value": value,
            "vhost": tenant.vhost,
            "component": "shovel",
            "name": name,
        }
        assert _put(tenant, name, {"value": value})[0] == 204
    finally:
        assert tenant.api("DELETE", f"/api/parameters/shovel/{vhost}/{name}")[0] == 204
        # The queues a running shovel declared go with the vhost (the tenant fixture).
