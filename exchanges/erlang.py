"""How Erlang prints values, for RabbitMQ's refusal texts that embed them (``~tp`` of a
binary, a field's type name and value)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any


def erlang_binary(raw: bytes) -> str:
    """How Erlang's ``~tp`` prints a binary: ``<<"foo">>``, ``<<"é"/utf8>>``, ``<<1,2>>``,
    and ``<<>>`` when empty."""
    if not raw:
        return "<<>>"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "<<" + ",".join(str(b) for b in raw) + ">>"
    if not all(ch.isprintable() or ch in "\n\t\r" for ch in text):
        return "<<" + ",".join(str(b) for b in raw) + ">>"
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
    return f'<<"{escaped}"/utf8>>' if not text.isascii() else f'<<"{escaped}">>'


def erlang_field(value: Any) -> tuple[str, str]:
    """The AMQP type name RabbitMQ reports, and the value as Erlang prints it.

    Integer type names follow the width pamqp picks when encoding (smallest that fits).
    """
    if value is None:
        return "void", "undefined"
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        for name, low, high in _INT_WIDTHS:
            if low <= value <= high:
                return name, str(value)
        return "long", str(value)
    if isinstance(value, float):
        return "float", repr(value)
    if isinstance(value, bytearray):
        return "binary", erlang_binary(bytes(value))
    if isinstance(value, Decimal):
        return "decimal", str(value)
    if isinstance(value, Mapping):
        return "table", repr(dict(value))
    if isinstance(value, list | tuple):
        return "array", repr(list(value))
    if isinstance(value, datetime):
        return "timestamp", str(int(value.timestamp()))
    return type(value).__name__, repr(value)


_INT_WIDTHS = (
    ("byte", -(2**7), 2**7 - 1),
    ("short", -(2**15), 2**15 - 1),
    ("unsignedshort", 0, 2**16 - 1),
    ("signedint", -(2**31), 2**31 - 1),
    ("unsignedint", 0, 2**32 - 1),
    ("long", -(2**63), 2**63 - 1),
)


def erlang_json(value: Any) -> str:
    """How Erlang's ``~p`` prints a value decoded from JSON by RabbitMQ (rabbit_json): a
    string is a binary, an object a proplist ``[{<<"k">>,V}]``, null ``null``."""
    if isinstance(value, str):
        return erlang_binary(value.encode("utf-8"))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        pairs = (f"{{{erlang_json(k)},{erlang_json(v)}}}" for k, v in value.items())
        return "[" + ",".join(pairs) + "]"
    if isinstance(value, list | tuple):
        return "[" + ",".join(erlang_json(item) for item in value) + "]"
    return repr(value)


def erlang_string(text: str) -> str:
    """How Erlang's ``~p`` prints a string (a list of characters): ``"foo"``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
