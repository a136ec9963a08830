"""Health checks of the management API: the aliveness test, the listener, cluster and
certificate checks, and /api/extensions and /api/auth.

Each scenario runs against Leveret (an in-process broker with its management API) and, with
``-m rabbitmq``, against a real RabbitMQ and its management plugin; vhosts and users made
for a test are deleted afterwards (the queue ``aliveness-test`` goes with its vhost; RabbitMQ
itself leaves it in place between checks). Every expectation was observed on RabbitMQ 3.10.8
first, except the expiring certificate of the last test: the local RabbitMQ has no TLS
listener, so that one runs on Leveret only and follows the module's source.

Sources: deps/rabbitmq_management/src/rabbit_mgmt_wm_aliveness_test.erl,
rabbit_mgmt_wm_health_check_{virtual_hosts,port_listener,protocol_listener,
node_is_quorum_critical,node_is_mirror_sync_critical,certificate_expiration}.erl,
rabbit_mgmt_wm_extensions.erl, rabbit_mgmt_wm_auth.erl, rabbit_mgmt_util:with_channel/5.
"""

from __future__ import annotations

import datetime
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveret.config import Config
from leveret.inspect import BrokerThread
from leveret.management.views import NODE

from .helpers import PASSWORD, Http, Tenant, poll, unique

pytestmark = pytest.mark.timeout(60)

NOT_FOUND = (404, {"error": "Object Not Found", "reason": "Not Found"})
EMPTY = (503, {"status": "failed", "reason": "aliveness-test queue is empty"})
ACCESS_REFUSED = (401, {"error": "not_authorised", "reason": "Access refused."})
NOT_MANAGEMENT = (401, {"error": "not_authorised", "reason": "Not management user"})
CHECKS = "/api/health/checks"


def quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def alive(tenant: Tenant, api: Http | None = None) -> tuple[int, Any]:
    """GET /api/aliveness-test/ of the tenant's vhost (as guest unless ``api``)."""
    return (api or tenant.api)("GET", f"/api/aliveness-test/{quoted(tenant.vhost)}")


def retag(api: Http, user: str, tags: str) -> Http:
    """``user`` (password PASSWORD) retagged ``tags``, on the management API."""
    status, _body = api("PUT", f"/api/users/{user}", {"password": PASSWORD, "tags": tags})
    assert status in (201, 204)
    return Http(api.base, user, PASSWORD)


@pytest.fixture
def stranger(brokers: tuple[str, Http]) -> Iterator[str]:
    """A user of the test's own with no permissions anywhere (password PASSWORD)."""
    _url, api = brokers
    name = unique("lt-stranger")
    assert api("PUT", f"/api/users/{name}", {"password": PASSWORD, "tags": ""})[0] == 201
    yield name
    api("DELETE", f"/api/users/{name}")


def ports(brokers: tuple[str, Http]) -> tuple[int, int]:
    """(AMQP port, management port) of the broker under test."""
    amqp_url, api = brokers
    port = urllib.parse.urlsplit(amqp_url).port
    http_port = urllib.parse.urlsplit(api.base).port
    assert port is not None and http_port is not None
    return port, http_port


# -- aliveness test -----------------------------------------------------------------------


def test_aliveness_test_declares_publishes_and_gets(tenant: Tenant) -> None:
    assert alive(tenant) == (200, {"status": "ok"})
    # The queue stays, as queue.declare with no options makes it.
    status, queue = tenant.api("GET", f"/api/queues/{quoted(tenant.vhost)}/aliveness-test")
    assert status == 200
    assert (queue["durable"], queue["auto_delete"], queue["exclusive"], queue["arguments"]) == (
        False,
        False,
        False,
        {},
    )
    connection = tenant.connect()
    try:
        ch = connection.channel()
        assert ch.queue_declare("aliveness-test", passive=True).method.message_count == 0
        # The get takes the oldest message: one already waiting is taken instead, and the
        # test's own message stays behind.
        ch.basic_publish("", "aliveness-test", b"waiting")
        assert alive(tenant) == (200, {"status": "ok"})
        method, properties, body = ch.basic_get("aliveness-test", auto_ack=True)
        assert method is not None
        assert (method.exchange, method.routing_key, body) == (
            "",
            "aliveness-test",
            b"test_message",
        )
        assert properties.headers is None and properties.delivery_mode is None
        assert ch.queue_declare("aliveness-test", passive=True).method.message_count == 0
    finally:
        connection.close()


