"""A shovel's ``amqp://`` and ``amqps://`` URIs, parsed as RabbitMQ's amqp_uri.erl parses
them (the RabbitMQ URI specification, https://www.rabbitmq.com/uri-spec.html and
https://www.rabbitmq.com/uri-query-parameters.html).

``amqp://user:pass@host:port/vhost?heartbeat=10``: user, password and vhost are
percent-decoded; without a path the vhost is ``/`` (amqp_uri:parse/1), ``amqp://host/``
names the vhost ``""``. An empty host (``amqp://``, ``amqp:///vhost``) is RabbitMQ's direct
connection: the local node. The query takes ``heartbeat``, ``connection_timeout`` (ms),
``channel_max``, ``frame_max`` and ``auth_mechanism``, and for ``amqps://`` the TLS options
``cacertfile``, ``certfile``, ``keyfile``, ``password`` (of the key), ``verify``
(``verify_peer`` / ``verify_none``), ``server_name_indication`` (a name, or ``disable``),
``fail_if_no_peer_cert`` and ``depth``; an unknown query key is ignored, as amqp_uri
ignores it. A refused URI raises :class:`URIError` whose ``term`` is the reason as
RabbitMQ prints it (``{unexpected_uri_scheme,"foo"}``).
"""

from __future__ import annotations

import dataclasses
import ssl
from urllib.parse import parse_qsl, unquote

from leveret.exchanges.erlang import erlang_string

DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
INTEGER_PARAMETERS = ("heartbeat", "connection_timeout", "channel_max", "frame_max", "depth")
VERIFY_MODES = ("verify_peer", "verify_none")


class URIError(ValueError):
    """A URI amqp_uri refuses; ``term`` is its reason as Erlang prints it."""

    def __init__(self, term: str) -> None:
        super().__init__(term)
        self.term = term


@dataclasses.dataclass(frozen=True)
class ShovelURI:
    """One parsed URI. ``host`` is ``""`` for the local node."""

    text: str
    tls: bool
    host: str
    port: int
    user: str
    password: str
    vhost: str
    heartbeat: int | None = None
    connection_timeout_ms: int | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def local(self) -> bool:
        """Whether it names the local node (RabbitMQ's direct connection)."""
        return self.host == ""

    def option(self, name: str) -> str | None:
        """The last value of query key ``name`` (None when absent)."""
        found = None
        for key, value in self.options:
            if key == name:
                found = value
        return found

    def redacted(self) -> str:
        """The URI without its password, as RabbitMQ shows a shovel's ``src_uri``
        (amqp_uri:remove_credentials/1)."""
        scheme = "amqps" if self.tls else "amqp"
        rest = self.text.split("://", 1)[1]
        authority, slash, tail = rest.partition("/")
        if "@" in authority:
            authority = authority.rsplit("@", 1)[1]
        return f"{scheme}://{authority}{slash}{tail}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context of an ``amqps://`` URI (None for ``amqp://``)."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.option("cacertfile"))
        certfile = self.option("certfile")
        if certfile is not None:
            context.load_cert_chain(certfile, self.option("keyfile"), self.option("password"))
        if self.option("verify") != "verify_peer":
            # amqp_uri's default is verify_none, as Erlang's ssl client's.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.option("server_name_indication") == "disable":
            context.check_hostname = False
        return context

    def server_hostname(self) -> str | None:
        """The name TLS checks the certificate against (``server_name_indication``)."""
        name = self.option("server_name_indication")
        return None if name in (None, "disable") else name


def _malformed(text: str) -> URIError:
    quoted = erlang_string(text)
    return URIError(f"{{{{unable_to_parse_uri,{{malformed_uri,{quoted},badarg}}}},{quoted}}}")


def parse_uri(text: str) -> ShovelURI:
    """Parse ``text`` as amqp_uri:parse/1 does (see the module's docstring)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise _malformed(text)
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise URIError(
            f"{{{{unexpected_uri_scheme,{erlang_string(scheme)}}},{erlang_string(text)}}}"
        )
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        userinfo, hostport = "", authority
    user, colon, password = userinfo.partition(":")
    host, port = hostport, DEFAULT_PORTS[scheme]
    if hostport.startswith("["):  # an IPv6 literal
        end = hostport.find("]")
        if end < 0:
            raise _malformed(text)
        host, tail = hostport[1:end], hostport[end + 1 :]
        if tail:
            if not tail.startswith(":") or not tail[1:].isdigit():
                raise _malformed(text)
            port = int(tail[1:])
    elif ":" in hostport:
        host, _, digits = hostport.partition(":")
        if not digits.isdigit():
            raise _malformed(text)
        port = int(digits)
    if "/" in path:
        raise URIError(f"{{{{invalid_vhost,{erlang_string(path)}}},{erlang_string(text)}}}")
    options = tuple(parse_qsl(query, keep_blank_values=True))
    numbers: dict[str, int] = {}
    for key, value in options:
        if key in INTEGER_PARAMETERS:
            if not value.lstrip("-").isdigit():
                pairs = ",".join(f"{{{erlang_string(k)},{erlang_string(v)}}}" for k, v in options)
                raise URIError(
                    f"{{{{invalid_amqp_params_parameter,{key},{erlang_string(value)},"
                    f"[{pairs}],{{not_an_integer,{erlang_string(value)}}}}},"
                    f"{erlang_string(text)}}}"
                )
            numbers[key] = int(value)
    return ShovelURI(
        text=text,
        tls=scheme == "amqps",
        host=unquote(host),
        port=port,
        user=unquote(user) if user or colon else "guest",
        password=unquote(password) if colon else "guest",
        vhost=unquote(path) if slash else "/",
        heartbeat=numbers.get("heartbeat"),
        connection_timeout_ms=numbers.get("connection_timeout"),
        options=options,
    )
