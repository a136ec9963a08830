"""rabbitmq_prometheus's channel, connection and ``rabbitmq_global_*`` families (names,
types and help texts of 3.10.8; see leveret.management.metrics for the queue and node
families and the views).

The channel counters (``rabbitmq_channel_messages_published_total``...) are served
aggregated as node-wide totals since start, and per object (and in the detailed groups
``channel_exchange_metrics`` and ``channel_queue_metrics``) as a sample per channel and
exchange or channel and queue, with RabbitMQ's labels, from each open channel's rows
(leveret.wire.channel.stats). An aggregated total never goes down (a closed channel's counts
are folded into the node's; RabbitMQ's aggregated sum drops when a channel that published
closes, which Prometheus's ``rate()`` reads as a counter reset).
``rabbitmq_queue_messages_published_total`` is served per channel, exchange and queue
(``channel_queue_exchange_metrics``), from the channel's publishes per route
(leveret.session.publish.ExchangeStats).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.management.metrics import Family
from leveret.wire.channel.stats import EXCHANGE_COUNTERS, QUEUE_COUNTERS

if TYPE_CHECKING:
    from leveret.node.churn import SocketCounters
    from leveret.wire.channel import Channel
    from leveret.wire.connection import Connection


@dataclass(frozen=True)
class ObjectFamily(Family):
    """A per-channel or per-connection family, with its value for the object and its
    detailed group."""

    value: Callable[[object], float] = lambda _o: 0
    group: str = "channel_metrics"


def _channel(read: Callable[[Channel], float]) -> Callable[[object], float]:
    return read  # type: ignore[return-value]  # the collectors pass channels only


def _connection(read: Callable[[Connection], float]) -> Callable[[object], float]:
    return read  # type: ignore[return-value]  # the collectors pass connections only


def unconfirmed(channel: Channel) -> int:
    """Publishes on a confirm channel not confirmed yet."""
    return channel.publish_seq - channel.confirmed_upto


def uncommitted(channel: Channel) -> int:
    """Publishes in the open transaction."""
    return channel.tx_publishes


def prefetch(channel: Channel) -> int:
    """basic.qos prefetch_count for each new consumer."""
    return channel.prefetch_count


def global_prefetch(channel: Channel) -> int:
    """basic.qos prefetch_count with global set: for the channel's consumers together."""
    return channel.global_prefetch


def socket_counter(connection: Connection, name: str) -> int:
    """One of the connection socket's counters (leveret.node.churn.SocketCounters)."""
    counters: SocketCounters = connection.io
    return int(getattr(counters, name))


CHANNEL_FAMILIES = (
    ObjectFamily(
        "channel_consumers", "gauge", "Consumers on a channel", _channel(lambda c: len(c.consumers))
    ),
    ObjectFamily(
        "channel_messages_unacked",
        "gauge",
        "Delivered but not yet acknowledged messages",
        _channel(lambda c: len(c.unacked)),
    ),
    ObjectFamily(
        "channel_messages_unconfirmed",
        "gauge",
        "Published but not yet confirmed messages",
        _channel(unconfirmed),
    ),
    ObjectFamily(
        "channel_messages_uncommitted",
        "gauge",
        "Messages received in a transaction but not yet committed",
        _channel(uncommitted),
    ),
    ObjectFamily(
        "channel_acks_uncommitted",
        "gauge",
        "Message acknowledgements in a transaction not yet committed",
        _channel(lambda c: len(c.tx_acks)),
    ),
    ObjectFamily(
        "consumer_prefetch",
        "gauge",
        "Limit of unacknowledged messages for each consumer",
        _channel(prefetch),
    ),
    ObjectFamily(
        "channel_prefetch",
        "gauge",
        "Total limit of unacknowledged messages for all consumers on a channel",
        _channel(global_prefetch),
    ),
)

CONNECTION_FAMILIES = (
    ObjectFamily(
        "connection_incoming_bytes_total",
        "counter",
        "Total number of bytes received on a connection",
        _connection(lambda c: socket_counter(c, "recv_oct")),
        "connection_coarse_metrics",
    ),
    ObjectFamily(
        "connection_outgoing_bytes_total",
        "counter",
        "Total number of bytes sent on a connection",
        _connection(lambda c: socket_counter(c, "send_oct")),
        "connection_coarse_metrics",
    ),
    ObjectFamily(
        "connection_incoming_packets_total",
        "counter",
        "Total number of packets received on a connection",
        _connection(lambda c: socket_counter(c, "recv_cnt")),
        "connection_metrics",
    ),
    ObjectFamily(
        "connection_outgoing_packets_total",
        "counter",
        "Total number of packets sent on a connection",
        _connection(lambda c: socket_counter(c, "send_cnt")),
        "connection_metrics",
    ),
    # Erlang's send_pend is bytes too, whatever the help text says.
    ObjectFamily(
        "connection_pending_packets",
        "gauge",
        "Number of packets waiting to be sent on a connection",
        _connection(
            lambda c: c.transport.get_write_buffer_size() if c.transport is not None else 0
        ),
        "connection_metrics",
    ),
    ObjectFamily(
        "connection_channels",
        "gauge",
        "Channels on a connection",
        _connection(lambda c: len(c.channels)),
        "connection_metrics",
    ),
)


