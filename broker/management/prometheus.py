"""The Prometheus listener: rabbitmq_prometheus's endpoints on their own port
(``--prometheus-port``, 15692 as RabbitMQ's ``prometheus.tcp.port``; -1: off).

- ``GET /metrics``: aggregated families (no per-object labels), plus prometheus_client's
  ``process_*`` families of the process;
- ``GET /metrics/per-object``: a sample per queue, channel and connection, and per channel
  and exchange or channel and queue for the channel counters;
- ``GET /metrics/detailed?family=GROUP&vhost=V``: the groups asked for (repeat
  ``family``), per object, named ``rabbitmq_detailed_*``, of the vhosts asked for (all
  when none is).

No credentials, as rabbitmq_prometheus (its endpoints have no authentication unless TLS
client certificates are configured). Everything is read from the broker's state at scrape
time, on the broker's loop, between two frames; the exposition text is written by
prometheus_client (``generate_latest``).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import Metric, SummaryMetricFamily

import leveret.management.client_metrics as cm
import leveret.management.metrics as m
from leveret.management.listener import HttpListener, serve
from leveret.management.stats import publish_totals
from leveret.management.views import channel_name
from leveret.wire.channel.stats import EXCHANGE_COUNTERS, QUEUE_COUNTERS

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.channel import Channel
    from leveret.wire.connection import Connection

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
    | {cm.EXCHANGE_GROUP, cm.QUEUE_GROUP, cm.QUEUE_EXCHANGE_GROUP}
)


@dataclass
class Telemetry:
    """telemetry_scrape_*: how many scrapes of a registry, how long they took, how big."""

    count: int = 0
    seconds: float = 0.0
    size: int = 0
    # per content encoding (gzip, identity): scrapes and bytes sent
    encoded: dict[str, list[int]] = field(default_factory=dict)


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


# Objects read between two turns of the loop: a scrape of many queues, channels or
# connections lets the broker serve its clients meanwhile.
CHUNK = 256


async def unacked_bytes(server: ServerState[Connection]) -> dict[int, int]:
    """Body bytes of the delivered, unacknowledged messages, by ``id(queue)``."""
    sizes: dict[int, int] = {}
    seen = 0
    for conn in list(server.connections):
        for channel in list(conn.channels.values()):
            for queue, entry, _consumer in channel.unacked.values():
                sizes[id(queue)] = sizes.get(id(queue), 0) + entry[0].body_size
            seen += len(channel.unacked) + 1
            if seen >= CHUNK * 16:
                seen = 0
                await asyncio.sleep(0)
    return sizes


@dataclass
class Table:
    """Per-object readings of some families, taken on the loop and turned into metric
    families (summed or one sample per object) in a worker thread."""

    families: list[m.Family]
    labels: tuple[str, ...]
    rows: list[tuple[list[str], list[float]]] = field(default_factory=list)

    def metrics(self, prefix: str, per_object: bool) -> Iterator[Metric]:
        """The families: a sample per row, or one summed sample (none for the families
        RabbitMQ does not sum)."""
        for index, family in enumerate(self.families):
            found = m.metric(prefix + family.name, family, self.labels if per_object else ())
            if per_object:
                for labels, values in self.rows:
                    found.add_metric(labels, values[index])
            elif not isinstance(family, m.QueueFamily) or family.summed:
                found.add_metric([], sum(values[index] for _, values in self.rows))
            yield found


async def read_queues(server: ServerState[Connection], view: View) -> Table:
    """The queue families of ``view``, read from every queue it covers."""
    wanted = [f for f in m.QUEUE_FAMILIES if view.wants(*f.groups) and not f.stored]
    stored = [f for f in m.QUEUE_FAMILIES if view.wants(*f.groups) and f.stored]
    wanted += stored  # last: a queue without a store gets their zeros in one go
    table = Table(list(wanted), ("vhost", "queue"))
    if not wanted:
        return table
    sizes = await unacked_bytes(server)
    queues = [
        (vhost.name, queue)
        for vhost in list(server.vhosts.values())
        if view.vhost(vhost.name)
        for queue in vhost.queues.values()
    ]
    reads = [f.value for f in wanted[: len(wanted) - len(stored)]]
    stored_reads = [f.value for f in stored]
    zeros = [0.0] * len(stored)
    rows = table.rows
    for index, (vhost, queue) in enumerate(queues):
        unacked = sizes.get(id(queue), 0)
        values = [read(queue, unacked) for read in reads]
        if queue.store is None:
            values += zeros
        else:
            values += [read(queue, unacked) for read in stored_reads]
        rows.append(([vhost, queue.name], values))
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)
    return table


async def read_objects(
    families: Iterable[cm.ObjectFamily],
    objects: list[tuple[str, Channel | Connection]],
    view: View,
) -> Table:
    """Per-channel or per-connection families, labelled ``channel`` (RabbitMQ's label for
    both, holding the process id)."""
    wanted = [f for f in families if view.wants(f.group)]
    table = Table(list(wanted), ("channel",))
    reads = [f.value for f in wanted]
    for index, (label, obj) in enumerate(objects):
        table.rows.append(([label], [read(obj) for read in reads]))
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)
    return table


async def read_channel_rows(channels: list[tuple[str, Channel]], view: View) -> list[Table]:
    """The channel counters per channel and exchange, per channel and queue, and per
    channel, exchange and queue (the channels' rows: leveret.wire.channel.stats), labelled as
    rabbitmq_prometheus labels channel_exchange_metrics, channel_queue_metrics and
    channel_queue_exchange_metrics: ``channel`` (as :func:`read_objects`), then the
    objects' names and vhosts."""
    exchange_families = [f for f in cm.CHANNEL_EXCHANGE_TOTALS if view.wants(f.group)]
    queue_families = [f for f in cm.CHANNEL_QUEUE_TOTALS if view.wants(f.group)]
    routes: list[m.Family] = [f for f in cm.CHANNEL_QUEUE_EXCHANGE_TOTALS if view.wants(f.group)]
    by_exchange = Table(list(exchange_families), ("channel", "vhost", "exchange"))
    by_queue = Table(list(queue_families), ("channel", "vhost", "queue"))
    # rabbitmq_prometheus labels these with both objects' vhosts (always the channel's here).
    by_route = Table(
        list(routes), ("channel", "exchange", "exchange_vhost", "queue", "queue_vhost")
    )
    exchange_at = [EXCHANGE_COUNTERS.index(f.row) for f in exchange_families]
    queue_at = [QUEUE_COUNTERS.index(f.row) for f in queue_families]
    for index, (label, channel) in enumerate(channels):
        vhost = channel.vhost
        if exchange_at:
            for name, counts in channel.exchange_rows(vhost.projection.exchanges):
                by_exchange.rows.append(
                    ([label, vhost.name, name], [counts[i] for i in exchange_at])
                )
        if queue_at:
            for name, counts in channel.queue_rows():
                by_queue.rows.append(([label, vhost.name, name], [counts[i] for i in queue_at]))
        if routes:
            v = vhost.name
            for exchange, queue, count in channel.queue_exchange_rows(
                vhost.projection.exchanges, vhost.queues
            ):
                by_route.rows.append(([label, exchange, v, queue, v], [count]))
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)
    return [table for table in (by_exchange, by_queue, by_route) if table.families]


