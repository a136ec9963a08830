"""Settings for ``leveret serve``: a TOML file, ``LEVERET_*`` environment variables and
command-line flags, in that order of increasing precedence.

Every scalar setting is declared once, as a field of :class:`ServeSettings` (a pydantic
model: type, range, default, help); the flag is ``--name-with-dashes``, the variable
``LEVERET_NAME`` and the file key ``name``. Users, vhosts and permissions come from the
file's tables (:class:`ConfigFile`)::

    vhosts = ["/", "orders"]

    [users.app]
    password = "s3cret"            # or password_hash = "<RabbitMQ SHA-256 hash>"
    tags = ["management"]

    [permissions.app."orders"]
    configure = ".*"
    write = ".*"
    read = ".*"

Without a ``[users]`` table the default user is guest/guest, as in RabbitMQ.

Every value is checked once, at start-up, where it is read: flags and variables are
strings, parsed as the field's type; the file's values must already have it (``port =
"5672"`` or ``vhosts = "orders"`` is a wrong type), and a key the file may not have is
refused. A refused value raises :class:`SettingsError`, whose one-line message names the
flag, the variable or the file and key.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from leveret.config import (
    CHANNEL_MAX,
    CONSUMER_TIMEOUT,
    DISK_FREE_LIMIT,
    FRAME_MAX,
    HEARTBEAT,
    MAX_MESSAGE_SIZE,
)
from leveret.node.disk import DiskFreeLimit
from leveret.node.memory import Watermark
from leveret.settings_types import (
    ChannelMax,
    Count,
    DiskLimit,
    FrameMax,
    Heartbeat,
    HighWatermark,
    Host,
    Hosts,
    LogLevel,
    MessageSize,
    Name,
    Names,
    OptionalPath,
    PasswordHash,
    Pattern,
    Port,
    PortOrOff,
    invalid,
)

ENV_PREFIX = "LEVERET_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"


class SettingsError(Exception):
    """A setting that cannot be used; the message (one line) names where it came from."""

    status = 2


# -- the declaration ----------------------------------------------------------------------


class ServeSettings(BaseModel):
    """The scalar settings of ``leveret serve``, each one field: the flag, the variable
    and the file key are made from its name, the help from its description."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Several hosts as RabbitMQ's listeners.tcp.1, listeners.tcp.2: --host repeated, a
    # comma-separated variable, a list in the file; each is bound at every address it
    # resolves to, localhost at 127.0.0.1 and ::1, :: for IPv6 and IPv4 (broker/listen.py).
    host: Hosts = Field(
        default=("127.0.0.1",),
        description="address the AMQP(S) listeners bind; repeat the flag, or a "
        "comma-separated variable or a list in the file, for several (localhost: 127.0.0.1 "
        "and ::1; '::': IPv6 and IPv4)",
        json_schema_extra={"repeatable": True},
    )
    port: Port = Field(default=5672, description="AMQP port (0: any free port)")
    data_dir: OptionalPath = Field(
        default=None, description="directory for durable data (none: memory only)"
    )
    log_level: LogLevel = Field(
        default="info", description="logging level: debug, info, warning, error, critical or none"
    )
    loopback_users: Names = Field(
        default=("guest",),
        description="users who may connect only from loopback, as RabbitMQ's "
        "loopback_users; comma-separated in a flag or variable, a list in the file "
        "('' lets guest connect from anywhere)",
    )
    memory_high_watermark: HighWatermark = Field(
        default=Watermark(relative=0.4),
        description="bytes of queued messages above which publishers are blocked: a "
        "fraction of the memory (RAM, or the container's cgroup limit), 0 < x <= 1, or a "
        "size as RabbitMQ's vm_memory_high_watermark.absolute (bytes, or with a unit: "
        "512MB, 2GiB, 4Gi)",
    )
    disk_free_limit: DiskLimit = Field(
        default=DiskFreeLimit(absolute=DISK_FREE_LIMIT),
        description="free bytes on the data directory's file system below which publishers "
        "are blocked, as RabbitMQ's disk_free_limit: a size (bytes, or with a unit: 50MB, "
        "1GiB) or a multiple of the memory with a decimal point (1.0, 2.0)",
    )
    max_connections: Count = Field(default=0, description="open connections allowed (0: no limit)")
    max_message_size: MessageSize = Field(
        default=MAX_MESSAGE_SIZE, description="largest message body in bytes"
    )
    consumer_timeout: Count = Field(
        default=CONSUMER_TIMEOUT,
        description="ms a delivery may stay unacknowledged before its channel is closed "
        "(0: no limit)",
    )
    frame_max: FrameMax = Field(
        default=FRAME_MAX, description="largest frame offered in connection.tune"
    )
    channel_max: ChannelMax = Field(
        default=CHANNEL_MAX, description="most channels per connection (0: no limit)"
    )
    heartbeat: Heartbeat = Field(
        default=HEARTBEAT, description="heartbeat interval offered, seconds (0: off)"
    )
    trace_dir: OptionalPath = Field(
        default=None, description="record one JSON line per published message here"
    )
    management_host: Host = Field(
        default="127.0.0.1", description="address of the management HTTP API"
    )
    management_port: PortOrOff = Field(
        default=15672, description="management HTTP API port (0: any free port, -1: disabled)"
    )
    prometheus_port: PortOrOff = Field(
        default=15692,
        description="Prometheus /metrics port, on the management host (0: any, -1: disabled)",
    )
    tls_port: Port = Field(
        default=5671, description="AMQPS port, used when --tls-cert and --tls-key are set"
    )
    tls_cert: OptionalPath = Field(
        default=None, description="PEM certificate (chain) for the AMQPS listener"
    )
    tls_key: OptionalPath = Field(
        default=None, description="PEM private key for the AMQPS listener"
    )
    tls_ca: OptionalPath = Field(
        default=None, description="PEM CA bundle: clients must present a certificate it signed"
    )
    control_socket: OptionalPath = Field(
        default=None,
        description="unix socket for leveret ctl / diagnostics, mode 0600, served to this "
        "user and root only (default: DATA_DIR/control.sock; without a data dir "
        "control-PORT.sock in $XDG_RUNTIME_DIR/leveret or /tmp/leveret-UID)",
    )
    force_recovery: bool = Field(
        default=False,
        description="start even if the definitions log has a damaged record in the middle: "
        "save the damaged bytes aside (definitions.log.corrupt-OFFSET) and replay the rest",
    )
    load_definitions: OptionalPath = Field(
        default=None,
        description="RabbitMQ definitions.json (or a directory of them) to load at start-up",
    )

    @model_validator(mode="after")
    def _tls_files_go_together(self, info: ValidationInfo) -> ServeSettings:
        # Checked once the sources are merged: the file may name the certificate and a
        # flag the key.
        if not (info.context and info.context.get("merged")):
            return self
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = ("cert", "key") if self.tls_key is None else ("key", "cert")
            raise invalid(
                "tls_pair",
                f"--tls-{given} is set without --tls-{missing}: the AMQPS listener needs both",
            )
        if self.tls_ca is not None and self.tls_cert is None:
            raise invalid("tls_ca", "--tls-ca needs --tls-cert and --tls-key")
        return self


