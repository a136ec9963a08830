"""Policies: optional queue and exchange arguments applied in bulk by name pattern.

RabbitMQ's model (rabbit_policy.erl, docs/parameters.md "Policies"); the broker and the
pipeline share it, as an alternate exchange set by a policy changes routing:

- a policy belongs to a vhost and has a name, a ``pattern`` (a regular expression searched
  in the queue or exchange name), ``apply-to`` (``queues``, ``exchanges`` or ``all``), a
  ``priority`` (default 0) and a ``definition`` of keys;
- at most one policy applies to a queue or an exchange: of those that match, the one with
  the highest priority (rabbit_policy:match_all/2; Leveret breaks a tie by name);
- policies apply at once to existing queues and exchanges and to those declared later;
- *operator policies* (``operator=True``) are a second set, kept by administrators, with a
  few numeric queue keys only (``expires``, ``message-ttl``, ``max-length``,
  ``max-length-bytes``, ``delivery-limit``, ``max-in-memory-*``). One of each kind may apply
  to a queue; where both set a key the lower value wins (rabbit_policy:
  merge_operator_definitions/2, docs/parameters.md "Operator Policies").

What the keys do (rabbit_amqqueue_process:process_args_policy/1, rabbit_exchange): a
queue's own ``x-`` argument and the policy's key are resolved as RabbitMQ resolves them,
the lower value for the limits (``message-ttl``, ``expires``, ``max-length``,
``max-length-bytes``) and the argument for the rest (``overflow``,
``dead-letter-exchange``, ``dead-letter-routing-key``); an exchange's own
``alternate-exchange`` argument wins over the policy's. Keys that change nothing on a
single-node broker (``ha-*``, ``queue-mode``, ``max-age``, ...)
are accepted and kept, as a RabbitMQ definitions export carries them.

This module is pure: parsing and validation with RabbitMQ's texts, matching, and the
resolution of arguments against a definition. The broker's vhosts apply them to queues and
exchanges; :func:`apply_alternates` gives a projection the alternate exchanges they set.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leveret.exchanges.projection import Projection

APPLY_TO = ("queues", "exchanges", "all")
# Operator policies are runtime parameters of this component in RabbitMQ (and so in its
# definitions exports).
OPERATOR_POLICY_COMPONENT = "operator_policy"


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse; ``reason`` is its text (management API 400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def erl_term(value: Any) -> str:
    """A JSON value as Erlang's ``~p`` prints the term RabbitMQ decoded it to."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # Erlang's shortest form: 1.5, 1.0e20, 1.0e-5 (Python: 1.5, 1e+20, 1e-05).
        text = repr(value)
        if "e" not in text:
            return text
        mantissa, exponent = text.split("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{int(exponent)}"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}">>'
    if isinstance(value, list):
        return "[" + ",".join(erl_term(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ",".join(f"{erl_term(k)} => {erl_term(v)}" for k, v in sorted(value.items()))
        return "#{" + items + "}"
    return repr(value)


def _failed(text: str) -> PolicyError:
    # rabbit_mgmt_wm_policy answers a refused policy with "Validation failed\n\n~ts\n".
    return PolicyError(f"Validation failed\n\n{text}\n")


def _integer(minimum: int, what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
            return None
        return f"{erl_term(value)} is not a valid {what}"

    return check


def _name(what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if isinstance(value, str) else f"{erl_term(value)} is not a valid {what}"

    return check


def _overflow(value: Any) -> str | None:
    if value in ("drop-head", "reject-publish", "reject-publish-dlx"):
        return None
    return f"{erl_term(value)} is not a valid overflow value"


def _any(_value: Any) -> str | None:
    return None


# Keys Leveret applies, with RabbitMQ's validation (rabbit_policies:validate_policy0/2).
_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "alternate-exchange": _name("alternate exchange name"),
    "dead-letter-exchange": _name("dead letter exchange name"),
    "dead-letter-routing-key": _name("dead letter routing key"),
    "message-ttl": _integer(0, "message TTL"),
    "expires": _integer(1, "queue expiry"),
    "max-length": _integer(0, "maximum length"),
    "max-length-bytes": _integer(0, "maximum length in bytes"),
    "delivery-limit": _integer(0, "delivery limit"),
    "overflow": _overflow,
    # 3.12+ (rabbitmq-server#7981); the text as RabbitMQ answers a string value:
    # '<<"86400000">> is not a valid consumer timeout' (voxpupuli/puppet-rabbitmq#970).
    "consumer-timeout": _integer(0, "consumer timeout"),
}
# Keys RabbitMQ 3.13 knows that change nothing here (mirroring, queue modes and versions,
# quorum queues, streams, federation): accepted as they are.
_KEPT = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-mode",
    "queue-version",
    "queue-master-locator",
    "queue-leader-locator",
    "dead-letter-strategy",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "max-age",
    "stream-max-segment-size-bytes",
    "initial-cluster-size",
    "federation-upstream",
    "federation-upstream-set",
)
_VALIDATORS.update({key: _any for key in _KEPT})

# Keys an operator policy may set (rabbit_policies: operator_policy_validator; others are
# "not recognised policy settings", observed on 3.10.8). Where a policy and an operator
# policy both set one, the lower value applies (merge_policy_value/3).
_OPERATOR_VALIDATORS = {
    key: _VALIDATORS[key]
    for key in (
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "delivery-limit",
    )
}


def _erlang_min(argument: Any, policy: Any) -> Any:
    # erlang:min/2 of an argument of any type and a policy's integer: in Erlang's term
    # order every number sorts before every other type, so a string argument loses.
    if isinstance(argument, (int, float)) and not isinstance(argument, bool):
        return min(argument, policy)
    return policy


# Policy key -> (queue argument, resolution when both are set). rabbit_amqqueue_process:
# res_min/2 for the limits, res_arg/2 (the queue's argument) for the rest; the consumer
# timeout is rabbit_channel:get_queue_consumer_timeout/2's erlang:min/2.
QUEUE_KEYS: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "message-ttl": ("x-message-ttl", min),
    "expires": ("x-expires", min),
    "max-length": ("x-max-length", min),
    "max-length-bytes": ("x-max-length-bytes", min),
    "delivery-limit": ("x-delivery-limit", min),  # quorum queues only
    "consumer-timeout": ("x-consumer-timeout", _erlang_min),
    "overflow": ("x-overflow", lambda argument, _policy: argument),
    "dead-letter-exchange": ("x-dead-letter-exchange", lambda argument, _policy: argument),
    "dead-letter-routing-key": ("x-dead-letter-routing-key", lambda argument, _policy: argument),
}


@dataclass(frozen=True)
class Policy:
    """One validated policy of a vhost."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int | float
    definition: Mapping[str, Any]
    regex: re.Pattern[str] = field(compare=False, repr=False)

    def applies(self, kind: str, name: str) -> bool:
        """Whether this policy applies to the ``queue`` or ``exchange`` called ``name``."""
        if self.apply_to != "all" and self.apply_to != kind + "s":
            return False
        return self.regex.search(name) is not None

    def to_json(self) -> dict[str, Any]:
        """The policy as the management API and definitions.json show it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(sorted(self.definition.items())),
            "priority": self.priority,
        }

    def to_parameter(self) -> dict[str, Any]:
        """An operator policy as the runtime parameter RabbitMQ exports it as."""
        return {
            "value": {
                "pattern": self.pattern,
                "definition": dict(sorted(self.definition.items())),
                "priority": self.priority,
                "apply-to": self.apply_to,
            },
            "vhost": self.vhost,
            "component": OPERATOR_POLICY_COMPONENT,
            "name": self.name,
        }


