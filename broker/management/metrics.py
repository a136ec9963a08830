"""GET /metrics: Prometheus text format with rabbitmq_prometheus's metric names.

Names, types and labels follow deps/rabbitmq_prometheus (rabbit_prometheus_collector and
the ``rabbit_global_counters`` metrics, labelled ``protocol="amqp091"``). Per-queue
metrics carry ``vhost`` and ``queue`` labels, as rabbitmq_prometheus gives them with
``prometheus.return_per_object_metrics = true`` (and on /metrics/per-object). Like
rabbitmq_prometheus the endpoint needs no credentials.

The global message counters come from the broker's own per-publish counters when it has
them (:func:`leveret.management.stats.broker_counters`); otherwise they are derived from the
per-queue counters, which count a message once per queue it reaches, so
``received``/``routed`` are queue enqueues and ``unroutable_dropped`` is only known to be 0
for messages published through the management API (which counts its own unroutable
publishes as ``unroutable_returned``, being mandatory).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.management import views
from leveret.management.access import SERVER_KEY
from leveret.management.state import state_of
from leveret.management.stats import broker_counters

if TYPE_CHECKING:
    from leveret.queue import Queue
    from leveret.server import Server

routes = web.RouteTableDef()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GLOBAL = '{protocol="amqp091"}'


def escape(value: str) -> str:
    """A label value escaped for the text format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def family(name: str, kind: str, text: str, samples: Iterable[tuple[str, int | float]]) -> str:
    """One metric family: HELP, TYPE and its samples (``labels`` text, value)."""
    lines = [f"# TYPE {name} {kind}", f"# HELP {name} {text}"]
    lines += [f"{name}{labels} {value}" for labels, value in samples]
    return "\n".join(lines) + "\n"


# Per-queue gauges and counters: (name, type, help, value of a queue).
QUEUE_METRICS: tuple[tuple[str, str, str, Callable[[Queue], int]], ...] = (
    (
        "rabbitmq_queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        lambda q: q.message_count,
    ),
    (
        "rabbitmq_queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        lambda q: q.unacked,
    ),
    (
        "rabbitmq_queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages - total queue depth",
        lambda q: q.message_count + q.unacked,
    ),
    (
        "rabbitmq_queue_messages_ready_bytes",
        "gauge",
        "Size in bytes of ready messages",
        lambda q: q.ready_bytes,
    ),
    ("rabbitmq_queue_consumers", "gauge", "Consumers on a queue", lambda q: len(q.consumers)),
    (
        "rabbitmq_queue_messages_published_total",
        "counter",
        "Total number of messages published to queues",
        lambda q: q.published_total,
    ),
)


def resident_memory() -> int | None:
    """The process's resident set size in bytes (Linux), or None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def global_counters(server: Server) -> list[tuple[str, str, int]]:
    """(name, help, value) of the ``rabbitmq_global_messages_*`` counters."""
    sampler = state_of(server).sampler
    totals = sampler.totals()
    hook = broker_counters(server)
    derived = "" if hook else " (derived: messages enqueued, once per queue reached)"
    return [
        (
            "rabbitmq_global_messages_received_total",
            "Total number of messages received from publishers" + derived,
            hook.received if hook else totals["publish"],
        ),
        (
            "rabbitmq_global_messages_routed_total",
            "Total number of messages routed to queues or streams" + derived,
            hook.routed if hook else totals["publish"],
        ),
        (
            "rabbitmq_global_messages_delivered_total",
            "Total number of messages delivered to consumers",
            totals["deliver_get"],
        ),
        (
            "rabbitmq_global_messages_acknowledged_total",
            "Total number of messages acknowledged by consumers",
            totals["ack"],
        ),
        (
            "rabbitmq_global_messages_unroutable_dropped_total",
            "Total number of messages published as non-mandatory into an exchange and dropped "
            "as unroutable" + ("" if hook else " (not counted: no per-publish counter yet)"),
            hook.unroutable_dropped if hook else 0,
        ),
        (
            "rabbitmq_global_messages_unroutable_returned_total",
            "Total number of messages published as mandatory into an exchange and returned to "
            "the publisher as unroutable"
            + ("" if hook else " (only those published through the management API)"),
            hook.unroutable_returned if hook else sampler.unroutable_returned,
        ),
        (
            "rabbitmq_global_messages_confirmed_total",
            "Total number of messages confirmed to publishers"
            + ("" if hook else " (not counted: no per-publish counter yet)"),
            hook.confirmed if hook else 0,
        ),
    ]


def render(server: Server) -> str:
    """The whole exposition."""
    queues = [(v.name, q) for v in server.vhosts.values() for q in v.queues.values()]
    channels = [ch for conn in server.connections for ch in conn.channels.values()]
    identity = f'{{rabbitmq_node="{views.NODE}",rabbitmq_cluster="{views.CLUSTER_NAME}"}}'
    build = (
        f'{{rabbitmq_version="{views.RABBITMQ_VERSION}",product_name="{views.PRODUCT_NAME}",'
        f'product_version="{views.PRODUCT_VERSION}"}}'
    )
    parts = [
        family("rabbitmq_identity_info", "untyped", "Node and cluster identity", [(identity, 1)]),
        family("rabbitmq_build_info", "untyped", "Version info", [(build, 1)]),
        family(
            "rabbitmq_connections",
            "gauge",
            "Connections currently open",
            [("", len(server.connections))],
        ),
        family("rabbitmq_channels", "gauge", "Channels currently open", [("", len(channels))]),
        family(
            "rabbitmq_consumers",
            "gauge",
            "Consumers currently connected",
            [("", sum(len(ch.consumers) for ch in channels))],
        ),
        family("rabbitmq_queues", "gauge", "Queues available", [("", len(queues))]),
    ]
    for name, kind, text, value in QUEUE_METRICS:
        samples = [
            (f'{{vhost="{escape(vhost)}",queue="{escape(queue.name)}"}}', value(queue))
            for vhost, queue in queues
        ]
        parts.append(family(name, kind, text, samples))
    for name, text, total in global_counters(server):
        parts.append(family(name, "counter", text, [(GLOBAL, total)]))
    memory = server.memory
    rss = resident_memory()
    if rss is not None:
        parts.append(
            family(
                "rabbitmq_process_resident_memory_bytes",
                "gauge",
                "Memory used in bytes",
                [("", rss)],
            )
        )
    parts += [
        family(
            "rabbitmq_resident_memory_limit_bytes",
            "gauge",
            "Memory high watermark in bytes (of the messages held, and process RSS)",
            [("", memory.limit)],
        ),
        family(
            "rabbitmq_alarms_memory_used_watermark",
            "gauge",
            "is 1 if VM memory watermark alarm is in effect",
            [("", int(memory.alarm))],
        ),
    ]
    return "".join(parts)


@routes.get("/metrics")
@routes.get("/metrics/per-object")
async def metrics(request: web.Request) -> web.Response:
    """GET /metrics (no authentication, as rabbitmq_prometheus)."""
    body = render(request.app[SERVER_KEY])
    return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})
