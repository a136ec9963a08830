"""The shared server state: what every connection, the management API and the control
channel read and change, and nothing that serves a socket.

:class:`ServerState` (uvicorn's ``ServerState`` is the model) holds the configuration,
the vhosts, access control, the node-wide counters, the open connections, the memory and
disk monitors, the store and the traffic trace, and the administrative changes that
must be saved with the users (vhosts, policies, parameters, limits). The composition
root, :class:`leveret.server.Server`, owns one, binds the listeners and hands this object
(not itself) to each :class:`leveret.wire.connection.Connection`, to the management and
Prometheus listeners and to the control socket. So the state sits below the wire: it
imports the node and never names a wire type; the connections it holds are any type
that satisfies :class:`ConnectionPeer`, and ``ServerState[Connection]`` is how the wire and the
management API name it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from leveret.node.acktimeout import AckTimeouts
from leveret.node.auth import AccessControl
from leveret.node.churn import NodeCounters
from leveret.node.disk import disk_monitor
from leveret.node.memory import MemoryMonitor, default_watermark
from leveret.node.peers import ConnectionPeer
from leveret.node.shovel import SHOVEL_COMPONENT, Shovels
from leveret.node.vhost import VHost
from leveret.trace import TraceWriter

if TYPE_CHECKING:
    from pathlib import Path

    from leveret.config import Config
    from leveret.exchanges.policies import Policy
    from leveret.node.persistence import Persistence

log = logging.getLogger(__name__)


class PublishCounters:
    """The node's publish counters (rabbit_channel's ``ch_stats`` fine stats: publish,
    confirm, return_unroutable, drop_unroutable). A session counts its publishes per
    exchange (leveret.session.publish.SessionCounters sums them), which costs the publish
    path one increment; the node's are its closed sessions' counts, folded in as each
    closes (leveret.session.publish.fold), and the open ones' are added when read
    (leveret.management.stats.publish_totals)."""

    __slots__ = ("confirmed", "received", "routed", "unroutable_dropped", "unroutable_returned")

    def __init__(self) -> None:
        self.confirmed = 0  # publisher confirms (basic.ack) sent, one per message
        self.received = 0
        self.routed = 0
        self.unroutable_dropped = 0
        self.unroutable_returned = 0


class Listening(Protocol):
    """A listener the composition root started (management API, Prometheus), as the
    status views list it."""

    @property
    def host(self) -> str:
        """The address it is bound to."""

    @property
    def port(self) -> int:
        """The port it is bound to."""


C = TypeVar("C", bound=ConnectionPeer)


class ServerState(Generic[C]):
    """The state one broker's connections, management API and control channel share.

    ``C`` is the connection type (the wire's ``Connection``): the state holds the
    connections without naming it.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.memory = MemoryMonitor(
            config.memory_high_watermark or default_watermark(), self._on_memory_alarm
        )
        self.persistence: Persistence | None = None
        self.counters = PublishCounters()
        self.churn = NodeCounters()  # connection, channel and queue churn (broker/churn.py)
        self.access = config.access or AccessControl.with_users(config.users, config.vhosts)
        self.tracer: TraceWriter | None = (
            TraceWriter(config.trace_dir) if config.trace_dir else None
        )
        self.vhosts: dict[str, VHost] = {}
        self.connections: set[C] = set()
        self.disk = disk_monitor(config, self._on_disk_alarm)  # the disk alarm (broker/disk.py)
        self.ack_timeouts = AckTimeouts(config.consumer_timeout, self.connections)
        # What the listeners bound (the composition root fills them in as they start), for
        # the status and overview views: port 0 in the configuration is any free port.
        self.port = config.port
        self.tls_port = config.tls_port
        # Every (address, port) the AMQP and AMQPS listeners bound (a host may be several).
        self.addresses: list[tuple[str, int]] = []
        self.tls_addresses: list[tuple[str, int]] = []
        self.management: Listening | None = None
        self.prometheus: Listening | None = None
        self.started: float | None = None  # time.time() when the node started (uptime)
        # Stops and starts the node again (True: as kill -9 would), for an injected
        # restart (broker/faults.py); the composition root sets it.
        self.restart: Callable[[bool], Awaitable[None]] | None = None
        # The vhosts of the node before that restart, by name: each new one of the same
        # name carries on from it (VHost.continue_from).
        self.predecessors: dict[str, VHost] = {}
        self.shovels = Shovels(self)  # dynamic shovels (node/shovel/)

    def _on_memory_alarm(self, alarm: bool) -> None:
        memory = self.memory
        log.warning(
            "memory alarm %s: %d bytes held by messages, process RSS %s, high watermark %d",
            "set" if alarm else "cleared",
            memory.used,
            "unknown" if memory.rss is None else memory.rss,
            memory.limit,
        )
        for connection in list(self.connections):
            connection.memory_alarm(alarm)

    def _on_disk_alarm(self, alarm: bool) -> None:
        # An alarm blocks or unblocks every connection that publishes.
        for connection in list(self.connections):
            connection.disk_alarm(alarm)

    def vhost(self, name: str) -> VHost:
        """The vhost ``name``, created if needed."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(name, self.memory, self.persistence)
            vhost.tracer = self.tracer
            vhost.ack_timeouts = self.ack_timeouts
            vhost.clock.on_moved(self.ack_timeouts.check)
            vhost.churn = self.churn
            old = self.predecessors.pop(name, None)
            if old is not None:
                vhost.continue_from(old)
        return vhost

    def save_access(self) -> None:
        """Save users, permissions, vhosts, policies and vhost limits (with a data dir)."""
        if self.persistence is not None:
            document = self.access.to_document()
            document["vhosts"] = sorted(self.vhosts)
            document["policies"] = [
                policy.to_json()
                for name in sorted(self.vhosts)
                for policy in sorted(self.vhosts[name].policies.values(), key=lambda p: p.name)
            ]
            # Vhost limits as RabbitMQ keeps them: runtime parameters of the component
            # vhost-limits, named limits (the same shape as in definitions.json).
            document["parameters"] = [
                parameter
                for name in sorted(self.vhosts)
                for parameter in self.vhosts[name].runtime_parameters()
            ]
            # Shovels with the user their local ends connect as (not part of a parameter).
            document["shovels"] = self.shovels.saved()
            self.persistence.save_access(document)

    def runtime_parameters(self, vhost: str) -> list[dict[str, Any]]:
        """The runtime parameters of ``vhost`` as RabbitMQ lists and exports them: its
        limits, operator policies and shovels."""
        return self.vhosts[vhost].runtime_parameters() + self.shovels.parameters(vhost)

    def set_vhost_limits(self, name: str, limits: dict[str, int]) -> None:
        """Replace the limits of vhost ``name`` (which must exist; checked values) and save
        them with the users. Connections and queues over a lowered limit stay."""
        self.vhosts[name].limits = dict(limits)
        self.save_access()

    def set_parameter(
        self, vhost: str, component: str, name: str, value: Any, user: str | None = None
    ) -> bool:
        """Apply a runtime parameter to the existing ``vhost`` (a shovel: started as
        ``user``'s, see Shovels.define; others: VHost.set_parameter) and save it with
        the users. True when it is new (only told for shovels). Raises ShovelError,
        LimitError or PolicyError with RabbitMQ's reason."""
        created = False
        if component == SHOVEL_COMPONENT:
            created = self.shovels.define(vhost, name, value, user)
        else:
            self.vhosts[vhost].set_parameter(component, name, value)
        self.save_access()
        return created

    def clear_parameter(self, vhost: str, component: str, name: str) -> bool:
        """Remove a shovel (the one component cleared this way); False when none."""
        if component != SHOVEL_COMPONENT or not self.shovels.delete(vhost, name):
            return False
        self.save_access()
        return True

    def set_policy(self, policy: Policy, operator: bool = False) -> bool:
        """Add or replace a policy (``operator``: an operator policy) of its vhost (which
        must exist), apply it, and save it with the users (on disk before the caller
        answers). True when it is new."""
        created = self.vhosts[policy.vhost].set_policy(policy, operator)
        self.save_access()
        return created

    def delete_policy(self, vhost: str, name: str, operator: bool = False) -> bool:
        """Remove a policy or operator policy; False when the vhost has none of that
        name."""
        host = self.vhosts.get(vhost)
        if host is None or not host.delete_policy(name, operator):
            return False
        self.save_access()
        return True

    def add_vhost(self, name: str) -> VHost:
        """Create the vhost ``name`` (idempotent; durable with a data dir)."""
        known = name in self.vhosts
        vhost = self.vhost(name)
        if not known:
            self.save_access()
        return vhost

    def delete_vhost(self, name: str) -> bool:
        """Delete a vhost: its connections are closed (320), its queues and their stored
        messages deleted, permissions and topic permissions on it revoked."""
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        for connection in list(self.connections):
            if connection.vhost is vhost:
                connection.force_close(f"vhost '{name}' is deleted")
        for queue in list(vhost.queues.values()):
            vhost.delete_queue(queue)
        vhost.delayed.drop()
        vhost.clock.close()
        vhost.unsubscribe_all()  # a deleted vhost records nothing more (a test's journal)
        self.access.forget_vhost(name)
        self.shovels.forget_vhost(name)
        self.save_access()
        return True

    def set_trace(self, directory: Path | None) -> None:
        """Start (or, with None, stop) recording the traffic trace into ``directory``."""
        if self.tracer is not None:
            self.tracer.close()
            self.tracer = None
        if directory is not None:
            self.tracer = TraceWriter(directory)
        for vhost in self.vhosts.values():
            vhost.tracer = self.tracer
