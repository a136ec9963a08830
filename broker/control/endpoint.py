"""Where a node's control socket is, and what travels on it.

One request per connection: the client sends one JSON line ``{"command": NAME, "args":
{...}}``; the node answers with JSON lines: ``{"rows": [...]}`` batches for a listing, then
one final ``{"done": true, "message": ..., "result": ...}`` or ``{"error": TEXT,
"status": N}`` (N: the exit status the CLI returns, RabbitMQ's sysexits codes).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

SOCKET_NAME = "control.sock"
# A request carries at most a definitions file: the management API's body limit.
MAX_REQUEST = 64 * 1024 * 1024
# Seconds a client gets to send its request once connected.
REQUEST_TIMEOUT = 10.0
# sun_path is 108 bytes on Linux, NUL included.
_SUN_PATH = 107

# Exit statuses, as rabbitmqctl's (RabbitMQ.CLI.Core.ExitCodes, from sysexits.h).
EX_USAGE = 64
EX_DATAERR = 65
EX_NOUSER = 67
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_NOPERM = 77


class ControlError(Exception):
    """A refused command: its one-line text and the CLI's exit status (raised by the
    node's commands and listings, sent to the client as ``{"error", "status"}``)."""

    def __init__(self, text: str, status: int = EX_SOFTWARE) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


def default_socket(data_dir: Path | None, port: int) -> Path:
    """The control socket of a node: ``DATA_DIR/control.sock``; without a data directory,
    ``control-PORT.sock`` in a directory private to the user (``$XDG_RUNTIME_DIR/leveret``,
    else ``/tmp/leveret-UID``), so nodes on different ports do not collide."""
    if data_dir is not None:
        return data_dir / SOCKET_NAME
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        Path(runtime) / "leveret"
        if runtime
        else Path(tempfile.gettempdir()) / f"leveret-{os.geteuid()}"
    )
    return base / f"control-{port}.sock"


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """A name ``bind``/``connect`` accept for ``path``: the path itself, or, when it is
    longer than a unix socket address may be (a deep data directory), the same file
    reached through ``/proc/self/fd`` of its directory."""
    text = os.fsdecode(path)
    if len(os.fsencode(text)) <= _SUN_PATH:
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)
