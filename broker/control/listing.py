"""The ``list_*`` commands: RabbitMQ's info keys, read from the management API's views.

Each object is shown through the same view the management API serves
(:mod:`leveret.management.views`), so a count means the same thing in both; an info key
names a field of that view (RabbitMQ's key names, rabbitmq_cli's ``list_*_command.ex``).
Where RabbitMQ shows an Erlang pid (a connection's or channel's ``pid``, a consumer's
``channel_pid``, a queue's ``owner_pid``) Leveret shows the connection or channel name,
which ``close_connection`` takes. Keys Leveret has no value for (Erlang memory, mirrors,
disk reads) are refused as unsupported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.control.endpoint import EX_USAGE, ControlError

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.node.vhost import VHost
    from leveret.wire.connection import Connection

Row = dict[str, Any]
Getter = Callable[[Row], Any]


def field(*path: str) -> Getter:
    """The value at ``path`` in a view ('' when absent: RabbitMQ prints nothing)."""

    def get(view: Row) -> Any:
        value: Any = view
        for part in path:
            if not isinstance(value, dict) or value.get(part) is None:
                return ""
            value = value[part]
        return value

    return get


def same(*names: str) -> dict[str, Getter]:
    """Keys that are the view's fields of the same name."""
    return {name: field(name) for name in names}


@dataclass(frozen=True)
class Kind:
    """One ``list_*`` command: its info keys and its default columns."""

    what: str  # "queues": the banner's "Listing queues ..."
    keys: dict[str, Getter]
    default: tuple[str, ...]
    per_vhost: bool = True
    banner: str = ""  # the line before the rows ("": "Listing <what> ...")

    def columns(self, asked: Sequence[str]) -> list[str]:
        """The columns asked for (the default when none), each a known info key."""
        columns = list(asked) or list(self.default)
        unknown = [c for c in columns if c not in self.keys]
        if unknown:
            # rabbitmq_cli's InfoKeys.validate_info_keys/2 wording.
            raise ControlError(
                f"Info key(s) {','.join(unknown)} are not supported; "
                f"supported info keys: {', '.join(self.keys)}",
                EX_USAGE,
            )
        return columns


