"""Helpers of the definitions round-trip tests: a rich set of definitions built through the
management API of either broker (Leveret or a real RabbitMQ 3.10.8), under names of the
test's own, and the exports' objects keyed for an object-by-object comparison."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from tests.integration.helpers import Http

# Each section's objects are keyed by what names them in the broker (RabbitMQ's own keys:
# rabbit_definitions:add_*), so that two exports compare object by object whatever order
# each broker lists them in.
KEYS: dict[str, Callable[[dict[str, Any]], tuple[Any, ...]]] = {
    "users": lambda o: (o["name"],),
    "vhosts": lambda o: (o["name"],),
    "permissions": lambda o: (o["user"], o["vhost"]),
    "topic_permissions": lambda o: (o["user"], o["vhost"], o["exchange"]),
    "parameters": lambda o: (o.get("vhost"), o["component"], o["name"]),
    "global_parameters": lambda o: (o["name"],),
    "policies": lambda o: (o.get("vhost"), o["name"]),
    "exchanges": lambda o: (o.get("vhost"), o["name"]),
    "queues": lambda o: (o.get("vhost"), o["name"]),
    "bindings": lambda o: (
        o.get("vhost"),
        o["source"],
        o["destination_type"],
        o["destination"],
        o["routing_key"],
        json.dumps(o["arguments"], sort_keys=True),
    ),
}
SECTIONS = tuple(KEYS)

PASSWORDS = {
    "admin": "adm1n-pw",
    "app": "app-pw-ü",
    "ops": "0ps",
    "sha512": "s512-pw",
    "md5": "md5-pw",
}
# The users put with a hash of another of RabbitMQ's hashing modules than SHA-256.
HASHED = {
    "sha512": "rabbit_password_hashing_sha512",
    "md5": "rabbit_password_hashing_md5",
}


def rabbit_hash(password: str, algorithm: str, salt: bytes = b"\x90\x8d\xc6\x0a") -> str:
    """rabbit_password:hash/2 of ``algorithm`` (``sha256``, ``sha512``, ``md5``), written
    out independently of the broker: base64(salt ++ digest(salt ++ password))."""
    digest = hashlib.new(algorithm, salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def quoted(name: str) -> str:
    """A path segment of the management API (``/`` as ``%2F``)."""
    return urllib.parse.quote(name, safe="")


class Names:
    """The names of one test's objects: vhosts and users start with ``prefix`` (a broker
    shared with other people is only ever touched under it)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.main = f"{prefix}-main"
        self.qq = f"{prefix}-qq"
        # Where a single vhost's definitions are loaded (not built).
        self.copy = f"{prefix}-copy"
        self.vhosts = (self.main, self.qq, self.copy)
        self.users = {role: f"{prefix}-{role}" for role in PASSWORDS}

    def mine(self, section: str, item: dict[str, Any]) -> bool:
        """Whether an exported object belongs to this test (shovels are left out: their
        round trip is tests/integration/test_shovel_definitions.py's)."""
        if section == "global_parameters":
            return False
        if section == "users":
            return item["name"] in self.users.values()
        if section == "vhosts":
            return item["name"] in self.vhosts
        if section == "parameters" and item.get("component") == "shovel":
            return False
        return item.get("vhost") in self.vhosts


def put(api: Http, path: str, body: Any) -> None:
    """A PUT/POST that must succeed."""
    status, answer = api("PUT", path, body)
    assert status in (201, 204), (path, status, answer)


