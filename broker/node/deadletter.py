"""Dead-lettering: republish a message a queue gave up on, with its ``x-death`` history.

RabbitMQ semantics (docs/dlx.md; ``rabbit_dead_letter.erl`` in 3.12/3.13):

- reasons: ``rejected`` (reject/nack without requeue), ``expired`` (TTL), ``maxlen``;
- the message goes to ``x-dead-letter-exchange`` with ``x-dead-letter-routing-key`` or,
  without one, its original routing keys (the routing key plus ``CC``); a missing DLX
  drops it silently;
- ``x-death`` is an array of tables, newest first, one per ``{queue, reason}``: a repeat
  increments ``count`` and moves the entry to the front; fields ``count``, ``reason``,
  ``queue``, ``time``, ``exchange``, ``routing-keys`` and, when the message had an
  ``expiration``, ``original-expiration`` (the property itself is removed so the copy
  does not expire again);
- ``x-first-death-*`` are set once, ``x-last-death-*`` every time (3.13);
- a cycle (the message would re-enter a queue it already died in) is dropped unless a
  ``rejected`` death lies on it: only consumers can break an automatic loop.

The queue calls :func:`dead_letter`, which names the queue and its vhost as types only (a
type-only import inside the node: ``tests/test_layers.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from pamqp import commands

from leveret.exchanges.model import ExchangeTypeCrashError
from leveret.exchanges.routing import route_kept
from leveret.node.message import (
    PROPERTIES_AT,
    Message,
    cached_by_properties,
    marshal_properties,
    unmarshal_properties,
)

if TYPE_CHECKING:
    from leveret.node.queue import Queue


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _routing_keys(routing_key: str, headers: dict[str, Any]) -> list[str]:
    keys = [routing_key]
    cc = headers.get("CC")
    if isinstance(cc, list):
        keys += [_text(k) for k in cc if isinstance(k, str | bytes)]
    return keys


def _updated_deaths(
    deaths: list[Any],
    queue: str,
    reason: str,
    exchange: str,
    keys: list[str],
    expiration: Any,
    now: int,
) -> list[Any]:
    for index, entry in enumerate(deaths):
        if (
            isinstance(entry, dict)
            and _text(entry.get("queue")) == queue
            and _text(entry.get("reason")) == reason
        ):
            updated = dict(entry)
            updated["count"] = int(entry.get("count") or 0) + 1
            return [updated, *deaths[:index], *deaths[index + 1 :]]
    new: dict[str, Any] = {
        "count": 1,
        "reason": reason,
        "queue": queue,
        "time": datetime.fromtimestamp(now, UTC),
        "exchange": exchange,
        "routing-keys": keys,
    }
    if expiration is not None:
        new["original-expiration"] = _text(expiration)
    return [new, *deaths]


def is_cycle(queue: str, deaths: list[Any]) -> bool:
    """Whether re-entering ``queue`` closes a loop with no ``rejected`` death on it
    (rabbit_dead_letter:is_cycle/2). ``deaths`` is newest first, current death included."""
    for index, entry in enumerate(deaths):
        if isinstance(entry, dict) and _text(entry.get("queue")) == queue:
            return all(
                not (isinstance(d, dict) and _text(d.get("reason")) == "rejected")
                for d in deaths[: index + 1]
            )
    return False


class _Death(NamedTuple):
    """A dead-lettered copy's properties (encoded and decoded), headers, ``x-death`` and the
    routing keys it is republished with."""

    payload: bytes  # the copy's content header payload from the property flags on
    properties: commands.Basic.Properties
    headers: dict[str, Any]
    deaths: list[Any]
    keys: list[str]


@cached_by_properties(maxsize=1024)
def _death(
    encoded: bytes,
    queue: str,
    reason: str,
    exchange: str,
    routing_key: str,
    dlrk: str | None,
    now: int,
) -> _Death:
    """The copy of a message with properties ``encoded`` that ``queue`` dead-letters.

    A function of its arguments alone (``now`` in whole seconds, as ``x-death`` records it),
    so cached: a queue dead-letters runs of messages with the same properties, and decoding
    and encoding their headers was most of the cost of dead-lettering. The results are
    shared between copies, which never change a message's properties (:class:`Message`).
    """
    properties = unmarshal_properties(encoded)
    headers = dict(properties.headers or {})
    keys = _routing_keys(routing_key, headers)
    deaths = headers.get("x-death")
    deaths = _updated_deaths(
        list(deaths) if isinstance(deaths, list) else [],
        queue,
        reason,
        exchange,
        keys,
        properties.expiration,
        now,
    )
    headers["x-death"] = deaths
    if "x-first-death-queue" not in headers:
        headers["x-first-death-queue"] = queue
        headers["x-first-death-reason"] = reason
        headers["x-first-death-exchange"] = exchange
    headers["x-last-death-queue"] = queue
    headers["x-last-death-reason"] = reason
    headers["x-last-death-exchange"] = exchange
    if dlrk is not None:
        keys = [dlrk]
        headers.pop("CC", None)
    properties.headers = headers
    properties.expiration = None
    return _Death(marshal_properties(properties), properties, headers, deaths, keys)


def dead_letter(queue: Queue, message: Message, reason: str) -> None:
    """Dead-letter ``message`` from ``queue`` for ``reason`` (no-op without a DLX)."""
    vhost = queue.vhost
    vhost.churn.dead_letter(queue, reason)  # counted with or without a DLX
    dlx = queue.dlx
    if dlx is None or dlx not in vhost.projection.exchanges:
        events = vhost.events
        if events is not None:
            events.dead_lettered(message, queue.name, reason, None, ())
        return
    death = _death(
        message.header[PROPERTIES_AT:],
        queue.name,
        reason,
        message.exchange,
        message.routing_key,
        queue.dlrk,
        int(vhost.clock.wall()),
    )
    # The same body, so the same class, weight and body size before the properties.
    copy = Message(dlx, death.keys[0], message.header[:PROPERTIES_AT] + death.payload, message.body)
    copy._properties = death.properties
    headers = death.headers
    targets: set[str] = set()
    kept: dict[str, None] = {}
    for key in death.keys:
        try:
            found, kept_by = route_kept(vhost.projection, dlx, key, headers, copy.header)
        except ExchangeTypeCrashError:
            # A type's keeps hook crashed (an x-delay the delayed-message plugin crashes
            # on): RabbitMQ's queue process crashes; here this routing key reaches nothing.
            continue
        targets.update(found)
        kept.update(dict.fromkeys(kept_by))
    if kept:
        # An exchange on the way that keeps it does so once, whatever the number of keys.
        vhost.delayed.hold(copy, list(kept))
    events = vhost.events
    if events is not None:
        # Before the copy is in any queue, as a publish: its deliveries come after.
        reached = [
            name
            for name in sorted(targets)
            if name in vhost.queues and (reason == "rejected" or not is_cycle(name, death.deaths))
        ]
        events.dead_lettered(message, queue.name, reason, copy, reached)
    for name in sorted(targets):
        target = vhost.queues.get(name)
        if target is None or (reason != "rejected" and is_cycle(name, death.deaths)):
            continue
        target.publish(copy)
