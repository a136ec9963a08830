"""The Prometheus listener: rabbitmq_prometheus's endpoints on their own port
(``--prometheus-port``, 15692 as RabbitMQ's ``prometheus.tcp.port``; -1: off).

- ``GET /metrics``: aggregated families (no per-object labels), plus prometheus_client's
  ``process_*`` families of the process;
- ``GET /metrics/per-object``: a sample per queue, channel and connection;
- ``GET /metrics/detailed?family=GROUP&vhost=V``: the groups asked for (repeat
  ``family``), per object, named ``rabbitmq_detailed_*``, of the vhosts asked for (all
  when none is).

No credentials, as rabbitmq_prometheus (its endpoints have no authentication unless TLS
client certificates are configured). Everything is read from the broker's state at scrape
time, on the broker's loop, between two frames; the exposition text is written by
prometheus_client (``generate_latest``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import Metric, SummaryMetricFamily

from leveret.listen import dual_stack_socket
from leveret.management import client_metrics as cm
from leveret.management import metrics as m
from leveret.management.views import channel_name

if TYPE_CHECKING:
    from leveret.channel import Channel
    from leveret.connection import Connection
    from leveret.server import Server

log = logging.getLogger(__name__)

# rabbitmq_prometheus answers with this type, without a charset (observed on 3.10.8).
CONTENT_TYPE = "text/plain; version=0.0.4"
DETAILED_PREFIX = "rabbitmq_detailed_"
PREFIX = "rabbitmq_"

CHURN_GROUP = "connection_churn_metrics"
VHOST_STATUS = m.Family("cluster_vhost_status", "gauge", "Whether a given vhost is running")
EXCHANGE_NAMES = m.Family(
    "cluster_exchange_name",
    "gauge",
    "Enumerates exchanges without any additional info. This value is cluster-wide. A cheaper "
    "alternative to `exchange_bindings`",
)
EXCHANGE_BINDINGS = m.Family(
    "cluster_exchange_bindings",
    "gauge",
    "Number of bindings for an exchange. This value is cluster-wide.",
)
# The groups of /metrics/detailed Leveret serves (deps/rabbitmq_prometheus/metrics-detailed.md).
GROUPS = frozenset(
    {CHURN_GROUP, "vhost_status", "exchange_names", "exchange_bindings"}
    | {group for f in m.QUEUE_FAMILIES for group in f.groups}
    | {f.group for f in (*cm.CHANNEL_FAMILIES, *cm.CONNECTION_FAMILIES)}
)


@dataclass
class Telemetry:
    """telemetry_scrape_*: how many scrapes of a registry, how long they took, how big."""

    count: int = 0
    seconds: float = 0.0
    size: int = 0


@dataclass
class View:
    """What a scrape serves: aggregated (``per_object`` False), per object, or detailed
    (``groups`` given: only those, of ``vhosts`` when given)."""

    registry: str
    per_object: bool
    groups: frozenset[str] | None = None
    vhosts: frozenset[str] | None = None
    telemetry: dict[str, Telemetry] = field(default_factory=dict)

    def wants(self, *groups: str) -> bool:
        """Whether a family of ``groups`` is served."""
        return self.groups is None or not self.groups.isdisjoint(groups)

    def vhost(self, name: str) -> bool:
        """Whether objects of vhost ``name`` are served."""
        return self.vhosts is None or name in self.vhosts


def unacked_bytes(server: Server) -> dict[int, int]:
    """Body bytes of the delivered, unacknowledged messages, by ``id(queue)``."""
    sizes: dict[int, int] = {}
    for conn in server.connections:
        for channel in conn.channels.values():
            for queue, entry, _consumer in channel.unacked.values():
                sizes[id(queue)] = sizes.get(id(queue), 0) + entry[0].body_size
    return sizes


def queue_families(server: Server, view: View, prefix: str) -> Iterator[Metric]:
    """The per-queue families: summed (aggregated) or a sample per queue."""
    queues = [
        (vhost.name, queue)
        for vhost in server.vhosts.values()
        if view.vhost(vhost.name)
        for queue in vhost.queues.values()
    ]
    sizes = unacked_bytes(server)
    for family in m.QUEUE_FAMILIES:
        if not view.wants(*family.groups):
            continue
        read = family.value
        if not view.per_object:
            found = m.metric(prefix + family.name, family)
            if family.summed:
                found.add_metric([], sum(read(q, sizes.get(id(q), 0)) for _, q in queues))
            yield found
            continue
        found = m.metric(prefix + family.name, family, ("vhost", "queue"))
        for vhost, queue in queues:
            found.add_metric([vhost, queue.name], read(queue, sizes.get(id(queue), 0)))
        yield found


def object_families(
    families: Iterable[cm.ObjectFamily],
    objects: list[tuple[str, Channel | Connection]],
    view: View,
    prefix: str,
) -> Iterator[Metric]:
    """Per-channel or per-connection families: summed, or a sample per object labelled
    ``channel`` (RabbitMQ's label for both, holding the process id)."""
    for family in families:
        if not view.wants(family.group):
            continue
        read = family.value
        if not view.per_object:
            found = m.metric(prefix + family.name, family)
            found.add_metric([], sum(read(obj) for _, obj in objects))
        else:
            found = m.metric(prefix + family.name, family, ("channel",))
            for label, obj in objects:
                found.add_metric([label], read(obj))
        yield found


def total_families(server: Server) -> Iterator[Metric]:
    """The node-wide counters: channel totals, then queue counts; the aggregated view."""
    totals = server.churn.totals(q for v in server.vhosts.values() for q in v.queues.values())
    counters = server.counters
    for family in cm.CHANNEL_TOTALS:
        yield m.single(family, total_of(family, counters, totals.values()))


def total_of(family: cm.TotalFamily, counters: object, totals: Iterable[dict[str, int]]) -> int:
    """A node-wide counter's value: a publish counter, or the sum over queue types."""
    if family.totals is None:
        return int(getattr(counters, family.publish))
    return sum(family.totals(t) for t in totals)


def global_families(server: Server) -> Iterator[Metric]:
    """rabbitmq_global_*, as rabbit_global_counters labels them."""
    totals = server.churn.totals(q for v in server.vhosts.values() for q in v.queues.values())
    channels = [ch for conn in server.connections for ch in conn.channels.values()]
    protocol = {"protocol": m.PROTOCOL}
    yield m.single(cm.GLOBAL_CONSUMERS, sum(len(ch.consumers) for ch in channels), protocol)
    for family in cm.GLOBAL_BY_QUEUE_TYPE:
        found = m.metric(PREFIX + family.name, family, ("protocol", "queue_type"))
        for kind in m.QUEUE_TYPES:
            counts = totals.get(kind)
            value = family.totals(counts) if counts is not None and family.totals else 0
            found.add_metric([m.PROTOCOL, kind], value)
        yield found
    for family in cm.GLOBAL_BY_PROTOCOL:
        yield m.single(family, total_of(family, server.counters, ()), protocol)
    confirming = server.churn.received_confirm + sum(ch.publish_seq for ch in channels)
    yield m.single(cm.GLOBAL_RECEIVED_CONFIRM, confirming, protocol)


def topology_families(server: Server, view: View) -> Iterator[Metric]:
    """vhost_status, exchange_names and exchange_bindings (detailed only)."""
    vhosts = [v for name, v in sorted(server.vhosts.items()) if view.vhost(name)]
    if view.wants("vhost_status"):
        found = m.metric("rabbitmq_" + VHOST_STATUS.name, VHOST_STATUS, ("vhost",))
        for vhost in vhosts:
            found.add_metric([vhost.name], 1)  # a Leveret vhost runs while it exists
        yield found
    for group, family in (
        ("exchange_names", EXCHANGE_NAMES),
        ("exchange_bindings", EXCHANGE_BINDINGS),
    ):
        if not view.wants(group):
            continue
        found = m.metric("rabbitmq_" + family.name, family, ("vhost", "exchange", "type"))
        for vhost in vhosts:
            projection = vhost.projection
            for name, exchange in sorted(projection.exchanges.items()):
                # 3.10.8 lists neither the default exchange nor amq.rabbitmq.* (observed).
                if not name or name.startswith("amq.rabbitmq."):
                    continue
                value = 1 if group == "exchange_names" else len(projection.bindings_from(name))
                found.add_metric([vhost.name, name, exchange.type.value], value)
        yield found


def collect(server: Server, view: View) -> Iterator[Metric]:
    """Every family of ``view``, in rabbitmq_prometheus's order."""
    detailed = view.groups is not None
    prefix = DETAILED_PREFIX if detailed else PREFIX
    connections = [(conn.name, conn) for conn in server.connections if conn.vhost is not None]
    if detailed:
        connections = [(label, c) for label, c in connections if view.vhost(c.vhost.name)]
    channels: list[tuple[str, Channel | Connection]] = [
        (channel_name(conn, ch), ch) for _, conn in connections for ch in conn.channels.values()
    ]
    if not detailed:
        yield from m.node_families(server, alarms=not view.per_object)
    elif view.wants(CHURN_GROUP):
        yield from m.churn_families(server, DETAILED_PREFIX)
    yield from queue_families(server, view, prefix)
    yield from object_families(cm.CHANNEL_FAMILIES, channels, view, prefix)
    yield from object_families(cm.CONNECTION_FAMILIES, list(connections), view, prefix)
    if not detailed:
        if not view.per_object:
            yield from total_families(server)
        yield from m.totals_families(server)
    yield from m.info_families()
    if detailed:
        yield from topology_families(server, view)
    else:
        yield from global_families(server)
    yield from telemetry_families(view)


def telemetry_families(view: View) -> Iterator[Metric]:
    """telemetry_scrape_duration_seconds and telemetry_scrape_size_bytes of this registry
    (the scrapes before this one, as RabbitMQ counts them)."""
    seen = view.telemetry.get(view.registry, Telemetry())
    labels = ["registry", "content_type"]
    duration = SummaryMetricFamily(
        "telemetry_scrape_duration_seconds", "Scrape duration", labels=labels
    )
    size = SummaryMetricFamily(
        "telemetry_scrape_size_bytes", "Scrape size, not encoded", labels=labels
    )
    if seen.count:
        duration.add_metric([view.registry, CONTENT_TYPE], seen.count, seen.seconds)
        size.add_metric([view.registry, CONTENT_TYPE], seen.count, seen.size)
    yield duration
    yield size


class Collector:
    """A prometheus_client collector over one view of the broker."""

    def __init__(self, server: Server, view: View) -> None:
        self.server = server
        self.view = view

    def collect(self) -> Iterator[Metric]:
        """The families, read now."""
        return collect(self.server, self.view)


TELEMETRY_KEY: web.AppKey[dict[str, Telemetry]] = web.AppKey("telemetry")
SERVER_KEY: web.AppKey[Server] = web.AppKey("prometheus_server")


def render(server: Server, view: View, process: bool) -> bytes:
    """The exposition text of ``view`` (``process``: with prometheus_client's process_*
    families first)."""
    registry = CollectorRegistry(auto_describe=False)
    if process:
        ProcessCollector(registry=registry)
    registry.register(Collector(server, view))
    return generate_latest(registry)


def parse_view(request: web.Request) -> View:
    """The view a request asks for."""
    telemetry = request.app[TELEMETRY_KEY]
    if request.path.rstrip("/") == "/metrics/detailed":
        groups = frozenset(request.query.getall("family", [])) & GROUPS
        vhosts = request.query.getall("vhost", [])
        return View("detailed", True, groups, frozenset(vhosts) if vhosts else None, telemetry)
    if request.path.rstrip("/") == "/metrics/per-object":
        return View("per-object", True, telemetry=telemetry)
    return View("default", False, telemetry=telemetry)


async def scrape(request: web.Request) -> web.Response:
    """GET /metrics, /metrics/per-object, /metrics/detailed."""
    server = request.app[SERVER_KEY]
    view = parse_view(request)
    started = time.perf_counter()
    body = render(server, view, process=view.registry == "default")
    seen = view.telemetry.setdefault(view.registry, Telemetry())
    seen.count += 1
    seen.seconds += time.perf_counter() - started
    seen.size += len(body)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


@dataclass
class PrometheusHandle:
    """A running Prometheus listener."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:15692``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        """Stop serving."""
        await self.runner.cleanup()


async def start_prometheus(server: Server, host: str, port: int) -> PrometheusHandle:
    """Serve the Prometheus endpoints of ``server`` on ``host:port`` (0: any free port, read
    it from the handle). Call on the broker's running event loop."""
    app = web.Application()
    app[SERVER_KEY] = server
    app[TELEMETRY_KEY] = {}
    for path in ("/metrics", "/metrics/per-object", "/metrics/detailed"):
        app.router.add_get(path, scrape)
        app.router.add_get(path + "/", scrape)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    sock = dual_stack_socket(host, port)
    site: web.BaseSite = (
        web.TCPSite(runner, host, port, reuse_address=True)
        if sock is None
        else web.SockSite(runner, sock)
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    actual_port = int(runner.addresses[0][1])
    log.info("Prometheus metrics on http://%s:%s/metrics", host, actual_port)
    return PrometheusHandle(runner, host, actual_port)
