"""Vhost and user limits: which exist, how a value is checked, when one is reached.

RabbitMQ keeps two small tables of limits (docs: vhosts.md "Limits", user-limits.md):

- per vhost (rabbit_vhost_limit.erl, set with ``rabbitmqctl set_vhost_limits`` or
  ``PUT /api/vhost-limits/VHOST/NAME``): ``max-connections`` and ``max-queues``;
- per user (rabbit_auth_backend_internal.erl, ``set_user_limits`` or
  ``PUT /api/user-limits/USER/NAME``): ``max-connections`` and ``max-channels``.

A value is an integer; a negative one means no limit, 0 refuses everything. The texts of
refused values are RabbitMQ 3.10.8's, observed through its management API: the vhost ones
come wrapped in ``Validation failed`` (rabbit_parameter_validation), the user ones bare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leveret.exchanges.policies import erl_term

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


class LimitError(ValueError):
    """A limit RabbitMQ would refuse; ``reason`` is its text (management API 400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_limits(values: Mapping[str, Any], user: bool = False) -> dict[str, int]:
    """Check a vhost's (or, with ``user``, a user's) limits; raise :class:`LimitError`."""
    known = USER_LIMITS if user else VHOST_LIMITS
    unknown = [(name, value) for name, value in values.items() if name not in known]
    if unknown:
        terms = ",".join(f"{{{erl_term(name)},{erl_term(value)}}}" for name, value in unknown)
        where = "user-limits" if user else "limits"
        raise LimitError(_wrapped(f"Unrecognised terms [{terms}] in {where}", user))
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            text = f"{name} should be a number, actually was {erl_term(value)}"
            raise LimitError(_wrapped(text, user))
    return dict(values)


def _wrapped(text: str, user: bool) -> str:
    # rabbit_runtime_parameters:set/5 prefixes a vhost parameter's validation errors.
    return text if user else f"Validation failed\n\n{text}\n"


def reached(limits: Mapping[str, int], name: str, count: int) -> int | None:
    """The limit ``name`` when ``count`` objects already use it all, else None
    (rabbit_vhost_limit:is_over_connection_limit/1: a negative limit is no limit)."""
    limit = limits.get(name)
    if limit is None or limit < 0 or count < limit:
        return None
    return limit


VHOST_LIMITS_COMPONENT = "vhost-limits"


def limits_parameter(vhost: str, limits: Mapping[str, int]) -> dict[str, Any]:
    """A vhost's limits as the runtime parameter RabbitMQ stores and exports them as."""
    return {
        "value": dict(limits),
        "vhost": vhost,
        "component": VHOST_LIMITS_COMPONENT,
        "name": "limits",
    }
