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
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from exchanges.routing import route

if TYPE_CHECKING:
    from broker.message import Message
    from broker.queue import Queue


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _routing_keys(message: Message, headers: dict[str, Any]) -> list[str]:
    keys = [message.routing_key]
    cc = headers.get("CC")
    if isinstance(cc, list):
        keys += [_text(k) for k in cc if isinstance(k, str | bytes)]
    return keys


def _updated_deaths(
    deaths: list[Any], queue: str, reason: str, exchange: str, keys: list[str], expiration: Any
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
        "time": datetime.now(UTC).replace(microsecond=0),
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


def dead_letter(queue: Queue, message: Message, reason: str) -> None:
    """Dead-letter ``message`` from ``queue`` for ``reason`` (no-op without a DLX)."""
    dlx = queue.dlx
    if dlx is None:
        return
    vhost = queue.vhost
    if dlx not in vhost.projection.exchanges:
        return
    properties = message.copy_properties()
    headers = dict(properties.headers or {})
    keys = _routing_keys(message, headers)
    deaths = headers.get("x-death")
    deaths = _updated_deaths(
        list(deaths) if isinstance(deaths, list) else [],
        queue.name,
        reason,
        message.exchange,
        keys,
        properties.expiration,
    )
    headers["x-death"] = deaths
    if "x-first-death-queue" not in headers:
        headers["x-first-death-queue"] = queue.name
        headers["x-first-death-reason"] = reason
        headers["x-first-death-exchange"] = message.exchange
    headers["x-last-death-queue"] = queue.name
    headers["x-last-death-reason"] = reason
    headers["x-last-death-exchange"] = message.exchange
    if queue.dlrk is not None:
        keys = [queue.dlrk]
        headers.pop("CC", None)
    properties.headers = headers
    properties.expiration = None
    copy = message.with_properties(properties, exchange=dlx, routing_key=keys[0])
    copy.ttl = None
    targets: set[str] = set()
    for key in keys:
        targets.update(route(vhost.projection, dlx, key, headers))
    for name in sorted(targets):
        target = vhost.queues.get(name)
        if target is None or (reason != "rejected" and is_cycle(name, deaths)):
            continue
        target.publish(copy)
