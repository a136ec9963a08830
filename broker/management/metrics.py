"""rabbitmq_prometheus's metric families, read from the broker's state at scrape time.

Names, types, labels and help texts are those of rabbitmq_prometheus 3.10.8
(deps/rabbitmq_prometheus/src/collectors/prometheus_rabbitmq_core_metrics_collector.erl
and prometheus_rabbitmq_global_metrics_collector.erl), as scraped from a running 3.10.8
into tests/management/data/rabbitmq-3.10.8-prometheus.json; the collectors here yield
prometheus_client metric families, which the listener (leveret.management.prometheus)
writes in the text format.

Three views, as rabbitmq_prometheus has them:

- aggregated (``/metrics``): one sample per family, summed over queues, channels and
  connections, so a scrape stays small whatever the number of objects;
- per object (``/metrics/per-object``): the same families with a sample per queue
  (``vhost``, ``queue``), channel or connection (``channel``);
- detailed (``/metrics/detailed?family=GROUP&vhost=V``): the per-object samples of the
  groups asked for, named ``rabbitmq_detailed_*``, of the vhosts asked for.

RabbitMQ labels channels and connections with their Erlang pid; Leveret has none and uses
the name the management API gives them (``127.0.0.1:50000 -> 127.0.0.1:5672 (1)``).
Families left out, and why, are listed in :data:`LEFT_OUT`.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

import leveret.management.node as node
import leveret.management.views as views
from leveret.storage.iostats import IoStats

if TYPE_CHECKING:
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

CLIENT_VERSION = version("prometheus_client")
PROTOCOL = "amqp091"
QUEUE_TYPES = ("rabbit_classic_queue", "rabbit_quorum_queue", "rabbit_stream_queue")

# Families of 3.10.8's /metrics that Leveret does not serve: Erlang VM internals, reductions
# and the Mnesia schema counters (the exclusions), and those with no counterpart here.
LEFT_OUT: dict[str, str] = {
    **dict.fromkeys(
        (
            "rabbitmq_erlang_processes_used",
            "rabbitmq_erlang_processes_limit",
            "rabbitmq_erlang_gc_runs_total",
            "rabbitmq_erlang_gc_reclaimed_bytes_total",
            "rabbitmq_erlang_scheduler_context_switches_total",
            "rabbitmq_erlang_scheduler_run_queue",
            "rabbitmq_erlang_net_ticktime_seconds",
            "rabbitmq_erlang_uptime_seconds",
        ),
        "Erlang VM internal",
    ),
    **dict.fromkeys(
        (
            "rabbitmq_queue_process_reductions_total",
            "rabbitmq_channel_process_reductions_total",
            "rabbitmq_connection_process_reductions_total",
        ),
        "Erlang reductions",
    ),
    **dict.fromkeys(
        ("rabbitmq_schema_db_ram_tx_total", "rabbitmq_schema_db_disk_tx_total"),
        "Mnesia schema counter",
    ),
    **dict.fromkeys(
        (
            "rabbitmq_raft_term_total",
            "rabbitmq_raft_log_snapshot_index",
            "rabbitmq_raft_log_last_applied_index",
            "rabbitmq_raft_log_commit_index",
            "rabbitmq_raft_log_last_written_index",
            "rabbitmq_raft_entry_commit_latency_seconds",
        ),
        "Raft: Leveret's quorum queues are not replicated",
    ),
    **dict.fromkeys(
        (
            "rabbitmq_auth_attempts_detailed_total",
            "rabbitmq_auth_attempts_detailed_succeeded_total",
            "rabbitmq_auth_attempts_detailed_failed_total",
        ),
        "login attempts by source are not kept (3.10.8 serves them empty unless "
        "track_auth_attempt_source is on)",
    ),
}


@dataclass(frozen=True)
class Family:
    """One family: its name after ``rabbitmq_`` (``rabbitmq_detailed_`` in the detailed
    view), its type and help text."""

    name: str
    kind: str
    help: str


Sampled = CounterMetricFamily | GaugeMetricFamily | UnknownMetricFamily


def metric(full_name: str, family: Family, labels: Iterable[str] = ()) -> Sampled:
    """An empty prometheus_client family of ``family``'s type."""
    names = list(labels)
    if family.kind == "counter":
        return CounterMetricFamily(full_name, family.help, labels=names)
    if family.kind == "gauge":
        return GaugeMetricFamily(full_name, family.help, labels=names)
    return UnknownMetricFamily(full_name, family.help, labels=names)