def parse(vhost: str, name: str, body: Mapping[str, Any], operator: bool = False) -> Policy:
    """A policy (``operator``: an operator policy) from a management API body or a
    definitions.json entry.

    Raises :class:`PolicyError` with the reason RabbitMQ gives (rabbit_mgmt_wm_policy,
    rabbit_policy:policy_validation/0): missing keys, then the priority, the pattern,
    ``apply-to`` and the definition's keys.
    """
    missing = [key for key in ("pattern", "definition") if key not in body]
    if missing:
        raise PolicyError("[" + ",".join(f"{{key_missing,{k}}}" for k in missing) + "]")
    priority = body.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise _failed(f"priority should be a number, actually was {erl_term(priority)}")
    if isinstance(priority, float) and not math.isfinite(priority):
        raise _failed(f"priority should be a number, actually was {erl_term(priority)}")
    pattern = body["pattern"]
    if not isinstance(pattern, str):
        raise _failed(f"pattern should be a binary but was {erl_term(pattern)}")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        # RabbitMQ prints PCRE's {Reason, Position}; Python's re words its reasons
        # differently, so only the shape is the same.
        raise _failed(
            f'pattern should be regular expression but is invalid: {{"{exc.msg}",{exc.pos or 0}}}'
        ) from exc
    apply_to = body.get("apply-to", "all")
    if apply_to is None:
        apply_to = "all"
    if apply_to not in APPLY_TO:
        shown = apply_to if isinstance(apply_to, str) else erl_term(apply_to)
        raise _failed(f"apply-to '{shown}' unrecognised; should be 'queues', 'exchanges' or 'all'")
    definition = body["definition"]
    if not isinstance(definition, dict):
        raise _failed(f"definition must be a dictionary: {erl_term(definition)}")
    if not definition:
        raise _failed("no policy provided")
    validators = _OPERATOR_VALIDATORS if operator else _VALIDATORS
    for key in sorted(definition):
        check = validators.get(key)
        problem = check(definition[key]) if check is not None else None
        if problem is not None:
            raise _failed(problem)
    unknown = sorted(key for key in definition if key not in validators)
    if unknown:
        terms = ",".join(f"{{{erl_term(k)},{erl_term(definition[k])}}}" for k in unknown)
        raise _failed(f"[{terms}] are not recognised policy settings")
    return Policy(vhost, name, pattern, apply_to, priority, dict(definition), regex)


