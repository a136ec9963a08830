"""The node's end of the control channel: a unix socket only the local operator may use.

Who may use it, twice over: the socket file is created with mode 0600 (umask set around
``bind``, so it is never reachable by others, even for an instant), which the kernel
checks on ``connect``; and every accepted peer's uid (``SO_PEERCRED``) must be the node's
own or root's, so loosening the file's mode or its directory opens nothing. RabbitMQ
relies on the Erlang cookie, a file readable by the node's user only, the same way.

What one request may do on the event loop is bounded: the request is read with a size
limit and a timeout, a listing is produced in batches of ``commands.BATCH`` rows with a turn
of the loop (and the socket drained) between batches, so AMQP clients are served while a
listing of 100,000 queues goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.control.endpoint import (
    EX_NOPERM,
    EX_SOFTWARE,
    EX_USAGE,
    MAX_REQUEST,
    REQUEST_TIMEOUT,
    ControlError,
    address,
    default_socket,
)

if TYPE_CHECKING:
    from leveret.config import Config
    from leveret.node.state import ServerState
    from leveret.wire.connection import Connection

log = logging.getLogger(__name__)


class ControlSocketError(Exception):
    """The control socket cannot be set up (its directory, a live node on it, an
    operating-system error): one line naming the socket."""


def _private_directory(directory: Path, data_dir: Path | None) -> None:
    """The socket's directory: the data directory as it is, or a runtime directory that
    must be the node user's own and closed to others (created so when missing)."""
    if data_dir is not None and directory == data_dir:
        return
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ControlSocketError(
            f"control socket directory {directory} must be owned by uid {os.geteuid()} "
            f"and closed to others (mode 0700)"
        )


def _clear_stale(path: Path) -> None:
    """Remove a socket left by a node that was killed; refuse to touch anything else."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ControlSocketError(f"control socket {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with address(path) as name:
            probe.connect(name)
    except OSError:
        path.unlink(missing_ok=True)  # nobody listens: a dead node's
        return
    finally:
        probe.close()
    raise ControlSocketError(f"control socket {path} is in use by another running node")


def _bound_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)  # the file is born 0600
        try:
            with address(path) as name:
                sock.bind(name)
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
        sock.listen(16)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def socket_of(config: Config, port: int) -> Path:
    """The control socket of a node with ``config`` whose AMQP listener is on ``port``."""
    return config.control_socket or default_socket(config.data_dir, port)


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The uid of the process at the other end of a unix socket (None: unknown)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def may_control(uid: int | None) -> bool:
    """The node's own user and root may use the control channel; nobody else."""
    return uid is not None and uid in (os.geteuid(), 0)


class ControlListener:
    """The control socket of one broker (its shared :class:`ServerState`)."""

    def __init__(self, server: ServerState[Connection], path: Path) -> None:
        self.server = server
        self.path = path
        self._listener: asyncio.AbstractServer | None = None
        self._inode: int | None = None
        self._clients: set[asyncio.Task[Any]] = set()

    def claim(self) -> None:
        """Before the node touches its data directory: refuse to start beside a node that
        still serves this socket (the same data directory), clear a dead node's socket."""
        try:
            _private_directory(self.path.parent, self.server.config.data_dir)
            _clear_stale(self.path)
        except OSError as exc:
            raise ControlSocketError(f"control socket {self.path}: {exc.strerror or exc}") from None

    async def start(self) -> None:
        """Create the socket (mode 0600) and serve requests on it."""
        self.claim()  # again: the node may have taken a while to recover
        try:
            sock = _bound_socket(self.path)
            self._inode = self.path.stat().st_ino
        except OSError as exc:
            raise ControlSocketError(f"control socket {self.path}: {exc.strerror or exc}") from None
        self._listener = await asyncio.start_unix_server(self._serve, sock=sock, limit=MAX_REQUEST)
        log.info("control socket on %s", self.path)

    async def close(self) -> None:
        """Stop serving, end requests in progress and remove the socket file."""
        if self._listener is not None:
            self._listener.close()
            for task in list(self._clients):
                task.cancel()
            await self._listener.wait_closed()
            self._listener = None
        with contextlib.suppress(OSError):
            if self._inode is not None and self.path.lstat().st_ino == self._inode:
                self.path.unlink()  # ours, not a newer node's

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            await self._request(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from leveret.control.dispatch import run

        uid = peer_uid(writer)
        if not may_control(uid):
            log.warning("control socket: refused a client with uid %s", uid)
            await send(
                writer, {"error": f"uid {uid} may not control this node", "status": EX_NOPERM}
            )
            return
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                line = await reader.readline()
        except TimeoutError:
            return
        except ValueError:  # longer than MAX_REQUEST
            await send(writer, {"error": "request too large", "status": EX_USAGE})
            return
        try:
            request = json.loads(line)
            command, args = str(request["command"]), dict(request.get("args") or {})
        except (ValueError, KeyError, TypeError):
            await send(writer, {"error": "malformed control request", "status": EX_USAGE})
            return
        try:
            await run(self.server, command, args, lambda item: send(writer, item))
        except ControlError as exc:
            await send(writer, {"error": exc.text, "status": exc.status})
        except Exception as exc:  # a bug: one line to the operator, the trace in the log
            log.exception("control command %s failed", command)
            await send(writer, {"error": f"{type(exc).__name__}: {exc}", "status": EX_SOFTWARE})


async def send(writer: asyncio.StreamWriter, item: dict[str, Any]) -> None:
    """Write one reply line and wait until the socket has room again."""
    writer.write(json.dumps(item, separators=(",", ":")).encode("utf-8") + b"\n")
    await writer.drain()
