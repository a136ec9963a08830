"""The headers exchange type: bindings whose arguments match the message headers
(``rabbit_exchange_type_headers``: ``x-match`` all, any, all-with-x or any-with-x)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from leveret.exchanges.erlang import erlang_binary, erlang_field
from leveret.exchanges.model import EMPTY, Binding, Exchange, ExchangeType, XMatch
from leveret.exchanges.types.base import Content, ExchangeTypeModule, Headers, Names, pair

BindingKey = tuple[Any, ...]

_BINARY = (str, bytes, bytearray)
_SCALARS = frozenset({str, bytes, int, float, bool})
_NUMBERS = frozenset({int, float})  # not bool: Erlang's true is an atom, never 1
_ABSENT = object()


def parse_x_match(value: Any) -> XMatch:
    """The match mode of an ``x-match`` value; unknown or missing values mean ``all``.

    RabbitMQ falls back to ``all`` for values it did not validate (``parse_x_match/1``);
    bindings with bad values are refused earlier by ``routing.validate_binding``.
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    try:
        return XMatch(value)
    except ValueError:
        return XMatch.ALL


class HeadersSpec:
    """One headers binding, pre-parsed: match mode, the arguments to check, destination.

    ``required`` holds ``(header, value)`` pairs where ``value is None`` means "present".
    ``x-match`` is never checked; other ``x-`` arguments are checked only in the
    ``-with-x`` modes (RabbitMQ ``rabbit_exchange_type_headers:match/2``).
    """

    __slots__ = ("dest", "match_any", "required")

    def __init__(self, arguments: Mapping[str, Any], dest: str) -> None:
        mode = parse_x_match(arguments.get("x-match"))
        with_x = mode in (XMatch.ALL_WITH_X, XMatch.ANY_WITH_X)
        self.match_any = mode in (XMatch.ANY, XMatch.ANY_WITH_X)
        self.required: tuple[tuple[str, Any], ...] = tuple(
            (key, value)
            for key, value in arguments.items()
            if key != "x-match" and (with_x or not key.startswith("x-"))
        )
        self.dest = dest


class HeadersIndex:
    """Headers exchange: the parsed specs of its bindings, by binding identity."""

    __slots__ = ("specs",)

    def __init__(self) -> None:
        self.specs: dict[BindingKey, HeadersSpec] = {}

    def bind(self, binding: Binding) -> None:
        self.specs[binding.key] = HeadersSpec(binding.arguments, binding.destination)

    def unbind(self, binding: Binding) -> None:
        self.specs.pop(binding.key, None)

    def dump(self) -> Any:
        return frozenset(self.specs)


def route_headers(
    index: HeadersIndex, routing_keys: Sequence[str], headers: Headers, content: Content = None
) -> Names:
    """Names whose binding arguments match the message headers; routing keys are ignored."""
    if not index.specs:
        return EMPTY
    message = headers if headers is not None else {}
    found: set[str] = set()
    for spec in index.specs.values():
        if spec.dest not in found and headers_match(spec, message):
            found.add(spec.dest)
    return found


def headers_match(spec: HeadersSpec, message: Mapping[str, Any]) -> bool:
    """Whether ``message`` headers satisfy one headers binding.

    ``all`` with nothing to check matches everything, ``any`` with nothing matches nothing
    (``match_all([]) -> true``, ``match_any([]) -> false`` in RabbitMQ).
    """
    if spec.match_any:
        for key, expected in spec.required:
            actual = message.get(key, _ABSENT)
            if actual is not _ABSENT and (expected is None or _equal(expected, actual)):
                return True
        return False
    for key, expected in spec.required:
        actual = message.get(key, _ABSENT)
        if actual is _ABSENT or (expected is not None and not _equal(expected, actual)):
            return False
    return True


def _equal(expected: Any, actual: Any) -> bool:
    # Most header values are scalars of the same type: settle those without a call.
    if type(expected) is type(actual) and type(actual) in _SCALARS:
        return bool(expected == actual)
    # rabbit_exchange_type_headers:headers_match/5 compares a header's value with the
    # binding's by Erlang's ==, whatever their field types: an integer 1 matches a float
    # 1.0 (observed on RabbitMQ 3.10.8). Inside arrays and tables the values keep their
    # type tags, so there amqp_equal's stricter rule applies.
    if type(expected) in _NUMBERS and type(actual) in _NUMBERS:
        return bool(expected == actual)
    return amqp_equal(expected, actual)


def amqp_equal(a: Any, b: Any) -> bool:
    """Equality of two AMQP field values as RabbitMQ's ``=:=`` sees them.

    The type matters (``1`` is not ``1.0``, ``True`` is not ``1``) except that integer widths
    do not exist in Python, and ``str``/``bytes``/``bytearray`` are all Erlang binaries, so
    the same UTF-8 content is equal. Decimals compare by digits and scale, as Erlang's
    ``{decimal, Scale, Value}`` does, so ``1.0`` and ``1.00`` differ.
    """
    # Iterative (a stack of pairs still to compare): tables may nest thousands deep. Each
    # step settles a pair of scalars or pushes the pairs of a container's members.
    pairs: list[tuple[Any, Any]] = [(a, b)]
    while pairs:
        a, b = pairs.pop()
        settled = _same_type(a, b, pairs) if type(a) is type(b) else _cross_type(a, b, pairs)
        if not settled:
            return False
    return True


def _same_type(a: Any, b: Any, pairs: list[tuple[Any, Any]]) -> bool:
    ta = type(a)
    if ta is list or ta is tuple:
        pairs.extend(zip(a, b, strict=False))
        return len(a) == len(b)
    if ta is dict:
        pairs.extend((v, b[k]) for k, v in a.items() if k in b)
        return bool(a.keys() == b.keys())
    if ta is Decimal:
        return bool(a.as_tuple() == b.as_tuple())
    return bool(a == b)


def _cross_type(a: Any, b: Any, pairs: list[tuple[Any, Any]]) -> bool:
    if isinstance(a, _BINARY) and isinstance(b, _BINARY):
        return _as_bytes(a) == _as_bytes(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, int) and isinstance(b, int):
        return bool(a == b)  # int subclasses (IntEnum) are still integers
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        pairs.append((list(a), list(b)))
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        pairs.append((dict(a), dict(b)))
        return True
    return False


def _as_bytes(value: str | bytes | bytearray) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def binding_problem(
    exchange: Exchange, routing_key: str, arguments: Mapping[str, Any]
) -> str | None:
    """``validate_binding/2``: ``x-match``, when present, is a longstr naming one of the four
    modes; RabbitMQ's explanation otherwise."""
    if "x-match" not in arguments:
        return None
    value = arguments["x-match"]
    if isinstance(value, str | bytes):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if raw.decode("utf-8", "replace") in tuple(XMatch):
            return None
        return (
            f"Invalid x-match field value {erlang_binary(raw)}; "
            "expected all, any, all-with-x, or any-with-x"
        )
    type_name, shown = erlang_field(value)
    return f"Invalid x-match field type {type_name} (value {shown}); expected longstr"


HEADERS = ExchangeTypeModule(
    ExchangeType.HEADERS,
    pair(HeadersIndex),
    route_headers,
    validate_binding=binding_problem,
    description="AMQP headers exchange, as per the AMQP specification",
)
