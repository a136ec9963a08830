"""Query-string options of list endpoints: ``sort``, ``sort_reverse``, ``columns`` and
pagination (``page``, ``page_size``, ``name``, ``use_regex``), as rabbit_mgmt_util does them
(reply_list/5, extract_columns/2, pagination_params/1, range_filter/3).

``columns`` applies to every JSON reply, lists and single objects alike, as
rabbit_mgmt_util:reply/3 applies it: :func:`reply_list` picks the columns of the items it
pages, and the app's middleware (:func:`pick_columns`) those of every other reply. Only the
lists RabbitMQ pages are paged (``pages=True``: queues, exchanges, vhosts, and the
connections and channels of the whole broker); the others ignore ``page``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from leveret.exchanges.fields import erlang_integer
from leveret.management.errors import ApiError, bad_request

__all__ = ["erlang_integer"]  # request integers are read as RabbitMQ reads them

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


def _dotted(item: Any, path: list[str]) -> Any:
    for key in path:
        item = item.get(key, 0) if isinstance(item, Mapping) else 0
    return item


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers before strings, so a mixed column still sorts."""
    if isinstance(value, bool | int | float):
        return (0, value)
    return (1, str(value))


def sort_items(
    items: list[dict[str, Any]], query: Mapping[str, str], default: str | None = None
) -> list[dict[str, Any]]:
    """Apply ``sort`` (a dotted field) and ``sort_reverse``; default order: the
    ``default`` field if given (then vhost, name), else vhost, name."""
    field = query.get("sort", "") or default or ""
    reverse = query.get("sort_reverse") == "true"
    ordered = sorted(items, key=lambda i: (str(i.get("vhost", "")), str(i.get("name", ""))))
    if field:
        path = field.split(".")
        return sorted(ordered, key=lambda i: sort_key(_dotted(i, path)), reverse=reverse)
    return list(reversed(ordered)) if reverse else ordered


def _columns(item: Any, columns: list[list[str]]) -> Any:
    if not isinstance(item, Mapping):
        return item
    picked: dict[str, Any] = {}
    for key, value in item.items():
        wanted = [c[1:] for c in columns if c[0] == key]
        if not wanted:
            continue
        picked[key] = value if any(not rest for rest in wanted) else _columns(value, wanted)
    return picked


def pick_columns(data: Any, spec: str) -> Any:
    """Keep only the comma-separated, dotted ``columns`` of an object, or of each object
    of a list."""
    columns = [c.split(".") for c in spec.split(",") if c]
    if isinstance(data, list):
        return [_columns(item, columns) for item in data]
    return _columns(data, columns)


# A response whose columns are already picked (the middleware leaves it alone).
COLUMNS_PICKED = web.ResponseKey("columns_picked", bool)
# The data a JSON response was made from.
JSON_DATA = web.ResponseKey("json_data", object)


def _pagination_error(page: int, size: int | None) -> ApiError:
    # rabbit_mgmt_util:pagination_params/1
    return ApiError(
        400,
        "invalid_pagination_parameters",
        "Invalid pagination parameters: page number "
        f"{page}, page size {'undefined' if size is None else size}",
    )


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    if name not in query:
        return None
    value = erlang_integer(query[name])
    if value is None:
        raise bad_request("Pagination parameters are invalid")
    return value


def reply_list(
    items: list[dict[str, Any]],
    request: web.Request,
    default_sort: str | None = None,
    pages: bool = False,
) -> web.Response:
    """A list response with the query-string options applied (rabbit_mgmt_util:
    reply_list/4, and reply_list_or_paginate/3 for the lists it pages, ``pages``;
    ``default_sort`` is the field its callers name, e.g. ``priority``)."""
    query = request.query
    items = sort_items(items, query, default_sort)
    if not pages or "page" not in query:
        return json_response(items)  # columns: the middleware
    page, size = page_window(query)
    return page_reply(items, query, page, size, lambda i: str(i.get("name", "")), lambda i: i)


def page_window(query: Mapping[str, str]) -> tuple[int, int]:
    """(page, page size) of a paged request, 400 when invalid (pagination_params/1)."""
    page = _int_param(query, "page") or 0
    size = _int_param(query, "page_size")
    if page < 1 or (size is not None and not 0 < size <= MAX_PAGE_SIZE):
        raise _pagination_error(page, size)
    return page, size or DEFAULT_PAGE_SIZE


def page_reply(
    items: list[T],
    query: Mapping[str, str],
    page: int,
    size: int,
    name_of: Callable[[T], str],
    build: Callable[[T], dict[str, Any]],
) -> web.Response:
    """One page of sorted ``items`` filtered by ``name`` (``use_regex``), in RabbitMQ's
    paged envelope; only the page's items go through ``build`` into views."""
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex") == "true":
            try:
                pattern = re.compile(name)
            except re.error:
                raise bad_request("Pagination parameters are invalid") from None
            items = [i for i in items if pattern.search(name_of(i))]
        else:
            items = [i for i in items if name.lower() in name_of(i).lower()]
    filtered = len(items)
    if (page - 1) * size > filtered:
        # range_filter/3: lists:sublist/3 takes a start up to one past the end, so the
        # page just after the last full one is an empty page, not an error (3.10.8).
        raise ApiError(
            400,
            "page_out_of_range",
            f"Page out of range, page: {page} page size: {size}, len: {filtered}",
        )
    chunk = [build(i) for i in items[(page - 1) * size : page * size]]
    spec = query.get("columns")
    response = json_response(
        {
            "filtered_count": filtered,
            "item_count": len(chunk),
            "items": pick_columns(chunk, spec) if spec else chunk,
            "page": page,
            "page_count": math.ceil(filtered / size),
            "page_size": size,
            "total_count": total,
        }
    )
    response[COLUMNS_PICKED] = True
    return response


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON body with RabbitMQ's ``cache-control: no-cache`` (rabbit_mgmt_util:reply/3);
    the data is kept on the response for the middleware's ``columns``."""
    response = web.Response(
        status=status,
        text=json.dumps(data),
        content_type="application/json",
        headers={"Cache-Control": "no-cache"},
    )
    response[JSON_DATA] = data
    return response


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; empty or ``null`` is ``{}`` (rabbit_mgmt_util:
    decode/1), anything else that is not an object is 400."""
    raw = await request.read()
    text = raw.decode("utf-8", "replace").strip()
    if text in ("", "null", "undefined"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise bad_request("not_json") from None
    if isinstance(value, str):
        raise bad_request(
            "invalid payload: the request body JSON-decoded to a string. "
            "Is the input doubly-JSON-encoded?"
        )
    if not isinstance(value, dict):
        raise bad_request("not_json")
    return value
