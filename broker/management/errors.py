"""HTTP errors of the management API, shaped as RabbitMQ's management plugin sends them.

Every error body is ``{"error": TYPE, "reason": TEXT}`` (rabbit_web_dispatch_access_control:
halt_response/5). The types and status codes used:

- 404 ``{"error": "Object Not Found", "reason": "Not Found"}``: a path naming something that
  does not exist (cowboy_rest's ``resource_exists`` returning false);
- 400 ``bad_request``: a body that is not JSON, a missing mandatory key, a refused AMQP
  operation (rabbit_mgmt_util:bad_request/3);
- 401 ``not_authorised``: a user without the needed tag, permission or vhost access
  (rabbit_web_dispatch_access_control:not_authorised/3, "consider changing to 403 in 4.0");
- 401 ``not_authorized`` (with ``WWW-Authenticate``): missing or wrong credentials.

AMQP errors raised by the broker are mapped as RabbitMQ maps them, in its two styles:
``direct`` for operations it runs through ``rabbit_channel:handle_method`` without a channel
(declare/delete/purge: rabbit_mgmt_util:direct_request/6) and ``channel`` for those it runs
on a real AMQP channel (get, bindings: rabbit_mgmt_util:with_channel/5); ``publish`` is the
channel style in which refusals are 400s too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from leveret.node.errors import ACCESS_REFUSED, NOT_ALLOWED, NOT_FOUND, AMQPError

if TYPE_CHECKING:
    from aiohttp import web

AUTH_REALM = 'Basic realm="RabbitMQ Management"'


class ApiError(Exception):
    """An error response: HTTP ``status`` with RabbitMQ's ``error`` and ``reason``."""

    def __init__(
        self, status: int, error: str, reason: str | list[Any], challenge: bool = False
    ) -> None:
        # A list where RabbitMQ's reason is an Erlang list ("no_such_user" and the name).
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        # Whether to send WWW-Authenticate (only for failed or missing credentials).
        self.challenge = challenge

    def response(self) -> web.Response:
        """The JSON response for this error."""
        from aiohttp import web  # here, so definitions import without aiohttp

        headers = {"WWW-Authenticate": AUTH_REALM} if self.challenge else None
        return web.Response(
            status=self.status,
            text=json.dumps({"error": self.error, "reason": self.reason}),
            content_type="application/json",
            headers=headers,
        )


def not_found() -> ApiError:
    """The 404 of a path that names nothing."""
    return ApiError(404, "Object Not Found", "Not Found")


def bad_request(reason: str | list[Any]) -> ApiError:
    """400 ``bad_request``; a list ``reason`` is an Erlang tuple as RabbitMQ's JSON encoder
    writes one (``{not_boolean, <<"yes">>}`` is ``["not_boolean", "yes"]``)."""
    return ApiError(400, "bad_request", reason)


def access_refused() -> ApiError:
    """401 ``Access refused.``: what a get or publish in a vhost that does not exist gets,
    when the channel RabbitMQ opens for it is refused (rabbit_mgmt_util:with_channel/5)."""
    return not_authorised("Access refused.")


def vhost_not_found() -> ApiError:
    """The 404 of a create (PUT of an exchange or queue, POST of a binding) in a vhost that
    does not exist (rabbit_mgmt_util:vhost/1 answering ``vhost_not_found``)."""
    return ApiError(404, "not_found", "vhost_not_found")


def not_authorised(reason: str) -> ApiError:
    """401 ``not_authorised``: authenticated, but not allowed."""
    return ApiError(401, "not_authorised", reason)


def not_authenticated() -> ApiError:
    """401 ``not_authorized`` with a Basic challenge: no or wrong credentials."""
    return ApiError(401, "not_authorized", "Not_Authorized", challenge=True)


def from_amqp(exc: AMQPError, style: str = "direct") -> ApiError:
    """The HTTP error for an AMQP error, in the ``direct``, ``channel`` or ``publish``
    style."""
    if style == "direct":
        # rabbit_mgmt_util:direct_request/6
        if exc.code == NOT_FOUND:
            return ApiError(404, "not_found", exc.explanation)
        if exc.code in (ACCESS_REFUSED, NOT_ALLOWED):
            return not_authorised("Access refused.")
        return bad_request(exc.explanation)
    # rabbit_mgmt_util:with_channel/5 and bad_request_exception/4 ("~tp ~ts": code, text).
    # A publish is cast and its channel's death caught by rabbit_mgmt_wm_exchange_publish:
    # bad/3, which sends every close as bad_request_exception (observed on 3.10.8: 400
    # "403 ACCESS_REFUSED - access to topic ...").
    if exc.code == NOT_FOUND and style != "publish":
        return ApiError(404, "not_found", exc.text)
    if exc.code == ACCESS_REFUSED and style != "publish":
        return not_authorised(exc.text)
    if exc.closes_connection:
        # A connection error reaches the API without its constant (observed on 3.10.8:
        # "540 basic.get not supported by stream queues ...").
        return bad_request(f"{exc.code} {exc.explanation}")
    return bad_request(f"{exc.code} {exc.text}")


@contextmanager
def amqp_errors(style: str = "direct") -> Iterator[None]:
    """Turn AMQP errors raised inside the block into the HTTP error RabbitMQ sends."""
    try:
        yield
    except AMQPError as exc:
        raise from_amqp(exc, style) from exc