@dataclass(frozen=True)
class TotalFamily(Family):
    """A node-wide counter: its value from the publish counters (``ServerState.counters``) or
    from the per-queue-type totals (:meth:`leveret.node.churn.NodeCounters.totals`); a channel
    counter's per object too, from the channels' rows (``row`` and its detailed ``group``)."""

    publish: str = ""  # an attribute of ServerState.counters
    totals: Callable[[dict[str, int]], int] | None = None  # of one queue type's totals
    # Its counter in a channel's rows (leveret.wire.channel.stats.EXCHANGE_COUNTERS or
    # QUEUE_COUNTERS) and their detailed group; "": served aggregated only.
    row: str = ""
    group: str = ""


EXCHANGE_GROUP, QUEUE_GROUP = "channel_exchange_metrics", "channel_queue_metrics"
QUEUE_EXCHANGE_GROUP = "channel_queue_exchange_metrics"


def _delivered_ack(t: dict[str, int]) -> int:
    """Deliveries to consumers that acknowledge (every take less the other three kinds)."""
    return t["delivered_total"] - t["deliver_no_ack_total"] - t["get_total"] - t["get_no_ack_total"]


CHANNEL_TOTALS = (
    TotalFamily(
        "channel_messages_published_total",
        "counter",
        "Total number of messages published into an exchange on a channel",
        publish="received",
        row="publish",
        group=EXCHANGE_GROUP,
    ),
    TotalFamily(
        "channel_messages_confirmed_total",
        "counter",
        "Total number of messages published into an exchange and confirmed on the channel",
        publish="confirmed",
        row="confirm",
        group=EXCHANGE_GROUP,
    ),
    TotalFamily(
        "channel_messages_unroutable_returned_total",
        "counter",
        "Total number of messages published as mandatory into an exchange and returned to the "
        "publisher as unroutable",
        publish="unroutable_returned",
        row="return_unroutable",
        group=EXCHANGE_GROUP,
    ),
    TotalFamily(
        "channel_messages_unroutable_dropped_total",
        "counter",
        "Total number of messages published as non-mandatory into an exchange and dropped as "
        "unroutable",
        publish="unroutable_dropped",
        row="drop_unroutable",
        group=EXCHANGE_GROUP,
    ),
    TotalFamily(
        "channel_get_ack_total",
        "counter",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        totals=lambda t: t["get_total"],
        row="get",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_get_total",
        "counter",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        totals=lambda t: t["get_no_ack_total"],
        row="get_no_ack",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_messages_delivered_ack_total",
        "counter",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        totals=_delivered_ack,
        row="deliver",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_messages_delivered_total",
        "counter",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        totals=lambda t: t["deliver_no_ack_total"],
        row="deliver_no_ack",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_messages_redelivered_total",
        "counter",
        "Total number of messages redelivered to consumers",
        totals=lambda t: t["redeliver_total"],
        row="redeliver",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_messages_acked_total",
        "counter",
        "Total number of messages acknowledged by consumers",
        totals=lambda t: t["acked_total"],
        row="ack",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "channel_get_empty_total",
        "counter",
        "Total number of times basic.get operations fetched no message",
        totals=lambda t: t["get_empty_total"],
        row="get_empty",
        group=QUEUE_GROUP,
    ),
    TotalFamily(
        "queue_messages_published_total",
        "counter",
        "Total number of messages published to queues",
        totals=lambda t: t["published_total"],
        row="publish",
        group=QUEUE_EXCHANGE_GROUP,
    ),
)

# Served per object too, from a channel's rows per exchange, per queue (in the rows' order).
CHANNEL_EXCHANGE_TOTALS = tuple(
    sorted(
        (f for f in CHANNEL_TOTALS if f.group == EXCHANGE_GROUP),
        key=lambda f: EXCHANGE_COUNTERS.index(f.row),
    )
)
# Per channel, exchange and queue: the publishes an exchange's route took to the queue.
CHANNEL_QUEUE_EXCHANGE_TOTALS = tuple(f for f in CHANNEL_TOTALS if f.group == QUEUE_EXCHANGE_GROUP)
CHANNEL_QUEUE_TOTALS = tuple(
    sorted(
        (f for f in CHANNEL_TOTALS if f.group == QUEUE_GROUP),
        key=lambda f: QUEUE_COUNTERS.index(f.row),
    )
)