SETTINGS: tuple[str, ...] = tuple(ServeSettings.model_fields)


class UserEntry(BaseModel):
    """``[users.NAME]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    password: str | None = None
    password_hash: PasswordHash = None
    tags: Names = ()

    @model_validator(mode="after")
    def _one_password(self) -> UserEntry:
        if self.password is not None and self.password_hash is not None:
            raise invalid("password_conflict", "give password or password_hash, not both")
        return self


class PermissionEntry(BaseModel):
    """``[permissions.USER."VHOST"]``: regular expressions (an empty one grants nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    configure: Pattern = ""
    write: Pattern = ""
    read: Pattern = ""


class ConfigFile(ServeSettings):
    """A ``--config`` TOML file: any scalar setting, and the tables."""

    vhosts: Names = ("/",)
    users: dict[Name, UserEntry] = {}
    permissions: dict[str, dict[str, PermissionEntry]] = {}

    @model_validator(mode="after")
    def _permissions_name_users_and_vhosts(self) -> ConfigFile:
        users = set(self.users) or {"guest"}
        for user, per_vhost in self.permissions.items():
            if user not in users:
                where = "in [users]" if self.users else "(without [users] there is only guest)"
                raise invalid(
                    "unknown_user",
                    f"key {_key(('permissions', user))!r}: no user {user!r} {where}",
                )
            for vhost in per_vhost:
                if vhost not in self.vhosts:
                    raise invalid(
                        "unknown_vhost",
                        f"key {_key(('permissions', user, vhost))!r}: vhost {vhost!r} is not "
                        f"in vhosts {list(self.vhosts)}",
                    )
        return self


@dataclass
class Settings:
    """The merged result: scalar values plus the user tables."""

    values: dict[str, Any]
    users: dict[str, UserEntry] = field(default_factory=dict)
    vhosts: tuple[str, ...] = ("/",)
    permissions: dict[str, dict[str, PermissionEntry]] = field(default_factory=dict)


# -- names and help -----------------------------------------------------------------------


def flag_name(name: str) -> str:
    """``data_dir`` -> ``--data-dir``."""
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    """``data_dir`` -> ``LEVERET_DATA_DIR``."""
    return ENV_PREFIX + name.upper()


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(value) or "''"
    return str(value)


def _bounds(info: FieldInfo) -> tuple[int | None, int | None]:
    """The ``ge``/``le`` constraints of an integer field."""
    low = high = None
    for item in info.metadata:
        ge, le = getattr(item, "ge", None), getattr(item, "le", None)
        low = ge if isinstance(ge, int) else low
        high = le if isinstance(le, int) else high
    return low, high


def _help(name: str, info: FieldInfo) -> str:
    low, high = _bounds(info)
    text = info.description or ""
    if low is not None and high is not None:
        text += f"; {low}..{high}"
    elif low is not None:
        text += f"; at least {low}"
    text += f" (env {env_name(name)}; default {_shown(info.default)})"
    return text.replace("%", "%%")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per setting (values are checked by :func:`resolve`)."""
    parser.add_argument(
        "--config", default=None, metavar="FILE", help=f"TOML settings file (env {CONFIG_ENV})"
    )
    for name, info in ServeSettings.model_fields.items():
        if info.annotation is bool:
            # A switch: present means "true" (LEVERET_X=true/false and the file's x = true
            # say it either way).
            parser.add_argument(
                flag_name(name),
                dest=name,
                default=None,
                action="store_const",
                const="true",
                help=_help(name, info),
            )
            continue
        repeatable = isinstance(info.json_schema_extra, dict) and bool(
            info.json_schema_extra.get("repeatable")
        )
        parser.add_argument(
            flag_name(name),
            dest=name,
            default=None,
            action="append" if repeatable else "store",
            metavar=name.upper(),
            help=_help(name, info),
        )


# -- error messages -----------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(loc: tuple[int | str, ...]) -> str:
    """A location as a TOML dotted key: ``permissions.app."/".read``, ``vhosts[1]``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            segment = part if _BARE_KEY.fullmatch(part) else json.dumps(part)
            text += f".{segment}" if text else segment
    return text


def _reason(error: ErrorDetails) -> str:
    """What is wrong, in words that fit after the value."""
    loc = error["loc"]
    info = ServeSettings.model_fields.get(str(loc[0])) if len(loc) == 1 else None
    if info is not None and error["type"].startswith(("int_", "less_than", "greater_than")):
        low, high = _bounds(info)
        if low is not None and high is not None:
            return f"expected an integer from {low} to {high}"
        if low is not None:
            return f"expected an integer of at least {low}"
    message = error["msg"].replace("a valid dictionary", "a table").replace("an object", "a table")
    if message.startswith("Input should be "):
        message = "expected " + message.removeprefix("Input should be ")
    return message


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """A known key close to the unknown one at ``loc`` (a typo, ``data-dir``)."""
    model: type[BaseModel] = ConfigFile
    if len(loc) == 3 and loc[0] == "users":
        model = UserEntry
    elif len(loc) == 4 and loc[0] == "permissions":
        model = PermissionEntry
    elif len(loc) != 1:
        return ""
    key = str(loc[-1]).replace("-", "_")
    close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(
    exc: ValidationError, where: Callable[[tuple[int | str, ...]], str], show: Callable[[Any], str]
) -> str:
    """One line for all of ``exc``'s errors."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown key {_key(loc)!r}{_did_you_mean(loc)}")
            continue
        prefix = where(loc) if loc else ""
        value = error["input"]
        shown = (
            "" if isinstance(value, dict | list) or not loc else f"invalid value {show(value)}: "
        )
        parts.append(f"{prefix}{': ' if prefix else ''}{shown}{_reason(error)}")
    return "; ".join(parts)


def one_line(text: str) -> str:
    """``text`` with its line breaks folded (an error is one line)."""
    return " ".join(text.split("\n")).replace("\r", " ")


# -- reading the sources ------------------------------------------------------------------

_TOML_POSITION = re.compile(r"(.*) \(at (line \d+, column \d+|end of document)\)", re.DOTALL)


def _reject_dates(value: object, loc: tuple[int | str, ...], path: Path) -> None:
    """No setting is a date or a time (they would not survive the JSON step below)."""
    if isinstance(value, datetime | date | time):
        raise SettingsError(f"{path}: key {_key(loc)!r}: a date or time is not accepted here")
    if isinstance(value, dict):
        for key, item in value.items():
            _reject_dates(item, (*loc, key), path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_dates(item, (*loc, index), path)


def _toml_value(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # nan, inf, -inf: as TOML writes them
    return json.dumps(value)


def load_config_file(path: Path) -> ConfigFile:
    """Read and check a TOML settings file (:class:`SettingsError` naming the file, and
    the key or the line)."""
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_POSITION.fullmatch(str(exc))
        if match is None:
            raise SettingsError(f"{path}: invalid TOML: {exc}") from None
        reason, position = match.groups()
        raise SettingsError(f"{path}: {position}: invalid TOML: {reason}") from None
    _reject_dates(document, (), path)
    try:
        # TOML's values are JSON's (dates aside): validating the document as JSON in
        # strict mode takes them as they are typed, with no coercion (true is not 1,
        # "5672" is not a port).
        return ConfigFile.model_validate_json(json.dumps(document), strict=True)
    except ValidationError as exc:
        raise SettingsError(
            f"{path}: " + _describe(exc, lambda loc: f"key {_key(loc)!r}", _toml_value)
        ) from None


def _from_strings(raw: dict[str, str], source: Callable[[str], str]) -> dict[str, Any]:
    """Parse flag or variable values (strings) into the fields' types."""
    if not raw:
        return {}
    try:
        parsed = ServeSettings.model_validate_strings(raw, context={"strings": True})
    except ValidationError as exc:
        raise SettingsError(_describe(exc, lambda loc: source(str(loc[0])), repr)) from None
    return {name: getattr(parsed, name) for name in raw}


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """Merge file, environment and flags: a flag beats the environment, which beats the
    file, which beats the default. Raises :class:`SettingsError` for any refused value."""
    config_path = getattr(args, "config", None) or environ.get(CONFIG_ENV, "")
    file = load_config_file(Path(config_path)) if config_path else ConfigFile()
    values: dict[str, Any] = {
        name: getattr(file, name) for name in SETTINGS if name in file.model_fields_set
    }
    values |= _from_strings(
        {name: environ[env_name(name)] for name in SETTINGS if env_name(name) in environ},
        lambda name: f"environment variable {env_name(name)}",
    )
    values |= _from_strings(
        {
            # A repeated flag (--host) gives a list: its values, comma-separated.
            name: value if isinstance(value, str) else ",".join(value)
            for name in SETTINGS
            if (value := getattr(args, name, None)) is not None
        },
        lambda name: f"argument {flag_name(name)}",
    )
    try:
        merged = ServeSettings.model_validate(values, context={"merged": True})
    except ValidationError as exc:
        raise SettingsError(_describe(exc, lambda loc: _key(loc), repr)) from None
    return Settings(
        values=dict(merged),
        users=dict(file.users),
        vhosts=file.vhosts,
        permissions={user: dict(per_vhost) for user, per_vhost in file.permissions.items()},
    )
