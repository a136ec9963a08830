"""Settings for ``leveret serve``: a TOML file, ``LEVERET_*`` environment variables and
command-line flags, in that order of increasing precedence.

Every scalar setting is declared once in :data:`SETTINGS` (name, type, default, help);
the flag is ``--name-with-dashes``, the variable ``LEVERET_NAME`` and the file key
``name``. Users, vhosts and permissions come from the file's tables::

    vhosts = ["/", "orders"]

    [users.app]
    password = "s3cret"            # or password_hash = "<RabbitMQ SHA-256 hash>"
    tags = ["management"]

    [permissions.app."orders"]
    configure = ".*"
    write = ".*"
    read = ".*"

Without a ``[users]`` table the default user is guest/guest, as in RabbitMQ.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveret.config import CHANNEL_MAX, CONSUMER_TIMEOUT, FRAME_MAX, HEARTBEAT, MAX_MESSAGE_SIZE

ENV_PREFIX = "LEVERET_"


@dataclass(frozen=True)
class Setting:
    """One scalar setting."""

    name: str
    kind: Callable[[str], Any]
    default: Any
    help: str


def _path(value: str) -> Path | None:
    return Path(value) if value else None


def _users_list(value: str) -> tuple[str, ...]:
    return tuple(u for u in value.split(",") if u)


SETTINGS: tuple[Setting, ...] = (
    Setting("host", str, "127.0.0.1", "address the AMQP listener binds"),
    Setting("port", int, 5672, "AMQP port (0: any free port)"),
    Setting("data_dir", _path, None, "directory for durable data (none: memory only)"),
    Setting("log_level", str, "info", "logging level: debug, info, warning, error"),
    Setting(
        "loopback_users",
        _users_list,
        ("guest",),
        "comma-separated users who may connect only from loopback, as RabbitMQ's "
        "loopback_users ('' lets guest connect from anywhere)",
    ),
    Setting(
        "memory_high_watermark",
        float,
        0.0,
        "bytes of queued messages above which publishers are blocked; below 1 a fraction "
        "of RAM (default 0.4 of RAM, as RabbitMQ)",
    ),
    Setting("max_connections", int, 0, "open connections allowed (0: no limit)"),
    Setting("max_message_size", int, MAX_MESSAGE_SIZE, "largest message body in bytes"),
    Setting(
        "consumer_timeout",
        int,
        CONSUMER_TIMEOUT,
        "ms a delivery may stay unacknowledged before its channel is closed (0: no limit)",
    ),
    Setting("frame_max", int, FRAME_MAX, "largest frame offered in connection.tune"),
    Setting("channel_max", int, CHANNEL_MAX, "most channels per connection"),
    Setting("heartbeat", int, HEARTBEAT, "heartbeat interval offered, seconds (0: off)"),
    Setting("trace_dir", _path, None, "record one JSON line per published message here"),
    Setting("management_host", str, "127.0.0.1", "address of the management HTTP API"),
    Setting("management_port", int, 15672, "management HTTP API port (-1: disabled)"),
    Setting("tls_port", int, 5671, "AMQPS port, used when --tls-cert and --tls-key are set"),
    Setting("tls_cert", _path, None, "PEM certificate (chain) for the AMQPS listener"),
    Setting("tls_key", _path, None, "PEM private key for the AMQPS listener"),
    Setting("tls_ca", _path, None, "PEM CA bundle: clients must present a certificate it signed"),
    Setting("load_definitions", _path, None, "RabbitMQ definitions.json to load at start-up"),
)


@dataclass
class Settings:
    """The merged result: scalar values plus the user tables."""

    values: dict[str, Any]
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    vhosts: tuple[str, ...] = ("/",)
    permissions: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per setting (defaults resolved later)."""
    parser.add_argument(
        "--config", type=Path, default=None, help="TOML settings file (env LEVERET_CONFIG)"
    )
    for setting in SETTINGS:
        flag = "--" + setting.name.replace("_", "-")
        default = setting.default
        if isinstance(default, tuple):
            default = ",".join(default)
        parser.add_argument(
            flag,
            dest=setting.name,
            default=None,
            metavar=setting.name.upper(),
            help=f"{setting.help} (env {ENV_PREFIX}{setting.name.upper()}; default {default!r})",
        )


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """Merge file, environment and flags: a flag beats the environment, which beats the
    file, which beats the default."""
    config_path = args.config or _path(environ.get(ENV_PREFIX + "CONFIG", ""))
    document: dict[str, Any] = {}
    if config_path is not None:
        with open(config_path, "rb") as f:
            document = tomllib.load(f)
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        value: Any = setting.default
        if setting.name in document:
            raw = document[setting.name]
            value = setting.kind(str(raw)) if not isinstance(raw, list | bool) else raw
            if isinstance(raw, list):
                value = tuple(str(v) for v in raw)
        env = environ.get(ENV_PREFIX + setting.name.upper())
        if env is not None:
            value = setting.kind(env)
        flag = getattr(args, setting.name, None)
        if flag is not None:
            value = setting.kind(flag)
        values[setting.name] = value
    vhosts = document.get("vhosts", ["/"])
    return Settings(
        values=values,
        users=dict(document.get("users", {})),
        vhosts=tuple(str(v) for v in vhosts),
        permissions=dict(document.get("permissions", {})),
    )
