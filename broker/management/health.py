"""Health checks and the small endpoints monitoring tools call, as RabbitMQ 3.10.8 answers
them (deps/rabbitmq_management/src):

- GET /api/aliveness-test/vhost (rabbit_mgmt_wm_aliveness_test): declare the queue
  ``aliveness-test``, publish a message to it and get one back, as the logged-in user;
- GET /api/health/checks/virtual-hosts, port-listener/PORT, protocol-listener/PROTOCOL,
  node-is-quorum-critical, node-is-mirror-sync-critical, certificate-expiration/WITHIN/UNIT
  (rabbit_mgmt_wm_health_check_*): 200 ``{"status": "ok", ...}``, or 503 ``{"status":
  "failed", "reason": ...}`` with what is missing;
- GET /api/extensions (rabbit_mgmt_wm_extensions) and GET /api/auth (rabbit_mgmt_wm_auth).

Every answer here was observed on RabbitMQ 3.10.8 (tests/integration/test_management_health.py
runs on both brokers), except the failure of certificate-expiration, which needs a TLS
listener the local RabbitMQ does not have: that one follows the module's source.

Left out: GET /api/feature-flags. Feature flags describe what the nodes of a RabbitMQ cluster
have switched on between releases; Leveret has no cluster and no release history, and its
overview reports the 3.13 profile, so neither 3.10.8's list nor 3.13's would be true of it.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from aiohttp import web
from cryptography import x509
from pamqp import commands

import leveret.management.views as views
from leveret.management.access import actor, require_vhost
from leveret.management.api import listeners, server_of
from leveret.management.errors import amqp_errors, bad_request, not_authorised, not_found
from leveret.management.messages import session_publisher
from leveret.management.query import erlang_integer, json_response
from leveret.management.state import state_of
from leveret.node.fieldtable import marshal_content_header
from leveret.node.limits import reached
from leveret.node.message import Message
from leveret.session import topology
from leveret.session.get import basic_get
from leveret.wire.handshake import State

if TYPE_CHECKING:
    from pathlib import Path

    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

routes = web.RouteTableDef()

# The status of every failed check (rabbit_mgmt.hrl: ?HEALTH_CHECK_FAILURE_STATUS).
FAILURE_STATUS = 503


def failure(body: dict[str, Any]) -> web.Response:
    """A failed health check: 503 with ``{"status": "failed", ...}``."""
    return json_response({"status": "failed", **body}, status=FAILURE_STATUS)


def raw_segment(request: web.Request, index: int) -> bytes:
    """Path segment ``index`` (0: the empty one before the first slash) as the bytes the
    client sent, percent-decoded. RabbitMQ works on these bytes (rabbit_mgmt_util:id/2);
    aiohttp's ``match_info`` has them decoded as UTF-8, or left percent-encoded where they
    are not UTF-8."""
    path = request.raw_path.split("?", 1)[0]
    return unquote_to_bytes(path.split("/")[index])


def erlang_lowercase(raw: bytes) -> bytes:
    """``string:lowercase(binary_to_list(Raw))``: each byte taken as a Latin-1 character
    (so only A-Z and the Latin-1 capitals change; a UTF-8 sequence may be broken)."""
    return raw.decode("latin-1").lower().encode("latin-1")


# -- aliveness test ---------------------------------------------------------------------

ALIVENESS_QUEUE = "aliveness-test"
ALIVENESS_PAYLOAD = b"test_message"


def open_direct(server: ServerState[Connection], vhost: VHost, user: str) -> None:
    """What opening RabbitMQ's direct connection for the test checks (rabbit_direct:connect/5):
    the vhost's and the user's connection limits and the user's access to the vhost. Any
    refusal reaches the API as 401 "Access refused." (observed on 3.10.8: an administrator
    without permissions on the vhost, ``max-connections`` 0 on the vhost or the user)."""
    opened = [c for c in server.connections if c.state is State.OPEN]
    refused = (
        reached(vhost.limits, "max-connections", sum(c.vhost is vhost for c in opened)) is not None
    )
    account = server.access.users.get(user)
    if account is not None:
        mine = sum(c.user == user for c in opened)
        refused = refused or reached(account.limits, "max-connections", mine) is not None
    if refused or not server.access.can_access_vhost(user, vhost.name):
        raise not_authorised("Access refused.")


@routes.get("/api/aliveness-test/{vhost}")
async def aliveness_test(request: web.Request) -> web.Response:
    """GET /api/aliveness-test/vhost (rabbit_mgmt_wm_aliveness_test, as 3.10.8 has it):
    queue.declare ``aliveness-test`` (not durable, not auto-delete, no arguments), publish
    ``test_message`` to it through the default exchange, basic.get it with no_ack: 200
    ``{"status": "ok"}``. The queue stays, as RabbitMQ leaves it (so a check every few
    seconds does not create and delete a queue each time).

    The steps run as the logged-in user on a channel of its own, so they can fail as a
    channel would: a refused permission is 401, an existing ``aliveness-test`` declared
    otherwise or exclusive to another connection 400 with the channel's error
    (rabbit_mgmt_util:with_channel/5); a get that finds the queue empty (a policy's
    ``max-length`` 0 or ``message-ttl`` 0) 503 "aliveness-test queue is empty".
    """
    server = server_of(request)
    name = request.match_info["vhost"]
    vhost = server.vhosts.get(name)
    # is_authorized_vhost lets any management user through for a vhost that does not
    # exist; resource_exists then makes it a 404.
    if vhost is None:
        raise not_found()
    user = require_vhost(request, server, name).name
    open_direct(server, vhost, user)
    publisher = session_publisher(request, vhost)
    with amqp_errors("channel"):
        topology.declare_queue(
            actor(request, vhost), ALIVENESS_QUEUE, False, False, False, False, {}
        )
        stats = publisher.check_exchange("", ALIVENESS_QUEUE)
        properties = commands.Basic.Properties()
        header = marshal_content_header(len(ALIVENESS_PAYLOAD), properties)
        message = Message("", ALIVENESS_QUEUE, header, ALIVENESS_PAYLOAD)
        publisher.route(message, False, None, stats)
        # No stream to refuse basic.get on: a stream is durable, so the declare failed.
        state_of(server).sampler.refresh()  # the queue may be new: follow its counters
        _queue, entry = basic_get(server.access, user, vhost, ALIVENESS_QUEUE, True, None)
    if entry is None:
        return failure({"reason": "aliveness-test queue is empty"})
    return json_response({"status": "ok"})


# -- cluster checks, trivially true of one node -----------------------------------------


@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts(request: web.Request) -> web.Response:
    """GET /api/health/checks/virtual-hosts (rabbit_mgmt_wm_health_check_virtual_hosts):
    503 "Some virtual hosts are down" lists the vhosts whose supervisor is not running in
    RabbitMQ; a Leveret vhost exists only while it runs, so the answer is always ok."""
    return json_response({"status": "ok"})


@routes.get("/api/health/checks/node-is-quorum-critical")
async def node_is_quorum_critical(request: web.Request) -> web.Response:
    """GET /api/health/checks/node-is-quorum-critical
    (rabbit_mgmt_wm_health_check_node_is_quorum_critical): a single node cluster has no
    quorum to lose by stopping."""
    return json_response({"status": "ok", "reason": "single node cluster"})


@routes.get("/api/health/checks/node-is-mirror-sync-critical")
async def node_is_mirror_sync_critical(request: web.Request) -> web.Response:
    """GET /api/health/checks/node-is-mirror-sync-critical
    (rabbit_mgmt_wm_health_check_node_is_mirror_sync_critical): the same for mirrors."""
    return json_response({"status": "ok", "reason": "single node cluster"})


# -- listeners --------------------------------------------------------------------------


@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener(request: web.Request) -> web.Response:
    """GET /api/health/checks/port-listener/PORT
    (rabbit_mgmt_wm_health_check_port_listener): 200 ``{"status": "ok", "port": N}`` when a
    listener of this node has the port; 503 "No active listener" with ``missing`` and every
    listener's ``ports`` otherwise (any integer, negative or huge: it is only compared);
    400 "Invalid port" for what ``binary_to_integer`` refuses."""
    port = erlang_integer(raw_segment(request, 5))
    if port is None:
        raise bad_request("Invalid port")
    ports = [listener["port"] for listener in listeners(request)]
    if port in ports:
        return json_response({"status": "ok", "port": port})
    return failure({"reason": "No active listener", "missing": port, "ports": ports})


# rabbit_mgmt_wm_health_check_protocol_listener:normalize_protocol/1: the names a client
# may use for a listener's protocol (after lowercasing); any other name is used as it is.
PROTOCOL_ALIASES = {
    **dict.fromkeys(
        ("amqp091", "amqp0.9.1", "amqp0-9-1", "amqp0_9_1", "amqp10", "amqp1.0", "amqp1-0"),
        "amqp",
    ),
    "amqp1_0": "amqp",
    "amqps": "amqp/ssl",
    **dict.fromkeys(("mqtt3.1", "mqtt3.1.1", "mqtt31", "mqtt311", "mqtt3_1", "mqtt3_1_1"), "mqtt"),
    **dict.fromkeys(("mqtts", "mqtt+tls", "mqtt+ssl"), "mqtt/ssl"),
    **dict.fromkeys(
        (
            "stomp1.0",
            "stomp1.1",
            "stomp1.2",
            "stomp10",
            "stomp11",
            "stomp12",
            "stomp1_0",
            "stomp1_1",
            "stomp1_2",
        ),
        "stomp",
    ),
    **dict.fromkeys(("stomps", "stomp+tls", "stomp+ssl"), "stomp/ssl"),
    **dict.fromkeys(("http1", "http1.1", "http_api", "management", "management_ui", "ui"), "http"),
    **dict.fromkeys(("cli", "distribution"), "clustering"),
    **dict.fromkeys(("webmqtt", "web-mqtt", "web_mqtt"), "http/web-mqtt"),
    **{
        f"{name}{sep}{tls}": "https/web-mqtt"
        for name in ("webmqtt", "web-mqtt")
        for sep in ("/", "+")
        for tls in ("tls", "ssl")
    },
    **dict.fromkeys(("webstomp", "web-stomp", "web_stomp"), "http/web-stomp"),
    **{
        f"{name}{sep}{tls}": "https/web-stomp"
        for name in ("webstomp", "web-stomp")
        for sep in ("/", "+")
        for tls in ("tls", "ssl")
    },
}


@routes.get("/api/health/checks/protocol-listener/{protocol}")
async def protocol_listener(request: web.Request) -> web.Response:
    """GET /api/health/checks/protocol-listener/PROTOCOL
    (rabbit_mgmt_wm_health_check_protocol_listener): the name lowercased and normalised
    (``amqp091`` is ``amqp``, ``amqps`` is ``amqp/ssl``, ``management`` is ``http``...);
    200 ``{"status": "ok", "protocol": P}`` when a listener speaks it, else 503 "No active
    listener" with ``missing`` and the listeners' ``protocols`` (Leveret's: ``amqp``,
    ``amqp/ssl`` with TLS on, ``http``; RabbitMQ also has ``clustering``, its Erlang
    distribution port)."""
    name = erlang_lowercase(raw_segment(request, 5))
    protocol = PROTOCOL_ALIASES.get(name.decode("latin-1"))
    wanted = protocol.encode() if protocol is not None else name
    protocols = [listener["protocol"] for listener in listeners(request)]
    if wanted.decode("latin-1") in protocols:
        return json_response({"status": "ok", "protocol": wanted.decode()})
    # A name that is no UTF-8 (lowercasing bytes as Latin-1 can break it) is written with
    # U+FFFD, as RabbitMQ's JSON encoder writes it (the same for broken sequences; for an
    # overlong one RabbitMQ writes one U+FFFD where Python's decoder writes two).
    missing = wanted.decode("utf-8", "replace")
    return failure({"reason": "No active listener", "missing": missing, "protocols": protocols})


# -- certificates -----------------------------------------------------------------------

DAY = 86400
# rabbit_mgmt_wm_health_check_certificate_expiration: ?MONTHS_SECONDS is a twelfth of a year.
# Exact fractions: any integer is a valid WITHIN, and a float of 10**400 months would
# overflow (RabbitMQ's own float arithmetic fails there with a 500; the other units are
# integers in Erlang and answer).
UNIT_SECONDS: dict[bytes, Fraction] = {
    b"days": Fraction(DAY),
    b"weeks": Fraction(DAY * 7),
    b"months": Fraction(DAY * 365, 12),
    b"years": Fraction(DAY * 365),
}


def expiring(path: Path | None, deadline: Fraction) -> list[str]:
    """The end dates of the certificates in the PEM file ``path`` that end before
    ``deadline``, as RabbitMQ writes them ("~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w", UTC).
    Other PEM entries (a key in the same file) are not certificates and are passed over."""
    if path is None:
        return []
    try:
        certificates = x509.load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        return []  # the broker loaded it at start; an unreadable one is not ours to judge
    found = []
    for certificate in certificates:
        at = certificate.not_valid_after_utc
        if int(at.timestamp()) < deadline:
            found.append(
                f"{at.year}-{at.month:02}-{at.day:02} {at.hour}:{at.minute:02}:{at.second:02}"
            )
    return found


@routes.get("/api/health/checks/certificate-expiration/{within:[^/]*}/{unit}")
async def certificate_expiration(request: web.Request) -> web.Response:
    """GET /api/health/checks/certificate-expiration/WITHIN/UNIT
    (rabbit_mgmt_wm_health_check_certificate_expiration): whether the certificate or CA file
    of a TLS listener ends within WITHIN days, weeks, months or years. 400 "Invalid
    expiration value." when WITHIN is no integer (checked first, even an empty one), 400
    "Time unit not recognised..." for another unit (any case); 200 ``{"status": "ok"}``;
    503 "Certificates expiring" with the listener and the dates (from the source: the
    local RabbitMQ has no TLS listener to observe it with)."""
    within = erlang_integer(raw_segment(request, 5))
    if within is None:
        raise bad_request("Invalid expiration value.")
    unit = UNIT_SECONDS.get(erlang_lowercase(raw_segment(request, 6)))
    if unit is None:
        raise bad_request("Time unit not recognised. Supported units: days, weeks, months, years.")
    server = server_of(request)
    config = server.config
    deadline = int(time.time()) + within * unit
    expired = []
    for listener in listeners(request):
        if listener["protocol"] != "amqp/ssl":  # the one listener with certificates
            continue
        cert, ca = config.tls_cert, config.tls_ca
        cert_ends, ca_ends = expiring(cert, deadline), expiring(ca, deadline)
        if cert_ends or ca_ends:
            expired.append(
                {
                    "node": views.NODE,
                    "protocol": listener["protocol"],
                    "interface": listener["ip_address"],
                    "port": listener["port"],
                    "certfile": str(cert) if cert is not None else None,
                    "cacertfile": str(ca) if ca is not None else None,
                    "certfile_expires_on": cert_ends,
                    "cacertfile_expires_on": ca_ends,
                }
            )
    if expired:
        return failure({"reason": "Certificates expiring", "expired": expired})
    return json_response({"status": "ok"})


# -- for the web page -------------------------------------------------------------------


@routes.get("/api/extensions")
async def extensions(request: web.Request) -> web.Response:
    """GET /api/extensions (rabbit_mgmt_wm_extensions): the scripts of plugins that extend
    the management UI. RabbitMQ lists its own ``dispatcher.js`` (rabbit_mgmt_dispatcher's
    web_ui/0) besides any plugin's; Leveret's page is its own and loads none, so none."""
    return json_response([])


@routes.get("/api/auth")
async def auth(request: web.Request) -> web.Response:
    """GET /api/auth (rabbit_mgmt_wm_auth, as in 3.10.8): the OAuth 2 (UAA) login settings
    of the management UI. Leveret has basic authentication only. Served without
    credentials, as RabbitMQ serves it (its login page asks before logging in)."""
    return json_response({"enable_uaa": False, "uaa_client_id": "", "uaa_location": ""})