def single(
    family: Family, value: float, labels: dict[str, str] | None = None, prefix: str = "rabbitmq_"
) -> Metric:
    """A family with one sample (named ``prefix`` and its name)."""
    found = metric(prefix + family.name, family, (labels or {}).keys())
    found.add_metric(list((labels or {}).values()), value)
    return found


# -- the node ---------------------------------------------------------------------------

ALARMS = (
    Family(
        "alarms_file_descriptor_limit",
        "untyped",
        "is 1 if file descriptor limit alarm is in effect",
    ),
    Family(
        "alarms_free_disk_space_watermark",
        "untyped",
        "is 1 if free disk space watermark alarm is in effect",
    ),
    Family(
        "alarms_memory_used_watermark", "untyped", "is 1 if VM memory watermark alarm is in effect"
    ),
)
CHURN = (
    Family("connections_opened_total", "counter", "Total number of connections opened"),
    Family(
        "connections_closed_total", "counter", "Total number of connections closed or terminated"
    ),
    Family("channels_opened_total", "counter", "Total number of channels opened"),
    Family("channels_closed_total", "counter", "Total number of channels closed"),
    Family("queues_declared_total", "counter", "Total number of queues declared"),
    Family("queues_created_total", "counter", "Total number of queues created"),
    Family("queues_deleted_total", "counter", "Total number of queues deleted"),
)
PROCESS = (
    Family("process_open_fds", "gauge", "Open file descriptors"),
    Family("process_open_tcp_sockets", "gauge", "Open TCP sockets"),
    Family("process_resident_memory_bytes", "gauge", "Memory used in bytes"),
    Family("disk_space_available_bytes", "gauge", "Disk space available in bytes"),
    Family("process_max_fds", "gauge", "Open file descriptors limit"),
    Family("process_max_tcp_sockets", "gauge", "Open TCP sockets limit"),
    Family("resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes"),
    Family("disk_space_available_limit_bytes", "gauge", "Free disk space low watermark in bytes"),
)
AUTH = (
    Family("auth_attempts_total", "counter", "Total number of authorization attempts"),
    Family(
        "auth_attempts_succeeded_total",
        "counter",
        "Total number of successful authentication attempts",
    ),
    Family(
        "auth_attempts_failed_total", "counter", "Total number of failed authentication attempts"
    ),
)
TOTALS = (
    Family("connections", "gauge", "Connections currently open"),
    Family("channels", "gauge", "Channels currently open"),
    Family("consumers", "gauge", "Consumers currently connected"),
    Family("queues", "gauge", "Queues available"),
)
BUILD_INFO = Family("build_info", "untyped", "RabbitMQ & Erlang/OTP version info")
IDENTITY_INFO = Family("identity_info", "untyped", "RabbitMQ node & cluster identity info")


def info_families() -> Iterator[Metric]:
    """rabbitmq_build_info and rabbitmq_identity_info, in every view. ``rabbitmq_version``
    is the release Leveret behaves as, the plugin's version Leveret's own; there is no
    Erlang, so ``erlang_version`` names the Python it runs on."""
    yield single(
        BUILD_INFO,
        1,
        {
            "rabbitmq_version": views.RABBITMQ_VERSION,
            "prometheus_plugin_version": views.PRODUCT_VERSION,
            "prometheus_client_version": CLIENT_VERSION,
            "erlang_version": "Python " + platform.python_version(),
        },
    )
    yield single(
        IDENTITY_INFO,
        1,
        {
            "rabbitmq_node": views.NODE,
            "rabbitmq_cluster": views.CLUSTER_NAME,
            "rabbitmq_cluster_permanent_id": "leveret-" + views.CLUSTER_NAME,
        },
    )