QUEUES = Kind(
    "queues",
    {
        **same("name", "durable", "auto_delete", "arguments", "policy", "exclusive"),
        "owner_pid": field("owner_pid_details", "name"),
        **same(
            "exclusive_consumer_tag",
            "messages_ready",
            "messages_unacknowledged",
            "messages",
            "messages_ready_ram",
            "messages_unacknowledged_ram",
            "messages_ram",
            "message_bytes",
            "message_bytes_ready",
            "message_bytes_unacknowledged",
            "consumers",
            "state",
            "type",
            "operator_policy",
            "effective_policy_definition",
            "single_active_consumer_tag",
            "node",
        ),
    },
    ("name", "messages"),
)
EXCHANGES = Kind(
    "exchanges",
    same("name", "type", "durable", "auto_delete", "internal", "arguments", "policy"),
    ("name", "type"),
)
BINDINGS = Kind(
    "bindings",
    {
        "source_name": field("source"),
        "source_kind": lambda view: "exchange",
        "destination_name": field("destination"),
        "destination_kind": field("destination_type"),
        "routing_key": field("routing_key"),
        "arguments": field("arguments"),
    },
    (
        "source_name",
        "source_kind",
        "destination_name",
        "destination_kind",
        "routing_key",
        "arguments",
    ),
)
CONNECTIONS = Kind(
    "connections",
    {
        "pid": field("name"),
        **same(
            "name",
            "user",
            "vhost",
            "host",
            "port",
            "peer_host",
            "peer_port",
            "state",
            "channels",
            "protocol",
            "ssl",
            "auth_mechanism",
            "frame_max",
            "channel_max",
            "timeout",
            "client_properties",
            "connected_at",
            "type",
            "node",
        ),
    },
    ("user", "peer_host", "peer_port", "state"),
    per_vhost=False,
)
CHANNELS = Kind(
    "channels",
    {
        "pid": field("name"),
        "connection": field("connection_details", "name"),
        **same(
            "name",
            "number",
            "user",
            "vhost",
            "transactional",
            "confirm",
            "consumer_count",
            "messages_unacknowledged",
            "messages_unconfirmed",
            "messages_uncommitted",
            "acks_uncommitted",
            "prefetch_count",
            "global_prefetch_count",
            "state",
            "node",
        ),
    },
    ("pid", "user", "consumer_count", "messages_unacknowledged"),
    per_vhost=False,
)
CONSUMERS = Kind(
    "consumers",
    {
        "queue_name": field("queue", "name"),
        "channel_pid": field("channel_details", "name"),
        **same(
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
            "activity_status",
            "arguments",
            "exclusive",
            "priority",
        ),
    },
    (
        "queue_name",
        "channel_pid",
        "consumer_tag",
        "ack_required",
        "prefetch_count",
        "active",
        "arguments",
    ),
)
USERS = Kind("users", same("user", "tags"), ("user", "tags"), per_vhost=False)
VHOSTS = Kind(
    "vhosts",
    same(
        "name",
        "description",
        "tags",
        "default_queue_type",
        "tracing",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
    ),
    ("name",),
    per_vhost=False,
)
PERMISSIONS = Kind(
    "permissions",
    same("user", "configure", "write", "read"),
    ("user", "configure", "write", "read"),
)
POLICIES = Kind(
    "policies",
    {**same("vhost", "name", "pattern", "definition", "priority"), "apply_to": field("apply-to")},
    ("vhost", "name", "pattern", "apply_to", "definition", "priority"),
)
# list_parameters (list_parameters_command.ex): the vhost's runtime parameters, as
# GET /api/parameters serves them (VHost.runtime_parameters).
PARAMETERS = Kind("parameters", same("component", "name", "value"), ("component", "name", "value"))
# list_topic_permissions (list_topic_permissions_command.ex).
TOPIC_PERMISSIONS = Kind(
    "topic_permissions",
    same("user", "exchange", "write", "read"),
    ("user", "exchange", "write", "read"),
)

# shovel_status (rabbitmq_shovel's ShovelStatusCommand): its default columns are the
# table's header in 3.10.8, the others its JSON keys.
SHOVELS = Kind(
    "shovels",
    same(
        "destination",
        "destination_protocol",
        "destination_queue",
        "destination_exchange",
        "destination_exchange_key",
        "last_changed",
        "name",
        "source",
        "source_protocol",
        "source_queue",
        "source_exchange",
        "source_exchange_key",
        "state",
        "termination_reason",
        "type",
        "vhost",
    ),
    (
        "destination",
        "last_changed",
        "name",
        "source",
        "state",
        "termination_reason",
        "type",
        "vhost",
    ),
    per_vhost=False,
    banner="Shovel status on node {node}",
)

KINDS = {
    f"list_{kind.what}": kind
    for kind in (
        QUEUES,
        EXCHANGES,
        BINDINGS,
        CONNECTIONS,
        CHANNELS,
        CONSUMERS,
        USERS,
        VHOSTS,
        PERMISSIONS,
        POLICIES,
        PARAMETERS,
        TOPIC_PERMISSIONS,
    )
}
KINDS["shovel_status"] = SHOVELS