def test_aliveness_test_of_a_missing_vhost(tenant: Tenant) -> None:
    missing = f"/api/aliveness-test/{unique('lt-none')}"
    assert tenant.api("GET", missing) == NOT_FOUND
    # Even for a user who could not see it if it existed (is_authorized_vhost lets a vhost
    # that does not exist through, resource_exists then says 404).
    assert retag(tenant.api, tenant.user, "management")("GET", missing) == NOT_FOUND
    assert tenant.api("GET", "/api/aliveness-test") == NOT_FOUND


def test_aliveness_test_users(tenant: Tenant, stranger: str) -> None:
    assert alive(tenant, retag(tenant.api, tenant.user, "")) == NOT_MANAGEMENT
    assert alive(tenant, retag(tenant.api, tenant.user, "management")) == (200, {"status": "ok"})
    assert alive(tenant, retag(tenant.api, tenant.user, "monitoring")) == (200, {"status": "ok"})
    # Without permissions on the vhost: the API refuses a management user...
    stranger_api = retag(tenant.api, stranger, "management")
    assert alive(tenant, stranger_api) == (
        401,
        {"error": "not_authorised", "reason": "User not authorised to access virtual host"},
    )
    # ... and lets an administrator through, whose connection to the vhost is refused.
    retag(tenant.api, stranger, "administrator")
    assert alive(tenant, stranger_api) == ACCESS_REFUSED


@pytest.mark.parametrize(
    ("permissions", "refused"),
    [
        (("", ".*", ".*"), "queue 'aliveness-test'"),  # queue.declare
        ((".*", "", ".*"), "exchange 'amq.default'"),  # basic.publish
        ((".*", ".*", ""), "queue 'aliveness-test'"),  # basic.get
    ],
)
def test_aliveness_test_permissions(
    tenant: Tenant, permissions: tuple[str, str, str], refused: str
) -> None:
    configure, write, read = permissions
    path = f"/api/permissions/{quoted(tenant.vhost)}/{tenant.user}"
    grant = {"configure": configure, "write": write, "read": read}
    assert tenant.api("PUT", path, grant)[0] == 204
    status, body = alive(tenant, retag(tenant.api, tenant.user, "management"))
    assert (status, body["error"]) == (401, "not_authorised")
    # "ACCESS_REFUSED - access to ..." on 3.10; 3.12+ (and Leveret) name the permission:
    # "ACCESS_REFUSED - configure access to ...".
    assert body["reason"].startswith("ACCESS_REFUSED - ")
    assert body["reason"].endswith(
        f"access to {refused} in vhost '{tenant.vhost}' refused for user '{tenant.user}'"
    )


def test_aliveness_test_runs_on_a_channel(tenant: Tenant) -> None:
    api, vhost = tenant.api, quoted(tenant.vhost)
    what = f"queue 'aliveness-test' in vhost '{tenant.vhost}'"
    # An aliveness-test queue declared otherwise fails the declare (406 as a 400).
    assert api("PUT", f"/api/queues/{vhost}/aliveness-test", {"durable": True})[0] == 201
    assert alive(tenant) == (
        400,
        {
            "error": "bad_request",
            "reason": f"406 PRECONDITION_FAILED - inequivalent arg 'durable' for {what}: "
            "received 'false' but current is 'true'",
        },
    )
    assert api("DELETE", f"/api/queues/{vhost}/aliveness-test")[0] == 204
    # One exclusive to another connection is locked (405 as a 400).
    connection = tenant.connect(user="guest")
    try:
        connection.channel().queue_declare("aliveness-test", exclusive=True)
        assert alive(tenant) == (
            400,
            {
                "error": "bad_request",
                "reason": f"405 RESOURCE_LOCKED - cannot obtain exclusive access to locked "
                f"{what}. It could be originally declared on another connection or the "
                "exclusive property value does not match that of the original declaration.",
            },
        )
    finally:
        connection.close()
    # The vhost's queue limit refuses the declare.
    assert tenant.set("vhost-limits", "max-queues", 0)[0] == 204
    assert alive(tenant) == (
        400,
        {
            "error": "bad_request",
            "reason": f"406 PRECONDITION_FAILED - cannot declare queue 'aliveness-test': queue "
            f"limit in vhost '{tenant.vhost}' (0) is reached",
        },
    )


