"""Declare equivalence: whether a re-declare's arguments match the entity's, and the 406 texts.

A passive-less re-declare of an exchange or queue must carry equivalent arguments, and
RabbitMQ's texts for a mismatch ("received ... but current is ...") follow rabbit_misc's
type classes and its x-queue-type exception. These are pure comparisons of argument tables,
kept apart from :mod:`leveret.node.vhost` so the vhost holds the topology and these the wording
(sources: ``rabbit_misc:assert_args_equivalence/4``, ``rabbit_exchange:check_type/1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leveret.exchanges.types.base import unknown_type_problem
from leveret.node.arguments import type_name as arg_type
from leveret.node.errors import PRECONDITION_FAILED, AMQPChannelError

_MISSING = object()
_INT_TYPES = frozenset(
    {"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"}
)


def shown(value: Any) -> str:
    """An argument value as RabbitMQ prints it in a 406 (booleans lowercase, bytes as text)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _type_class(kind: str) -> str:
    # rabbit_misc:type_class/1: integer widths do not matter, nor float vs double.
    if kind in _INT_TYPES:
        return "int"
    return "float" if kind in ("float", "double") else kind


def arg_mismatch(key: str, new: Mapping[str, Any], old: Mapping[str, Any]) -> str | None:
    """rabbit_misc:assert_args_equivalence1/4: the "received ... but current is ..."
    part of the 406 text, or None when the argument is equivalent."""
    new_value, old_value = new.get(key, _MISSING), old.get(key, _MISSING)
    if new_value is _MISSING and old_value is _MISSING:
        return None
    # rabbit_misc:assert_field_equivalence/4 (rabbitmq-common#341): a classic queue need
    # not carry x-queue-type, so missing and 'classic' are equivalent; missing and any
    # other type is not, and fails below like any other argument.
    one_missing = _MISSING in (new_value, old_value)
    present = old_value if new_value is _MISSING else new_value
    if key == "x-queue-type" and one_missing and shown(present) == "classic":
        return None
    if new_value is not _MISSING and old_value is not _MISSING:
        if (
            _type_class(arg_type(new, key)) == _type_class(arg_type(old, key))
            and new_value == old_value
        ):
            return None
        return f"received '{shown(new_value)}' but current is '{shown(old_value)}'"

    def val(table: Mapping[str, Any], value: Any) -> str:
        if value is _MISSING:
            return "none"
        return f"the value '{shown(value)}' of type '{arg_type(table, key)}'"

    return f"received {val(new, new_value)} but current is {val(old, old_value)}"


def unknown_type(name: str) -> AMQPChannelError:
    """An exchange type Leveret does not have: RabbitMQ 4.x's channel-level 406 (3.x closes
    the connection with 503), chosen by DESIGN.md's profile."""
    return AMQPChannelError(PRECONDITION_FAILED, unknown_type_problem(name))


def assert_args(
    what: str,
    keys: tuple[str, ...],
    new: Mapping[str, Any],
    old: Mapping[str, Any],
) -> None:
    """406 with RabbitMQ's text at the first of ``keys`` whose value in ``new`` is not
    equivalent to the one in ``old`` (``what``: the entity, as rabbit_misc:rs/1 names it)."""
    for key in keys:
        mismatch = arg_mismatch(key, new, old)
        if mismatch is not None:
            raise AMQPChannelError(
                PRECONDITION_FAILED, f"inequivalent arg '{key}' for {what}: {mismatch}"
            )
