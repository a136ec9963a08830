"""Listening sockets: a ``::`` host takes IPv4 clients too, as RabbitMQ's listeners do.

asyncio's ``create_server`` (and aiohttp's ``TCPSite`` on top of it) sets ``IPV6_V6ONLY`` on
every IPv6 socket, so a broker told to listen on ``::`` would refuse IPv4 clients, while
RabbitMQ's ``listeners.tcp.default = :::5672`` (Erlang's dual-stack sockets) serves both.
"""

from __future__ import annotations

import socket
from typing import Any


def dual_stack_socket(host: str | None, port: int, backlog: int = 1024) -> socket.socket | None:
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
