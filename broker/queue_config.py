"""A queue's feature settings: its arguments and its policies, and a policy change applied.

RabbitMQ reads a queue's TTL, length limits, overflow, dead-lettering, delivery limit and
consumer timeout from its ``x-`` arguments and the keys of its policy and operator policy
(``rabbit_amqqueue_process:process_args_policy/1``), again whenever a policy changes. This
runs on declare and on a policy change, never per message: publish reads the settled
attributes (``plain`` among them). Functions over :class:`leveret.queue.Queue`, which binds
them as its methods (a stream queue extends ``_configure``), kept apart so the queue module
holds dispatch and the delivery verbs; they see it as a :class:`ConfiguredQueue`, which
lists what they use, so this module does not import :mod:`leveret.queue`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from leveret.arguments import arg_text, int_arg
from leveret.exchanges.policies import Policy, effective_definition, queue_arguments

if TYPE_CHECKING:
    from collections import deque

    from leveret.acktimeout import AckTimeouts
    from leveret.clock import Timer
    from leveret.prioritydeque import Entry, PriorityDeque


class ConfiguredHome(Protocol):
    """A queue's vhost as its settings see it."""

    @property
    def ack_timeouts(self) -> AckTimeouts | None:
        """The delivery acknowledgement timeout checks, told of a queue's own timeout."""


class ConfiguredQueue(Protocol):
    """A queue as its feature settings see it (:class:`leveret.queue.Queue` implements
    it; the functions below are its methods): what they read, and the settings they write."""

    message_ttl: int | None
    expires: int | None
    max_length: int | None
    max_length_bytes: int | None
    overflow: str
    dlx: str | None
    dlrk: str | None
    delivery_limit: int | None
    consumer_timeout: float | None
    plain: bool
    expiring: bool
    policy: Policy | None
    operator_policy: Policy | None
    policy_definition: dict[str, Any]
    _expiry_timer: Timer | None

    @property
    def vhost(self) -> ConfiguredHome:
        """Its vhost."""

    @property
    def arguments(self) -> dict[str, Any]:
        """Its declare arguments."""

    @property
    def quorum(self) -> bool:
        """A quorum queue (the only type with a delivery limit)."""

    @property
    def max_priority(self) -> int | None:
        """``x-max-priority`` (None: no priorities)."""

    @property
    def deleted(self) -> bool:
        """Whether it was deleted."""

    @property
    def messages(self) -> deque[Entry] | PriorityDeque:
        """The ready entries, oldest first."""

    def _configure(self) -> None:
        """:func:`configure` (a stream queue extends it)."""

    def _enforce_drop_head(self) -> None:
        """drop-head: the excess over the limits goes."""

    def _expire_head(self, now: float | None = None) -> None:
        """Drop (or dead-letter) the expired messages at the head."""

    def touch(self) -> None:
        """Restart the ``x-expires`` clock."""


def _str_arg(arguments: dict[str, Any], key: str) -> str | None:
    return arg_text(arguments.get(key))


def configure(queue: ConfiguredQueue) -> None:
    """The feature settings from the queue's arguments and its policy's keys
    (rabbit_amqqueue_process:process_args_policy/1)."""
    arguments = queue_arguments(queue.arguments, queue.policy_definition)
    queue.message_ttl = int_arg(arguments, "x-message-ttl")
    queue.expires = int_arg(arguments, "x-expires")
    queue.max_length = int_arg(arguments, "x-max-length")
    queue.max_length_bytes = int_arg(arguments, "x-max-length-bytes")
    queue.overflow = _str_arg(arguments, "x-overflow") or "drop-head"
    queue.dlx = _str_arg(arguments, "x-dead-letter-exchange")
    queue.dlrk = _str_arg(arguments, "x-dead-letter-routing-key")
    if queue.quorum:
        queue.delivery_limit = int_arg(arguments, "x-delivery-limit")
    # The queue's own delivery acknowledgement timeout (leveret.acktimeout): None
    # means the broker's; a value that is no integer means none at all, as RabbitMQ's
    # evaluate_consumer_timeout1/2 then never fires.
    queue.consumer_timeout = None
    if "x-consumer-timeout" in arguments:
        own = int_arg(arguments, "x-consumer-timeout")
        queue.consumer_timeout = math.inf if own is None else own
    ack_timeouts = queue.vhost.ack_timeouts
    if queue.consumer_timeout is not None and ack_timeouts is not None:
        ack_timeouts.watch(queue)
    # True when no TTL, length limit or priority applies: publish skips all checks.
    queue.plain = (
        queue.message_ttl is None
        and queue.max_length is None
        and queue.max_length_bytes is None
        and not queue.max_priority
    )
    queue.expiring = queue.expiring or queue.message_ttl is not None


def apply_policy(
    queue: ConfiguredQueue, policy: Policy | None, operator_policy: Policy | None = None
) -> None:
    """Take ``policy`` and ``operator_policy`` (None: none) as a classic queue does on a
    policy change: the new limits apply now (drop-head drops the excess,
    dead-lettered as ``maxlen``), the new TTL to messages published from now on, a new
    ``expires`` restarts the expiry clock."""
    if policy == queue.policy and operator_policy == queue.operator_policy:
        return
    expires = queue.expires
    queue.policy = policy
    queue.operator_policy = operator_policy
    queue.policy_definition = effective_definition(policy, operator_policy)
    queue._configure()
    if queue.deleted:
        return
    if queue.overflow == "drop-head":
        queue._enforce_drop_head()
    if queue.expiring and queue.messages:
        queue._expire_head()
    if queue.expires != expires:
        if queue._expiry_timer is not None:
            queue._expiry_timer.cancel()
            queue._expiry_timer = None
        queue.touch()