def total_families(server: ServerState[Connection]) -> Iterator[Metric]:
    """The node-wide counters: channel totals, then queue counts; the aggregated view."""
    totals = server.churn.totals(q for v in server.vhosts.values() for q in v.queues.values())
    counters = publish_totals(server)
    for family in cm.CHANNEL_TOTALS:
        yield m.single(family, total_of(family, counters, totals.values()))


def total_of(family: cm.TotalFamily, counters: object, totals: Iterable[dict[str, int]]) -> int:
    """A node-wide counter's value: a publish counter, or the sum over queue types."""
    if family.totals is None:
        return int(getattr(counters, family.publish))
    return sum(family.totals(t) for t in totals)


def global_families(server: ServerState[Connection]) -> Iterator[Metric]:
    """rabbitmq_global_*, as rabbit_global_counters labels them."""
    totals = server.churn.totals(q for v in server.vhosts.values() for q in v.queues.values())
    channels = [ch for conn in server.connections for ch in conn.channels.values()]
    protocol = {"protocol": m.PROTOCOL}
    yield m.single(cm.GLOBAL_CONSUMERS, sum(len(ch.consumers) for ch in channels), protocol)
    publishers = sum(1 for ch in channels if ch.has_published())
    yield m.single(cm.GLOBAL_PUBLISHERS, publishers, protocol)
    for family in cm.GLOBAL_BY_QUEUE_TYPE:
        found = m.metric(PREFIX + family.name, family, ("protocol", "queue_type"))
        for kind in m.QUEUE_TYPES:
            counts = totals.get(kind)
            value = family.totals(counts) if counts is not None and family.totals else 0
            found.add_metric([m.PROTOCOL, kind], value)
        yield found
    dead = server.churn.dead_lettered
    for dead_family, reason, pairs in cm.DEAD_LETTERED:
        labels = ("queue_type", "dead_letter_strategy")
        found = m.metric(PREFIX + dead_family.name, dead_family, labels)
        for kind, strategy in pairs:
            found.add_metric([kind, strategy], dead.get((kind, reason, strategy), 0))
        yield found
    for family in cm.GLOBAL_BY_PROTOCOL:
        yield m.single(family, total_of(family, publish_totals(server), ()), protocol)
    confirming = server.churn.received_confirm + sum(ch.publish_seq for ch in channels)
    yield m.single(cm.GLOBAL_RECEIVED_CONFIRM, confirming, protocol)


