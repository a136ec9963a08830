"""A dynamic shovel's definition: the JSON value of a ``shovel`` runtime parameter,
checked as rabbitmq_shovel 3.10's rabbit_shovel_parameters:validate/5 checks it.

The keys (https://www.rabbitmq.com/shovel-dynamic.html, AMQP 0-9-1 on both sides):
``src-uri`` and ``dest-uri`` (one URI or a list, mandatory), ``src-queue`` or
``src-exchange`` (+ ``src-exchange-key``), ``src-queue-args``, ``src-consumer-args``,
``src-prefetch-count`` (1000), ``src-delete-after`` (``never``, ``queue-length`` or a count),
``dest-queue`` or ``dest-exchange`` (+ ``dest-exchange-key``), ``dest-queue-args``,
``dest-add-forward-headers``, ``dest-add-timestamp-header``, ``dest-publish-properties``,
``ack-mode`` (``on-confirm``, ``on-publish``, ``no-ack``) and ``reconnect-delay`` (s, 5),
plus the names 3.7 used (``prefetch-count``, ``delete-after``, ``add-forward-headers``,
``add-timestamp-header``, ``publish-properties``), which 3.10 still reads.

Every reason is RabbitMQ's text (observed on 3.10.8 through ``PUT
/api/parameters/shovel/...``); all of a value's faults are reported, one per line, as
rabbit_runtime_parameters does. ``src-protocol``/``dest-protocol`` ``amqp10`` is valid in
RabbitMQ but Leveret speaks AMQP 0-9-1 only: refused with a reason that says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from leveret.exchanges.erlang import erlang_json
from leveret.node.shovel.uri import ShovelURI, URIError, parse_uri

ACK_MODES = ("no-ack", "on-publish", "on-confirm")
DEFAULT_PREFETCH = 1000
# rabbit_shovel_parameters 3.10's default reconnect-delay.
DEFAULT_RECONNECT_DELAY = 5.0
# Keys 3.10 reads under their old names too (rabbit_shovel_parameters:parse_amqp091_*).
OLD_NAMES = {
    "src-prefetch-count": "prefetch-count",
    "src-delete-after": "delete-after",
    "dest-add-forward-headers": "add-forward-headers",
    "dest-add-timestamp-header": "add-timestamp-header",
    "dest-publish-properties": "publish-properties",
}
PROTOCOLS = ("amqp091", "amqp10")
SHOVEL_COMPONENT = "shovel"


class ShovelError(ValueError):
    """A value rabbit_shovel_parameters refuses: ``reason`` is the 400's text."""

    def __init__(self, faults: list[str]) -> None:
        self.faults = faults
        self.reason = "Validation failed\n\n" + "".join(f"{fault}\n" for fault in faults)
        super().__init__(self.reason)


@dataclasses.dataclass(frozen=True)
class ShovelDefinition:
    """A checked shovel value, with RabbitMQ's defaults filled in."""

    src_uris: tuple[ShovelURI, ...]
    dest_uris: tuple[ShovelURI, ...]
    src_queue: str | None
    src_exchange: str | None
    src_exchange_key: str
    src_queue_args: dict[str, Any]
    src_consumer_args: dict[str, Any]
    prefetch_count: int
    delete_after: str | int  # "never", "queue-length" or a count
    dest_queue: str | None
    dest_exchange: str | None
    dest_exchange_key: str | None
    dest_queue_args: dict[str, Any]
    add_forward_headers: bool
    add_timestamp_header: bool
    publish_properties: dict[str, Any]
    ack_mode: str
    reconnect_delay: float

    def endpoints(self) -> dict[str, str]:
        """The source's queue or exchange and key, and the destination's, by the value's
        key names (``src-queue``...), as rabbit_shovel_status and ``x-shovelled`` name
        them (the destination's exchange key only when given)."""
        found: dict[str, str] = {}
        if self.src_queue is not None:
            found["src-queue"] = self.src_queue
        else:
            found["src-exchange"] = str(self.src_exchange)
            found["src-exchange-key"] = self.src_exchange_key
        if self.dest_queue is not None:
            found["dest-queue"] = self.dest_queue
        elif self.dest_exchange is not None:
            found["dest-exchange"] = self.dest_exchange
            if self.dest_exchange_key is not None:
                found["dest-exchange-key"] = self.dest_exchange_key
        return found


def _binary(key: str, value: Any) -> str | None:
    if isinstance(value, str):
        return None
    return f"{key} should be binary, actually was {erlang_json(value)}"


