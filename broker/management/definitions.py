"""RabbitMQ definitions (``definitions.json``): export and import.

The format is rabbit_definitions.erl's (deps/rabbit/src): ``rabbit_version``, ``users``
(``password_hash``, ``hashing_algorithm``, ``tags``), ``vhosts``, ``permissions``,
``topic_permissions``, ``policies``, ``exchanges``, ``queues``, ``bindings``, ``parameters``
(of which Leveret knows the components in :data:`LOADABLE_COMPONENTS`), plus
``global_parameters``, which Leveret has no use for (exported empty). User limits are the
users' ``limits``.

What a RabbitMQ export holds that Leveret cannot load (a parameter of another component, a
global parameter, a user whose hash was made by none of RabbitMQ's own hashing modules, an
exchange of a type Leveret lacks, and what depends on those) is skipped and named in one
line per item (:class:`Skipped`): logged, and returned to the caller, which shows the lines
(``leveret ctl import_definitions``) or their count (POST /api/definitions, in a header).

Import follows rabbit_definitions:apply_defs/3: users, vhosts, permissions, topic
permissions, parameters, policies, then exchanges, queues and bindings; definitions are
merged into what exists, an object that exists with different properties is an error
(immutable objects) or is overwritten (users, permissions), the default exchange and
``amq.*`` exchanges and queues are skipped, and an error leaves what was already applied in
place. Export follows list_exchanges/0,
list_queues/0 and list_bindings/0: no default or ``amq.*`` exchanges, no exclusive queues,
no implicit default-exchange bindings (internal exchanges are exported, as RabbitMQ 3.10.8
does: observed).
"""

from __future__ import annotations

import html
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import leveret.management.ops as ops
import leveret.management.views as views
from leveret.exchanges.model import DestKind
from leveret.exchanges.policies import OPERATOR_POLICY_COMPONENT, PolicyError
from leveret.exchanges.policies import parse as parse_policy
from leveret.exchanges.types import parse_type
from leveret.management.errors import ApiError
from leveret.management.state import state_of
from leveret.node.arguments import queue_type
from leveret.node.auth import HASHING, Permission, TopicPermission, invalid_regexp
from leveret.node.errors import AMQPError
from leveret.node.fieldtable import amqp_json
from leveret.node.limits import VHOST_LIMITS_COMPONENT, LimitError, parse_limits
from leveret.node.shovel import SHOVEL_COMPONENT, ShovelError

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

log = logging.getLogger(__name__)

# RabbitMQ's own hashing modules; a user of another (a custom module) is skipped.
SUPPORTED_HASHING = tuple(HASHING)
# The runtime parameter components an import applies; a parameter of any other component is
# skipped with a line (why: :data:`MISSING_COMPONENTS`, else that Leveret has no such one).
LOADABLE_COMPONENTS = (VHOST_LIMITS_COMPONENT, OPERATOR_POLICY_COMPONENT, SHOVEL_COMPONENT)
# Components of RabbitMQ plugins a RabbitMQ export may hold, and what Leveret lacks for them.
MISSING_COMPONENTS = {
    "federation-upstream": "Leveret has no federation",
    "federation-upstream-set": "Leveret has no federation",
}

# The header of POST /api/definitions' 204 that counts the skipped items (absent: none).
SKIPPED_HEADER = "X-Leveret-Skipped-Definitions"


@dataclass
class Skipped:
    """What an import could not load, one line per item (``skipped parameter
    federation-upstream/up in vhost /: Leveret has no federation``), each logged as a
    warning as it is added; and the users and exchanges left out, so that what depends on
    them (permissions, bindings) is skipped and named too, across the several calls of one
    ``leveret ctl import_definitions``."""

    lines: list[str] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    exchanges: set[tuple[str, str]] = field(default_factory=set)

    def add(self, what: str, why: str) -> None:
        """Name one skipped item and why it was skipped."""
        line = f"skipped {what}: {why}"
        log.warning("definitions: %s", line)
        self.lines.append(line)

    def parameter(self, item: dict[str, Any], only: str | None) -> None:
        """A runtime parameter of a component Leveret does not apply."""
        component = str(item.get("component"))
        vhost = only if only is not None else item.get("vhost")
        why = MISSING_COMPONENTS.get(component, f"Leveret has no component {component}")
        self.add(f"parameter {component}/{item.get('name')} in vhost {vhost}", why)

    def user(self, name: str, algorithm: str) -> None:
        """A user whose password hash Leveret cannot check."""
        self.users.add(name)
        self.add(f"user {name}", f"Leveret has no password hashing module {algorithm}")

    def exchange(self, vhost: str, name: str, kind: str) -> None:
        """An exchange of a type Leveret does not have."""
        self.exchanges.add((vhost, name))
        self.add(f"exchange {name} in vhost {vhost}", f"Leveret has no exchange type {kind}")