def topology_families(server: ServerState[Connection], view: View) -> Iterator[Metric]:
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
                found.add_metric([vhost.name, name, exchange.type], value)
        yield found


async def read(server: ServerState[Connection], view: View) -> list[Metric | Table]:
    """Everything ``view`` serves, read now, in rabbitmq_prometheus's order: metric
    families where they are few, tables of per-object readings otherwise."""
    detailed = view.groups is not None
    parts: list[Metric | Table] = []
    connections = [(conn.name, conn) for conn in list(server.connections) if conn.vhost is not None]
    if detailed:
        connections = [(label, c) for label, c in connections if view.vhost(c.vhost.name)]
    channels: list[tuple[str, Channel]] = [
        (channel_name(conn, ch), ch) for _, conn in connections for ch in conn.channels.values()
    ]
    if not detailed:
        parts += m.node_families(server, alarms=not view.per_object)
    elif view.wants(CHURN_GROUP):
        parts += m.churn_families(server, DETAILED_PREFIX)
    parts.append(await read_queues(server, view))
    parts.append(await read_objects(cm.CHANNEL_FAMILIES, list(channels), view))
    if view.per_object:
        parts += await read_channel_rows(channels, view)
    parts.append(await read_objects(cm.CONNECTION_FAMILIES, list(connections), view))
    if not detailed:
        if not view.per_object:
            parts += total_families(server)
        parts += m.totals_families(server)
    parts += m.info_families()
    parts += topology_families(server, view) if detailed else global_families(server)
    return parts


def telemetry_families(view: View) -> Iterator[Metric]:
    """telemetry_scrape_encoded_size_bytes, _duration_seconds and _size_bytes of every
    registry (default, per-object, detailed), counting the scrapes before this one, as
    rabbitmq_prometheus's prometheus_httpd keeps them."""
    labels = ["registry", "content_type"]
    encoded = SummaryMetricFamily(
        "telemetry_scrape_encoded_size_bytes",
        "Scrape size, encoded",
        labels=[*labels, "encoding"],
    )
    duration = SummaryMetricFamily(
        "telemetry_scrape_duration_seconds", "Scrape duration", labels=labels
    )
    size = SummaryMetricFamily(
        "telemetry_scrape_size_bytes", "Scrape size, not encoded", labels=labels
    )
    for registry, seen in sorted(view.telemetry.items()):
        for encoding, (count, sent) in sorted(seen.encoded.items()):
            encoded.add_metric([registry, CONTENT_TYPE, encoding], count, sent)
        duration.add_metric([registry, CONTENT_TYPE], seen.count, seen.seconds)
        size.add_metric([registry, CONTENT_TYPE], seen.count, seen.size)
    yield encoded
    yield duration
    yield size