def _queues(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    from leveret.management.state import state_of
    from leveret.management.topology import queue_item, unacked_bytes

    state_of(server).sampler.refresh()  # rates of queues it has not seen yet
    sizes = unacked_bytes(server)
    for queue in list(vhost.queues.values()):
        yield queue_item(server, vhost, queue, sizes)


def _exchanges(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    from leveret.management.topology import exchange_item

    for exchange in list(vhost.projection.exchanges.values()):
        yield exchange_item(server, vhost, exchange)


def _bindings(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    from leveret.management.topology import all_bindings
    from leveret.management.views import binding_view

    for binding in all_bindings(vhost):
        yield binding_view(vhost.name, binding)


def _connections(server: ServerState[Connection]) -> list[Connection]:
    """Open connections (past the handshake), a snapshot."""
    return [conn for conn in list(server.connections) if conn.vhost is not None]


def _connection_views(server: ServerState[Connection], vhost: VHost | None) -> Iterator[Row]:
    from leveret.management.clients import connection_state
    from leveret.management.views import connection_view

    for conn in _connections(server):
        yield connection_view(conn, connection_state(conn))


def _channels(server: ServerState[Connection], vhost: VHost | None) -> Iterator[Row]:
    from leveret.management.views import channel_view

    for conn in _connections(server):
        for channel in list(conn.channels.values()):
            yield channel_view(conn, channel)


def _consumers(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    from leveret.management.views import consumer_view

    for conn in _connections(server):
        if conn.vhost is vhost:
            for channel in list(conn.channels.values()):
                for consumer in list(channel.consumers.values()):
                    yield consumer_view(conn, consumer, vhost.name)


def _users(server: ServerState[Connection], vhost: VHost | None) -> Iterator[Row]:
    for user in list(server.access.users.values()):
        yield {"user": user.name, "tags": list(user.tags)}


def _vhosts(server: ServerState[Connection], vhost: VHost | None) -> Iterator[Row]:
    from leveret.management.api import vhost_item

    for name in sorted(server.vhosts):
        if name in server.vhosts:
            yield vhost_item(server, name)


def _permissions(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    from leveret.management.views import permission_view

    for (user, host), permission in sorted(server.access.permissions.items()):
        if host == vhost.name:
            yield permission_view(user, host, permission)


def _policies(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    for policy in sorted(vhost.policies.values(), key=lambda p: p.name):
        yield policy.to_json()


def _parameters(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    yield from server.runtime_parameters(vhost.name)


# A shovel's status fields (GET /api/shovels) by ShovelStatusCommand's names.
SHOVEL_KEYS = {
    "dest_uri": "destination",
    "dest_protocol": "destination_protocol",
    "dest_queue": "destination_queue",
    "dest_exchange": "destination_exchange",
    "dest_exchange_key": "destination_exchange_key",
    "timestamp": "last_changed",
    "src_uri": "source",
    "src_protocol": "source_protocol",
    "src_queue": "source_queue",
    "src_exchange": "source_exchange",
    "src_exchange_key": "source_exchange_key",
    "reason": "termination_reason",
}


def _shovels(server: ServerState[Connection], vhost: None) -> Iterator[Row]:
    for status in server.shovels.status():
        yield {SHOVEL_KEYS.get(key, key): value for key, value in status.items()}


def _topic_permissions(server: ServerState[Connection], vhost: VHost) -> Iterator[Row]:
    yield from server.access.topic_permission_rows(vhost=vhost.name)


# Where each listing's views come from: the management API's view of each object, made
# one at a time (the caller sends them in batches, a turn of the loop apart), from a
# snapshot of the lists, so changes during the listing cannot break it.
SOURCES: dict[str, Callable[[ServerState[Connection], Any], Iterator[Row]]] = {
    "queues": _queues,
    "exchanges": _exchanges,
    "bindings": _bindings,
    "connections": _connection_views,
    "channels": _channels,
    "consumers": _consumers,
    "users": _users,
    "vhosts": _vhosts,
    "permissions": _permissions,
    "policies": _policies,
    "parameters": _parameters,
    "topic_permissions": _topic_permissions,
    "shovels": _shovels,
}


def rows(
    server: ServerState[Connection], kind: Kind, vhost: VHost | None, columns: list[str]
) -> Iterator[Row]:
    """The listing's rows: the asked info keys of each view, in the asked order."""
    getters = [(column, kind.keys[column]) for column in columns]
    for view in SOURCES[kind.what](server, vhost):
        yield {column: get(view) for column, get in getters}
