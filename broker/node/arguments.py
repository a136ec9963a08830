"""Validation of ``queue.declare`` arguments, as RabbitMQ does it.

Source: ``rabbit_amqqueue:declare_args/0`` and its ``check_*_arg/2`` functions in
rabbitmq-server (deps/rabbit/src/rabbit_amqqueue.erl). A failing argument gives
``PRECONDITION_FAILED - invalid arg '<key>' for queue '<q>' in vhost '<v>': <reason>``
where the reason is the Erlang term RabbitMQ prints (``{value_negative,-1}``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from leveret.node.errors import ChannelCrashError
from leveret.node.fieldtable import TypedTable

# rabbit_misc ?MAX_EXPIRY_TIMER: ten years in ms, the largest TTL, x-expires or expiration
# RabbitMQ takes (observed on 3.10.8: 315360000000 passes, one more is value_too_large).
MAX_EXPIRY = 315360000000
MAX_PRIORITY = 255


def int_arg(arguments: dict[str, Any], key: str) -> int | None:
    """An integer argument (not a bool), or None when unset or of another type."""
    value = arguments.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def copy_args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an argument table that keeps its wire types (if it has them)."""
    types = getattr(arguments, "types", None)
    if types is not None:
        return TypedTable(dict(arguments), dict(types))
    return dict(arguments)


def type_name(arguments: Mapping[str, Any], key: str) -> str:
    """The AMQP type of ``arguments[key]`` as RabbitMQ names it: the wire type when the
    table came from the wire (:class:`leveret.wire.codec.TypedTable`), else a best guess."""
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