def match(policies: Iterable[Policy], kind: str, name: str) -> Policy | None:
    """The policy that applies to the ``queue`` or ``exchange`` ``name``: the highest
    priority of those that match (ties: the first name in sort order), or None."""
    best: Policy | None = None
    for policy in policies:
        if not policy.applies(kind, name):
            continue
        if (
            best is None
            or policy.priority > best.priority
            or (policy.priority == best.priority and policy.name < best.name)
        ):
            best = policy
    return best


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """The keys that apply to a queue with ``policy`` and the operator policy ``operator``
    (either may be None): both definitions, the lower value where both set a key (all the
    keys an operator policy may set are numbers)."""
    merged = dict(policy.definition) if policy is not None else {}
    if operator is not None:
        for key, value in operator.definition.items():
            merged[key] = value if key not in merged else min(merged[key], value)
    return merged


def queue_arguments(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """A queue's effective ``x-`` arguments: its own, resolved against the keys of the
    policy ``definition`` that applies to it."""
    effective = dict(arguments)
    for key, value in definition.items():
        spec = QUEUE_KEYS.get(key)
        if spec is None:
            continue
        argument, resolve = spec
        own = arguments.get(argument)
        effective[argument] = value if own is None else resolve(own, value)
    return effective


def alternate_exchange(policy: Policy | None) -> str | None:
    """The ``alternate-exchange`` a policy gives (an exchange's own argument wins)."""
    if policy is None:
        return None
    value = policy.definition.get("alternate-exchange")
    return value if isinstance(value, str) else None


def apply_alternates(
    projection: Projection, policies: Iterable[Policy], names: Iterable[str] | None = None
) -> None:
    """Give the exchanges ``names`` of ``projection`` (default: all of them) the alternate
    exchange their policy sets (an exchange's own argument still wins), or none."""
    policies = list(policies)
    for name in projection.exchanges if names is None else names:
        found = match(policies, "exchange", name) if policies else None
        projection.set_policy_alternate(name, alternate_exchange(found))