def build(api: Http, names: Names, plugins: bool = False) -> None:
    """Users with passwords, tags and limits; two vhosts with descriptions, tags and a default
    queue type; permissions and topic permissions; policies, operator policies and vhost
    limits; exchanges of every type with arguments (an alternate exchange, an internal one,
    an auto-delete one); classic, quorum and stream queues with arguments; queue and
    exchange-to-exchange bindings with arguments. Only through the management API, so
    that it builds the same on Leveret and RabbitMQ. ``plugins``: the exchange types of
    plugins the RabbitMQ under test lacks too (x-delayed-message, x-rtopic)."""
    main, qq = names.main, names.qq
    users = names.users
    put(
        api,
        f"/api/users/{users['admin']}",
        {"password": PASSWORDS["admin"], "tags": "administrator"},
    )
    put(
        api,
        f"/api/users/{users['app']}",
        {"password": PASSWORDS["app"], "tags": "monitoring,custom-tag"},
    )
    put(api, f"/api/users/{users['ops']}", {"password": PASSWORDS["ops"], "tags": ""})
    put(api, f"/api/user-limits/{users['ops']}/max-connections", {"value": 7})
    for role, algorithm in HASHED.items():
        password_hash = rabbit_hash(PASSWORDS[role], role)
        body = {"password_hash": password_hash, "hashing_algorithm": algorithm, "tags": ""}
        put(api, f"/api/users/{users[role]}", body)
    put(api, f"/api/vhosts/{quoted(main)}", {"description": "Main shop", "tags": "production,eu"})
    put(api, f"/api/vhosts/{quoted(qq)}", {"description": "", "default_queue_type": "quorum"})
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    for vhost in (main, qq):
        for user in (users["admin"], users["sha512"], users["md5"], "guest"):
            put(api, f"/api/permissions/{quoted(vhost)}/{user}", everything)
    put(
        api,
        f"/api/permissions/{quoted(main)}/{users['app']}",
        {"configure": "^app\\.", "write": "^(app|orders)\\.", "read": ".*"},
    )
    put(
        api,
        f"/api/topic-permissions/{quoted(main)}/{users['app']}",
        {"exchange": "amq.topic", "write": "^orders\\.", "read": ".*"},
    )
    put(
        api,
        f"/api/topic-permissions/{quoted(main)}/{users['app']}",
        {"exchange": "orders.topic", "write": "^eu\\.", "read": "^eu\\."},
    )
    put(
        api,
        f"/api/policies/{quoted(main)}/ttl",
        {
            "pattern": "^ttl\\.",
            "definition": {"message-ttl": 60000, "max-length": 100},
            "priority": 3,
            "apply-to": "queues",
        },
    )
    put(
        api,
        f"/api/policies/{quoted(main)}/ae",
        {
            "pattern": "^policy-ae$",
            "definition": {"alternate-exchange": "orders.unrouted"},
            "apply-to": "exchanges",
        },
    )
    put(
        api,
        f"/api/policies/{quoted(qq)}/mirrored",
        {
            "pattern": "^mirrored\\.",
            "definition": {
                "ha-mode": "exactly",
                "ha-params": 2,
                "ha-sync-mode": "automatic",
                "queue-mode": "lazy",
                "queue-master-locator": "min-masters",
            },
            "priority": 0,
            "apply-to": "queues",
        },
    )
    put(
        api,
        f"/api/policies/{quoted(qq)}/streams",
        {
            "pattern": "^work\\.stream",
            "definition": {"max-age": "1h", "stream-max-segment-size-bytes": 500000},
            "priority": 2,
            "apply-to": "queues",
        },
    )
    put(
        api,
        f"/api/operator-policies/{quoted(main)}/cap",
        {
            "pattern": ".*",
            "definition": {"max-length": 100000},
            "priority": 1,
            "apply-to": "queues",
        },
    )
    put(api, f"/api/vhost-limits/{quoted(main)}/max-connections", {"value": 50})
    put(api, f"/api/vhost-limits/{quoted(main)}/max-queues", {"value": 500})
    exchanges: list[tuple[str, str, dict[str, Any]]] = [
        (
            "orders.direct",
            "direct",
            {"durable": True, "arguments": {"alternate-exchange": "orders.unrouted"}},
        ),
        ("orders.unrouted", "fanout", {"durable": True}),
        ("orders.topic", "topic", {"durable": True}),
        ("orders.headers", "headers", {"durable": True, "arguments": {"x-custom": "kept"}}),
        (
            "orders.hash",
            "x-consistent-hash",
            {"durable": True, "arguments": {"hash-header": "shard"}},
        ),
        ("orders.internal", "topic", {"durable": True, "internal": True}),
        ("orders.transient", "direct", {"durable": False, "auto_delete": True}),
        ("policy-ae", "direct", {"durable": True}),
    ]
    if plugins:
        exchanges += [
            ("orders.delayed", "x-delayed-message", {"arguments": {"x-delayed-type": "topic"}}),
            ("orders.rtopic", "x-rtopic", {}),
        ]
    for name, kind, extra in exchanges:
        body = {
            "type": kind,
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
        body.update(extra)
        put(api, f"/api/exchanges/{quoted(main)}/{quoted(name)}", body)
    queues: list[tuple[str, str, dict[str, Any]]] = [
        (
            main,
            "orders.created",
            {
                "x-message-ttl": 30000,
                "x-dead-letter-exchange": "orders.unrouted",
                "x-dead-letter-routing-key": "dead",
                "x-max-length": 1000,
                "x-overflow": "reject-publish",
            },
        ),
        (main, "orders.dead", {"x-queue-mode": "lazy"}),
        (main, "orders.priority", {"x-max-priority": 10, "x-expires": 3600000}),
        (main, "ttl.short", {}),
        (
            main,
            "orders.quorum",
            {"x-queue-type": "quorum", "x-delivery-limit": 5, "x-max-length-bytes": 1048576},
        ),
        (
            main,
            "orders.stream",
            {
                "x-queue-type": "stream",
                "x-max-age": "7D",
                "x-stream-max-segment-size-bytes": 1000000,
            },
        ),
        (main, "shard.1", {}),
        (main, "shard.2", {}),
        (qq, "work", {"x-queue-type": "quorum"}),
        (qq, "work.classic", {"x-queue-type": "classic", "x-single-active-consumer": True}),
        # Every other argument a RabbitMQ 3.10.8 queue of each type takes.
        (
            qq,
            "work.quorum-all",
            {
                "x-queue-type": "quorum",
                "x-dead-letter-exchange": "dlx",
                "x-dead-letter-routing-key": "dead.work",
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
                "x-expires": 86400000,
                "x-message-ttl": 1000,
                "x-max-length": 10,
                "x-max-in-memory-length": 5,
                "x-max-in-memory-bytes": 4096,
                "x-quorum-initial-group-size": 1,
                "x-queue-leader-locator": "balanced",
                "x-single-active-consumer": False,
            },
        ),
        (
            qq,
            "work.classic-all",
            {
                "x-queue-type": "classic",
                "x-queue-version": 2,
                "x-queue-master-locator": "min-masters",
                "x-max-length-bytes": 1000000,
                "x-overflow": "reject-publish-dlx",
                "x-custom-argument": "kept as it is",
            },
        ),
        (
            qq,
            "work.stream-all",
            {
                "x-queue-type": "stream",
                "x-max-length-bytes": 100000000,
                "x-initial-cluster-size": 1,
                "x-queue-leader-locator": "client-local",
            },
        ),
    ]
    for vhost, name, arguments in queues:
        put(
            api,
            f"/api/queues/{quoted(vhost)}/{quoted(name)}",
            {"durable": True, "auto_delete": False, "arguments": arguments},
        )
    put(
        api,
        f"/api/queues/{quoted(main)}/transient.q",
        {"durable": False, "auto_delete": True, "arguments": {}},
    )
    bindings: list[tuple[str, str, str, str, dict[str, Any]]] = [
        ("orders.direct", "q", "orders.created", "created", {}),
        ("orders.unrouted", "q", "orders.dead", "", {}),
        ("orders.topic", "q", "orders.priority", "eu.#", {}),
        ("orders.topic", "e", "orders.internal", "eu.*.vip", {}),
        ("orders.internal", "q", "orders.quorum", "#", {}),
        ("orders.topic", "e", "orders.headers", "#", {"x-note": "e2e"}),
        (
            "orders.headers",
            "q",
            "orders.stream",
            "",
            {"x-match": "any", "kind": "email", "level": 3},
        ),
        ("orders.hash", "q", "shard.1", "1", {}),
        ("orders.hash", "q", "shard.2", "2", {}),
        ("orders.transient", "q", "transient.q", "t", {}),
    ]
    if plugins:
        bindings += [
            ("orders.delayed", "q", "orders.priority", "later.#", {}),
            ("orders.rtopic", "e", "orders.topic", "eu.*", {}),
        ]
    for source, kind, destination, key, arguments in bindings:
        status, answer = api(
            "POST",
            f"/api/bindings/{quoted(main)}/e/{quoted(source)}/{kind}/{quoted(destination)}",
            {"routing_key": key, "arguments": arguments},
        )
        assert status == 201, (source, destination, status, answer)


def no_shovels(section: str, item: dict[str, Any]) -> bool:
    """Every object but shovels (tests/integration/test_shovel_definitions.py's)."""
    return not (section == "parameters" and item.get("component") == "shovel")


def objects(
    export: dict[str, Any], keep: Callable[[str, dict[str, Any]], bool] = no_shovels
) -> dict[str, dict[tuple[Any, ...], Any]]:
    """The objects of an export that ``keep`` keeps (a :meth:`Names.mine`: one test's),
    section by section, keyed by :data:`KEYS`."""
    out: dict[str, dict[tuple[Any, ...], Any]] = {}
    for section in SECTIONS:
        keyed = {}
        for item in export.get(section, []):
            if keep(section, item):
                keyed[KEYS[section](item)] = copy.deepcopy(item)
        out[section] = keyed
    return out


def only(export: dict[str, Any], keep: Callable[[str, dict[str, Any]], bool]) -> dict[str, Any]:
    """An export with only the objects ``keep`` keeps (what may go into a shared broker)."""
    return {
        key: [item for item in value if keep(key, item)] if key in KEYS else value
        for key, value in export.items()
    }


def differences(
    left: dict[str, dict[tuple[Any, ...], Any]], right: dict[str, dict[tuple[Any, ...], Any]]
) -> list[str]:
    """One line per object that is missing on a side or differs (with the differing
    fields), for an assertion message that says what to fix."""
    lines = []
    for section in SECTIONS:
        a, b = left.get(section, {}), right.get(section, {})
        for key in sorted(set(a) | set(b), key=repr):
            if key not in b:
                lines.append(f"{section} {key}: only on the left")
            elif key not in a:
                lines.append(f"{section} {key}: only on the right")
            elif a[key] != b[key]:
                fields = sorted(
                    f for f in set(a[key]) | set(b[key]) if a[key].get(f) != b[key].get(f)
                )
                shown = ", ".join(f"{f}: {a[key].get(f)!r} != {b[key].get(f)!r}" for f in fields)
                lines.append(f"{section} {key}: {shown}")
    return lines


def drop(export: dict[str, Any], section: str, fields: Iterable[str]) -> None:
    """Remove ``fields`` from every object of ``section`` (fields one broker does not have)."""
    for item in export.get(section, []):
        for field in fields:
            item.pop(field, None)


# A RabbitMQ 3.10.8 export (shaped as one; the values as RabbitMQ writes them) with what
# Leveret cannot load next to what it can.
UNLOADABLE: dict[str, Any] = {
    "rabbit_version": "3.10.8",
    "rabbitmq_version": "3.10.8",
    "users": [
        {
            # RabbitMQ's rabbit_password:hashing_mod/1 takes any module named here.
            "name": "custom",
            "password_hash": "AAAAAA==",
            "hashing_algorithm": "my_company_password_hashing",
            "tags": ["administrator"],
            "limits": {},
        },
        {
            "name": "sha512",
            "password_hash": rabbit_hash(PASSWORDS["sha512"], "sha512"),
            "hashing_algorithm": "rabbit_password_hashing_sha512",
            "tags": [],
            "limits": {},
        },
    ],
    "vhosts": [{"name": "fed"}],
    "permissions": [
        {"user": "custom", "vhost": "fed", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "sha512", "vhost": "fed", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "guest", "vhost": "fed", "configure": ".*", "write": ".*", "read": ".*"},
    ],
    "topic_permissions": [
        {"user": "custom", "vhost": "fed", "exchange": "amq.topic", "write": ".*", "read": ".*"}
    ],
    "parameters": [
        {
            "value": {"uri": "amqp://upstream", "expires": 3600000},
            "vhost": "fed",
            "component": "federation-upstream",
            "name": "up-1",
        },
        {
            "value": [{"upstream": "up-1"}],
            "vhost": "fed",
            "component": "federation-upstream-set",
            "name": "set-1",
        },
        {"value": {"x": 1}, "vhost": "fed", "component": "some-plugin", "name": "p"},
        {
            # A RabbitMQ shovel with an AMQP 1.0 end (rabbitmq_amqp1_0): 3.10.8 accepts it.
            "value": {
                "src-protocol": "amqp10",
                "src-uri": "amqp://",
                "src-address": "a",
                "dest-uri": "amqp://",
                "dest-queue": "b",
            },
            "vhost": "fed",
            "component": "shovel",
            "name": "to-amqp10",
        },
        {
            "value": {"max-queues": 10},
            "vhost": "fed",
            "component": "vhost-limits",
            "name": "limits",
        },
    ],
    "global_parameters": [
        {"name": "cluster_name", "value": "rabbit@prod"},
        {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-kRT2KchnsMUxa1eHlhdm-w"},
    ],
    "policies": [],
    "queues": [
        {"name": "q", "vhost": "fed", "durable": True, "auto_delete": False, "arguments": {}}
    ],
    "exchanges": [
        {
            "name": "jms",
            "vhost": "fed",
            "type": "x-jms-topic",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        },
        {
            "name": "recent",
            "vhost": "fed",
            "type": "x-recent-history",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {"x-recent-history-length": 10},
        },
        {
            "name": "fan",
            "vhost": "fed",
            "type": "fanout",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        },
    ],
    "bindings": [
        {
            "source": "jms",
            "vhost": "fed",
            "destination": "q",
            "destination_type": "queue",
            "routing_key": "k",
            "arguments": {},
        },
        {
            "source": "fan",
            "vhost": "fed",
            "destination": "recent",
            "destination_type": "exchange",
            "routing_key": "",
            "arguments": {},
        },
        {
            "source": "fan",
            "vhost": "fed",
            "destination": "q",
            "destination_type": "queue",
            "routing_key": "",
            "arguments": {},
        },
    ],
}
UNLOADABLE_LINES = [
    "skipped global parameter cluster_name: Leveret has no global parameters",
    "skipped global parameter internal_cluster_id: Leveret has no global parameters",
    "skipped user custom: Leveret has no password hashing module my_company_password_hashing",
    "skipped permission of user custom in vhost fed: user custom was skipped",
    "skipped topic permission of user custom in vhost fed: user custom was skipped",
    "skipped parameter federation-upstream/up-1 in vhost fed: Leveret has no federation",
    "skipped parameter federation-upstream-set/set-1 in vhost fed: Leveret has no federation",
    "skipped parameter some-plugin/p in vhost fed: Leveret has no component some-plugin",
    "skipped parameter shovel/to-amqp10 in vhost fed: Leveret's shovels speak AMQP 0-9-1 only "
    "(src-protocol amqp10)",
    "skipped exchange jms in vhost fed: Leveret has no exchange type x-jms-topic",
    "skipped exchange recent in vhost fed: Leveret has no exchange type x-recent-history",
    "skipped binding of exchange jms to queue q in vhost fed: exchange jms was skipped",
    "skipped binding of exchange fan to exchange recent in vhost fed: exchange recent was skipped",
]
