"""The server lifecycle: listen, serve, shut down gracefully.

``Server.start()`` binds the listener; ``Server.stop()`` closes it, sends every client
``Connection.Close`` 320 CONNECTION_FORCED and waits (bounded) for them to go.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.acktimeout import AckTimeouts
from leveret.auth import AccessControl
from leveret.churn import NodeCounters
from leveret.config import Config
from leveret.connection import Connection
from leveret.disk import disk_monitor
from leveret.exchanges.policies import Policy
from leveret.exchanges.policies import parse as parse_policy
from leveret.listen import dual_stack_socket
from leveret.memory import MemoryMonitor, default_watermark
from leveret.trace import TraceWriter
from leveret.vhost import VHost

if TYPE_CHECKING:
    import ssl

    from leveret.control.node import ControlListener
    from leveret.management import ManagementHandle
    from leveret.management.prometheus import PrometheusHandle
    from leveret.persistence import Persistence

log = logging.getLogger(__name__)


class PublishCounters:
    """Broker-wide publish counters (for /metrics and the management overview)."""

    __slots__ = ("confirmed", "received", "routed", "unroutable_dropped", "unroutable_returned")

    def __init__(self) -> None:
        self.confirmed = 0  # publisher confirms (basic.ack) sent, one per message
        self.received = 0
        self.routed = 0
        self.unroutable_dropped = 0
        self.unroutable_returned = 0


class Server:
    """A Leveret broker instance."""

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
        self.connections: set[Connection] = set()
        self.disk = disk_monitor(self)  # the disk alarm (broker/disk.py)
        self._listener: asyncio.Server | None = None
        self._reclaimer: asyncio.Task[None] | None = None
        self.ack_timeouts = AckTimeouts(config.consumer_timeout, self.connections)
        self._tls_listener: asyncio.Server | None = None
        self.tls_port = config.tls_port
        self.management: ManagementHandle | None = None
        self.prometheus: PrometheusHandle | None = None
        self.control: ControlListener | None = None
        self.port = config.port
        if config.data_dir is None:
            for name in config.vhosts:
                self.vhost(name)

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

    def vhost(self, name: str) -> VHost:
        """The vhost ``name``, created if needed."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(name, self.memory, self.persistence)
            vhost.tracer = self.tracer
            vhost.ack_timeouts = self.ack_timeouts
            vhost.churn = self.churn
        return vhost

    def _save_access(self) -> None:
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
            self.persistence.save_access(document)

    def set_vhost_limits(self, name: str, limits: dict[str, int]) -> None:
        """Replace the limits of vhost ``name`` (which must exist; checked values) and save
        them with the users. Connections and queues over a lowered limit stay."""
        self.vhosts[name].limits = dict(limits)
        self._save_access()

    def set_parameter(self, vhost: str, component: str, name: str, value: Any) -> None:
        """Apply a runtime parameter to the existing ``vhost`` (VHost.set_parameter) and
        save it with the users."""
        self.vhosts[vhost].set_parameter(component, name, value)
        self._save_access()

    def set_policy(self, policy: Policy, operator: bool = False) -> bool:
        """Add or replace a policy (``operator``: an operator policy) of its vhost (which
        must exist), apply it, and save it with the users (on disk before the caller
        answers). True when it is new."""
        created = self.vhosts[policy.vhost].set_policy(policy, operator)
        self._save_access()
        return created

    def delete_policy(self, vhost: str, name: str, operator: bool = False) -> bool:
        """Remove a policy or operator policy; False when the vhost has none of that
        name."""
        host = self.vhosts.get(vhost)
        if host is None or not host.delete_policy(name, operator):
            return False
        self._save_access()
        return True

    def add_vhost(self, name: str) -> VHost:
        """Create the vhost ``name`` (idempotent; durable with a data dir)."""
        known = name in self.vhosts
        vhost = self.vhost(name)
        if not known:
            self._save_access()
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
        self.access.forget_vhost(name)
        self._save_access()
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

    def _recover(self, data_dir: Path) -> None:
        """Open the data directory, replay the definitions log, restore messages."""
        # Imported here: a broker without a data dir (tests) never loads storage/.
        from leveret.persistence import Persistence
        from leveret.storage.files import gc_paused

        started = time.monotonic()
        # --force-recovery: start even past a damaged record in the middle of the
        # definitions log (storage/log.py).
        persistence = self.persistence = Persistence(
            data_dir, force_recovery=self.config.force_recovery
        )
        saved = persistence.load_access()
        if saved is not None:
            # Users, permissions and vhosts made at run time (API, definitions) win over
            # the configured defaults, as RabbitMQ seeds its default user only once.
            configured = set(self.access.users)
            self.access = AccessControl.from_document(saved)
            extra = sorted(set(self.access.users) - configured)
            if extra:
                # Not silent: an operator who removed a user from the configuration should
                # learn that it can still log in (remove it through the management API).
                log.warning(
                    "%s keeps users that the configuration does not name, with their "
                    "permissions: %s",
                    persistence.data_dir / "users.json",
                    ", ".join(extra),
                )
            for name in saved.get("vhosts", []):
                self.vhost(name)
            for item in saved.get("parameters", []):
                vhost = self.vhost(item["vhost"])
                vhost.set_parameter(item["component"], item["name"], item["value"])
            # Before the log replay, so that recovered queues and exchanges get theirs.
            for item in saved.get("policies", []):
                policy = parse_policy(item["vhost"], item["name"], item)
                self.vhost(policy.vhost).set_policy(policy)
        self.access.listeners.append(self._save_access)
        for name in self.config.vhosts:
            self.vhost(name)
        records = persistence.log.replay()
        # Recovery builds many long-lived objects and no cycles: the cyclic GC would only
        # rescan them again and again. Afterwards they are frozen out of its generations.
        with gc_paused():
            for vhost_name, event in records:
                self.vhost(vhost_name).replay(event)
            persistence.compact()
            restored = 0
            for (vhost_name, queue_name), stored in persistence.store.recover().items():
                queue = self.vhosts.get(vhost_name, None)
                target = queue.queues.get(queue_name) if queue is not None else None
                if target is None:
                    # Never acked away: the definitions log may have lost the queue
                    # (broker/persistence.py says how the messages come back).
                    persistence.keep_aside((vhost_name, queue_name), len(stored))
                    continue
                target.restore(stored, all_redelivered=not persistence.clean_start)
                restored += len(stored)
            for (vhost_name, exchange), stored in persistence.delayed.recover().items():
                # Kept back by a delayed exchange; released on time whether the exchange
                # is still there or not, as the plugin does.
                owner = self.vhosts.get(vhost_name)
                if owner is None:
                    persistence.delayed.drop_queue((vhost_name, exchange))
                    continue
                owner.delayed.restore(exchange, stored)
                restored += len(stored)
            gc.freeze()
        persistence.report_aside()
        log.info(
            "recovered %d definitions and %d messages in %.3fs",
            len(records),
            restored,
            time.monotonic() - started,
        )

    async def start(self) -> None:
        """Bind the listening socket (port 0 picks a free port, see :attr:`port`)."""
        loop = asyncio.get_running_loop()
        if self.config.control and (self.config.control_socket or self.config.data_dir):
            from leveret.control.node import ControlListener, socket_of

            # First: a node still serving this socket (the same data dir) stops the start.
            self.control = ControlListener(self, socket_of(self.config, self.config.port))
            self.control.claim()
        if self.config.data_dir is not None:
            self._recover(self.config.data_dir)
        for name in self.config.vhosts:
            self.vhost(name)
        if self.config.load_definitions is not None:
            # Imported here: in-process starts (the pytest plugin) stay fast without it.
            from leveret.management import load_definitions_file

            load_definitions_file(self, self.config.load_definitions)
        self.disk.start()
        self._listener = await self._listen(self.config.port)
        self.port = self._listener.sockets[0].getsockname()[1]
        context = self._tls_context()
        if context is not None:
            self._tls_listener = await self._listen(self.config.tls_port, context)
            self.tls_port = self._tls_listener.sockets[0].getsockname()[1]
            log.info("AMQPS listening on %s:%s", self.config.host, self.tls_port)
        if self.config.management_port is not None:
            from leveret.management import start_management

            self.management = await start_management(
                self, self.config.management_host, self.config.management_port
            )
        if self.config.prometheus_port is not None:
            from leveret.management.prometheus import start_prometheus

            self.prometheus = await start_prometheus(
                self, self.config.management_host, self.config.prometheus_port
            )
        if self.persistence is not None:
            self._reclaimer = loop.create_task(self.persistence.reclaim())
        self.ack_timeouts.start()
        if self.config.control:
            from leveret.control.node import ControlListener, socket_of

            if self.control is None:  # no data dir: named after the port just bound
                self.control = ControlListener(self, socket_of(self.config, self.port))
            # Last: `leveret diagnostics ping` answers once the node serves everything.
            await self.control.start()
        log.info("Leveret listening on %s:%s", self.config.host, self.port)

    async def _listen(self, port: int, tls: ssl.SSLContext | None = None) -> asyncio.Server:
        """Listen on the configured host (``::``: IPv6 and IPv4) and ``port``."""
        loop = asyncio.get_running_loop()
        sock = dual_stack_socket(self.config.host, port)
        where: dict[str, Any] = (
            {"sock": sock}
            if sock is not None
            else {"host": self.config.host, "port": port, "reuse_address": True, "backlog": 1024}
        )
        return await loop.create_server(
            lambda: Connection(self),
            ssl=tls,
            # A TLS client gets 10 s to finish its handshake, as an AMQP client gets for its
            # protocol header (RabbitMQ's handshake_timeout; asyncio's default is 60 s).
            ssl_handshake_timeout=self.config.handshake_timeout if tls is not None else None,
            **where,
        )

    def _tls_context(self) -> ssl.SSLContext | None:
        """The AMQPS server context, when a certificate and key are configured."""
        config = self.config
        if config.tls_cert is None or config.tls_key is None:
            return None
        import ssl  # only when TLS is configured: it costs several ms to import

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_ca is not None:
            # Mutual TLS: only clients with a certificate signed by this CA get in.
            context.load_verify_locations(cafile=config.tls_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def stop(self) -> None:
        """Stop listening, close every connection with 320, wait for them."""
        if self.control is not None:
            await self.control.close()
            self.control = None
        if self.management is not None:
            await self.management.close()
            self.management = None
        if self.prometheus is not None:
            await self.prometheus.close()
            self.prometheus = None
        if self._tls_listener is not None:
            self._tls_listener.close()
            self._tls_listener = None
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            connection.shutdown()
        pending = [c.closed.wait() for c in list(self.connections)]
        if pending:
            try:
                async with asyncio.timeout(self.config.shutdown_timeout):
                    await asyncio.gather(*pending)
            except TimeoutError:
                log.warning("%d connections did not close in time", len(self.connections))
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
        if self._reclaimer is not None:
            self._reclaimer.cancel()
            self._reclaimer = None
        for vhost in self.vhosts.values():
            vhost.delayed.close()
        self.ack_timeouts.stop()
        self.disk.stop()
        if self.persistence is not None:
            self.persistence.close()
            self.persistence = None
        self.set_trace(None)
