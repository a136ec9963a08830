"""The value types of ``leveret serve``'s settings (broker/settings.py): each a pydantic
annotated type that parses a flag's or variable's string and checks a file's typed value."""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, ValidationInfo
from pydantic_core import PydanticCustomError

from leveret.config import (
    CHANNEL_MAX_LIMIT,
    FRAME_MAX_LIMIT,
    FRAME_MIN,
    HEARTBEAT_LIMIT,
    MAX_MESSAGE_SIZE_LIMIT,
)
from leveret.node.auth import SALT_BYTES, invalid_regexp
from leveret.node.disk import DiskFreeLimit
from leveret.node.memory import Watermark


def invalid(kind: str, reason: str) -> PydanticCustomError:
    """A refused value, ``reason`` its message (settings.py words the line around it)."""
    return PydanticCustomError(kind, "{reason}", {"reason": reason})


def _strings(info: ValidationInfo) -> bool:
    """Whether the value comes from a flag or a variable (a string to parse)."""
    return bool(info.context and info.context.get("strings"))


def _optional_path(value: object) -> Path | None:
    if value is None or value == "":
        return None
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise invalid("path_type", "expected a path (a string)")
    if "\0" in value:
        raise invalid("path_type", "a path cannot contain a NUL character")
    return Path(value)


def _string_list(value: object, info: ValidationInfo) -> object:
    if isinstance(value, str) and _strings(info):
        return tuple(item for item in value.split(",") if item)  # comma-separated
    if isinstance(value, list | tuple):
        return tuple(value)
    raise invalid("list_type", "expected a list of strings")


def _host(value: str) -> str:
    if "\0" in value:
        raise invalid("host_type", "a host cannot contain a NUL character")
    return value


def _hosts(value: object, info: ValidationInfo) -> object:
    if isinstance(value, str):
        # A flag or variable lists hosts comma-separated (no address has a comma); the
        # file's string is one host, its list several.
        value = value.split(",") if _strings(info) else [value]
    if isinstance(value, list | tuple):
        if not value:
            raise invalid("hosts_empty", "expected at least one host")
        return tuple(value)
    raise invalid("hosts_type", "expected a host or a list of hosts")


def _log_level(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _watermark(value: object) -> Watermark:
    try:
        return Watermark.parse(value)
    except ValueError as exc:
        raise invalid("watermark", str(exc)) from None


def _disk_free_limit(value: object) -> DiskFreeLimit:
    try:
        return DiskFreeLimit.parse(value)
    except ValueError as exc:
        raise invalid("disk_free_limit", str(exc)) from None


def _regexp(pattern: str) -> str:
    reason = invalid_regexp(pattern)
    if reason is not None:
        message, position = reason[2]
        raise invalid(
            "invalid_regexp", f"invalid regular expression: {message} at position {position}"
        )
    return pattern


def _password_hash(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != SALT_BYTES + hashlib.sha256().digest_size:
        raise invalid(
            "password_hash",
            "expected a RabbitMQ SHA-256 password hash (base64 of a 4-byte salt and the "
            "digest, as in a definitions export)",
        )
    return value


OptionalPath = Annotated[Path | None, PlainValidator(_optional_path)]
Host = Annotated[str, AfterValidator(_host)]
Hosts = Annotated[tuple[Host, ...], BeforeValidator(_hosts)]
Name = Annotated[str, Field(min_length=1)]
Names = Annotated[tuple[Name, ...], BeforeValidator(_string_list)]
Port = Annotated[int, Field(ge=0, le=65535)]
PortOrOff = Annotated[int, Field(ge=-1, le=65535)]  # -1: the listener is off
FrameMax = Annotated[int, Field(ge=FRAME_MIN, le=FRAME_MAX_LIMIT)]
ChannelMax = Annotated[int, Field(ge=0, le=CHANNEL_MAX_LIMIT)]
Heartbeat = Annotated[int, Field(ge=0, le=HEARTBEAT_LIMIT)]
MessageSize = Annotated[int, Field(ge=1, le=MAX_MESSAGE_SIZE_LIMIT)]
Count = Annotated[int, Field(ge=0)]
LogLevel = Annotated[
    Literal["debug", "info", "warning", "error", "critical", "none"],
    BeforeValidator(_log_level),
]
HighWatermark = Annotated[Watermark, PlainValidator(_watermark)]
DiskLimit = Annotated[DiskFreeLimit, PlainValidator(_disk_free_limit)]
Pattern = Annotated[str, AfterValidator(_regexp)]
PasswordHash = Annotated[str | None, AfterValidator(_password_hash)]
