"""Stream queues (``x-queue-type: stream``) as AMQP 0-9-1 clients see them.

A stream is an append-only log: consuming does not remove messages, every consumer reads
from an offset of its own (``x-stream-offset``: ``first``, ``last``, ``next``, a number, a
timestamp, or an interval such as ``"1h"``) and each delivery carries its offset in the
``x-stream-offset`` header. RabbitMQ's rules (docs/streams.md "Usage" and "Limitations";
rabbit_stream_queue; each observed on 3.10.8 with pika and aio-pika):

* consumers must acknowledge and need a consumer prefetch (``basic.qos``); an ack only
  frees prefetch credit, nothing is removed;
* ``basic.get``, ``queue.purge``, ``basic.nack`` and ``basic.reject`` are 540
  NOT_IMPLEMENTED (the connection closes);
* retention (``x-max-length-bytes``, ``x-max-age``) drops whole segments from the head
  (``x-stream-max-segment-size-bytes``, 500 MB by default), evaluated when a segment is
  full, so a stream keeps at least its last segment.

Offsets are numbered from 0 per stream and survive a restart: the stored copy of each
message is the one delivered, its header already carrying ``x-stream-offset``, and the
store's 64-bit field that classic queues use for an expiry holds its publish time.

Leveret keeps a stream's messages in memory like any queue's (counted against the memory
watermark as a queue's ready messages are, until retention drops them or the stream is
deleted; a delivery waiting for its ack adds only its record: leveret.node.memory); a message
is one "chunk", so ``last`` starts at the last message, where RabbitMQ starts at the last
chunk (one chunk per publish unless publishes are batched).

Filtering (RabbitMQ 3.13, docs/stream-filtering.md): a publisher gives a message a filter
value in its ``x-stream-filter-value`` header; a consumer asks for some with the
``x-stream-filter`` argument (a string or an array of strings) and for the messages without
one with ``x-stream-match-unfiltered`` (rabbit_stream_queue:filter_spec/1). RabbitMQ
filters whole chunks through a Bloom filter, so a consumer may also get other messages of a
chunk that matched; a Leveret chunk is one message, so it gets exactly the matching ones.
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from leveret.node.arguments import NAMED_OFFSETS, arg_text, int_arg, interval_ms
from leveret.node.errors import (
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AMQPChannelError,
    AMQPConnectionError,
    ChannelCrashError,
)
from leveret.node.memory import message_bytes
from leveret.node.message import PROPERTIES_AT, Message, unmarshal_properties, with_header
from leveret.node.queue import Consumer, Entry, Queue

if TYPE_CHECKING:
    from leveret.node.peers import ConnectionPeer
    from leveret.node.vhost import VHost
    from leveret.storage.segments import StoredMessage

OFFSET_HEADER = "x-stream-offset"
FILTER_HEADER = "x-stream-filter-value"
# osiris' default segment size (rabbit_stream_queue: ?MAX_SEGMENT_SIZE_BYTES).
DEFAULT_SEGMENT_BYTES = 500_000_000

# Where a consumer starts: ("first"|"last"|"next", 0), ("offset", n) or ("time", ms).
Start = tuple[str, int]


def not_supported(what: str, where: str) -> AMQPConnectionError:
    """540 for an operation streams refuse (``basic.get``, ``queue.purge``, ``basic.nack
    and basic.reject``, ``automatic acknowledgement``) on the queue ``where`` names."""
    return AMQPConnectionError(NOT_IMPLEMENTED, f"{what} not supported by stream queues {where}")


def parse_start(arguments: Mapping[str, Any], now_ms: int = 0) -> Start:
    """The start a consumer's ``x-stream-offset`` asks for (``next`` when absent).

    As RabbitMQ 3.10.8: an integer is an offset (a negative one means the first), a
    timestamp a time (seconds), a string ``first``/``last``/``next`` or an interval back
    from ``now_ms`` (the vhost's time; other strings were refused before:
    leveret.node.arguments.consume_error); floats,
    booleans and other types crash RabbitMQ's channel (541).
    """
    if OFFSET_HEADER not in arguments:
        return ("next", 0)
    value = arguments[OFFSET_HEADER]
    if isinstance(value, bool | float):
        raise ChannelCrashError()
    if isinstance(value, int):
        return ("offset", max(value, 0))
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return ("time", int(stamp.timestamp()) * 1000)
    text = arg_text(value)
    if text is not None:
        if text in NAMED_OFFSETS:
            return (text, 0)
        back = interval_ms(text)
        if back is not None:
            return ("time", now_ms - back)
    raise ChannelCrashError()


class Filter:
    """What a filtering consumer asked for (rabbit_stream_queue:filter_spec/1)."""

    __slots__ = ("match_unfiltered", "values")

    def __init__(self, values: frozenset[str], match_unfiltered: bool) -> None:
        self.values = values
        self.match_unfiltered = match_unfiltered

    def matches(self, value: str | None) -> bool:
        """Whether a message with the filter value ``value`` (None: none) is delivered."""
        return self.match_unfiltered if value is None else value in self.values


def parse_filter(arguments: Mapping[str, Any]) -> Filter | None:
    """The filter ``basic.consume`` arguments ask for, or None (every message). As in
    RabbitMQ nothing here is an error: array elements that are no string are left out,
    an ``x-stream-filter`` of another type means no filter, and an
    ``x-stream-match-unfiltered`` that is no boolean means false."""
    wanted = arguments.get("x-stream-filter")
    if isinstance(wanted, str):
        values = frozenset((wanted,))
    elif isinstance(wanted, list):
        values = frozenset(value for value in wanted if isinstance(value, str))
    else:
        return None
    return Filter(values, arguments.get("x-stream-match-unfiltered") is True)


def filter_value(message: Message) -> str | None:
    """A message's filter value: its ``x-stream-filter-value`` header if that is a string
    (RabbitMQ 3.13 takes only strings; another type crashes its channel, while Leveret
    stores the message as one without a value)."""
    headers = message.headers
    value = headers.get(FILTER_HEADER) if headers else None
    return value if isinstance(value, str) else None


def _age(value: Any) -> int | None:
    """An ``x-max-age`` or ``max-age`` policy value in ms (None: unset or not valid; the
    policy's value is not validated when it is set, as in RabbitMQ)."""
    if not isinstance(value, str | bytes):
        return None
    try:
        return interval_ms(value)
    except ChannelCrashError:
        return None


def _lower(own: int | None, policy: Any) -> int | None:
    """The lower of an argument and a policy value (either may be unset)."""
    values = [v for v in (own, policy) if isinstance(v, int) and not isinstance(v, bool)]
    return min(values) if values else None


class StreamQueue(Queue):
    """A stream: the log of messages, and where each consumer is in it."""

    __slots__ = (
        "filters",
        "first_offset",
        "log",
        "max_age",
        "positions",
        "retention_bytes",
        "segment_bytes",
        "segments",
        "stamps",
        "values",
    )

    stream: ClassVar[bool] = True

    def __init__(
        self,
        vhost: VHost,
        name: str,
        durable: bool,
        owner: ConnectionPeer | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.log: list[Message] = []
        self.stamps: list[int] = []  # publish time (ms since the epoch) per message
        self.values: list[str | None] = []  # filter value per message
        self.first_offset = 0  # the offset of log[0]
        # Segments as [first offset, bytes]; the last one is being written.
        self.segments: list[list[int]] = [[0, 0]]
        self.positions: dict[Consumer, int] = {}
        self.filters: dict[Consumer, Filter] = {}  # the consumers that filter
        super().__init__(vhost, name, durable, owner, auto_delete, arguments)

    def _configure(self) -> None:
        # Nothing of a classic queue's features applies: x-max-length-bytes is retention.
        super()._configure()
        self.max_length = self.max_length_bytes = self.message_ttl = self.expires = None
        self.dlx = self.dlrk = None
        self.plain = True
        # Argument or policy, the lower wins (rabbit_stream_queue:make_stream_conf/1).
        policy = self.policy_definition
        self.retention_bytes = _lower(
            int_arg(self.arguments, "x-max-length-bytes"), policy.get("max-length-bytes")
        )
        self.max_age = _lower(_age(self.arguments.get("x-max-age")), _age(policy.get("max-age")))
        segment = _lower(
            int_arg(self.arguments, "x-stream-max-segment-size-bytes"),
            policy.get("stream-max-segment-size-bytes"),
        )
        self.segment_bytes = segment if segment else DEFAULT_SEGMENT_BYTES

    # -- messages ---------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Append ``message`` (every message is stored, whatever its delivery mode) and
        deliver it to the consumers waiting at the end of the log."""
        self.published_total += 1
        offset = self.first_offset + len(self.log)
        copy = Message(
            message.exchange,
            message.routing_key,
            with_header(message.header, OFFSET_HEADER, offset),
            message.body,
        )
        stamp = self.clock.wall_ms()
        if self.store is not None:
            copy.store_ids = {
                self.name: self.store.append(
                    (self.vhost.name, self.name),
                    copy.exchange,
                    copy.routing_key,
                    copy.header,
                    copy.body,
                    expires=stamp,  # a stream's stored messages keep their publish time
                )
            }
            persistence = self.vhost.persistence
            assert persistence is not None
            message.sync_gen = persistence.appended()
        self._append(copy, stamp, filter_value(message))
        self.drain()
        return True

    def _append(self, message: Message, stamp: int, value: str | None) -> None:
        size = len(message.header) + message.body_size
        segment = self.segments[-1]
        if segment[1] and segment[1] + size > self.segment_bytes:
            self.segments.append([self.first_offset + len(self.log), 0])
            self._apply_retention(stamp)
        self.segments[-1][1] += size
        self.log.append(message)
        self.stamps.append(stamp)
        self.values.append(value)
        self.ready_bytes += message.body_size
        size = message_bytes(message)
        self.held += size
        self.memory.add(size)

    def _apply_retention(self, now: int) -> None:
        """Drop whole segments from the head, never the one being written: while the
        stream is over ``x-max-length-bytes``, or the newest message of the oldest segment
        is older than ``x-max-age``."""
        limit = self.retention_bytes
        segments = self.segments
        total = sum(size for _, size in segments)
        drop = 0
        while len(segments) - drop > 1:
            size = segments[drop][1]
            last = segments[drop + 1][0] - 1
            too_big = limit is not None and total > limit
            too_old = (
                self.max_age is not None
                and self.stamps[last - self.first_offset] < now - self.max_age
            )
            if not (too_big or too_old):
                break
            total -= size
            drop += 1
        if drop:
            self._truncate(segments[drop][0])
            del segments[:drop]

    def _truncate(self, new_first: int) -> None:
        count = new_first - self.first_offset
        gone, self.log = self.log[:count], self.log[count:]
        del self.stamps[:count]
        del self.values[:count]
        self.first_offset = new_first
        self.ready_bytes -= sum(message.body_size for message in gone)
        released = sum(message_bytes(message) for message in gone)
        self.held -= released
        self.memory.remove(released)
        store = self.store
        if store is not None:
            key = (self.vhost.name, self.name)
            for message in gone:
                if message.store_ids:
                    store.ack(key, message.store_ids[self.name])
            persistence = self.vhost.persistence
            assert persistence is not None
            persistence.marks_changed()

    def drain(self) -> None:
        """Deliver to every consumer from its position while it has prefetch credit."""
        log = self.log
        first = self.first_offset
        end = first + len(log)
        positions = self.positions
        filters = self.filters
        for consumer in self.consumers:
            position = max(positions.get(consumer, end), first)
            wanted = filters.get(consumer)
            while position < end and consumer.has_capacity():
                if wanted is None or wanted.matches(self.values[position - first]):
                    self.deliver(consumer, (log[position - first], False, 0.0, position))
                position += 1
            positions[consumer] = position

    def start_at(self, start: Start) -> int:
        """The offset a consumer asking for ``start`` reads first."""
        kind, value = start
        end = self.first_offset + len(self.log)
        if kind == "first":
            return self.first_offset
        if kind == "last":
            return max(end - 1, self.first_offset)
        if kind == "next":
            return end
        if kind == "offset":
            return max(value, self.first_offset)
        # A time: the first message published at or after it (RabbitMQ: the first chunk).
        return self.first_offset + bisect.bisect_left(self.stamps, value)

    # -- what a stream refuses (rabbit_stream_queue; each observed on 3.10.8) ----------

    def check_consume(
        self, no_ack: bool, prefetch: int, global_prefetch: int, arguments: Mapping[str, Any]
    ) -> None:
        """rabbit_stream_queue:consume/3: credit comes from the consumer prefetch, and only
        acks return it (checked in this order); then the start offset, whose values that
        crash RabbitMQ's channel are refused before the consumer exists."""
        where = self.vhost.rs("queue", self.name)
        if not prefetch:
            raise AMQPChannelError(
                PRECONDITION_FAILED, f"consumer prefetch count is not set for '{where}'"
            )
        if no_ack:
            raise not_supported("automatic acknowledgement", where)
        parse_start(arguments)

    def check_get(self) -> None:
        """basic.get: 540."""
        raise not_supported("basic.get", self.vhost.rs("queue", self.name))

    def check_purge(self) -> None:
        """queue.purge: 540."""
        raise not_supported("queue.purge", self.vhost.rs("queue", self.name))

    def check_reject(self) -> None:
        """basic.nack and basic.reject: 540, checked before anything is settled
        (rabbit_stream_queue:settle/4)."""
        raise not_supported("basic.nack and basic.reject", self.vhost.rs("queue", self.name))

    def subscribe(self, consumer: Consumer) -> None:
        """Attach ``consumer`` reading from the start its ``x-stream-offset`` asks for,
        filtered if its arguments ask."""
        start = parse_start(consumer.arguments, self.clock.wall_ms())
        self.positions[consumer] = self.start_at(start)
        wanted = parse_filter(consumer.arguments)
        if wanted is not None:
            self.filters[consumer] = wanted
        self.add_consumer(consumer)

    def detach(self, consumer: Consumer) -> None:
        """Stop delivering to ``consumer``."""
        self.positions.pop(consumer, None)
        self.filters.pop(consumer, None)
        super().detach(consumer)

    # Acks and channel closes only return prefetch credit: nothing leaves a stream.

    def _put_back(self, entries: list[Entry]) -> None:
        """Unacked deliveries given back (channel closed, recover): nothing to put back."""
        self.drain()

    def forget(self, message: Message) -> None:
        """Messages leave a stream only by retention."""

    def mark_delivered(self, message: Message) -> None:
        """Stream deliveries are never marked redelivered."""

    def restore(self, stored: list[StoredMessage], all_redelivered: bool = False) -> None:
        """Put the stored log back (start-up), offsets from the stored headers.
        ``all_redelivered`` is ignored: a stream is read by offset, never redelivered."""
        for item in stored:
            message = Message(item.exchange, item.routing_key, item.header, item.body)
            message.store_ids = {self.name: item.msg_id}
            if not self.log:
                headers = unmarshal_properties(item.header[PROPERTIES_AT:]).headers or {}
                offset = headers.get(OFFSET_HEADER)
                self.first_offset = offset if isinstance(offset, int) else 0
                self.segments = [[self.first_offset, 0]]
            self._append(message, item.expires, filter_value(message))

    def purge(self) -> int:
        """Release the whole log: only :meth:`Queue.discard` calls this, as the stream is
        deleted (clients cannot purge one; the store drops its messages there)."""
        count = len(self.log)
        self.ready_bytes = 0
        held, self.held = self.held, 0
        self.memory.remove(held)
        self.log, self.stamps, self.values = [], [], []
        return count

    @property
    def message_count(self) -> int:
        """Messages in the log (RabbitMQ reports this with a delay; Leveret at once)."""
        return len(self.log)
