"""What the node is using, read from the operating system when asked: the figures of
GET /api/nodes (rabbit_mgmt_wm_nodes) and of the node families on the Prometheus listener
(rabbitmq_prometheus's ``rabbitmq_process_*``, ``rabbitmq_disk_space_*``...).

RabbitMQ reads them from the Erlang VM and from the OS (rabbit_vm, file_handle_cache,
rabbit_disk_monitor); Leveret is one Python process, so each figure is the process's own:

- memory used: the resident set size, as RabbitMQ's default ``rss`` calculation strategy
  (``mem_calculation_strategy``) reads it; the limit and alarm are the watermark's;
- file descriptors: the entries of ``/proc/self/fd`` against the soft ``RLIMIT_NOFILE``;
- sockets: the AMQP connections' sockets (RabbitMQ counts the sockets its client
  connections obtain from file_handle_cache); their limit is what the process can hold:
  ``--max-connections`` when set, capped by the descriptors not used for anything else
  (RabbitMQ's is a fixed share of the descriptor limit, reserved at start-up, which
  Leveret does not reserve);
- run queue: the process's threads that are ready to run (state ``R`` in
  ``/proc/self/task``), the nearest thing to the Erlang schedulers' run queue;
- processors: the CPUs the process may run on (its affinity);
- uptime: since the broker was created (a broker started inside a test runs in a process
  that is older), in milliseconds.
"""

from __future__ import annotations

import os
import resource
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

import leveret.management.views as views
from leveret.management.api import contexts, exchange_types, server_of
from leveret.management.errors import not_found
from leveret.management.query import json_response, reply_list
from leveret.node.memory import resident_bytes

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

_TICKS = os.sysconf("SC_CLK_TCK")


def open_fds() -> int:
    """File descriptors the process holds."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def max_fds() -> int:
    """The soft limit on file descriptors."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 2**31 - 1


def run_queue() -> int:
    """Threads of the process ready to run."""
    ready = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        ready += state == b"R"
    return ready


def processors() -> int:
    """CPUs the process may run on."""
    return len(os.sched_getaffinity(0))


def sockets_total(server: ServerState[Connection], fds: int, fd_limit: int) -> int:
    """How many client sockets the process can hold: the descriptors it does not use for
    anything else, or ``--max-connections`` when that is lower."""
    room = fd_limit - (fds - len(server.connections))
    limit = server.config.max_connections
    return min(room, limit) if limit else room


def figures(server: ServerState[Connection]) -> dict[str, Any]:
    """The node's figures, with /api/nodes's field names (``disk_free`` left out only
    when it cannot be read)."""
    memory, disk, churn = server.memory, server.disk, server.churn
    fds, fd_limit = open_fds(), max_fds()
    rss = resident_bytes()
    node: dict[str, Any] = {
        "os_pid": str(os.getpid()),  # a string in RabbitMQ's answer too
        "mem_used": rss if rss is not None else memory.used,
        "mem_limit": memory.limit,
        "mem_alarm": memory.alarm,
        "mem_calculation_strategy": "rss",
        "disk_free_limit": disk.limit,
        "disk_free_alarm": disk.alarm,
        "fd_used": fds,
        "fd_total": fd_limit,
        "sockets_used": len(server.connections),
        "sockets_total": sockets_total(server, fds, fd_limit),
        "uptime": int((time.time() - churn.started) * 1000),
        "run_queue": run_queue(),
        "processors": processors(),
        "connection_created": churn.connections_opened,
        "connection_closed": churn.connections_closed,
        "channel_created": churn.channels_opened,
        "channel_closed": churn.channels_closed,
        "queue_declared": churn.queues_declared,
        "queue_created": churn.queues_created,
        "queue_deleted": churn.queues_deleted,
    }
    free = disk.reported_free()
    if free is not None:
        node["disk_free"] = free
    return node


# -- GET /api/nodes ---------------------------------------------------------------------

routes = web.RouteTableDef()

# rabbit_auth_mechanism_plain:description/0 and _amqplain's (as 3.10.8's /api/nodes lists
# them; RabbitMQ's disabled RABBIT-CR-DEMO is not offered here at all).
AUTH_MECHANISMS = (
    {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": True},
    {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True},
)


def node_view(request: web.Request) -> dict[str, Any]:
    """The node as rabbit_mgmt_wm_nodes shows it: RabbitMQ's fields that mean something
    for one Python process (no Erlang process counts, garbage collector or Mnesia figures,
    no plugins or applications), the others left out."""
    server = server_of(request)
    view: dict[str, Any] = {
        "name": views.NODE,
        "type": "disc",
        "running": True,
        "partitions": [],
        "cluster_links": [],
        "rates_mode": "basic",
        "exchange_types": exchange_types(),
        "auth_mechanisms": list(AUTH_MECHANISMS),
        "contexts": contexts(request),
        **figures(server),
    }
    if server.config.data_dir is not None:
        view["db_dir"] = str(server.config.data_dir)
    return dict(sorted(view.items()))


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    """GET /api/nodes: the one node (any management user may list it, as in RabbitMQ)."""
    return reply_list([node_view(request)], request)


@routes.get("/api/nodes/{name}")
async def get_node(request: web.Request) -> web.Response:
    """GET /api/nodes/NAME: the node, or 404 for another name."""
    if request.match_info["name"] != views.NODE:
        raise not_found()
    return json_response(node_view(request))