def churn_families(server: ServerState[Connection], prefix: str) -> Iterator[Metric]:
    """The connection, channel and queue churn counters."""
    churn = server.churn
    values = (
        churn.connections_opened,
        churn.connections_closed,
        churn.channels_opened,
        churn.channels_closed,
        churn.queues_declared,
        churn.queues_created,
        churn.queues_deleted,
    )
    for family, value in zip(CHURN, values, strict=True):
        yield single(family, value, prefix=prefix)


def totals_families(server: ServerState[Connection]) -> Iterator[Metric]:
    """rabbitmq_connections, _channels, _consumers and _queues."""
    channels = [ch for conn in server.connections for ch in conn.channels.values()]
    values = (
        len(server.connections),
        len(channels),
        sum(len(ch.consumers) for ch in channels),
        sum(len(v.queues) for v in server.vhosts.values()),
    )
    for family, value in zip(TOTALS, values, strict=True):
        yield single(family, value)


@dataclass(frozen=True)
class IoFamily(Family):
    """A family of the node's storage I/O: the :class:`~leveret.storage.iostats.IoStats`
    attribute it reads, and whether it counts the delayed-message store too (file I/O of
    the node) or the queues' message store only (what rabbit_msg_store and
    rabbit_queue_index count in RabbitMQ)."""

    attribute: str = ""
    all_stores: bool = True


# deps/rabbitmq_prometheus/src/collectors/prometheus_rabbitmq_core_metrics_collector.erl
# (file_handle_cache_stats), counted as storage/iostats.py says.
IO = (
    IoFamily("io_read_ops_total", "counter", "Total number of I/O read operations", "read_ops"),
    IoFamily("io_read_bytes_total", "counter", "Total number of I/O bytes read", "read_bytes"),
    IoFamily("io_write_ops_total", "counter", "Total number of I/O write operations", "write_ops"),
    IoFamily("io_write_bytes_total", "counter", "Total number of I/O bytes written", "write_bytes"),
    IoFamily("io_sync_ops_total", "counter", "Total number of I/O sync operations", "sync_ops"),
    IoFamily("io_seek_ops_total", "counter", "Total number of I/O seek operations", "seek_ops"),
    IoFamily(
        "io_reopen_ops_total",
        "counter",
        "Total number of times files have been reopened",
        "reopen_ops",
    ),
    IoFamily("io_read_time_seconds_total", "counter", "Total I/O read time", "read_seconds"),
    IoFamily("io_write_time_seconds_total", "counter", "Total I/O write time", "write_seconds"),
    IoFamily("io_sync_time_seconds_total", "counter", "Total I/O sync time", "sync_seconds"),
    IoFamily("io_seek_time_seconds_total", "counter", "Total I/O seek time", "seek_seconds"),
    IoFamily(
        "msg_store_read_total",
        "counter",
        "Total number of Message Store read operations",
        "msg_reads",
        all_stores=False,
    ),
    IoFamily(
        "msg_store_write_total",
        "counter",
        "Total number of Message Store write operations",
        "msg_writes",
        all_stores=False,
    ),
    IoFamily(
        "queue_index_read_ops_total",
        "counter",
        "Total number of Queue Index read operations",
        "index_read_ops",
        all_stores=False,
    ),
    IoFamily(
        "queue_index_write_ops_total",
        "counter",
        "Total number of Queue Index write operations",
        "index_write_ops",
        all_stores=False,
    ),
)


def io_families(server: ServerState[Connection]) -> Iterator[Metric]:
    """rabbitmq_io_*, rabbitmq_msg_store_* and rabbitmq_queue_index_*: what the node's
    message stores did with their files (all 0 without a data directory: no file I/O)."""
    queues, both = IoStats(), IoStats()
    persistence = server.persistence
    if persistence is not None:
        queues.add(persistence.store.io)
        both.add(persistence.store.io)
        both.add(persistence.delayed.io)
    for family in IO:
        yield single(family, getattr(both if family.all_stores else queues, family.attribute))


