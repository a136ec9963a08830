"""Management API answers to malformed or misdirected requests, and the query-string
options (``columns``, pagination), as RabbitMQ's management plugin gives them.

Each scenario runs against Leveret and, with ``-m rabbitmq``, against a real RabbitMQ and
its management plugin, in a vhost of the test's own (the ``tenant`` fixture). Every
expectation was observed on RabbitMQ 3.10.8 first.

Sources (deps/rabbitmq_management/src): rabbit_mgmt_util.erl (parse_bool/1, parse_int/1,
with_decode/5, with_channel/5, direct_request/6, pagination_params/1, range_filter/3,
reply/3's extract_columns), rabbit_mgmt_format.erl (to_amqp_table/1,
to_basic_properties/1), rabbit_mgmt_wm_exchange_publish.erl, rabbit_mgmt_wm_queue_get.erl,
rabbit_mgmt_wm_bindings.erl. Reasons that are Erlang tuples come back as JSON lists
(``{not_boolean, <<"yes">>}`` is ``["not_boolean", "yes"]``); lists of them are printed
with ``~p``, which breaks a list that does not fit in 78 columns one element a line.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest
from pika.exceptions import ChannelClosedByBroker

from .helpers import Tenant, unique

pytestmark = pytest.mark.timeout(60)

MISSING_VHOST = "no-such-vhost-for-leveret-tests"


def quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def publish_body(**fields: Any) -> dict[str, Any]:
    """A publish request, with ``fields`` replacing (or, as None, removing) its keys."""
    body: dict[str, Any] = {
        "properties": {},
        "routing_key": "k",
        "payload": "x",
        "payload_encoding": "string",
    }
    for key, value in fields.items():
        body[key] = value
    return body


def error(reason: Any, kind: str = "bad_request") -> dict[str, Any]:
    return {"error": kind, "reason": reason}


# -- request bodies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        ("exchanges", {"type": "direct", "durable": "yes"}, ["not_boolean", "yes"]),
        ("exchanges", {"type": "direct", "internal": None}, ["not_boolean", None]),
        ("queues", {"auto_delete": 1}, ["not_boolean", 1]),
        ("queues", {"durable": 0}, ["not_boolean", 0]),
    ],
    ids=["string", "null", "one", "zero"],
)
def test_flags_must_be_booleans(tenant: Tenant, kind: str, body: Any, reason: Any) -> None:
    name = unique("flag")
    path = f"/api/{kind}/{quoted(tenant.vhost)}/{name}"
    assert tenant.api("PUT", path, body) == (400, error(reason))
    assert tenant.api("GET", path)[0] == 404  # nothing was declared


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("exchanges", {"type": "direct", "arguments": {"a": None}}),
        ("queues", {"arguments": {"x-max-length": 5, "a": {"b": [1, None]}}}),
    ],
    ids=["exchange-argument", "nested-queue-argument"],
)
def test_a_null_argument_is_refused(tenant: Tenant, kind: str, body: Any) -> None:
    path = f"/api/{kind}/{quoted(tenant.vhost)}/{unique('null')}"
    assert tenant.api("PUT", path, body) == (400, error("null_not_allowed"))
    assert tenant.api("GET", path)[0] == 404


def test_publish_refusals_in_rabbitmq_order(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    publish = f"/api/exchanges/{vhost}/amq.default/publish"
    # The keys first (a null is present), wherever the request goes.
    for path in (publish, f"/api/exchanges/{MISSING_VHOST}/x/publish"):
        assert api("POST", path, {"payload": "x"}) == (
            400,
            error(
                "[{key_missing,routing_key},\n {key_missing,properties},\n"
                " {key_missing,payload_encoding}]"
            ),
        )
    assert api("POST", publish, publish_body(payload=None)) == (400, error("payload_not_string"))
    # Then the vhost, which a channel must open on.
    assert api("POST", f"/api/exchanges/{MISSING_VHOST}/x/publish", publish_body()) == (
        401,
        error("Access refused.", "not_authorised"),
    )
    # Then the properties and the payload, before the exchange is looked up.
    missing = f"/api/exchanges/{vhost}/{unique('nx')}/publish"
    bad_properties = {"priority": "5"}, {"content_type": None}, {"headers": {"a": [1, None]}}
    reasons = ["not_int", "priority"], ["not_string", "content_type"], "null_not_allowed"
    for properties, reason in zip(bad_properties, reasons, strict=True):
        assert api("POST", missing, publish_body(properties=properties)) == (400, error(reason))
    assert api("POST", missing, publish_body(payload_encoding=None)) == (
        400,
        error(["unsupported_encoding", None]),
    )
    assert api("POST", missing, publish_body(payload="!", payload_encoding="base64")) == (
        400,
        error(["not_base64", "!"]),
    )
    # Last, the publish itself, whose channel error is a 400 like every other.
    name = missing.split("/")[-2]
    assert api("POST", missing, publish_body()) == (
        400,
        error(f"404 NOT_FOUND - no exchange '{name}' in vhost '{tenant.vhost}'"),
    )


def test_get_refusals_in_rabbitmq_order(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    name = unique("nq")
    get = f"/api/queues/{vhost}/{name}/get"
    request = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    assert api("POST", get, {"count": "x"}) == (
        400,
        error("[{key_missing,ackmode},{key_missing,encoding}]"),
    )
    assert api("POST", f"/api/queues/{MISSING_VHOST}/q/get", request) == (
        401,
        error("Access refused.", "not_authorised"),
    )
    assert api("POST", get, {**request, "count": "x"}) == (400, error(["not_integer", "x"]))
    assert api("POST", get, {**request, "count": None}) == (400, error(["not_integer", None]))
    assert api("POST", get, {**request, "truncate": "all"}) == (
        400,
        error(["not_integer", "all"]),
    )
    assert api("POST", get, request) == (
        404,
        error(f"NOT_FOUND - no queue '{name}' in vhost '{tenant.vhost}'", "not_found"),
    )


# -- missing vhosts and binding ends --------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/exchanges/{v}/x", {"type": "direct"}),
        ("PUT", "/api/queues/{v}/q", {}),
        ("POST", "/api/bindings/{v}/e/amq.direct/q/q", {}),
    ],
    ids=["exchange", "queue", "binding"],
)
def test_creating_in_a_missing_vhost_is_vhost_not_found(
    tenant: Tenant, method: str, path: str, body: Any
) -> None:
    assert tenant.api(method, path.format(v=MISSING_VHOST), body) == (
        404,
        error("vhost_not_found", "not_found"),
    )


def test_binding_to_a_missing_end_is_the_bind_404(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    queue, exchange = unique("nq"), unique("nx")
    where = f"in vhost '{tenant.vhost}'"
    assert api("POST", f"/api/bindings/{vhost}/e/amq.direct/q/{queue}", {}) == (
        404,
        error(f"no queue '{queue}' {where}", "not_found"),
    )
    for path in (f"e/amq.direct/e/{exchange}", f"e/{exchange}/e/amq.direct"):
        assert api("POST", f"/api/bindings/{vhost}/{path}", {}) == (
            404,
            error(f"no exchange '{exchange}' {where}", "not_found"),
        )


def test_bindings_of_missing_things_are_listed_empty(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    queue, exchange = unique("nq"), unique("nx")
    for path in (
        f"/api/bindings/{vhost}/e/{exchange}/q/{queue}",
        f"/api/bindings/{vhost}/e/amq.direct/q/{queue}",
        f"/api/bindings/{MISSING_VHOST}/e/amq.direct/q/{queue}",
        f"/api/exchanges/{vhost}/{exchange}/bindings/source",
        f"/api/exchanges/{vhost}/{exchange}/bindings/destination",
        f"/api/exchanges/{MISSING_VHOST}/amq.direct/bindings/source",
        f"/api/queues/{MISSING_VHOST}/{queue}/bindings",
    ):
        assert api("GET", path) == (200, []), path
    # A queue's bindings are listed without looking the queue up: its default binding shows.
    assert api("GET", f"/api/queues/{vhost}/{queue}/bindings") == (
        200,
        [
            {
                "source": "",
                "vhost": tenant.vhost,
                "destination": queue,
                "destination_type": "queue",
                "routing_key": queue,
                "arguments": {},
                "properties_key": queue,
            }
        ],
    )


# -- query-string options ---------------------------------------------------------------------


def test_pagination_parameters_and_ranges(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    exchanges = f"/api/exchanges/{vhost}"
    status, everything = api("GET", exchanges)
    assert status == 200
    count = len(everything)  # the predeclared exchanges of a fresh vhost
    for query, page, size in (("page=0", 0, "undefined"), ("page=1&page_size=501", 1, 501)):
        assert api("GET", f"{exchanges}?{query}") == (
            400,
            error(
                f"Invalid pagination parameters: page number {page}, page size {size}",
                "invalid_pagination_parameters",
            ),
        )
    # The page just after the last full one is empty, the one after that out of range.
    status, page = api("GET", f"{exchanges}?page=2&page_size={count}")
    assert status == 200
    assert (page["items"], page["page_count"], page["total_count"]) == ([], 1, count)
    assert api("GET", f"{exchanges}?page=3&page_size={count}") == (
        400,
        error(f"Page out of range, page: 3 page size: {count}, len: {count}", "page_out_of_range"),
    )
    # A filter that keeps nothing has no pages.
    status, page = api("GET", f"{exchanges}?page=1&name=nothing-is-called-this")
    assert status == 200
    assert (page["filtered_count"], page["page_count"], page["items"]) == (0, 0, [])
    # Lists RabbitMQ does not page ignore the parameters.
    for path in (f"/api/policies/{vhost}", f"/api/consumers/{vhost}"):
        assert api("GET", f"{path}?page=1&page_size=5") == (200, []), path


def test_columns_apply_to_single_objects_too(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    queue = unique("cols")
    assert api("PUT", f"/api/queues/{vhost}/{queue}", {"durable": False})[0] == 201
    assert api("GET", f"/api/queues/{vhost}/{queue}?columns=name,durable") == (
        200,
        {"name": queue, "durable": False},
    )
    assert api("GET", f"/api/exchanges/{vhost}/amq.direct?columns=name,type") == (
        200,
        {"name": "amq.direct", "type": "direct"},
    )
    status, overview = api("GET", "/api/overview?columns=rabbitmq_version")
    assert status == 200
    assert list(overview) == ["rabbitmq_version"]
    status, listed = api("GET", f"/api/exchanges/{vhost}?columns=name&sort=name")
    assert status == 200
    assert listed[:2] == [{"name": ""}, {"name": "amq.direct"}]


def test_one_trailing_slash_is_the_same_path(tenant: Tenant) -> None:
    # cowboy's router takes /api/queues/%2F/ as /api/queues/%2F; two slashes are another
    # path (an empty segment), which matches nothing.
    api, vhost = tenant.api, quoted(tenant.vhost)
    queue = unique("slash")
    assert api("PUT", f"/api/queues/{vhost}/{queue}/", {"durable": False})[0] == 201
    status, listed = api("GET", f"/api/queues/{vhost}/?columns=name")
    assert (status, listed) == (200, [{"name": queue}])
    assert api("GET", f"/api/queues/{vhost}/{queue}/?columns=name") == (200, {"name": queue})
    assert api("GET", "/api/whoami/")[0] == 200
    assert api("DELETE", f"/api/queues/{vhost}/{queue}/")[0] == 204
    assert api("GET", f"/api/queues/{vhost}/{queue}")[0] == 404
    assert api("GET", f"/api/queues/{vhost}//") == (404, error("Not Found", "Object Not Found"))


# -- users ------------------------------------------------------------------------------------


def test_users_without_permissions_and_bulk_delete(tenant: Tenant) -> None:
    api = tenant.api
    first, second, missing = unique("bulk-a"), unique("bulk-b"), unique("bulk-none")
    for name in (first, second):
        assert api("PUT", f"/api/users/{name}", {"password": "pw", "tags": ""})[0] == 201
    try:
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        grant = f"/api/permissions/{quoted(tenant.vhost)}/{second}"
        assert api("PUT", grant, everything)[0] in (201, 204)
        status, users = api("GET", "/api/users/without-permissions?columns=name")
        assert status == 200
        names = [u["name"] for u in users]
        assert first in names
        assert second not in names and tenant.user not in names
        # Deleted in order up to the first name that is no user.
        assert api("POST", "/api/users/bulk-delete", {}) == (
            400,
            error("[{key_missing,users}]"),
        )
        assert api("POST", "/api/users/bulk-delete", {"users": [first, missing, second]}) == (
            400,
            error(["no_such_user", missing]),
        )
        assert api("GET", f"/api/users/{first}")[0] == 404
        assert api("GET", f"/api/users/{second}")[0] == 200
        assert api("POST", "/api/users/bulk-delete", {"users": [second]}) == (204, None)
        assert api("GET", f"/api/users/{second}")[0] == 404
    finally:
        for name in (first, second):
            api("DELETE", f"/api/users/{name}")


def test_creating_a_vhost_grants_its_creator_full_permissions(tenant: Tenant) -> None:
    # rabbit_mgmt_wm_vhost: the acting user gets ".*" on a vhost it creates; an update of
    # an existing vhost grants nothing (observed on 3.10.8).
    api, vhost = tenant.api, unique("created")
    path = f"/api/vhosts/{quoted(vhost)}"
    assert api("PUT", path, {})[0] == 201
    try:
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api("GET", f"{path}/permissions") == (
            200,
            [{"vhost": vhost, "user": "guest", **everything}],
        )
        assert api("DELETE", f"/api/permissions/{quoted(vhost)}/guest") == (204, None)
        assert api("PUT", path, {"description": "again"})[0] == 204
        assert api("GET", f"{path}/permissions") == (200, [])
    finally:
        api("DELETE", path)


def test_a_json_integer_argument_is_a_long(tenant: Tenant) -> None:
    # rabbit_misc:to_amqp_table/1 makes every JSON integer a long, which an inequivalent
    # re-declare over AMQP names (observed on 3.10.8).
    queue = unique("typed")
    path = f"/api/queues/{quoted(tenant.vhost)}/{queue}"
    assert tenant.api("PUT", path, {"arguments": {"x-max-length": 0}})[0] == 201
    connection = tenant.connect()
    try:
        with pytest.raises(ChannelClosedByBroker) as err:
            connection.channel().queue_declare(queue)
        assert (err.value.reply_code, err.value.reply_text) == (
            406,
            f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{queue}' in "
            f"vhost '{tenant.vhost}': received none but current is the value '0' of type 'long'",
        )
    finally:
        connection.close()
        tenant.api("DELETE", path)
