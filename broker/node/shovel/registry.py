"""The node's dynamic shovels: defined, replaced and cleared as runtime parameters of the
component ``shovel`` (rabbit_shovel_dyn_worker_sup_sup), listed with their status
(rabbit_shovel_status), restarted on demand, and saved with the users so that a node with
a data dir runs them again after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from leveret.node.shovel.definition import (
    SHOVEL_COMPONENT,
    ShovelDefinition,
    ShovelError,
    parse_definition,
)
from leveret.node.shovel.worker import Shovel

if TYPE_CHECKING:
    from leveret.node.state import ServerState

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (vhost, name)


class Shovels:
    """Every dynamic shovel of one node, by (vhost, name)."""

    def __init__(self, state: ServerState[Any]) -> None:
        self._state = state
        self.shovels: dict[Key, Shovel] = {}
        # The JSON values as defined (what GET /api/parameters and definitions show).
        self.values: dict[Key, dict[str, Any]] = {}
        self.running = False  # the node's listeners are up: shovels may connect
        # Shovels stopped (deleted, replaced, restarted) still closing their connections:
        # the node's stop waits for them too.
        self.closing: set[asyncio.Task[None]] = set()

    # -- what a worker needs of the node ----------------------------------------------

    def address(self) -> tuple[str, int]:
        """Where a local end connects: the node's first AMQP listener, over loopback."""
        if not self._state.addresses:
            raise OSError("the node has no AMQP listener")
        host, port = self._state.addresses[0][:2]
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return host, port

    def secret(self) -> str:
        """The credential a local end logs in with (AccessControl.direct_secret)."""
        return self._state.access.direct_secret

    # -- definitions --------------------------------------------------------------------

    def check(self, vhost: str, name: str, value: Any, user: str | None) -> ShovelDefinition:
        """``value`` checked as rabbit_shovel_parameters:validate/5 checks it, including
        that ``user`` may connect to the vhost a local URI names (validate_params_user);
        :class:`ShovelError` with every fault."""
        definition = parse_definition(name, value)
        owner = self.owner(user)
        faults = []
        for uri in (*definition.src_uris, *definition.dest_uris):
            if uri.local and not (
                uri.vhost in self._state.vhosts
                and owner is not None
                and self._state.access.can_access_vhost(owner, uri.vhost)
            ):
                faults.append(f'user "{owner}" may not connect to vhost "{uri.vhost}"')
        if faults:
            raise ShovelError(faults)
        return definition

    def owner(self, user: str | None) -> str | None:
        """Who a shovel's local ends connect as: the user who defined it, or (defined
        without one: leveret ctl, --load-definitions) the first administrator."""
        if user is not None:
            return user
        users = self._state.access.users
        admins = sorted(n for n, u in users.items() if "administrator" in u.tags)
        return admins[0] if admins else None

    def define(self, vhost: str, name: str, value: Any, user: str | None = None) -> bool:
        """Add or replace shovel ``name`` of ``vhost`` (which must exist) and start it
        when the node runs; True when it is new. Raises :class:`ShovelError`."""
        definition = self.check(vhost, name, value, user)
        key = (vhost, name)
        created = key not in self.values
        old = self.shovels.pop(key, None)
        if old is not None:
            self._closing(old)
        self.values[key] = dict(value)
        shovel = Shovel(vhost, name, definition, self.owner(user) or "", self, self._finished)
        self.shovels[key] = shovel
        if self.running:
            shovel.start()
        return created

    def delete(self, vhost: str, name: str) -> bool:
        """Stop and remove a shovel; False when there is none."""
        key = (vhost, name)
        shovel = self.shovels.pop(key, None)
        self.values.pop(key, None)
        if shovel is None:
            return False
        self._closing(shovel)
        return True

    def restart(self, vhost: str, name: str) -> bool:
        """Stop a shovel and start it again (its connections anew); False when none."""
        shovel = self.shovels.get((vhost, name))
        if shovel is None:
            return False
        self._closing(shovel)
        shovel.state, shovel.reason = "starting", None
        if self.running:
            shovel.start()
        return True

    def _closing(self, shovel: Shovel) -> None:
        task = shovel.cancel()
        if task is not None and not task.done():
            self.closing.add(task)
            task.add_done_callback(self.closing.discard)

    def forget_vhost(self, vhost: str) -> None:
        """A deleted vhost's shovels go with it, as its runtime parameters do."""
        for key in [k for k in self.shovels if k[0] == vhost]:
            self.delete(*key)

    def _finished(self, shovel: Shovel) -> None:
        # src-delete-after reached: the shovel clears its own parameter
        # (rabbit_shovel_worker's terminate with delete-after).
        if self.shovels.get((shovel.vhost, shovel.name)) is shovel:
            self.delete(shovel.vhost, shovel.name)
            self._state.save_access()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """The node listens: run every shovel."""
        self.running = True
        for shovel in self.shovels.values():
            shovel.start()

    async def stop(self) -> None:
        """The node stops: stop every shovel and close its connections."""
        self.running = False
        for shovel in list(self.shovels.values()):
            await shovel.stop()
        for task in list(self.closing):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- views ------------------------------------------------------------------------

    def parameters(self, vhost: str) -> list[dict[str, Any]]:
        """The vhost's shovels as runtime parameters (name order)."""
        return [
            {"value": value, "vhost": v, "component": SHOVEL_COMPONENT, "name": name}
            for (v, name), value in sorted(self.values.items())
            if v == vhost
        ]

    def saved(self) -> list[dict[str, Any]]:
        """What the node saves with the users: each parameter and its owner."""
        return [
            {
                "vhost": vhost,
                "name": name,
                "value": value,
                "owner": self.shovels[(vhost, name)].owner,
            }
            for (vhost, name), value in sorted(self.values.items())
        ]

    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """rabbit_shovel_status of each shovel (of ``vhost``), in (vhost, name) order."""
        return [
            shovel.status()
            for key, shovel in sorted(self.shovels.items())
            if vhost is None or key[0] == vhost
        ]
