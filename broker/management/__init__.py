"""RabbitMQ-compatible management HTTP API, Prometheus metrics and a small web page.

A subset of RabbitMQ's management plugin (deps/rabbitmq_management in rabbitmq-server,
whose priv/www/api/index.html documents the API) with the same paths, JSON field names,
status codes and error bodies, so ``rabbitmqadmin``, HTTP clients written for RabbitMQ
and its ``definitions.json`` files work unchanged; the Prometheus listener serves
rabbitmq_prometheus's endpoints and families. Modules:

- :mod:`.app`: the aiohttp application, auth middleware, :func:`start_management`;
- :mod:`.access`: basic auth, management tags, vhost visibility;
- :mod:`.api`: overview, nodes, health checks, vhosts, users, permissions;
- :mod:`.clients`: connections, channels, consumers;
- :mod:`.topology`: exchanges, queues, bindings; :mod:`.messages`: purge, get, publish;
- :mod:`.actions`: vhost, user, permission changes and the definitions endpoints;
- :mod:`.definitions`: definitions.json import and export (``--load-definitions``);
- :mod:`.views`: JSON shapes; :mod:`.query`: sort, columns, pagination;
- :mod:`.stats`: counters and rates; :mod:`.node`: ``/api/nodes``, the process's figures;
- :mod:`.prometheus`: the Prometheus listener; :mod:`.metrics`, :mod:`.client_metrics`:
  rabbitmq_prometheus's families; :mod:`.parameters`: ``/api/parameters``;
- :mod:`.page`: the dashboard at ``/`` (``static/``).

Every handler reads and changes the shared state (:class:`leveret.node.state.ServerState`:
vhosts, access control, counters, connections), which the server hands to
:func:`start_management`; nothing here imports :mod:`leveret.server`, which starts these
listeners. Views may read wire types (connections, channels): management sits above the
wire. Usage, on the broker's event loop::

    handle = await start_management(server.state, "127.0.0.1", 15672)
    ...
    await handle.close()

Rule at the door: the management API is an operator package, above the wire: it may import
:mod:`leveret.wire`, :mod:`leveret.session`, :mod:`leveret.node`, :mod:`leveret.trace`,
:mod:`leveret.faults`, never :mod:`leveret.server`, which starts it and hands it the
shared state; only the server and :mod:`leveret.control` import it.
"""

from typing import TYPE_CHECKING, Any

from leveret.management.definitions import (
    DefinitionsError,
    export_definitions,
    load_definitions,
    load_definitions_file,
)

if TYPE_CHECKING:
    from leveret.management.app import ManagementHandle, build_app, start_management

_LAZY = {"ManagementHandle", "build_app", "start_management"}


def __getattr__(name: str) -> Any:
    # The HTTP server (and aiohttp) is imported only when asked for, so loading
    # definitions at start-up costs no aiohttp import.
    if name in _LAZY:
        from leveret.management import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DefinitionsError",
    "ManagementHandle",
    "build_app",
    "export_definitions",
    "load_definitions",
    "load_definitions_file",
    "start_management",
]