# rabbitmq_global_*: labelled protocol="amqp091", and per queue type where RabbitMQ counts
# per queue type (rabbit_global_counters).
GLOBAL_BY_QUEUE_TYPE = (
    TotalFamily(
        "global_messages_acknowledged_total",
        "counter",
        "Total number of messages acknowledged by consumers",
        totals=lambda t: t["acked_total"],
    ),
    TotalFamily(
        "global_messages_delivered_consume_auto_ack_total",
        "counter",
        "Total number of messages delivered to consumers using basic.consume with automatic "
        "acknowledgment",
        totals=lambda t: t["deliver_no_ack_total"],
    ),
    TotalFamily(
        "global_messages_delivered_consume_manual_ack_total",
        "counter",
        "Total number of messages delivered to consumers using basic.consume with manual "
        "acknowledgment",
        totals=_delivered_ack,
    ),
    TotalFamily(
        "global_messages_delivered_get_auto_ack_total",
        "counter",
        "Total number of messages delivered to consumers using basic.get with automatic "
        "acknowledgment",
        totals=lambda t: t["get_no_ack_total"],
    ),
    TotalFamily(
        "global_messages_delivered_get_manual_ack_total",
        "counter",
        "Total number of messages delivered to consumers using basic.get with manual "
        "acknowledgment",
        totals=lambda t: t["get_total"],
    ),
    TotalFamily(
        "global_messages_delivered_total",
        "counter",
        "Total number of messages delivered to consumers",
        totals=lambda t: t["delivered_total"],
    ),
    TotalFamily(
        "global_messages_get_empty_total",
        "counter",
        "Total number of times basic.get operations fetched no message",
        totals=lambda t: t["get_empty_total"],
    ),
    TotalFamily(
        "global_messages_redelivered_total",
        "counter",
        "Total number of messages redelivered to consumers",
        totals=lambda t: t["redeliver_total"],
    ),
)
GLOBAL_BY_PROTOCOL = (
    TotalFamily(
        "global_messages_confirmed_total",
        "counter",
        "Total number of messages confirmed to publishers",
        publish="confirmed",
    ),
    TotalFamily(
        "global_messages_received_total",
        "counter",
        "Total number of messages received from publishers",
        publish="received",
    ),
    TotalFamily(
        "global_messages_routed_total",
        "counter",
        "Total number of messages routed to queues or streams",
        publish="routed",
    ),
    TotalFamily(
        "global_messages_unroutable_dropped_total",
        "counter",
        "Total number of messages published as non-mandatory into an exchange and dropped as "
        "unroutable",
        publish="unroutable_dropped",
    ),
    TotalFamily(
        "global_messages_unroutable_returned_total",
        "counter",
        "Total number of messages published as mandatory into an exchange and returned to the "
        "publisher as unroutable",
        publish="unroutable_returned",
    ),
)
CLASSIC, QUORUM = "rabbit_classic_queue", "rabbit_quorum_queue"
# rabbitmq_global_messages_dead_lettered_*: the reason counted, and the (queue type,
# dead-letter strategy) pairs 3.10.8 serves a sample for, zeros included (observed).
# Leveret dead-letters at most once: its at_least_once samples stay 0.
_EVERY_STRATEGY = ((QUORUM, "at_least_once"), (QUORUM, "at_most_once"), (QUORUM, "disabled"))
_CLASSIC = ((CLASSIC, "at_most_once"), (CLASSIC, "disabled"))
DEAD_LETTERED: tuple[tuple[Family, str, tuple[tuple[str, str], ...]], ...] = (
    (
        Family(
            "global_messages_dead_lettered_confirmed_total",
            "counter",
            "Total number of messages dead-lettered and confirmed by target queues",
        ),
        "confirmed",
        ((QUORUM, "at_least_once"),),
    ),
    (
        Family(
            "global_messages_dead_lettered_delivery_limit_total",
            "counter",
            "Total number of messages dead-lettered due to delivery-limit exceeded",
        ),
        "delivery_limit",
        _EVERY_STRATEGY,
    ),
    (
        Family(
            "global_messages_dead_lettered_expired_total",
            "counter",
            "Total number of messages dead-lettered due to message TTL exceeded",
        ),
        "expired",
        _CLASSIC + _EVERY_STRATEGY,
    ),
    (
        Family(
            "global_messages_dead_lettered_maxlen_total",
            "counter",
            "Total number of messages dead-lettered due to overflow drop-head or "
            "reject-publish-dlx",
        ),
        "maxlen",
        _CLASSIC + _EVERY_STRATEGY[1:],
    ),
    (
        Family(
            "global_messages_dead_lettered_rejected_total",
            "counter",
            "Total number of messages dead-lettered due to basic.reject or basic.nack",
        ),
        "rejected",
        _CLASSIC + _EVERY_STRATEGY,
    ),
)
GLOBAL_CONSUMERS = Family("global_consumers", "gauge", "Current number of consumers")
# Open channels that have published (rabbit_global_counters' publishers, as counted after
# rabbitmq-server pull request 6244: from a channel's first basic.publish until it closes;
# 3.10.8's own figure drifts below zero). Counted at scrape time from each channel's publish
# counter (leveret.wire.channel.stats.DeliveryCounters.has_published).
GLOBAL_PUBLISHERS = Family("global_publishers", "gauge", "Current number of publishers")
GLOBAL_RECEIVED_CONFIRM = Family(
    "global_messages_received_confirm_total",
    "counter",
    "Total number of messages received from publishers expecting confirmations",
)
