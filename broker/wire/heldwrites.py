"""What an injected delay (broker/faults.py) does to one connection's socket: hold its
writes a while, as a slow network would (a network failure is ``Connection.drop``).

A delay puts a :class:`HeldWrites` in front of the connection's transport: the connection
writes to it as to any transport, and it hands each write to the real one ``seconds``
later, in order. Without a delay the connection writes straight to its transport, so the
fault costs the write path nothing at all when it is off.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leveret.wire.connection import Connection


def delay_writes(conn: Connection, seconds: float) -> None:
    """Hold every write to ``conn`` ``seconds`` before it reaches the socket, in order;
    0 turns it off once what is held has gone out."""
    transport = conn.transport
    if isinstance(transport, HeldWrites):
        transport.seconds = seconds
        transport.release()
    elif seconds and transport is not None:
        conn.transport = HeldWrites(conn, transport, seconds)


class HeldWrites(asyncio.Transport):
    """A transport that writes to ``inner`` ``seconds`` late, in order; everything else
    is the inner transport's. Turned off (``seconds`` 0), it hands the connection its
    transport back as soon as nothing is held."""

    def __init__(self, conn: Connection, inner: asyncio.Transport, seconds: float) -> None:
        super().__init__()
        self.conn = conn
        self.inner = inner
        self.seconds = seconds
        self._held: deque[tuple[float, bytes]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    # -- writes: held -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` (copied: the caller may reuse its buffer)."""
        self._hold(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        """Hold the buffers, joined."""
        self._hold(b"".join(list_of_data))

    def _hold(self, data: bytes) -> None:
        loop = self.conn.loop
        self._held.append((loop.time() + self.seconds, data))
        if self._timer is None:
            self._timer = loop.call_at(self._held[0][0], self.release)

    def release(self) -> None:
        """Write what is due, in order; set the timer for the rest, or, turned off and
        empty, give the connection its transport back."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self.conn.loop.time()
        while self._held and (self._held[0][0] <= now or not self.seconds):
            data = self._held.popleft()[1]
            if not self.inner.is_closing():
                self.inner.write(data)
        if self._held:
            self._timer = self.conn.loop.call_at(self._held[0][0], self.release)
        elif not self.seconds and self.conn.transport is self:
            self.conn.transport = self.inner

    def close(self) -> None:
        """A close after what is held (as the socket's own buffer goes before a FIN)."""
        self.seconds = 0
        self.release()
        self.inner.close()

    def abort(self) -> None:
        """Drop what is held and abort the socket."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._held.clear()
        self.inner.abort()

    # -- everything else: the inner transport's ------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self.inner.is_closing()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def pause_reading(self) -> None:
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.inner.get_write_buffer_limits()

    def write_eof(self) -> None:
        self.inner.write_eof()

    def can_write_eof(self) -> bool:
        return self.inner.can_write_eof()
