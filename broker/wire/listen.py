"""Listening sockets as RabbitMQ opens them: each configured host is resolved to every
address it names and each address gets its own socket, all on one port; ``::`` takes IPv4
clients too.

RabbitMQ (deps/rabbit/src/rabbit_networking.erl, ``tcp_listener_addresses/1`` and
``getaddr/2``) looks a host name up for IPv4 and for IPv6 and listens on every address found,
so ``listeners.tcp.default = localhost`` serves 127.0.0.1 and ::1; several
``listeners.tcp.N`` keys add hosts. Erlang's own resolver knows ``localhost`` as both
loopback addresses even when /etc/hosts lists only 127.0.0.1 (many container images do),
and clients resolving ``localhost`` to ::1 first (Node's amqplib, curl) rely on it: here
``localhost`` always includes both loopback addresses.

asyncio's ``create_server`` (and aiohttp's ``TCPSite`` on top of it) sets ``IPV6_V6ONLY`` on
every IPv6 socket, so a broker told to listen on ``::`` would refuse IPv4 clients, while
RabbitMQ's ``listeners.tcp.default = :::5672`` (Erlang's dual-stack sockets) serves both:
the sockets are made here and handed to asyncio ready to accept.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl  # only TLS listeners use it, and it costs several ms to import

LOOPBACK = ("127.0.0.1", "::1")
BACKLOG = 1024


class BindError(OSError):
    """An address could not be bound: the OSError, with the address it was for."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        # Lowercased, as asyncio words its bind errors ("address already in use").
        super().__init__(cause.errno, (cause.strerror or str(cause)).lower())
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port``, ``[host]:port`` for IPv6."""
        return host_port(self.host, self.port)


def host_port(host: str, port: int) -> str:
    """``host:port``, the host in brackets when it is an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _literal(host: str) -> str | None:
    """The address ``host`` is written as (an IPv6 one without brackets), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def resolve_hosts(hosts: tuple[str, ...]) -> list[tuple[str, bool]]:
    """Every address to bind for ``hosts``, in order, without repeats: ``(address,
    required)``. An address the resolver gave or the user wrote is required; ``::1`` added
    for ``localhost`` is not (a machine without IPv6 on loopback still starts, with a
    warning). Raises :class:`BindError` for a name that does not resolve."""
    found: dict[str, bool] = {}
    for host in hosts:
        literal = _literal(host) if host else "0.0.0.0"  # "": every interface, as asyncio's
        if literal is not None:
            found.setdefault(literal, True)
            continue
        try:
            infos = socket.getaddrinfo(
                host, None, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
            )
        except socket.gaierror as exc:
            raise BindError(host, 0, OSError(errno.EADDRNOTAVAIL, exc.strerror)) from None
        for family, *_, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6):
                found.setdefault(str(sockaddr[0]), True)
        if host.lower() == "localhost":
            for address in LOOPBACK:
                found.setdefault(address, False)
    return list(found.items())


def bind(address: str, port: int, dual_stack: bool = True, backlog: int = BACKLOG) -> socket.socket:
    """A listening socket on ``address:port``: ``::`` dual-stack (unless ``dual_stack`` is
    False), any other IPv6 address IPv6 only (so 0.0.0.0 and ``::1`` can be bound beside
    it). Raises :class:`BindError`."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise BindError(address, port, exc) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            v6only = address != "::" or not dual_stack
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
        sock.bind((address, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(address, port, exc) from None
    return sock


def bind_all(hosts: tuple[str, ...], port: int, warn: Any = None) -> list[socket.socket]:
    """Listening sockets for every address of ``hosts`` (:func:`resolve_hosts`), all on one
    port: ``port`` 0 takes the free port the first socket gets for the others too. An
    optional address that cannot be bound is left out (``warn(message)`` is told); any
    other failure closes what was bound and raises :class:`BindError`."""
    sockets: list[socket.socket] = []
    try:
        addresses = resolve_hosts(hosts)
        # ``::`` with IPv4 addresses listed beside it (``--host 0.0.0.0 --host ::``) is
        # IPv6 only: dual-stack, it would hold their ports already.
        dual_stack = not any(":" not in address for address, _ in addresses)
        for address, required in addresses:
            try:
                sock = bind(address, port, dual_stack)
            except BindError as exc:
                if required or exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise
                if warn is not None:
                    warn(f"not listening on {exc.address}: {exc.strerror}")
                continue
            sockets.append(sock)
            port = port or sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Listeners:
    """One listener of the broker (AMQP or AMQPS): an asyncio server per bound address,
    all on one port, started and stopped together."""

    def __init__(self, servers: list[asyncio.Server]) -> None:
        self.servers = servers

    @classmethod
    async def start(
        cls,
        hosts: tuple[str, ...],
        port: int,
        factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
        warn: Callable[[str], object] | None = None,
    ) -> Listeners:
        """Bind every address of ``hosts`` (:func:`bind_all`) and serve ``factory``'s
        protocols on each. Raises :class:`BindError`; nothing is left open then."""
        loop = asyncio.get_running_loop()
        sockets = bind_all(hosts, port, warn)
        servers: list[asyncio.Server] = []
        try:
            for sock in sockets:
                servers.append(
                    await loop.create_server(
                        factory, sock=sock, ssl=tls, ssl_handshake_timeout=handshake_timeout
                    )
                )
        except BaseException:
            for server in servers:
                server.close()
            for sock in sockets:
                sock.close()
            raise
        return cls(servers)

    @property
    def port(self) -> int:
        """The port every address is bound on."""
        return int(self.servers[0].sockets[0].getsockname()[1])

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every bound ``(address, port)``, in the order bound."""
        return [address_pair(s.getsockname()) for server in self.servers for s in server.sockets]

    def close(self) -> None:
        """Stop accepting connections (open ones go on)."""
        for server in self.servers:
            server.close()

    async def wait_closed(self) -> None:
        """Wait until every server is closed."""
        for server in self.servers:
            await server.wait_closed()


def dual_stack_socket(host: str | None, port: int, backlog: int = BACKLOG) -> socket.socket | None:
    """A bound, listening socket serving IPv6 and IPv4 for the ``::`` host, else None (any
    other host goes to asyncio as it is). Raises OSError when the port cannot be bound."""
    if host != "::" or not socket.has_dualstack_ipv6():
        return None
    return socket.create_server(
        (host, port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
    )


def address_pair(pair: Any) -> tuple[str, int]:
    """Host and port of a socket address as the transport reports it (an IPv6 address is a
    4-tuple; a unix socket or no address at all gives ``("", 0)``)."""
    if isinstance(pair, tuple) and len(pair) >= 2:
        return str(pair[0]), int(pair[1])
    return "", 0
