"""Per-channel and per-connection statistics: counters, rates and their history.

A channel's ``message_stats`` are rabbit_mgmt_format's channel stats (publish, confirm,
return_unroutable, drop_unroutable, deliver_get, deliver, deliver_no_ack, get,
get_no_ack, get_empty, redeliver, ack, each with ``*_details``), read from the channel's
own counters (leveret.wire.channel.stats); a connection's ``recv_oct`` / ``send_oct`` get
``*_details`` as rabbit_mgmt_db gives its coarse connection stats. The statistics sampler
(leveret.management.stats) samples them with the queues every 5 s; a request asks for
their samples as RabbitMQ's does: ``?msg_rates_age=..&msg_rates_incr=..`` for a channel,
``?data_rates_age=..&data_rates_incr=..`` for a connection (rabbit_mgmt_util:range/1).

Keyed by the object's id, checked against the object itself: an id Python reuses for a
new channel after an old one closed starts a new series instead of continuing the old.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from leveret.management.history import History, now_ms, requested_range, with_samples
from leveret.wire.channel.stats import CHANNEL_COUNTERS

if TYPE_CHECKING:
    from leveret.wire.connection import Connection

# A connection's counters with rates, in the order its history records them.
CONNECTION_COUNTERS = ("recv_oct", "send_oct")
Rates = dict[str, float]


def connection_counts(conn: Connection) -> tuple[int, int]:
    """(recv_oct, send_oct) of a connection's socket (leveret.node.churn.SocketCounters)."""
    return conn.io.recv_oct, conn.io.send_oct


class ObjectSeries:
    """The last sample, rates and history of one kind of object (channels, connections)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.history = History()
        self.rates: dict[int, Rates] = {}
        # id -> (the object, when, its values): the previous sample.
        self._last: dict[int, tuple[object, float, tuple[int, ...]]] = {}

    def sample(
        self, objects: Iterable[tuple[object, tuple[int, ...]]], now: float, at_ms: int
    ) -> None:
        """Record each (object, values) and its rates since its previous sample; forget
        the objects that are gone."""
        last: dict[int, tuple[object, float, tuple[int, ...]]] = {}
        for obj, values in objects:
            key = id(obj)
            previous = self._last.get(key)
            if previous is not None and previous[0] is not obj:
                self.history.forget(key)  # a reused id: another object
                previous = None
            if previous is not None:
                elapsed = now - previous[1]
                self.rates[key] = {
                    name: round((new - old) / elapsed, 1) if elapsed > 0 else 0.0
                    for name, new, old in zip(self.names, values, previous[2], strict=True)
                }
            last[key] = (obj, now, values)
            self.history.record(key, at_ms, values)
        for key in self._last.keys() - last.keys():
            self.history.forget(key)
            self.rates.pop(key, None)
        self._last = last

    def rates_of(self, obj: object) -> Rates:
        """The last rates of ``obj`` (empty before two samples)."""
        previous = self._last.get(id(obj))
        if previous is None or previous[0] is not obj:
            return {}
        return self.rates.get(id(obj), {})

    def add_samples(
        self, obj: object, target: dict[str, Any], query: Mapping[str, str], prefix: str
    ) -> None:
        """Give ``target``'s ``*_details`` the samples of the ``{prefix}_age`` /
        ``{prefix}_incr`` range ``query`` asks for (400 for a bad one)."""
        rng = requested_range(query, prefix)
        if rng is None:
            return
        previous = self._last.get(id(obj))
        points = (
            self.history.points(id(obj), rng, now_ms())
            if previous is not None and previous[0] is obj
            else []
        )
        indices = {name: i for i, name in enumerate(self.names)}
        with_samples(target, self.names, points, indices)


class ClientStats:
    """The channels' and connections' series of one server's sampler."""

    def __init__(self) -> None:
        self.channels = ObjectSeries(CHANNEL_COUNTERS)
        self.connections = ObjectSeries(CONNECTION_COUNTERS)

    def sample(self, connections: Iterable[Connection], now: float, at_ms: int) -> None:
        """Sample every open connection and channel."""
        conns = list(connections)
        self.connections.sample(((c, connection_counts(c)) for c in conns), now, at_ms)
        channels = [ch for c in conns for ch in c.channels.values()]
        self.channels.sample(((ch, ch.message_counts()) for ch in channels), now, at_ms)
