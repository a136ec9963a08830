"""Broker configuration: one frozen dataclass, every default in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.node.auth import AccessControl

# RabbitMQ's defaults (deps/rabbit/Makefile app env): frame_max 131072, channel_max 2047,
# heartbeat 60 s, handshake_timeout 10 s.
FRAME_MAX = 131072
# 3.13 profile: a client may not negotiate below 4096 (rabbit_reader ?FRAME_MIN_SIZE).
FRAME_MIN = 4096
CHANNEL_MAX = 2047
HEARTBEAT = 60
HANDSHAKE_TIMEOUT = 10.0
# 3.13 profile: max_message_size defaults to 128 MiB (16 MiB from 4.0).
MAX_MESSAGE_SIZE = 128 * 1024 * 1024
# The largest values the settings accept (broker/settings.py): frame_max is a long in
# connection.tune, channel_max and heartbeat are shorts; max_message_size is hard limited to
# 512 MiB (rabbit.hrl ?MAX_MSG_SIZE).
FRAME_MAX_LIMIT = 2**31 - 1
CHANNEL_MAX_LIMIT = 65535
HEARTBEAT_LIMIT = 65535
MAX_MESSAGE_SIZE_LIMIT = 512 * 1024 * 1024
# RabbitMQ's consumer_timeout (docs/consumers.md "Delivery Acknowledgement Timeout"):
# 30 minutes, in ms.
CONSUMER_TIMEOUT = 1_800_000
# RabbitMQ's default disk_free_limit (rabbit_disk_monitor ?DEFAULT_DISK_FREE_LIMIT): 50 MB.
DISK_FREE_LIMIT = 50_000_000
# The node name the broker gives itself where RabbitMQ names its Erlang node (management
# API, metrics, firehose trace headers).
NODE_NAME = "leveret@localhost"


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a :class:`leveret.server.Server` needs to run."""

    # The AMQP and AMQPS listeners' hosts: one, or several (RabbitMQ's listeners.tcp.N);
    # each is bound at every address it resolves to (broker/listen.py).
    host: str | tuple[str, ...] = "127.0.0.1"
    port: int = 5672
    data_dir: Path | None = None
    frame_max: int = FRAME_MAX
    channel_max: int = CHANNEL_MAX
    heartbeat: int = HEARTBEAT
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    max_message_size: int = MAX_MESSAGE_SIZE
    # Start even when the definitions log has a damaged record in the middle: the damaged
    # bytes are saved aside and the rest is replayed (storage/log.py). Off: refuse to start.
    force_recovery: bool = False
    # A delivery left unacknowledged this long (ms) closes its channel with 406; 0: never.
    consumer_timeout: int = CONSUMER_TIMEOUT
    # Bytes of queued messages above which publishers are blocked; 0: 40 % of the memory
    # available, RAM or a container's cgroup limit (RabbitMQ's vm_memory_high_watermark).
    # See broker/memory.py.
    memory_high_watermark: int = 0
    # Free bytes on the data directory's file system below which publishers are blocked
    # (RabbitMQ's disk_free_limit). See broker/disk.py.
    disk_free_limit: int = DISK_FREE_LIMIT
    # What reads the free bytes compared with it; None: statvfs of data_dir (no data dir:
    # no disk alarm). Tests pass their own to make the disk look full, then fine again.
    disk_free_probe: Callable[[], int] | None = None
    # Open connections allowed at once; 0: no limit (RabbitMQ's connection_max).
    max_connections: int = 0
    # Directory for the traffic trace (one JSON line per publish); None: no trace.
    trace_dir: Path | None = None
    # AMQPS listener: on when both cert and key are set; tls_ca requires client certs.
    tls_port: int = 5671
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    # Management HTTP API (None: off; `leveret serve` turns it on at 15672).
    management_host: str = "127.0.0.1"
    management_port: int | None = None
    # rabbitmq_prometheus's listener, on the management host (None: off; `leveret serve`
    # turns it on at 15692).
    prometheus_port: int | None = None
    # RabbitMQ definitions.json loaded at start-up.
    load_definitions: Path | None = None
    # Serve `leveret ctl` on a unix socket (broker/control/; `leveret serve` does), at
    # control_socket, else DATA_DIR/control.sock, else control-PORT.sock in a private
    # runtime directory (PORT: the AMQP port bound, so port 0 names no shared path).
    control: bool = False
    control_socket: Path | None = None
    # A prepared user database (users with hashes and tags, permissions); None: built from
    # ``users`` with full permissions on ``vhosts``.
    access: AccessControl | None = None
    # user -> password. guest may only connect from loopback, as in RabbitMQ.
    users: dict[str, str] = field(default_factory=lambda: {"guest": "guest"})
    # Users that may only connect from loopback (RabbitMQ's ``loopback_users``, default
    # guest); the Docker image clears it, as the official RabbitMQ image does.
    loopback_users: tuple[str, ...] = ("guest",)
    vhosts: tuple[str, ...] = ("/",)
    # Seconds to wait for clients to answer Connection.Close on shutdown.
    shutdown_timeout: float = 5.0
    use_uvloop: bool = True

    @property
    def hosts(self) -> tuple[str, ...]:
        """The AMQP(S) listeners' hosts as a tuple (``host`` may be one string)."""
        return (self.host,) if isinstance(self.host, str) else self.host