class One:
    """A collector of one metric family (prometheus_client writes a registry's text)."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        """The family."""
        yield self.metric


def exposition(metric: Metric) -> bytes:
    """The text of one family (its HELP and TYPE lines, then its samples)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(One(metric))
    return generate_latest(registry)


def process_exposition() -> bytes:
    """prometheus_client's process_* families of this process."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    return generate_latest(registry)


# Samples written between two turns of the loop (a few milliseconds of work).
SAMPLES_PER_TURN = 500


async def render(parts: list[Metric | Table], view: View, process: bool) -> bytes:
    """The exposition text of what :func:`read` took (``process``: with the process_*
    families first). Per-object families are written a slice of samples at a time, the
    loop serving the clients between two slices; every slice after a family's first is
    written without the HELP and TYPE lines."""
    out = [process_exposition()] if process else []
    prefix = PREFIX if view.groups is None else DETAILED_PREFIX
    for part in parts:
        if not isinstance(part, Table):
            out.append(exposition(part))
        elif not view.per_object:
            out += [exposition(metric) for metric in part.metrics(prefix, False)]
        else:
            for index, family in enumerate(part.families):
                for start in range(0, max(len(part.rows), 1), SAMPLES_PER_TURN):
                    found = m.metric(prefix + family.name, family, part.labels)
                    for labels, values in part.rows[start : start + SAMPLES_PER_TURN]:
                        found.add_metric(labels, values[index])
                    text = exposition(found)
                    out.append(text.split(b"\n", 2)[2] if start else text)
                    await asyncio.sleep(0)
    out += [exposition(metric) for metric in telemetry_families(view)]
    return b"".join(out)


TELEMETRY_KEY: web.AppKey[dict[str, Telemetry]] = web.AppKey("telemetry")
SERVER_KEY: web.AppKey[ServerState[Connection]] = web.AppKey("prometheus_server")


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
    parts = await read(server, view)
    body = await render(parts, view, process=view.registry == "default")
    size = len(body)
    encoding = "identity"
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        # As rabbitmq_prometheus answers Prometheus, which asks for gzip; zlib lets go of
        # the interpreter while it works, so a thread compresses beside the loop.
        encoding = "gzip"
        body = await asyncio.to_thread(gzip.compress, body)
    seen = view.telemetry.setdefault(view.registry, Telemetry())
    seen.count += 1
    seen.seconds += time.perf_counter() - started
    seen.size += size
    counts = seen.encoded.setdefault(encoding, [0, 0])
    counts[0] += 1
    counts[1] += len(body)
    headers = {"Content-Type": CONTENT_TYPE, "Content-Encoding": encoding}
    return web.Response(body=body, headers=headers)


PrometheusHandle = HttpListener  # the running Prometheus listener


async def start_prometheus(
    server: ServerState[Connection], host: str, port: int
) -> PrometheusHandle:
    """Serve the Prometheus endpoints of ``server`` on ``host:port`` (0: any free port, read
    it from the handle). Call on the broker's running event loop."""
    app = web.Application()
    app[SERVER_KEY] = server
    app[TELEMETRY_KEY] = {}
    for path in ("/metrics", "/metrics/per-object", "/metrics/detailed"):
        app.router.add_get(path, scrape)
        app.router.add_get(path + "/", scrape)
    runner, actual_port = await serve(app, host, port)
    log.info("Prometheus metrics on http://%s:%s/metrics", host, actual_port)
    return PrometheusHandle(runner, host, actual_port)