def arg_text(value: Any) -> str | None:
    """A string argument's text (pamqp gives a longstr as str, or bytes when it is not
    UTF-8, and a byte array 'x' as bytearray), or None for a value of another type."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


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


def _one_of(reason: str, *allowed: str) -> Check:
    # A string among ``allowed``; ``reason`` is printed otherwise ({value} filled in).
    def check(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
        problem = _longstr(value, kind, args)
        if problem is not None:
            return problem
        text = arg_text(value)
        return None if text in allowed else reason.format(value=text)

    return check


def _queue_version(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    problem = _int(value, kind, args)
    if problem is None and value not in (1, 2):
        return f"\"unsupported queue version '{value}'\""
    return problem


def _cluster_size(value: Any, kind: str, args: Mapping[str, Any]) -> str | None:
    # rabbit_amqqueue:check_initial_cluster_size_arg/2: a positive integer.
    problem = _non_negative(value, kind, args)
    if problem is None and value == 0:
        return "{value_zero,0}"
    return problem


def _master_locator(value: Any, _kind: str, _args: Mapping[str, Any]) -> str | None:
    # Not validated at declare in RabbitMQ 3.10.8: the classic queue's start crashes on an
    # unknown strategy or a value that is no string, and the connection closes with 541.
    if arg_text(value) not in ("min-masters", "client-local", "random"):
        raise ChannelCrashError()
    return None


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
    text = arg_text(text) or ""
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


# In rabbit_amqqueue:declare_args/0's order, which decides which of several invalid
# arguments is reported; each reason observed on RabbitMQ 3.10.8.
VALIDATORS: dict[str, Check] = {
    "x-expires": _expires,
    "x-message-ttl": _message_ttl,
    "x-dead-letter-exchange": _longstr,
    "x-dead-letter-routing-key": _dlx_routing_key,
    "x-max-length": _non_negative,
    "x-max-length-bytes": _non_negative,
    "x-max-in-memory-length": _non_negative,
    "x-max-in-memory-bytes": _non_negative,
    "x-max-priority": _max_priority,
    "x-overflow": _one_of("invalid_overflow", "drop-head", "reject-publish", "reject-publish-dlx"),
    "x-queue-mode": _one_of("\"unsupported queue mode '{value}'\"", "default", "lazy"),
    "x-queue-version": _queue_version,
    "x-single-active-consumer": _bool,
    "x-quorum-initial-group-size": _cluster_size,
    "x-max-age": _max_age,
    "x-stream-max-segment-size-bytes": _non_negative,
    "x-initial-cluster-size": _cluster_size,
    "x-queue-leader-locator": _one_of(
        "invalid_queue_locator_arg", "client-local", "balanced", "random", "least-leaders"
    ),
    "x-dead-letter-strategy": _one_of("invalid_dlx_strategy", "at-most-once", "at-least-once"),
    "x-queue-master-locator": _master_locator,
}


# The x-stream-offset words (rabbit_stream_queue:parse_offset_arg/1).
NAMED_OFFSETS = ("first", "last", "next")


def _stream_offset(value: Any, kind: str, _args: Mapping[str, Any]) -> str | None:
    # The string offsets, checked before the stream's own consume (observed on 3.10.8:
    # before the prefetch check); other types are taken or refused there (parse_start).
    text = arg_text(value)
    if text is None or text in NAMED_OFFSETS or interval_ms(text) is not None:  # may crash
        return None
    return f'{{invalid_stream_offset_arg,{{{kind},<<"{text}">>}}}}'


# rabbit_amqqueue:consume_args/0, in its order.
CONSUME_VALIDATORS: dict[str, Check] = {
    "x-priority": _int,
    "x-cancel-on-ha-failover": _bool,
    "x-stream-offset": _stream_offset,
}

# The consumer arguments each queue type takes (capabilities/0's consumer_arguments,
# observed on 3.10.8 as for the queue arguments below).
CONSUMER_TYPE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "classic": ("x-priority", "x-cancel-on-ha-failover", "x-credit"),
    "quorum": ("x-priority", "x-credit"),
    "stream": ("x-stream-offset", "x-credit"),
}


def argument_error(
    arguments: Mapping[str, Any],
    validators: Mapping[str, Check] = VALIDATORS,
    takes: Collection[str] | None = None,
) -> tuple[str, str] | None:
    """The first invalid argument as ``(key, reason)``, or None when all are valid; with
    ``takes``, only those keys are looked at (a queue type's: the others are refused as
    another type's afterwards, whatever their value, as RabbitMQ 3.10.8 does)."""
    for key, check in validators.items():
        if key in arguments and (takes is None or key in takes):
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


_QUEUE_TYPE_CHECK = _one_of("\"unsupported queue type '{value}'\"", *QUEUE_TYPE_ARGUMENTS)


def queue_type_error(arguments: Mapping[str, Any]) -> str | None:
    """Why ``x-queue-type`` names no queue type, or None (checked before any other
    argument: observed on 3.10.8)."""
    if "x-queue-type" not in arguments:
        return None
    return _QUEUE_TYPE_CHECK(
        arguments["x-queue-type"], type_name(arguments, "x-queue-type"), arguments
    )


def queue_type(arguments: Mapping[str, Any]) -> str:
    """The queue type ``x-queue-type`` names (``classic`` when it names none)."""
    value = arg_text(arguments.get("x-queue-type"))
    return value if value in QUEUE_TYPE_ARGUMENTS else "classic"


def foreign_argument(
    kind: str,
    arguments: Mapping[str, Any],
    by_type: Mapping[str, tuple[str, ...]] = QUEUE_TYPE_ARGUMENTS,
) -> str | None:
    """The first argument (in table order) that queues of type ``kind`` do not take but
    another type does, or None."""
    takes = by_type[kind]
    for key in arguments:
        if key not in takes and any(key in others for others in by_type.values()):
            return key
    return None


def declare_error(kind: str, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first argument a new queue of type ``kind`` is refused for, with what follows
    the queue in RabbitMQ's text (``: <reason>`` or `` of queue type rabbit_<kind>_queue``),
    or None. In RabbitMQ 3.10.8's order (observed): ``x-queue-type`` itself, then the
    values of the arguments the type takes (in declare_args/0's order), then the first
    argument (in table order) that only other types take."""
    problem = queue_type_error(arguments)
    if problem is not None:
        return "x-queue-type", f": {problem}"
    return _typed_error(kind, arguments, VALIDATORS, QUEUE_TYPE_ARGUMENTS)


def consume_error(kind: str, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """As :func:`declare_error`, for the arguments of a ``basic.consume`` on a queue of
    type ``kind`` (the same order, observed on 3.10.8)."""
    return _typed_error(kind, arguments, CONSUME_VALIDATORS, CONSUMER_TYPE_ARGUMENTS)


def _typed_error(
    kind: str,
    arguments: Mapping[str, Any],
    validators: Mapping[str, Check],
    by_type: Mapping[str, tuple[str, ...]],
) -> tuple[str, str] | None:
    invalid = argument_error(arguments, validators, takes=by_type[kind])
    if invalid is not None:
        return invalid[0], f": {invalid[1]}"
    foreign = foreign_argument(kind, arguments, by_type)
    if foreign is not None:
        return foreign, f" of queue type rabbit_{kind}_queue"
    return None