def node_families(server: ServerState[Connection], *, alarms: bool) -> Iterator[Metric]:
    """The node's own families (``alarms``: the alarm families, which 3.10.8 serves on
    /metrics but not on /metrics/per-object)."""
    figures = node.figures(server)
    if alarms:
        for family, on in zip(ALARMS, (False, server.disk.alarm, server.memory.alarm), strict=True):
            # No file descriptor alarm in Leveret: it is never in effect.
            yield single(family, int(on))
    yield from churn_families(server, "rabbitmq_")
    process_values = (
        figures["fd_used"],
        figures["sockets_used"],
        figures["mem_used"],
        figures.get("disk_free"),
        figures["fd_total"],
        figures["sockets_total"],
        figures["mem_limit"],
        figures["disk_free_limit"],
    )
    for family, reading in zip(PROCESS, process_values, strict=True):
        if reading is None:  # the free disk space, when it cannot be read
            yield metric("rabbitmq_" + family.name, family)
        else:
            yield single(family, reading)
    churn = server.churn
    attempts = (churn.auth_succeeded + churn.auth_failed, churn.auth_succeeded, churn.auth_failed)
    for family, value in zip(AUTH, attempts, strict=True):
        yield single(family, value, {"protocol": PROTOCOL})
    yield from io_families(server)


# -- queues -----------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFamily(Family):
    """A per-queue family: its value for a queue (given its unacknowledged bytes), whether
    the aggregated view sums it (3.10.8 serves a few there without a sample), and the
    detailed groups that hold it."""

    value: Callable[[Queue, int], float] = lambda _q, _b: 0
    summed: bool = True
    # Read from the queue's message store: 0, without a call, for a queue that has none
    # (non-durable, or no data directory), which keeps a scrape of many such queues cheap.
    stored: bool = False
    groups: tuple[str, ...] = ("queue_metrics",)


def head_timestamp(queue: Queue, _unacked_bytes: int) -> float:
    """The timestamp property of the queue's first ready message, NaN when there is none
    (as rabbitmq_prometheus writes ``undefined``)."""
    head = next(iter(queue.messages), None)
    if head is None:
        return math.nan
    stamp = head[0].properties.timestamp
    return stamp.timestamp() if stamp is not None else math.nan


def persistent(queue: Queue, _unacked_bytes: int) -> float:
    """The queue's persistent messages, ready or unacknowledged: those its message store
    holds. As rabbit_variable_queue's persistent_count, a message counts when it is
    persistent and its queue durable (a non-durable queue has none). A Leveret quorum
    queue stores every message whatever its delivery mode (broker/queue/), as a
    RabbitMQ quorum queue keeps each in its log: all of them count."""
    store = queue.store
    return 0 if store is None else store.held((queue.vhost.name, queue.name))[0]


def persistent_bytes(queue: Queue, _unacked_bytes: int) -> float:
    """The body bytes of :func:`persistent`'s messages."""
    store = queue.store
    return 0 if store is None else store.held((queue.vhost.name, queue.name))[1]


def disk_reads(queue: Queue, _unacked_bytes: int) -> float:
    """Messages of the queue read back from disk since it was declared (at start-up, or
    when a durable queue left in the store came back), as rabbit_variable_queue's
    disk_read_count."""
    store = queue.store
    return 0 if store is None else store.disk_counts((queue.vhost.name, queue.name))[0]


def disk_writes(queue: Queue, _unacked_bytes: int) -> float:
    """Messages of the queue written to disk since it was declared (disk_write_count)."""
    store = queue.store
    return 0 if store is None else store.disk_counts((queue.vhost.name, queue.name))[1]


def consumer_capacity(queue: Queue, _unacked_bytes: int) -> float:
    """rabbit_amqqueue_process's consumer_capacity (and consumer_utilisation): 0 for a queue
    without consumers, else its consumers' use (leveret.node.consumeruse)."""
    return queue.use.capacity() if queue.consumers else 0.0