@pytest.mark.parametrize(
    "definition",
    [{"max-length": 0}, {"max-length": 0, "overflow": "reject-publish"}, {"message-ttl": 0}],
)
def test_aliveness_test_fails_when_the_message_is_gone(
    tenant: Tenant, definition: dict[str, Any]
) -> None:
    policy = {"pattern": "^aliveness-test$", "definition": definition, "apply-to": "queues"}
    path = f"/api/policies/{quoted(tenant.vhost)}/no-room"
    assert tenant.api("PUT", path, policy)[0] == 201
    poll(lambda: alive(tenant), EMPTY)
    assert tenant.api("DELETE", path)[0] == 204
    poll(lambda: alive(tenant), (200, {"status": "ok"}))


def test_aliveness_test_opens_a_connection(tenant: Tenant) -> None:
    # The test's own connection counts against the vhost's and the user's limits.
    assert tenant.set("vhost-limits", "max-connections", 1)[0] == 204
    assert alive(tenant) == (200, {"status": "ok"})
    connection = tenant.connect()
    try:
        assert alive(tenant) == ACCESS_REFUSED
    finally:
        connection.close()
    assert tenant.set("vhost-limits", "max-connections", -1)[0] == 204
    assert alive(tenant) == (200, {"status": "ok"})
    path = f"/api/user-limits/{tenant.user}/max-connections"
    assert tenant.api("PUT", path, {"value": 0})[0] == 204
    assert alive(tenant, retag(tenant.api, tenant.user, "management")) == ACCESS_REFUSED


# -- checks -------------------------------------------------------------------------------


def test_single_node_checks(brokers: tuple[str, Http]) -> None:
    _url, api = brokers
    assert api("GET", f"{CHECKS}/virtual-hosts") == (200, {"status": "ok"})
    single = (200, {"status": "ok", "reason": "single node cluster"})
    assert api("GET", f"{CHECKS}/node-is-quorum-critical") == single
    assert api("GET", f"{CHECKS}/node-is-mirror-sync-critical") == single
    # Not in 3.10.8.
    assert api("GET", f"{CHECKS}/is-in-service") == NOT_FOUND


def test_checks_need_a_management_user(brokers: tuple[str, Http], stranger: str) -> None:
    _url, api = brokers
    paths = [
        f"{CHECKS}/virtual-hosts",
        f"{CHECKS}/port-listener/1",
        f"{CHECKS}/protocol-listener/amqp",
        f"{CHECKS}/node-is-quorum-critical",
        f"{CHECKS}/node-is-mirror-sync-critical",
        f"{CHECKS}/certificate-expiration/1/days",
        "/api/extensions",
    ]
    user = Http(api.base, stranger, PASSWORD)
    for path in paths:
        assert user("GET", path) == NOT_MANAGEMENT, path
    # Any management tag will do: none of these needs monitoring or administrator, nor
    # permissions on any vhost.
    retag(api, stranger, "management")
    for path in paths:
        assert user("GET", path)[0] in (200, 503), path
    assert user("GET", f"{CHECKS}/port-listener/1")[0] == 503


def test_port_listener(brokers: tuple[str, Http]) -> None:
    _url, api = brokers
    amqp, http = ports(brokers)
    assert api("GET", f"{CHECKS}/port-listener/{amqp}") == (200, {"status": "ok", "port": amqp})
    assert api("GET", f"{CHECKS}/port-listener/{http}") == (200, {"status": "ok", "port": http})
    # binary_to_integer: a sign and leading zeros are fine.
    assert api("GET", f"{CHECKS}/port-listener/+0{amqp}") == (200, {"status": "ok", "port": amqp})
    for missing in (1, -1, 0, 10**22):
        status, body = api("GET", f"{CHECKS}/port-listener/{missing}")
        assert status == 503
        # RabbitMQ also lists its inter-node port (25672).
        assert {amqp, http} <= set(body.pop("ports"))
        assert body == {"status": "failed", "reason": "No active listener", "missing": missing}


