"""Message counters and rates for the management API and the metrics endpoint.

The broker keeps plain per-queue counters (``Queue.published_total``, ``delivered_total``,
``acked_total``, and the kinds of delivery: ``deliver_no_ack_total``, ``get_total``, ...),
and per exchange its publishes in and out (``VHost.exchange_stats``); this module turns them
into what RabbitMQ's management plugin shows:

- totals over the whole broker that survive queue deletion: the sampler holds on to every
  queue object it has seen, so when a queue disappears its final counters move into
  ``retired``. A queue created and deleted between two refreshes is missed; refreshes run
  every :data:`INTERVAL` seconds and on every API or metrics request.
- rates (``*_details: {"rate": r}``): the change per second between the last two samples,
  taken every :data:`INTERVAL` seconds, RabbitMQ's default ``collect_statistics_interval``
  of 5000 ms (deps/rabbitmq_management_agent/Makefile).

What the per-queue counters cannot give: messages received from publishers (a message
routed to three queues counts three times in the queues' ``publish``) and unroutable
messages (they reach no queue). Those come from the broker's per-publish counters
(:func:`publish_totals`: ``ServerState.counters``, kept by the API's publish and holding
the closed channels' counts, plus each open channel's own). Channels and connections are
sampled here too (client_stats.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.management.client_stats import ClientStats
from leveret.management.history import History, now_ms, ranges, with_samples
from leveret.session.publish import PUBLISH_COUNTER_NAMES, Counters, PublishCounters

if TYPE_CHECKING:
    from leveret.node.queue import Queue
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

log = logging.getLogger(__name__)

INTERVAL = 5.0
# Counter names as RabbitMQ's message_stats keys: a queue's, summed for the overview (whose
# publish is the broker's own count). deliver_get is deliver (to consumers that ack),
# deliver_no_ack, get and get_no_ack together; redeliver counts both ways of taking.
COUNTERS: tuple[str, ...] = ("publish", "deliver_get", "ack", "deliver", "deliver_no_ack")
COUNTERS += ("get", "get_no_ack", "get_empty", "redeliver")
# The overview's counters that only the broker's per-publish counters have.
PUBLISH_COUNTERS = ("confirm", "drop_unroutable", "return_unroutable")
# Gauges whose rate of change RabbitMQ also shows (queue_totals, per queue).
GAUGES = ("messages", "messages_ready", "messages_unacknowledged")
# An exchange's message_stats: messages published to it, and the deliveries to queues they
# made (VHost.exchange_stats; rabbit_mgmt_format's exchange stats in 3.10.8).
EXCHANGE_COUNTERS = ("publish_in", "publish_out")
# The order of the values a queue's history records.
QUEUE_FIELDS = COUNTERS + GAUGES
# The rates of a queue whose counters and lengths did not change (shared: never mutated).
IDLE_RATES: dict[str, float] = dict.fromkeys(QUEUE_FIELDS, 0.0)


def broker_counters(server: ServerState[Connection]) -> PublishCounters | None:
    """The broker's own publish counters, when it has them: :func:`publish_totals`."""
    if getattr(server, "counters", None) is None:
        return None
    return publish_totals(server)


def publish_totals(server: ServerState[Connection]) -> PublishCounters:
    """The node's publish counters since start: ``ServerState.counters`` (the management API's
    publishes and those of closed channels, folded in as each closed) plus every open
    channel's own (leveret.wire.channel.stats)."""
    totals = PublishCounters()
    sources: list[Counters] = [server.counters]
    sources += [ch.counters for conn in server.connections for ch in conn.channels.values()]
    for name in PUBLISH_COUNTER_NAMES:
        setattr(totals, name, sum(getattr(source, name) for source in sources))
    return totals


def queue_counters(queue: Queue) -> tuple[int, ...]:
    """The :data:`COUNTERS` of one queue, in order."""
    taken = queue.delivered_total
    no_ack, get, get_no_ack = queue.deliver_no_ack_total, queue.get_total, queue.get_no_ack_total
    return (
        queue.published_total,
        taken,
        queue.acked_total,
        taken - no_ack - get - get_no_ack,
        no_ack,
        get,
        get_no_ack,
        queue.get_empty_total,
        queue.redeliver_total,
    )