COARSE = ("queue_coarse_metrics",)
QUEUE_FAMILIES = (
    QueueFamily(
        "queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        lambda q, _b: q.message_count,
        groups=COARSE,
    ),
    QueueFamily(
        "queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        lambda q, _b: q.unacked,
        groups=COARSE,
    ),
    QueueFamily(
        "queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages - total queue depth",
        lambda q, _b: q.message_count + q.unacked,
        groups=COARSE,
    ),
    QueueFamily(
        "queue_consumers",
        "gauge",
        "Consumers on a queue",
        lambda q, _b: len(q.consumers),
        groups=("queue_consumer_count", "queue_metrics"),
    ),
    # RabbitMQ: the queue process's memory; here what the queue's ready messages cost
    # against the memory watermark (leveret.node.memory), the bulk of what a queue holds.
    QueueFamily(
        "queue_process_memory_bytes",
        "gauge",
        "Memory in bytes used by the Erlang queue process",
        lambda q, _b: q.held,
    ),
    # Every message a Leveret queue holds is in memory, and none is ever paged out.
    QueueFamily(
        "queue_messages_ram",
        "gauge",
        "Ready and unacknowledged messages stored in memory",
        lambda q, _b: q.message_count + q.unacked,
    ),
    QueueFamily(
        "queue_messages_ram_bytes",
        "gauge",
        "Size of ready and unacknowledged messages stored in memory",
        lambda q, b: q.ready_bytes + b,
    ),
    QueueFamily(
        "queue_messages_ready_ram",
        "gauge",
        "Ready messages stored in memory",
        lambda q, _b: q.message_count,
    ),
    QueueFamily(
        "queue_messages_unacked_ram",
        "gauge",
        "Unacknowledged messages stored in memory",
        lambda q, _b: q.unacked,
    ),
    QueueFamily(
        "queue_messages_bytes",
        "gauge",
        "Size in bytes of ready and unacknowledged messages",
        lambda q, b: q.ready_bytes + b,
    ),
    QueueFamily(
        "queue_messages_ready_bytes",
        "gauge",
        "Size in bytes of ready messages",
        lambda q, _b: q.ready_bytes,
    ),
    QueueFamily(
        "queue_messages_unacked_bytes",
        "gauge",
        "Size in bytes of all unacknowledged messages",
        lambda q, b: b,
    ),
    QueueFamily("queue_messages_paged_out", "gauge", "Messages paged out to disk"),
    QueueFamily(
        "queue_messages_paged_out_bytes", "gauge", "Size in bytes of messages paged out to disk"
    ),
    QueueFamily(
        "queue_consumer_capacity",
        "gauge",
        "Consumer capacity",
        consumer_capacity,
    ),
    # 3.10.8 serves the same value under both names (rabbit_queue_consumers:utilisation/1).
    QueueFamily(
        "queue_consumer_utilisation",
        "gauge",
        "Same as consumer capacity",
        consumer_capacity,
    ),
    QueueFamily(
        "queue_messages_persistent", "gauge", "Persistent messages", persistent, stored=True
    ),
    QueueFamily(
        "queue_messages_persistent_bytes",
        "gauge",
        "Size in bytes of persistent messages",
        persistent_bytes,
        stored=True,
    ),
    QueueFamily(
        "queue_disk_reads_total",
        "counter",
        "Total number of times queue read messages from disk",
        disk_reads,
        stored=True,
    ),
    QueueFamily(
        "queue_disk_writes_total",
        "counter",
        "Total number of times queue wrote messages to disk",
        disk_writes,
        stored=True,
    ),
    QueueFamily(
        "queue_head_message_timestamp",
        "gauge",
        "Timestamp of the first message in the queue, if any",
        head_timestamp,
        summed=False,
    ),
)
# Served in the aggregated view only: its per-object samples are per channel, queue and
# exchange, which Leveret does not count.
QUEUE_PUBLISHED = Family(
    "queue_messages_published_total", "counter", "Total number of messages published to queues"
)