@pytest.mark.parametrize("port", ["abc", "5672.0", "1e3", "0x10", "%205672", "5_672", "56%2F72"])
def test_invalid_port(brokers: tuple[str, Http], port: str) -> None:
    _url, api = brokers
    assert api("GET", f"{CHECKS}/port-listener/{port}") == (
        400,
        {"error": "bad_request", "reason": "Invalid port"},
    )


@pytest.mark.parametrize(
    ("name", "protocol"),
    [
        ("amqp", "amqp"),
        ("AMQP", "amqp"),
        ("amqp091", "amqp"),
        ("Amqp0-9-1", "amqp"),
        ("amqp1.0", "amqp"),
        ("http", "http"),
        ("management", "http"),
        ("UI", "http"),
        ("http_api", "http"),
    ],
)
def test_protocol_listener(brokers: tuple[str, Http], name: str, protocol: str) -> None:
    _url, api = brokers
    assert api("GET", f"{CHECKS}/protocol-listener/{name}") == (
        200,
        {"status": "ok", "protocol": protocol},
    )


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("stomp", "stomp"),
        ("mqtt", "mqtt"),
        ("MQTT311", "mqtt"),
        ("amqps", "amqp/ssl"),
        ("amqp%2Fssl", "amqp/ssl"),
        ("https", "https"),
        ("web-stomp", "http/web-stomp"),
        ("webmqtt%2Ftls", "https/web-mqtt"),
        ("Web-MQTT+SSL", "https/web-mqtt"),
        ("a%20b", "a b"),
        ("%F0%9F%90%87", "\U0001f407"),
        # The name is lowercased byte by byte, as Latin-1, breaking the UTF-8 of "é" into
        # bytes that are not UTF-8, which the JSON encoder writes as one U+FFFD.
        ("%C3%A9", "\ufffd"),
        ("x%FF%FEy", "x\ufffd\ufffdy"),
    ],
)
def test_protocol_without_listener(brokers: tuple[str, Http], name: str, missing: str) -> None:
    _url, api = brokers
    status, body = api("GET", f"{CHECKS}/protocol-listener/{name}")
    assert status == 503
    # RabbitMQ also lists "clustering" (its inter-node listener).
    assert {"amqp", "http"} <= set(body.pop("protocols"))
    assert body == {"status": "failed", "reason": "No active listener", "missing": missing}


@pytest.mark.parametrize(
    "period",
    [
        *("1/days", "1/weeks", "1/months", "1/years", "2/DAYS", "+01/Weeks", "-1/days"),
        # Any integer (not in months: a float in RabbitMQ, which overflows there: a 500).
        f"{10**400}/days",
        f"{10**400}/years",
    ],
)
def test_certificate_expiration_without_tls(brokers: tuple[str, Http], period: str) -> None:
    _url, api = brokers
    assert api("GET", f"{CHECKS}/certificate-expiration/{period}") == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("period", "reason"),
    [
        ("1/day", "Time unit not recognised. Supported units: days, weeks, months, years."),
        ("1/hours", "Time unit not recognised. Supported units: days, weeks, months, years."),
        ("x/days", "Invalid expiration value."),
        ("1.5/days", "Invalid expiration value."),
        ("/days", "Invalid expiration value."),
        # The number is read first.
        ("x/fortnights", "Invalid expiration value."),
    ],
)
def test_invalid_certificate_expiration(
    brokers: tuple[str, Http], period: str, reason: str
) -> None:
    _url, api = brokers
    assert api("GET", f"{CHECKS}/certificate-expiration/{period}") == (
        400,
        {"error": "bad_request", "reason": reason},
    )
    assert api("GET", f"{CHECKS}/certificate-expiration/1") == NOT_FOUND


# -- for the web page ---------------------------------------------------------------------


