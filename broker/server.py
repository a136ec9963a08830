"""The server lifecycle: listen, serve, shut down gracefully.

``Server.start()`` binds the listener; ``Server.stop()`` closes it, sends every client
``Connection.Close`` 320 CONNECTION_FORCED and waits (bounded) for them to go.

This is the composition root, the top of ``broker/``: it builds the shared state
(:class:`leveret.node.state.ServerState`), recovers it from the data directory, and starts the
listeners that serve it (AMQP connections, the management API, Prometheus, the control
socket), handing each the state, never the ``Server``. Only ``cli``, ``testing`` and
``inspect`` import this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from leveret.config import Config
from leveret.exchanges.policies import parse as parse_policy
from leveret.node.auth import AccessControl
from leveret.node.state import ServerState
from leveret.wire.connection import Connection
from leveret.wire.listen import Listeners, host_port

if TYPE_CHECKING:
    import ssl

    from leveret.control.node import ControlListener
    from leveret.management import ManagementHandle
    from leveret.management.prometheus import PrometheusHandle

log = logging.getLogger(__name__)


class Server:
    """A Leveret broker instance: the composition root.

    It owns the listeners (AMQP, AMQPS, the management API, Prometheus, the control
    socket) and one :class:`ServerState`, which it hands to each of them and to every
    connection; nothing below it needs the ``Server``. Its attributes of the shared state
    (``vhosts``, ``access``, ``connections``...) and the administrative methods are the
    state's, kept here for scripts and tests.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.state: ServerState[Connection] = self._new_state()
        self._listener: Listeners | None = None
        self._reclaimer: asyncio.Task[None] | None = None
        self._tls_listener: Listeners | None = None
        self._management: ManagementHandle | None = None
        self._prometheus: PrometheusHandle | None = None
        self.control: ControlListener | None = None
        self._restarting = False

    def _new_state(self) -> ServerState[Connection]:
        """A fresh shared state (at creation, and at an injected restart)."""
        state: ServerState[Connection] = ServerState(self.config)
        if self.config.data_dir is None:
            for name in self.config.vhosts:
                state.vhost(name)
        state.restart = self.restart
        return state

    # -- the bound ports and the listeners (the shared state is self.state) ------------

    @property
    def port(self) -> int:
        """The AMQP port, the bound one once started (port 0: a free one)."""
        return self.state.port

    @property
    def tls_port(self) -> int | None:
        """The AMQPS port, the bound one once started."""
        return self.state.tls_port

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every (address, port) the AMQP listener bound."""
        return self.state.addresses

    @property
    def tls_addresses(self) -> list[tuple[str, int]]:
        """Every (address, port) the AMQPS listener bound."""
        return self.state.tls_addresses

    @property
    def management(self) -> ManagementHandle | None:
        """The management API's listener, when it runs."""
        return self._management

    @management.setter
    def management(self, handle: ManagementHandle | None) -> None:
        self._management = self.state.management = handle

    @property
    def prometheus(self) -> PrometheusHandle | None:
        """The Prometheus listener, when it runs."""
        return self._prometheus

    @prometheus.setter
    def prometheus(self, handle: PrometheusHandle | None) -> None:
        self._prometheus = self.state.prometheus = handle

    def _recover(self, data_dir: Path) -> None:
        """Open the data directory, replay the definitions log, restore messages."""
        # Imported here: a broker without a data dir (tests) never loads storage/.
        from leveret.node.persistence import Persistence
        from leveret.storage.files import gc_paused

        state = self.state
        started = time.monotonic()
        # --force-recovery: start even past a damaged record in the middle of the
        # definitions log (storage/log.py).
        persistence = state.persistence = Persistence(
            data_dir, force_recovery=self.config.force_recovery
        )
        saved = persistence.load_access()
        if saved is not None:
            # Users, permissions and vhosts made at run time (API, definitions) win over
            # the configured defaults, as RabbitMQ seeds its default user only once.
            configured = set(state.access.users)
            state.access = AccessControl.from_document(saved)
            extra = sorted(set(state.access.users) - configured)
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
                self.state.vhost(name)
            for item in saved.get("parameters", []):
                vhost = self.state.vhost(item["vhost"])
                vhost.set_parameter(item["component"], item["name"], item["value"])
            for item in saved.get("shovels", []):
                # Started once the node listens (Shovels.start, below in start()).
                try:
                    state.shovels.define(item["vhost"], item["name"], item["value"], item["owner"])
                except ValueError as exc:  # a user or vhost removed by hand since
                    log.warning("shovel %s/%s not started: %s", item["vhost"], item["name"], exc)
            # Before the log replay, so that recovered queues and exchanges get theirs.
            for item in saved.get("policies", []):
                policy = parse_policy(item["vhost"], item["name"], item)
                self.state.vhost(policy.vhost).set_policy(policy)
        state.access.listeners.append(state.save_access)
        for name in self.config.vhosts:
            self.state.vhost(name)
        records = persistence.log.replay()
        # Recovery builds many long-lived objects and no cycles: the cyclic GC would only
        # rescan them again and again. Afterwards they are frozen out of its generations.
        with gc_paused():
            for vhost_name, event in records:
                self.state.vhost(vhost_name).replay(event)
            persistence.compact()
            restored = 0
            for (vhost_name, queue_name), stored in persistence.store.recover().items():
                queue = state.vhosts.get(vhost_name, None)
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
                owner = state.vhosts.get(vhost_name)
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
        self.state.started = time.time()  # the node's uptime (status)
        if self.config.control and (self.config.control_socket or self.config.data_dir):
            from leveret.control.node import ControlListener, socket_of

            # First: a node still serving this socket (the same data dir) stops the start.
            self.control = ControlListener(self.state, socket_of(self.config, self.config.port))
            self.control.claim()
        if self.config.data_dir is not None:
            self._recover(self.config.data_dir)
        for name in self.config.vhosts:
            self.state.vhost(name)
        if self.config.load_definitions is not None:
            # Imported here: in-process starts (the pytest plugin) stay fast without it.
            from leveret.management import load_definitions_file

            load_definitions_file(self.state, self.config.load_definitions)
        self.state.disk.start()
        self._listener = await self._listen(self.config.port)
        self.state.port = self._listener.port
        self.state.addresses = self._listener.addresses
        context = self._tls_context()
        if context is not None:
            self._tls_listener = await self._listen(self.config.tls_port, context)
            self.state.tls_port = self._tls_listener.port
            self.state.tls_addresses = self._tls_listener.addresses
            for address in self.state.tls_addresses:
                log.info("AMQPS listening on %s", host_port(*address))
        if self.config.management_port is not None:
            from leveret.management import start_management

            self.management = await start_management(
                self.state, self.config.management_host, self.config.management_port
            )
        if self.config.prometheus_port is not None:
            from leveret.management.prometheus import start_prometheus

            self.prometheus = await start_prometheus(
                self.state, self.config.management_host, self.config.prometheus_port
            )
        if self.state.persistence is not None:
            self._reclaimer = loop.create_task(self.state.persistence.reclaim())
        self.state.ack_timeouts.start()
        if self.config.control:
            from leveret.control.node import ControlListener, socket_of

            if self.control is None:  # no data dir: named after the port just bound
                self.control = ControlListener(self.state, socket_of(self.config, self.port))
            # Last: `leveret diagnostics ping` answers once the node serves everything.
            await self.control.start()
        self.state.shovels.start()  # local ends need the listener
        for address in self.state.addresses:
            log.info("Leveret listening on %s", host_port(*address))

    async def _listen(self, port: int, tls: ssl.SSLContext | None = None) -> Listeners:
        """Listen on every address of the configured hosts (``::``: IPv6 and IPv4) and
        ``port`` (broker/listen.py)."""
        state = self.state
        return await Listeners.start(
            self.config.hosts,
            port,
            lambda: Connection(state),
            tls,
            # A TLS client gets 10 s to finish its handshake, as an AMQP client gets for its
            # protocol header (RabbitMQ's handshake_timeout; asyncio's default is 60 s).
            self.config.handshake_timeout if tls is not None else None,
            log.warning,
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

    async def restart(self, kill: bool = True) -> None:
        """Stop and start again on the same ports and data directory (an injected fault,
        broker/faults.py): ``kill`` stops as ``kill -9`` would (:meth:`kill`), else as
        :meth:`stop` does; the state is then recovered from the data directory as at any
        start. Returns once the node listens again. The ``Server`` object stays the same
        (its ``state`` is new), so whoever holds it sees the restarted node."""
        from leveret.faults import NO_DATA_DIR, FaultError, NoDataDirError

        if self.config.data_dir is None:
            raise NoDataDirError(NO_DATA_DIR)
        if self._restarting:
            raise FaultError("a restart is already under way")
        self._restarting = True
        try:
            await self._restart(kill)
        finally:
            self._restarting = False

    async def _restart(self, kill: bool) -> None:
        # Port 0 picked free ports: the restarted node takes the same ones.
        config = dataclasses.replace(
            self.config,
            port=self.port,
            tls_port=self.tls_port or self.config.tls_port,
            management_port=self.management.port if self.management else None,
            prometheus_port=self.prometheus.port if self.prometheus else None,
        )
        old = self.state
        if kill:
            await self.kill()
        else:
            await self.stop()
        # What the old state still holds must not touch the store again, nor fire timers.
        for vhost in old.vhosts.values():
            vhost.persistence = None
            vhost.clock.close()
        self.config = config
        self.state = self._new_state()
        self.state.predecessors = dict(old.vhosts)
        await self.start()
        self.state.predecessors.clear()

    async def kill(self) -> None:
        """Stop as ``kill -9`` stops the process: every socket aborted (clients see a
        reset, no Connection.Close), nothing written that is still in memory, no
        clean-stop marker (the next start recovers as after a crash)."""
        persistence = self.state.persistence
        if persistence is not None:
            # First, so that nothing the connections' clean-up does reaches the disk.
            persistence.abandon()
            self.state.persistence = None
            for vhost in self.state.vhosts.values():
                vhost.persistence = None
        await self._go_down(Connection.drop)

    async def stop(self) -> None:
        """Stop listening, close every connection with 320, wait for them."""
        await self._go_down(Connection.shutdown)

    async def _go_down(self, end: Callable[[Connection], None]) -> None:
        """Stop listening, ``end`` every connection and wait for them, then release the
        rest (the store last)."""
        await self.state.shovels.stop()
        await self._close_listeners()
        for connection in list(self.state.connections):
            end(connection)
        await self._wait_for_connections()
        await self._release()

    async def _close_listeners(self) -> None:
        """Stop listening: the control socket, the HTTP listeners, AMQP(S)."""
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

    async def _wait_for_connections(self) -> None:
        """Wait (bounded by the shutdown timeout) until every connection is gone."""
        pending = [c.closed.wait() for c in list(self.state.connections)]
        if pending:
            try:
                async with asyncio.timeout(self.config.shutdown_timeout):
                    await asyncio.gather(*pending)
            except TimeoutError:
                log.warning("%d connections did not close in time", len(self.state.connections))

    async def _release(self) -> None:
        """After the connections: the listener, the background work, the store."""
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
        if self._reclaimer is not None:
            self._reclaimer.cancel()
            self._reclaimer = None
        for vhost in self.state.vhosts.values():
            vhost.delayed.close()
        self.state.ack_timeouts.stop()
        self.state.disk.stop()
        if self.state.persistence is not None:
            self.state.persistence.close()
            self.state.persistence = None
        self.state.set_trace(None)
