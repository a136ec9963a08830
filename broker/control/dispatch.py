"""Runs one control request on the node: a listing, sent in batches, or a command of
:mod:`.commands`, :mod:`.runtime` or :mod:`.settings` and its final line."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from leveret.control import commands, runtime, settings, shovels
from leveret.control.commands import BATCH, Args, Reply, Send, text, vhost_named
from leveret.control.endpoint import EX_USAGE, ControlError
from leveret.control.listing import KINDS, rows

if TYPE_CHECKING:
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

ALL: dict[str, Callable[[ServerState[Connection], Args], Reply | Awaitable[Reply]]] = {
    **commands.COMMANDS,
    **runtime.COMMANDS,
    **settings.COMMANDS,
    **shovels.COMMANDS,
}


async def run(server: ServerState[Connection], command: str, args: Args, send: Send) -> None:
    """Run ``command`` and send its reply (rows, then the final line)."""
    kind = KINDS.get(command)
    if kind is not None:
        vhost = vhost_named(server, text(args, "vhost")) if kind.per_vhost else None
        columns = kind.columns([str(c) for c in args.get("columns") or []])
        await send({"columns": columns})
        batch: list[dict[str, Any]] = []
        for row in rows(server, kind, vhost, columns):
            batch.append(row)
            if len(batch) >= BATCH:
                await send({"rows": batch})
                batch = []
                await asyncio.sleep(0)  # let the AMQP clients have the loop
        if batch:
            await send({"rows": batch})
        await send({"done": True})
        return
    handler = ALL.get(command)
    if handler is None:
        raise ControlError(f"unknown command {command!r}", EX_USAGE)
    reply = handler(server, args)
    message, result = await reply if inspect.isawaitable(reply) else reply
    await send({"done": True, "message": message, "result": result})