def test_extensions_and_auth(brokers: tuple[str, Http], broker_kind: str) -> None:
    _url, api = brokers
    status, scripts = api("GET", "/api/extensions")
    assert status == 200
    if broker_kind == "rabbitmq":
        # RabbitMQ lists its own UI's dispatcher.js, then a script per management plugin:
        # shovel.js with rabbitmq_shovel_management, which the node of docs/contributing.md
        # enables (rabbit_mgmt_wm_extensions reads them from the plugins' dispatchers).
        assert scripts[0] == {"javascript": "dispatcher.js"}
        assert {script["javascript"] for script in scripts[1:]} <= {"shovel.js"}
    else:
        # Leveret's page has its Shovels built in: no extensions to load.
        assert scripts == []
    settings = {"enable_uaa": False, "uaa_client_id": "", "uaa_location": ""}
    assert api("GET", "/api/auth") == (200, settings)
    # A login page reads it before logging in: no valid credentials needed.
    assert Http(api.base, "nobody", "wrong")("GET", "/api/auth") == (200, settings)


# -- an expiring certificate (Leveret only) -----------------------------------------------


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA valid for 60 days and a server certificate it signs, valid for 10."""

    def run(*args: str) -> str:
        done = subprocess.run(
            ["openssl", *args], check=True, capture_output=True, cwd=directory, text=True
        )
        return done.stdout

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "60", "-subj", "/CN=Test CA",
        "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "10", "-out", "server.pem")  # fmt: skip
    return {name: directory / name for name in ("ca.pem", "server.pem", "server.key")}


def end_date(path: Path) -> str:
    """A certificate's notAfter as RabbitMQ writes it: "2026-12-02 3:05:09" (UTC)."""
    out = subprocess.run(
        ["openssl", "x509", "-enddate", "-noout", "-in", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    at = datetime.datetime.strptime(out.strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z")
    return f"{at.year}-{at.month:02}-{at.day:02} {at.hour}:{at.minute:02}:{at.second:02}"


def test_certificate_expiration_of_the_tls_listener(tmp_path: Path) -> None:
    files = make_certificates(tmp_path)
    config = Config(
        host="127.0.0.1",
        port=0,
        management_port=0,
        tls_port=0,
        tls_cert=files["server.pem"],
        tls_key=files["server.key"],
        tls_ca=files["ca.pem"],
    )
    broker = BrokerThread(config).start()
    try:
        management = broker.server.management
        assert management is not None
        api = Http(management.url)
        tls_port = broker.server.tls_port
        assert api("GET", f"{CHECKS}/port-listener/{tls_port}") == (
            200,
            {"status": "ok", "port": tls_port},
        )
        assert api("GET", f"{CHECKS}/protocol-listener/amqps") == (
            200,
            {"status": "ok", "protocol": "amqp/ssl"},
        )
        status, body = api("GET", f"{CHECKS}/protocol-listener/stomp")
        assert (status, body["protocols"]) == (503, ["amqp", "amqp/ssl", "http"])
        assert api("GET", f"{CHECKS}/certificate-expiration/1/weeks") == (200, {"status": "ok"})
        listener = {
            "node": NODE,
            "protocol": "amqp/ssl",
            "interface": "127.0.0.1",
            "port": tls_port,
            "certfile": str(files["server.pem"]),
            "cacertfile": str(files["ca.pem"]),
            "certfile_expires_on": [end_date(files["server.pem"])],
            "cacertfile_expires_on": [],
        }
        assert api("GET", f"{CHECKS}/certificate-expiration/2/weeks") == (
            503,
            {"status": "failed", "reason": "Certificates expiring", "expired": [listener]},
        )
        listener["cacertfile_expires_on"] = [end_date(files["ca.pem"])]
        assert api("GET", f"{CHECKS}/certificate-expiration/3/months") == (
            503,
            {"status": "failed", "reason": "Certificates expiring", "expired": [listener]},
        )
        assert api("GET", f"{CHECKS}/certificate-expiration/{10**400}/months") == (
            503,
            {"status": "failed", "reason": "Certificates expiring", "expired": [listener]},
        )
        assert api("GET", f"{CHECKS}/certificate-expiration/-1/years") == (200, {"status": "ok"})
    finally:
        broker.stop()
