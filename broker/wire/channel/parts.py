"""What a channel's command modules share, below :mod:`leveret.wire.channel`: the record of an
unacked delivery, the connection (:class:`Wire`) and the node's state (:class:`Node`) as
they see them, and the states of a published message's content assembly.

:mod:`leveret.wire.channel.stats` (the channel's counters) sees the channel's connection
through :class:`Wire`, so it does not import :mod:`leveret.wire.channel` (which imports it);
the channel sees its connection through
:class:`leveret.wire.channel.Link`, which extends :class:`Wire`, and never imports
:mod:`leveret.wire.connection`. Protocols and plain types: nothing here runs code on a
message's path.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Protocol

from leveret.node.queue import Consumer, Entry, Queue

if TYPE_CHECKING:
    from leveret.node.auth import AccessControl
    from leveret.node.state import PublishCounters
    from leveret.node.vhost import VHost

# An unacked delivery: its queue, the queue entry, the consumer (None for basic.get).
Record = tuple[Queue, Entry, Consumer | None]


class Wire(Protocol):
    """A channel's connection as the channel's commands see it (the wire's Connection
    implements it): its socket, its client's capabilities and who it is."""

    @property
    def writable(self) -> bool:
        """False while the socket's buffer is full."""

    @property
    def frame_max(self) -> int:
        """The negotiated largest frame."""

    @property
    def vhost(self) -> VHost:
        """The vhost it opened."""

    @property
    def name(self) -> str:
        """Its name, as the management API and the firehose show it."""

    @property
    def user(self) -> str:
        """The user it logged in as."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the socket."""

    def client_capability(self, name: str) -> bool:
        """Whether the client announced capability ``name``."""


class Node(Protocol):
    """The node's state as a channel sees it (leveret.node.state.ServerState implements it)."""

    @property
    def access(self) -> AccessControl:
        """Users, permissions and their checks."""

    @property
    def counters(self) -> PublishCounters:
        """The node's publish counters (a closed channel's fold into them)."""


class Content(Enum):
    """Where a channel is in assembling a published message's content."""

    IDLE = 0
    AWAIT_HEADER = 1
    AWAIT_BODY = 2
