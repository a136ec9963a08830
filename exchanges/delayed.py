"""The delayed-message exchange ``x-delayed-message``: the pure rules.

RabbitMQ's community plugin rabbitmq-delayed-message-exchange (the 3.10-era release,
``src/rabbit_exchange_type_delayed_message.erl`` and ``rabbit_delayed_message_utils.erl``)
makes an exchange that routes as the type named by its ``x-delayed-type`` argument, except
that a message whose ``x-delay`` header holds a delay in ``1..2^32-1`` ms is kept back and
routed from the exchange only when the delay is up. Kept back, it has routed nowhere (its
route is ``[]``), so at publish time it counts as unroutable and only the exchange's
alternate exchange applies. When it is routed at last its ``x-delay`` header has become the
negative delay (a signedint), so that another delayed exchange downstream does not delay it
again.

This module holds the plugin's rules, without I/O; the exchange type built on them is
:mod:`leveret.exchanges.types.delayed`, and keeping messages back and routing them later is
the broker's (``broker/delayed.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from leveret.exchanges.fields import erlang_integer
from leveret.exchanges.model import ExchangeType, ExchangeTypeCrashError

DELAYED_TYPE = "x-delayed-type"
DELAY_HEADER = "x-delay"
# The longest delay the plugin accepts: Erlang's timer limit (?ERL_MAX_T).
MAX_DELAY = 4294967295


class DelayCrashError(ExchangeTypeCrashError):
    """The ``x-delay`` header is a value the plugin's ``get_delay/1`` crashes on: a string
    that is no integer (``binary_to_integer/1``), a decimal (``trunc/1`` of a tuple). The
    crash happens in the publishing channel, which RabbitMQ then closes with 541."""


def underlying_type(arguments: Mapping[str, Any]) -> str | None:
    """The name of the type an ``x-delayed-message`` exchange routes as (whether a type has
    that name is the registry's to say, :func:`leveret.exchanges.types.parse_type`), or None
    when ``x-delayed-type`` is absent or not a string."""
    value = arguments.get(DELAYED_TYPE)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def declare_problem(arguments: Mapping[str, Any]) -> str | None:
    """The plugin's ``validate/1`` refusal (406 PRECONDITION_FAILED) for the arguments of a
    new ``x-delayed-message`` exchange, else None. An ``x-delayed-type`` that names no type
    is left to the caller (it is refused as an unknown exchange type, as
    ``rabbit_exchange:check_type/1`` refuses it)."""
    kind = underlying_type(arguments)
    if kind is None:
        return "Invalid argument, 'x-delayed-type' must be an existing exchange type"
    if kind == ExchangeType.DELAYED:
        return "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"
    return None


def delay_of(headers: Mapping[str, Any] | None) -> int:
    """The delay in ms that keeps a message back, or 0 when it is routed at once.

    As ``get_delay/1``: integer types count as they are, strings are read as integers, floats
    are truncated; any other type, or no header, means no delay; so does a delay outside
    ``1..2^32-1`` (``delay_message/2``). Raises :class:`DelayCrashError` where the plugin
    crashes.
    """
    if headers is None:
        return 0
    value = headers.get(DELAY_HEADER)
    if value is None or isinstance(value, bool | bytearray):
        return 0  # absent, void, a boolean or a byte array: no delay
    if isinstance(value, int):
        delay = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise DelayCrashError(f"x-delay {value!r}")
        delay = math.trunc(value)
    elif isinstance(value, str | bytes):
        parsed = erlang_integer(value)  # binary_to_integer/1
        if parsed is None:
            raise DelayCrashError(f"x-delay {value!r}")
        delay = parsed
    elif isinstance(value, Decimal):
        raise DelayCrashError(f"x-delay {value!r}")
    else:
        return 0  # a timestamp, a table, an array
    return delay if 0 < delay <= MAX_DELAY else 0
