"""Validation of ``queue.declare`` arguments, as RabbitMQ does it.

Source: ``rabbit_amqqueue:declare_args/0`` and its ``check_*_arg/2`` functions in
rabbitmq-server (deps/rabbit/src/rabbit_amqqueue.erl). A failing argument gives
``PRECONDITION_FAILED - invalid arg '<key>' for queue '<q>' in vhost '<v>': <reason>``
where the reason is the Erlang term RabbitMQ prints (``{value_negative,-1}``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MAX_EXPIRY = 4294967295  # rabbit_misc ?MAX_EXPIRY_TIMER
MAX_PRIORITY = 255


def _type_name(value: Any) -> str:
    """The AMQP type RabbitMQ would see for a decoded value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else "timestamp"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if _is_int(value) else f"{{unacceptable_type,{_type_name(value)}}}"


def _non_negative(value: Any, args: Mapping[str, Any]) -> str | None:
    problem = _int(value, args)
    if problem is None and value < 0:
        return f"{{value_negative,{value}}}"
    return problem


def _expiry(value: int) -> str | None:
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_EXPIRY:
        return f"{{value_too_large,{value}}}"
    return None


def _expires(value: Any, args: Mapping[str, Any]) -> str | None:
    problem = _int(value, args)
    if problem is not None:
        return problem
    return f"{{value_zero,{value}}}" if value == 0 else _expiry(value)


def _message_ttl(value: Any, args: Mapping[str, Any]) -> str | None:
    return _int(value, args) or _expiry(value)


def _max_priority(value: Any, args: Mapping[str, Any]) -> str | None:
    problem = _non_negative(value, args)
    if problem is None and value > MAX_PRIORITY:
        return f"{{max_value_exceeded,{value}}}"
    return problem


def _bool(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, bool) else f"{{unacceptable_type,{_type_name(value)}}}"


def _longstr(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, str | bytes) else f"{{unacceptable_type,{_type_name(value)}}}"


def _dlx_routing_key(value: Any, args: Mapping[str, Any]) -> str | None:
    problem = _longstr(value, args)
    if problem is None and "x-dead-letter-exchange" not in args:
        return "routing_key_but_no_dlx_defined"
    return problem


def _one_of(*allowed: str) -> Callable[[Any, Mapping[str, Any]], str | None]:
    def check(value: Any, args: Mapping[str, Any]) -> str | None:
        problem = _longstr(value, args)
        if problem is not None:
            return problem
        text = value.decode() if isinstance(value, bytes) else value
        return None if text in allowed else "invalid_" + _ONE_OF_NAMES[allowed]

    return check


_ONE_OF_NAMES = {
    ("drop-head", "reject-publish", "reject-publish-dlx"): "overflow",
    ("default", "lazy"): "queue_mode",
}

VALIDATORS: dict[str, Callable[[Any, Mapping[str, Any]], str | None]] = {
    "x-expires": _expires,
    "x-message-ttl": _message_ttl,
    "x-dead-letter-exchange": _longstr,
    "x-dead-letter-routing-key": _dlx_routing_key,
    "x-max-length": _non_negative,
    "x-max-length-bytes": _non_negative,
    "x-max-priority": _max_priority,
    "x-overflow": _one_of("drop-head", "reject-publish", "reject-publish-dlx"),
    "x-queue-mode": _one_of("default", "lazy"),
    "x-single-active-consumer": _bool,
}


def queue_argument_error(arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first invalid argument as ``(key, reason)``, or None when all are valid."""
    for key, check in VALIDATORS.items():
        if key in arguments:
            problem = check(arguments[key], arguments)
            if problem is not None:
                return key, problem
    return None