def _number(key: str, value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None
    return f"{key} should be a number, actually was {erlang_json(value)}"


def _boolean(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    return f"{key} should be boolean, actually was {erlang_json(value)}"


def _table(key: str, value: Any) -> str | None:
    # RabbitMQ answers 500 to a non-object here (a crash in rabbit_amqqueue:declare_args);
    # Leveret names the key instead.
    if isinstance(value, dict):
        return None
    return f"{key} should be an object, actually was {erlang_json(value)}"


def _properties(key: str, value: Any) -> str | None:
    if isinstance(value, dict):
        return None
    return f"{key} not a list {erlang_json(value)}"


def _ack_mode(key: str, value: Any) -> str | None:
    if value in ACK_MODES:
        return None
    modes = ",".join(erlang_json(mode) for mode in ACK_MODES)
    return f"{key} should be one of [{modes}], actually was {erlang_json(value)}"


def _delete_after(key: str, value: Any) -> str | None:
    if value in ("never", "queue-length"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    return (
        f'{key} should be a number greater than or equal to 0, "never" or "queue-length", '
        f"actually was {erlang_json(value)}"
    )


def _uris(key: str, value: Any) -> str | None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        return f"{key} should be list, actually was {erlang_json(value)}"
    for item in items:
        if not isinstance(item, str):
            return f"{key} should be binary, actually was {erlang_json(item)}"
        try:
            parse_uri(item)
        except URIError as exc:
            return f'"{item}" not a valid URI: {exc.term}'
    return None


def _protocol(key: str, value: Any) -> str | None:
    if value == "amqp091":
        return None
    if value == "amqp10":
        return f"{key} amqp10 is not supported: Leveret speaks AMQP 0-9-1 only"
    modes = ",".join(erlang_json(p) for p in PROTOCOLS)
    return f"{key} should be one of [{modes}], actually was {erlang_json(value)}"


Check = Callable[[str, Any], str | None]
# (key, check, mandatory), in rabbit_shovel_parameters' order: the shovel's own keys,
# then the source's, then the destination's.
VALIDATION: tuple[tuple[str, Check, bool], ...] = (
    ("src-protocol", _protocol, False),
    ("dest-protocol", _protocol, False),
    ("reconnect-delay", _number, False),
    ("ack-mode", _ack_mode, False),
    ("src-uri", _uris, True),
    ("src-exchange", _binary, False),
    ("src-exchange-key", _binary, False),
    ("src-queue", _binary, False),
    ("src-queue-args", _table, False),
    ("src-consumer-args", _table, False),
    ("src-prefetch-count", _number, False),
    ("prefetch-count", _number, False),
    ("src-delete-after", _delete_after, False),
    ("delete-after", _delete_after, False),
    ("dest-uri", _uris, True),
    ("dest-exchange", _binary, False),
    ("dest-exchange-key", _binary, False),
    ("dest-queue", _binary, False),
    ("dest-queue-args", _table, False),
    ("dest-add-forward-headers", _boolean, False),
    ("add-forward-headers", _boolean, False),
    ("dest-add-timestamp-header", _boolean, False),
    ("add-timestamp-header", _boolean, False),
    ("dest-publish-properties", _properties, False),
    ("publish-properties", _properties, False),
)
KNOWN_KEYS = frozenset(key for key, _check, _mandatory in VALIDATION)


def _get(value: dict[str, Any], key: str, default: Any = None) -> Any:
    if key in value:
        return value[key]
    old = OLD_NAMES.get(key)
    return value.get(old, default) if old is not None else default


def _exclusive(value: dict[str, Any]) -> list[str]:
    faults = []
    if "src-exchange" not in value and "src-queue" not in value:
        faults.append("Must specify 'src-exchange' or 'src-queue'")
    elif "src-exchange" in value and "src-queue" in value:
        faults.append("Cannot specify 'src-exchange' and 'src-queue'")
    if "dest-exchange" in value and "dest-queue" in value:
        faults.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    delete_after = _get(value, "src-delete-after")
    if isinstance(delete_after, int) and _get(value, "ack-mode") == "no-ack":
        faults.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    return faults


def validate(name: str, value: Any) -> list[str]:
    """Every fault of ``value`` (empty: valid), in RabbitMQ's words and order."""
    if not isinstance(value, dict):
        return [f"shovel {name} should be an object, actually was {erlang_json(value)}"]
    faults = _exclusive(value)
    for key, check, mandatory in VALIDATION:
        if key not in value:
            if mandatory:
                faults.append(f'Key "{key}" not found in {name}')
            continue
        fault = check(key, value[key])
        if fault is not None:
            faults.append(fault)
    unknown = [(key, item) for key, item in value.items() if key not in KNOWN_KEYS]
    if unknown:
        terms = ",".join(f"{{{erlang_json(key)},{erlang_json(item)}}}" for key, item in unknown)
        faults.append(f"Unrecognised terms [{terms}] in {name}")
    return faults


def _uri_list(value: Any) -> tuple[ShovelURI, ...]:
    items = [value] if isinstance(value, str) else list(value)
    return tuple(parse_uri(item) for item in items)


def parse_definition(name: str, value: Any) -> ShovelDefinition:
    """The definition of shovel ``name``; :class:`ShovelError` with every fault."""
    faults = validate(name, value)
    if faults:
        raise ShovelError(faults)
    delete_after = _get(value, "src-delete-after", "never")
    return ShovelDefinition(
        src_uris=_uri_list(value["src-uri"]),
        dest_uris=_uri_list(value["dest-uri"]),
        src_queue=value.get("src-queue"),
        src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", ""),
        src_queue_args=dict(value.get("src-queue-args", {})),
        src_consumer_args=dict(value.get("src-consumer-args", {})),
        prefetch_count=int(_get(value, "src-prefetch-count", DEFAULT_PREFETCH)),
        delete_after=delete_after,
        dest_queue=value.get("dest-queue"),
        dest_exchange=value.get("dest-exchange"),
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue_args=dict(value.get("dest-queue-args", {})),
        add_forward_headers=bool(_get(value, "dest-add-forward-headers", False)),
        add_timestamp_header=bool(_get(value, "dest-add-timestamp-header", False)),
        publish_properties=dict(_get(value, "dest-publish-properties", {})),
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
    )