def queue_gauges(queue: Queue) -> tuple[int, int, int]:
    """(messages, messages_ready, messages_unacknowledged) of one queue."""
    ready = queue.message_count
    return ready + queue.unacked, ready, queue.unacked


@dataclass
class Sample:
    """Counters and gauges at one moment."""

    at: float
    values: tuple[int, ...]


class Sampler:
    """Broker-wide counter totals and the rates of one server."""

    def __init__(self, server: ServerState[Connection]) -> None:
        # Weak: the sampler lives in a WeakKeyDictionary keyed by the server.
        self._server = weakref.ref(server)
        self.retired = [0] * len(COUNTERS)
        # Messages published through the management API that reached no queue (returned,
        # as the API publishes with mandatory set), for a broker without its own counters.
        self.unroutable_returned = 0
        self.global_rates: dict[str, float] = {}
        self.queue_rates: dict[int, dict[str, float]] = {}
        self.exchange_rates: dict[tuple[str, str], dict[str, float]] = {}
        self._seen: dict[int, Queue] = {}
        self._last: Sample | None = None
        self._last_queues: dict[int, Sample] = {}
        self._last_exchanges: dict[tuple[str, str], Sample] = {}
        self._task: asyncio.Task[None] | None = None
        # What the samples were, for ranges (history.py): the overview's (key None),
        # the queues' (by id, as above) and the exchanges' (by (vhost, name)).
        self.overview_history = History()
        self.queue_history = History()
        self.exchange_history = History()
        # Channels' and connections' rates and history (client_stats.py).
        self.clients = ClientStats()
        self.global_names: tuple[str, ...] = ()

    def live_queues(self) -> list[Queue]:
        """Every queue of every vhost."""
        server = self._server()
        if server is None:
            return []
        return [q for vhost in server.vhosts.values() for q in vhost.queues.values()]

    def refresh(self) -> list[Queue]:
        """Remember new queues, retire the counters of deleted ones; returns the live ones."""
        live = self.live_queues()
        current = {id(queue): queue for queue in live}
        for key, queue in list(self._seen.items()):
            if key not in current:
                for i, value in enumerate(queue_counters(queue)):
                    self.retired[i] += value
                del self._seen[key]
                self.queue_history.forget(key)
                self._last_queues.pop(key, None)
                self.queue_rates.pop(key, None)
        self._seen.update(current)
        return live

    def totals(self) -> dict[str, int]:
        """Broker-wide :data:`COUNTERS` since start, and with per-publish counters
        :data:`PUBLISH_COUNTERS` too. ``publish`` then counts messages received from
        publishers, as RabbitMQ's overview does (a message routed to three queues is one
        publish there, unroutable ones count too; observed on 3.10.8); the queues'
        ``publish`` counts what each of them received."""
        live = self.refresh()  # first: it may move counters into ``retired``
        sums = list(self.retired)
        for queue in live:
            for i, value in enumerate(queue_counters(queue)):
                sums[i] += value
        server = self._server()
        counters = broker_counters(server) if server is not None else None
        totals = dict(zip(COUNTERS, sums, strict=True))
        if counters is not None:
            totals["publish"] = counters.received
            own = (counters.confirmed, counters.unroutable_dropped, counters.unroutable_returned)
            totals.update(zip(PUBLISH_COUNTERS, own, strict=True))
        return totals

    def gauges(self) -> dict[str, int]:
        """Broker-wide messages, ready and unacknowledged now."""
        sums = [0, 0, 0]
        for queue in self.live_queues():
            for i, value in enumerate(queue_gauges(queue)):
                sums[i] += value
        return dict(zip(GAUGES, sums, strict=True))

    def sample(self, now: float | None = None) -> None:
        """Take a sample and compute the rates since the previous one."""
        now = time.monotonic() if now is None else now
        at_ms = now_ms()
        totals = self.totals()
        gauges = self.gauges()
        values = (*totals.values(), *gauges.values())
        names = (*totals, *GAUGES)
        if self._last is not None:
            self.global_rates = _rates(self._last, Sample(now, values), names)
        self._last = Sample(now, values)
        self.global_names = names
        self.overview_history.record(None, at_ms, values)
        series = self.queue_history.series
        for key, queue in self._seen.items():
            current = Sample(now, (*queue_counters(queue), *queue_gauges(queue)))
            previous = self._last_queues.get(key)
            if previous is not None:
                # An idle queue's rates are all zero: one shared dict, nothing computed.
                same = previous.values == current.values
                self.queue_rates[key] = (
                    IDLE_RATES if same else _rates(previous, current, QUEUE_FIELDS)
                )
            self._last_queues[key] = current
            kept = series.get(key)
            if kept is None or kept.values[-1] != current.values:  # inlined: 3,000 a sample
                self.queue_history.record(key, at_ms, current.values)
        self._sample_exchanges(now, at_ms)
        server = self._server()
        if server is not None:
            self.clients.sample(server.connections, now, at_ms)

    def _sample_exchanges(self, now: float, at_ms: int) -> None:
        server = self._server()
        last: dict[tuple[str, str], Sample] = {}
        rates: dict[tuple[str, str], dict[str, float]] = {}
        for vhost in server.vhosts.values() if server is not None else ():
            for name, counts in vhost.exchange_stats.items():
                key = (vhost.name, name)
                current = last[key] = Sample(now, tuple(counts))
                previous = self._last_exchanges.get(key)
                if previous is not None:
                    rates[key] = _rates(previous, current, EXCHANGE_COUNTERS)
                self.exchange_history.record(key, at_ms, current.values)
        # Deleted exchanges drop out here: a new one of the same name starts afresh.
        for key in self._last_exchanges.keys() - last.keys():
            self.exchange_history.forget(key)
        self._last_exchanges, self.exchange_rates = last, rates

    def add_samples(
        self,
        history: History,
        key: Hashable,
        names: tuple[str, ...],
        query: Mapping[str, str],
        stats: dict[str, Any] | None,
        lengths: dict[str, Any] | None,
    ) -> None:
        """Give the ``*_details`` of ``stats`` (message counters) and ``lengths`` (the
        :data:`GAUGES`) the samples of the ranges ``query`` asks for (400 for a bad one).
        ``names`` is the order of the values recorded for ``key`` in ``history``."""
        msg_range, length_range = ranges(query)
        indices = {name: i for i, name in enumerate(names)}
        now = now_ms()
        if msg_range is not None and stats is not None:
            counters = [name for name in names if name not in GAUGES]
            with_samples(stats, counters, history.points(key, msg_range, now), indices)
        if length_range is not None and lengths is not None:
            with_samples(lengths, GAUGES, history.points(key, length_range, now), indices)

    def rates_of(self, queue: Queue) -> dict[str, float]:
        """The last computed rates of ``queue`` (zeros before two samples)."""
        return self.queue_rates.get(id(queue), {})

    def start(self, interval: float = INTERVAL) -> None:
        """Sample every ``interval`` seconds on the running loop."""
        if self._task is None:
            self.sample()
            self._task = asyncio.get_running_loop().create_task(self._run(interval))

    async def stop(self) -> None:
        """Stop sampling."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.sample()
            except Exception:  # a bad sample must not end sampling for good
                log.exception("management statistics sample failed")


def _rates(previous: Sample, current: Sample, names: tuple[str, ...]) -> dict[str, float]:
    elapsed = current.at - previous.at
    if elapsed <= 0:
        return dict.fromkeys(names, 0.0)
    return {
        name: round((new - old) / elapsed, 1)
        for name, new, old in zip(names, current.values, previous.values, strict=True)
    }


def details(rate: float | None) -> dict[str, float]:
    """RabbitMQ's ``*_details`` object."""
    return {"rate": rate or 0.0}
