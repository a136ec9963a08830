"""Validation of ``queue.declare`` arguments, as RabbitMQ does it.

Source: ``rabbit_amqqueue:declare_args/0`` and its ``check_*_arg/2`` functions in
rabbitmq-server (deps/rabbit/src/rabbit_amqqueue.erl). A failing argument gives
``PRECONDITION_FAILED - invalid arg '<key>' for queue '<q>' in vhost '<v>': <reason>``
where the reason is the Erlang term RabbitMQ prints (``{value_negative,-1}``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.codec import TypedTable
from broker.errors import ChannelCrashError

# rabbit_misc ?MAX_EXPIRY_TIMER: ten years in ms, the largest TTL, x-expires or expiration
# RabbitMQ takes (observed on 3.10.8: 315360000000 passes, one more is value_too_large).
MAX_EXPIRY = 315360000000
MAX_PRIORITY = 255


def copy_args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an argument table that keeps its wire types (if it has them)."""
    types = getattr(arguments, "types", None)
    if types is not None:
        return TypedTable(dict(arguments), dict(types))
    return dict(arguments)


def type_name(arguments: Mapping[str, Any], key: str) -> str:
    """The AMQP type of ``arguments[key]`` as RabbitMQ names it: the wire type when the
    table came from the wire (:class:`broker.codec.TypedTable`), else a best guess."""
    types = getattr(arguments, "types", None)
    if types and key in types:
        return str(types[key])
    value = arguments[key]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else "timestamp"


Check = Callable[[Any, str, Mapping[str, Any]], "str | None"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, kind: str, _args: Mapping[str, Any]) -> str | None:
    # rabbit_amqqueue:check_int_arg/2 formats this one as a string, printed quoted.
    return None if _is_int(value) else f'"expected integer, got {kind}"'


def _non_negative(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _int(value, kind, args)
    if problem is None and value < 0:
        return f"{{value_negative,{value}}}"
    return problem


def _expiry(value: int) -> str | None:
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_EXPIRY:
        return f"{{value_too_large,{value}}}"
    return None


def _expires(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _int(value, kind, args)
    if problem is not None:
        return problem
    return f"{{value_zero,{value}}}" if value == 0 else _expiry(value)


def _message_ttl(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    return _int(value, kind, args) or _expiry(value)


def _max_priority(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _non_negative(value, kind, args)
    if problem is None and value > MAX_PRIORITY:
        return f"{{max_value_exceeded,{value}}}"
    return problem


def _bool(value: Any, kind: str, _args: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, bool) else f"{{unacceptable_type,{kind}}}"


def _longstr(value: Any, kind: str, _args: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, str | bytes) else f"{{unacceptable_type,{kind}}}"


def _dlx_routing_key(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _longstr(value, kind, args)
    if problem is None and "x-dead-letter-exchange" not in args:
        return "routing_key_but_no_dlx_defined"
    return problem


def _one_of(name: str, *allowed: str) -> Check:
    def check(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
        problem = _longstr(value, kind, args)
        if problem is not None:
            return problem
        text = value.decode() if isinstance(value, bytes) else value
        return None if text in allowed else f"invalid_{name}"

    return check


# rabbit_amqqueue:check_max_age/1 units (a month is 30 days, a year 365).
_UNIT_MS = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1000,
}


def interval_ms(text: str | bytes) -> int | None:
    """A stream interval (``"7D"``, ``"12h"``: digits then one of ``YMDhms``) in ms, or None
    when it is not one (or is zero).

    Text that does not start with a digit raises :class:`~broker.errors.ChannelCrashError`:
    RabbitMQ 3.10's parser crashes on it (observed: ``x-max-age: "h"`` and
    ``x-stream-offset: "bogus"`` both close the connection with 541).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    digits = len(text) - len(text.lstrip("0123456789"))
    if digits == 0:
        raise ChannelCrashError()
    unit = _UNIT_MS.get(text[digits:])
    value = int(text[:digits])
    return value * unit if unit is not None and value > 0 else None


def _max_age(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _longstr(value, kind, args)
    if problem is None and interval_ms(value) is None:
        return "invalid_max_age"
    return problem


VALIDATORS: dict[str, Check] = {
    "x-expires": _expires,
    "x-message-ttl": _message_ttl,
    "x-dead-letter-exchange": _longstr,
    "x-dead-letter-routing-key": _dlx_routing_key,
    "x-max-length": _non_negative,
    "x-max-length-bytes": _non_negative,
    "x-max-priority": _max_priority,
    "x-overflow": _one_of("overflow", "drop-head", "reject-publish", "reject-publish-dlx"),
    "x-queue-mode": _one_of("queue_mode", "default", "lazy"),
    "x-single-active-consumer": _bool,
    "x-max-age": _max_age,
    "x-stream-max-segment-size-bytes": _non_negative,
}

# rabbit_amqqueue:consume_args/0
CONSUME_VALIDATORS: dict[str, Check] = {"x-priority": _int}


def argument_error(
    arguments: Mapping[str, Any], validators: Mapping[str, Check] = VALIDATORS
) -> tuple[str, str] | None:
    """The first invalid argument as ``(key, reason)``, or None when all are valid."""
    for key, check in validators.items():
        if key in arguments:
            problem = check(arguments[key], type_name(arguments, key), arguments)
            if problem is not None:
                return key, problem
    return None


# The queue arguments each queue type takes, in RabbitMQ's order (rabbit_classic_queue,
# rabbit_quorum_queue and rabbit_stream_queue capabilities/0; observed on RabbitMQ 3.10.8).
# A re-declare compares them in this order (rabbit_amqqueue:assert_args_equivalence/2); an
# argument that another type takes is refused (rabbit_amqqueue:check_arguments_key/4); keys
# no type knows (x-foo) are ignored.
QUEUE_TYPE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "classic": (
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-queue-version",
        "x-single-active-consumer",
        "x-queue-type",
        "x-queue-master-locator",
    ),
    "quorum": (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator",
    ),
    "stream": (
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    ),
}
_KNOWN_ARGUMENTS = frozenset().union(*QUEUE_TYPE_ARGUMENTS.values())


def queue_type(arguments: Mapping[str, Any]) -> str:
    """The queue type ``x-queue-type`` names (``classic`` when it names none)."""
    value = arguments.get("x-queue-type")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and value in QUEUE_TYPE_ARGUMENTS else "classic"


def foreign_argument(kind: str, arguments: Mapping[str, Any]) -> str | None:
    """The first argument (in table order) that queues of type ``kind`` do not take but
    another type does, or None."""
    takes = QUEUE_TYPE_ARGUMENTS[kind]
    for key in arguments:
        if key in _KNOWN_ARGUMENTS and key not in takes:
            return key
    return None
