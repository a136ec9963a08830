"""A virtual host's policies, operator policies and limits, and their application.

RabbitMQ keeps these as runtime parameters (``rabbit_policy``, ``rabbit_vhost_limit``) beside
the topology rather than in it: setting or deleting one re-applies the matching policy to every
queue and the alternate exchanges of the projection, and never writes a topology event. Kept out
of :mod:`leveret.node.vhost` so that module holds the declare/delete/bind path; a mixin because the
state (the policy tables, the limits) is the vhost's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from leveret.exchanges.policies import OPERATOR_POLICY_COMPONENT, Policy, apply_alternates
from leveret.exchanges.policies import match as match_policy
from leveret.exchanges.policies import parse as parse_policy
from leveret.node.limits import VHOST_LIMITS_COMPONENT, limits_parameter, parse_limits

if TYPE_CHECKING:
    from leveret.exchanges.projection import Projection
    from leveret.node.queue import Queue


class VHostPolicies:
    """The policy half of :class:`leveret.node.vhost.VHost`, which sets the attributes below."""

    name: str
    projection: Projection
    queues: Mapping[str, Queue]
    # Policies and operator policies by name (exchanges/policies.py), and max-connections /
    # max-queues (broker/limits.py); the server persists all three beside the users.
    policies: dict[str, Policy]
    operator_policies: dict[str, Policy]
    limits: dict[str, int]

    def policy_for(self, kind: str, name: str) -> Policy | None:
        """The policy that applies to the ``queue`` or ``exchange`` ``name``, if any."""
        return match_policy(self.policies.values(), kind, name)

    def queue_policies(self, name: str) -> tuple[Policy | None, Policy | None]:
        """The policy and the operator policy that apply to the queue ``name``."""
        return (
            match_policy(self.policies.values(), "queue", name),
            match_policy(self.operator_policies.values(), "queue", name),
        )

    def runtime_parameters(self) -> list[dict[str, Any]]:
        """The vhost's limits and operator policies as the runtime parameters RabbitMQ
        keeps and exports them as (components ``vhost-limits`` and ``operator_policy``)."""
        found = [limits_parameter(self.name, self.limits)] if self.limits else []
        by_name = sorted(self.operator_policies.values(), key=lambda p: p.name)
        return found + [policy.to_parameter() for policy in by_name]

    def set_parameter(self, component: str, name: str, value: Any) -> None:
        """Apply a runtime parameter: the vhost's limits (``vhost-limits``) or an operator
        policy (``operator_policy``). Raises LimitError or PolicyError with RabbitMQ's
        reason for a value it would refuse."""
        if component == VHOST_LIMITS_COMPONENT:
            self.limits = parse_limits(value)
        elif component == OPERATOR_POLICY_COMPONENT:
            self.set_policy(parse_policy(self.name, name, value, operator=True), operator=True)
        else:
            raise ValueError(f"unknown runtime parameter component {component!r}")

    def policy_set(self, operator: bool) -> dict[str, Policy]:
        """The vhost's policies, or (``operator``) its operator policies, by name."""
        return self.operator_policies if operator else self.policies

    def set_policy(self, policy: Policy, operator: bool = False) -> bool:
        """Add or replace a policy (``operator``: an operator policy) and apply the vhost's
        policies again to every queue and exchange (rabbit_policy:update_policies/1).
        True when it is new."""
        policies = self.policy_set(operator)
        created = policy.name not in policies
        policies[policy.name] = policy
        self._apply_policies()
        return created

    def delete_policy(self, name: str, operator: bool = False) -> bool:
        """Remove a policy or operator policy (False: there was none) and apply what is
        left."""
        if self.policy_set(operator).pop(name, None) is None:
            return False
        self._apply_policies()
        return True

    def _apply_policies(self) -> None:
        for queue in list(self.queues.values()):
            queue.apply_policy(*self.queue_policies(queue.name))
        apply_alternates(self.projection, self.policies.values())
