"""Management state kept beside a :class:`leveret.node.state.ServerState`, without changing it.

The broker has no place for what only the management API knows: vhost descriptions and
tags (RabbitMQ's vhost metadata) and the statistics sampler. They live here, one
:class:`ManagementState` per server, held weakly so a stopped server is not kept alive.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.management.stats import Sampler

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

DEFAULT_VHOST_DESCRIPTION = "Default virtual host"


@dataclass
class VHostMeta:
    """RabbitMQ's vhost metadata (rabbit_vhost: description, tags, default queue type)."""

    description: str = ""
    tags: list[str] = field(default_factory=list)
    default_queue_type: str = "classic"


@dataclass
class ManagementState:
    """What the management API remembers about one server."""

    sampler: Sampler
    vhosts: dict[str, VHostMeta] = field(default_factory=dict)

    def vhost_meta(self, name: str) -> VHostMeta:
        """The metadata of vhost ``name`` (defaults for vhosts made elsewhere)."""
        meta = self.vhosts.get(name)
        if meta is None:
            description = DEFAULT_VHOST_DESCRIPTION if name == "/" else ""
            meta = self.vhosts[name] = VHostMeta(description)
        return meta


_STATES: weakref.WeakKeyDictionary[ServerState[Connection], ManagementState] = (
    weakref.WeakKeyDictionary()
)


def state_of(server: ServerState[Connection]) -> ManagementState:
    """The management state of ``server``, created on first use."""
    state = _STATES.get(server)
    if state is None:
        state = _STATES[server] = ManagementState(Sampler(server))
    return state