class DefinitionsError(ValueError):
    """Definitions that cannot be applied; the reason is RabbitMQ's where it has one (a
    list where RabbitMQ's is an Erlang list, as ``["no_such_user", NAME]``)."""

    def __init__(self, reason: str | list[Any]) -> None:
        super().__init__(reason)
        self.reason = reason


# -- export -----------------------------------------------------------------------------


def export_definitions(server: ServerState[Connection], vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions (all of them, or one vhost's as
    GET /api/definitions/vhost gives them: no users, vhosts or permissions, and exchanges,
    queues and bindings without their ``vhost`` key)."""
    state = state_of(server)
    names = sorted(server.vhosts) if vhost is None else [vhost]
    exchanges, queues, bindings, policies, parameters = [], [], [], [], []
    for name in names:
        host = server.vhosts[name]
        parameters += server.runtime_parameters(name)
        policies += [p.to_json() for p in sorted(host.policies.values(), key=lambda p: p.name)]
        for exchange in host.projection.exchanges.values():
            if exchange.name == "" or exchange.name.startswith("amq."):
                continue
            item = views.exchange_view(name, exchange)
            del item["user_who_performed_action"]
            exchanges.append(item)
        for queue in host.queues.values():
            if queue.owner is not None:
                continue
            queues.append(
                {
                    "name": queue.name,
                    "vhost": name,
                    "type": queue_type(queue.arguments),
                    "durable": queue.durable,
                    "auto_delete": queue.auto_delete,
                    "arguments": amqp_json(queue.arguments),
                }
            )
        for binding in host.projection.bindings():
            item = views.binding_view(name, binding)
            del item["properties_key"]
            bindings.append(item)
    if vhost is not None:
        # Policies and parameters keep their vhost, as RabbitMQ 3.10.8 exports them
        # (observed; an import into a vhost puts them there whatever they name).
        for item in (*exchanges, *queues, *bindings):
            del item["vhost"]
        return {
            "rabbit_version": views.RABBITMQ_VERSION,
            "rabbitmq_version": views.RABBITMQ_VERSION,
            "parameters": parameters,
            "policies": policies,
            "queues": queues,
            "exchanges": exchanges,
            "bindings": bindings,
        }
    vhosts = []
    for name in names:
        meta = state.vhost_meta(name)
        vhosts.append(
            {
                "name": name,
                "description": meta.description,
                "tags": list(meta.tags),
                "default_queue_type": meta.default_queue_type,
                "limits": [],
                # RabbitMQ 3.10.8 imports the default queue type from the metadata only
                # (rabbit_definitions:add_vhost/2, observed), 3.11+ from either place.
                "metadata": {
                    "description": meta.description,
                    "tags": list(meta.tags),
                    "default_queue_type": meta.default_queue_type,
                },
            }
        )
    access = server.access
    return {
        "rabbit_version": views.RABBITMQ_VERSION,
        "rabbitmq_version": views.RABBITMQ_VERSION,
        "product_name": views.PRODUCT_NAME,
        "product_version": views.PRODUCT_VERSION,
        "users": [views.user_view(user) for user in access.users.values()],
        "vhosts": vhosts,
        "permissions": [
            views.permission_view(user, host, permission)
            for (user, host), permission in sorted(access.permissions.items())
        ],
        "topic_permissions": access.topic_permission_rows(),
        "parameters": parameters,
        "global_parameters": [],
        "policies": policies,
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }


# -- import -----------------------------------------------------------------------------


def _items(data: dict[str, Any], section: str) -> list[dict[str, Any]]:
    value = data.get(section)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DefinitionsError(f"'{section}' must be a list")
    return [item for item in value if isinstance(item, dict)]


def _tags(value: Any) -> list[str]:
    # 3.x exports tags as a list; before 3.9 (and in hand-written files) a comma-separated
    # string (rabbit_auth_backend_internal:put_user/3).
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list):
        return [str(t) for t in value]
    raise DefinitionsError(f"invalid tags {value!r}")


def _version(data: dict[str, Any]) -> tuple[int, ...]:
    text = str(data.get("rabbitmq_version") or data.get("rabbit_version") or "")
    parts = []
    for piece in text.split("."):
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _add_user(
    server: ServerState[Connection],
    item: dict[str, Any],
    version: tuple[int, ...],
    skipped: Skipped,
) -> None:
    name = item.get("name")
    if not isinstance(name, str):
        raise DefinitionsError("user without a name")
    algorithm = _hashing_algorithm(item, version)
    if algorithm is not None and algorithm not in SUPPORTED_HASHING:
        # A custom module (rabbit_password:hashing_mod/1 uses any): RabbitMQ loads the
        # hash as it is; Leveret could not check it (the user could never log in), so the
        # user is left out by name rather than loaded unusable.
        skipped.user(name, algorithm)
        return
    tags = _tags(item.get("tags"))
    # A user without ``limits`` keeps the ones it has (rabbit_auth_backend_internal:put_user).
    limits = _user_limits(name, item["limits"]) if "limits" in item else None
    if algorithm is None:
        server.access.add_user(name, password=str(item["password"]), tags=tags)
    else:
        password_hash = str(item.get("password_hash") or "")
        server.access.add_user(
            name, password_hash=password_hash, tags=tags, hashing_algorithm=algorithm
        )
    if limits is not None:
        server.access.set_user_limits(name, limits)


def _hashing_algorithm(item: dict[str, Any], version: tuple[int, ...]) -> str | None:
    """The algorithm of a user's ``password_hash`` (None: the user has a plain password)."""
    if "password" in item and "password_hash" not in item:
        return None
    algorithm = item.get("hashing_algorithm")
    if algorithm is None:
        # Files from before 3.6 carry MD5 hashes without saying so (put_user/3).
        return (
            "rabbit_password_hashing_md5"
            if version and version < (3, 6)
            else views.HASHING_ALGORITHM
        )
    return str(algorithm)


def _user_limits(name: str, value: Any) -> dict[str, int]:
    # RabbitMQ 3.10.8 answers 500 to a user's invalid limits; Leveret names the user.
    if not isinstance(value, dict):
        raise DefinitionsError(f"user '{name}': limits must be an object")
    try:
        return parse_limits(value, user=True)
    except LimitError as exc:
        raise DefinitionsError(f"user '{name}': {exc.reason}") from exc


def _add_parameters(
    server: ServerState[Connection], data: dict[str, Any], only: str | None, skipped: Skipped
) -> None:
    """The file's runtime parameters, but those of a component Leveret does not have and
    shovels with an AMQP 1.0 end, which are skipped and named."""
    for item in _items(data, "parameters"):
        if item.get("component") not in LOADABLE_COMPONENTS:
            skipped.parameter(item, only)
            continue
        protocol = _amqp10_end(item)
        if protocol is not None:
            where = f"parameter shovel/{item.get('name')} in vhost {only or item.get('vhost')}"
            skipped.add(where, f"Leveret's shovels speak AMQP 0-9-1 only ({protocol} amqp10)")
            continue
        _add_parameter(server, item, only)


def _amqp10_end(item: dict[str, Any]) -> str | None:
    """The key of a shovel's AMQP 1.0 end (``src-protocol``/``dest-protocol``), if any."""
    value = item.get("value")
    if item.get("component") != SHOVEL_COMPONENT or not isinstance(value, dict):
        return None
    for key in ("src-protocol", "dest-protocol"):
        if value.get(key) == "amqp10":
            return key
    return None


def _add_parameter(server: ServerState[Connection], item: dict[str, Any], only: str | None) -> None:
    """A runtime parameter of one of :data:`LOADABLE_COMPONENTS` (load_definitions skips,
    and names, the others). A refused value is RabbitMQ's validation text, escaped as the
    management plugin escapes reasons, with the parameter's vhost/component/name
    (rabbit_definitions, observed on 3.10.8)."""
    component = str(item.get("component"))
    vhost = only if only is not None else item.get("vhost")
    if not isinstance(vhost, str) or vhost not in server.vhosts:
        raise DefinitionsError(["no_such_vhost", str(vhost or "undefined")])
    name = str(item.get("name", ""))
    value = item.get("value")
    where = f" ({vhost}/{component}/{name})"
    if not isinstance(value, dict):
        raise DefinitionsError(f"vhost '{vhost}': {component} {name} must be an object")
    try:
        if component == OPERATOR_POLICY_COMPONENT and "priority" not in value:
            raise PolicyError(f'Validation failed\n\nKey "priority" not found in {name}\n')
        server.set_parameter(vhost, component, name, value)
    except (LimitError, PolicyError, ShovelError) as exc:
        raise DefinitionsError(html.escape(exc.reason, quote=False) + where) from exc


def _add_vhost(server: ServerState[Connection], item: dict[str, Any]) -> None:
    name = item.get("name")
    if not isinstance(name, str):
        raise DefinitionsError("vhost without a name")
    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    server.add_vhost(name)
    meta = state_of(server).vhost_meta(name)
    meta.description = str(item.get("description", metadata.get("description", meta.description)))
    meta.tags = _tags(item.get("tags", metadata.get("tags", meta.tags)))
    # 3.11+ exports it at the top, 3.10 keeps it in the metadata (and imports it from there).
    default_queue_type = item.get("default_queue_type") or metadata.get("default_queue_type")
    if default_queue_type:
        meta.default_queue_type = str(default_queue_type)


def _vhost_name(server: ServerState[Connection], item: dict[str, Any], only: str | None) -> str:
    name = only if only is not None else item.get("vhost")
    if not isinstance(name, str) or name not in server.vhosts:
        if name is None:
            raise DefinitionsError(
                "Virtual host does not exist and is not specified in definitions file."
            )
        raise DefinitionsError(
            f'Please create virtual host "{name}" prior to importing definitions.'
        )
    return name


def _grantee(server: ServerState[Connection], item: dict[str, Any]) -> tuple[str, str]:
    """The user and vhost a permission names (rabbit_definitions:add_permission/2 and
    add_topic_permission/2: 400 ``["no_such_user", U]`` or ``["no_such_vhost", V]``, observed
    on 3.10.8)."""
    user, host = item.get("user"), item.get("vhost")
    if not isinstance(user, str) or not isinstance(host, str):
        raise DefinitionsError("permission without user or vhost")
    if user not in server.access.users:
        raise DefinitionsError(["no_such_user", user])
    if host not in server.vhosts:
        raise DefinitionsError(["no_such_vhost", host])
    return user, host


def _add_topic_permission(server: ServerState[Connection], item: dict[str, Any]) -> None:
    user, host = _grantee(server, item)
    exchange, write, read = (item.get(key) for key in ("exchange", "write", "read"))
    if not isinstance(exchange, str) or not isinstance(write, str) or not isinstance(read, str):
        # RabbitMQ 3.10.8 answers "badarg" when one of them is missing.
        raise DefinitionsError("badarg")
    for pattern in (write, read):
        reason = invalid_regexp(pattern)
        if reason is not None:
            raise DefinitionsError(reason)
    server.access.set_topic_permission(user, host, exchange, TopicPermission(write, read))


def _of_skipped_user(
    server: ServerState[Connection], item: dict[str, Any], skipped: Skipped, what: str
) -> bool:
    """Whether a (topic) permission is of a user this import skipped (and is skipped too)."""
    user = item.get("user")
    if user not in skipped.users or user in server.access.users:
        return False
    skipped.add(f"{what} of user {user} in vhost {item.get('vhost')}", f"user {user} was skipped")
    return True


def _amqp_failure(exc: AMQPError) -> DefinitionsError:
    # rabbit_definitions:format/1: "~s: ~s" of the error name and explanation.
    from leveret.node.errors import NAMES

    return DefinitionsError(f"{NAMES.get(exc.code, 'error').lower()}: {exc.explanation}")


def _add_policies(server: ServerState[Connection], data: dict[str, Any], only: str | None) -> None:
    for item in _items(data, "policies"):
        vhost = _vhost_name(server, item, only)
        name = item.get("name")
        if not isinstance(name, str):
            raise DefinitionsError("policy without a name")
        try:
            policy = parse_policy(vhost, name, item)
        except PolicyError as exc:
            raise DefinitionsError(exc.reason.strip()) from exc
        server.set_policy(policy)


def _add_topology(
    server: ServerState[Connection], data: dict[str, Any], only: str | None, skipped: Skipped
) -> None:
    _add_policies(server, data, only)
    for item in _items(data, "exchanges"):
        host = server.vhosts[_vhost_name(server, item, only)]
        name = str(item.get("name", ""))
        if name == "" or name.startswith("amq."):
            log.warning("definitions: not importing exchange %r", name)
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind and parse_type(kind) is None:
            # A RabbitMQ plugin's type (x-jms-topic, x-recent-history, x-modulus-hash...):
            # RabbitMQ refuses the whole file without the plugin; Leveret names it.
            skipped.exchange(host.name, name, kind)
            continue
        ops.declare_exchange(
            host,
            name,
            str(item.get("type", "")),
            bool(item.get("durable", True)),
            bool(item.get("auto_delete", False)),
            bool(item.get("internal", False)),
            ops.json_arguments(item.get("arguments")),
        )
    for item in _items(data, "queues"):
        host = server.vhosts[_vhost_name(server, item, only)]
        name = str(item.get("name", ""))
        if name.startswith("amq."):
            log.warning("definitions: not importing queue %r", name)
            continue
        arguments = ops.json_arguments(item.get("arguments"))
        ops.declare_queue(
            host,
            name,
            bool(item.get("durable", True)),
            bool(item.get("auto_delete", False)),
            arguments,
        )
    for item in _items(data, "bindings"):
        host = server.vhosts[_vhost_name(server, item, only)]
        kind = DestKind.EXCHANGE if item.get("destination_type") == "exchange" else DestKind.QUEUE
        if _of_skipped_exchange(host.name, item, kind, skipped):
            continue
        ops.bind(
            host,
            str(item.get("source", "")),
            kind,
            str(item.get("destination", "")),
            str(item.get("routing_key", "")),
            ops.json_arguments(item.get("arguments")),
        )


def _of_skipped_exchange(
    vhost: str, item: dict[str, Any], kind: DestKind, skipped: Skipped
) -> bool:
    """Whether a binding is from or to an exchange this import skipped (and is skipped too)."""
    source, destination = str(item.get("source", "")), str(item.get("destination", ""))
    if (vhost, source) in skipped.exchanges:
        gone = source
    elif kind is DestKind.EXCHANGE and (vhost, destination) in skipped.exchanges:
        gone = destination
    else:
        return False
    to = "exchange" if kind is DestKind.EXCHANGE else "queue"
    skipped.add(
        f"binding of exchange {source} to {to} {destination} in vhost {vhost}",
        f"exchange {gone} was skipped",
    )
    return True


def load_definitions(
    server: ServerState[Connection],
    data: dict[str, Any],
    vhost: str | None = None,
    skipped: Skipped | None = None,
) -> Skipped:
    """Apply RabbitMQ definitions to ``server`` (all of them, or, with ``vhost``, the
    exchanges, queues and bindings of a single-vhost file into that vhost). Must run on the
    broker's event loop (queues are created on it). Raises :class:`DefinitionsError`.
    Returns what was skipped (added to ``skipped`` when given: one import in several
    calls)."""
    if skipped is None:
        skipped = Skipped()
    if not isinstance(data, dict):
        raise DefinitionsError("definitions must be a JSON object")
    for item in _items(data, "global_parameters"):
        # cluster_name, internal_cluster_id...: Leveret's cluster name is fixed.
        skipped.add(f"global parameter {item.get('name')}", "Leveret has no global parameters")
    try:
        if vhost is None:
            version = _version(data)
            for item in _items(data, "users"):
                _add_user(server, item, version, skipped)
            for item in _items(data, "vhosts"):
                _add_vhost(server, item)
            for item in _items(data, "permissions"):
                if _of_skipped_user(server, item, skipped, "permission"):
                    continue
                user, host = _grantee(server, item)
                server.access.set_permissions(
                    user,
                    host,
                    Permission(
                        str(item.get("configure", "")),
                        str(item.get("write", "")),
                        str(item.get("read", "")),
                    ),
                )
            for item in _items(data, "topic_permissions"):
                if not _of_skipped_user(server, item, skipped, "topic permission"):
                    _add_topic_permission(server, item)
        _add_parameters(server, data, vhost, skipped)
        _add_topology(server, data, vhost, skipped)
    except AMQPError as exc:
        raise _amqp_failure(exc) from exc
    except ApiError as exc:
        raise DefinitionsError(exc.reason) from exc
    return skipped


def load_definitions_file(server: ServerState[Connection], path: Path) -> None:
    """``--load-definitions PATH``: a definitions.json file, or a directory whose ``*.json``
    files are applied in name order (rabbit_definitions_import_local_filesystem). Raises
    :class:`DefinitionsError` with the file name for unreadable or invalid files."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DefinitionsError(f"{file}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise DefinitionsError(f"{file}: not valid JSON ({exc})") from exc
        try:
            skipped = load_definitions(server, data)
        except DefinitionsError as exc:
            raise DefinitionsError(f"{file}: {exc}") from exc
        log.info("loaded definitions from %s (items skipped: %d)", file, len(skipped.lines))
