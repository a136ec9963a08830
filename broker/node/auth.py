"""Users, password hashes, tags, vhost permissions: RabbitMQ's internal auth backend.

- Passwords are stored as RabbitMQ's ``rabbit_password_hashing_sha256`` hashes:
  ``base64(salt ++ sha256(salt ++ utf8(password)))`` with a 4-byte random salt, so
  ``password_hash`` values from a RabbitMQ definitions export log in unchanged. A user
  imported with another of RabbitMQ's algorithms (SHA-512, or MD5 from before 3.6) keeps
  it and is checked with it, as RabbitMQ checks each user with its own
  (rabbit_password:salted_hash/3, rabbit_auth_backend_internal).
- Permissions are three regular expressions per (user, vhost): configure, write, read.
  RabbitMQ matches them with ``re:run`` (a search, not a full match); an empty pattern
  grants nothing. The default exchange is checked under the name ``amq.default``
  (rabbit_access_control, docs/access-control.md).
- Topic permissions are two more expressions (write, read) per (user, vhost, exchange),
  matched against routing keys of topic exchanges only: a publish's routing key (write) and
  a binding's key when the topic exchange is its source (read). A user without one for an
  exchange may use every key; an empty pattern allows only the empty key
  (rabbit_auth_backend_internal:check_topic_access/4, docs/access-control.md "Topic
  Authorisation").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leveret.exchanges.model import Exchange, ExchangeType
from leveret.node.errors import ACCESS_REFUSED, AMQPChannelError

# The declare argument through which each kind of object passes messages on to an exchange.
LINKED_EXCHANGE_ARGUMENT = {"exchange": "alternate-exchange", "queue": "x-dead-letter-exchange"}

SALT_BYTES = 4
SHA256 = "rabbit_password_hashing_sha256"
# RabbitMQ's hashing modules (rabbit_password_hashing_*.erl: hash/1 is the digest of
# salt ++ password) -> hashlib's name. RabbitMQ hashes new passwords with sha256 unless
# password_hashing_module says otherwise; Leveret always does.
HASHING = {
    SHA256: "sha256",
    "rabbit_password_hashing_sha512": "sha512",
    "rabbit_password_hashing_md5": "md5",
}


def is_loopback(host: str | None) -> bool:
    """Whether a peer address is loopback, as rabbit_net:is_loopback/1 decides for
    ``loopback_users``: all of 127.0.0.0/8, ``::1``, and IPv4-mapped 127/8 addresses."""
    try:
        address = ipaddress.ip_address((host or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def hash_password(password: str, salt: bytes | None = None, algorithm: str = SHA256) -> str:
    """RabbitMQ's password hash (base64 of salt + digest; SHA-256 unless ``algorithm``
    names another of :data:`HASHING`)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.new(HASHING[algorithm], salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str = SHA256) -> bool:
    """Whether ``password`` matches a RabbitMQ ``password_hash`` of ``algorithm``."""
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if algorithm not in HASHING:
        return False
    if len(raw) != SALT_BYTES + hashlib.new(HASHING[algorithm]).digest_size:
        return False
    expected = hash_password(password, raw[:SALT_BYTES], algorithm)
    return hmac.compare_digest(expected, password_hash)


@dataclass
class User:
    """A user of the internal database."""

    name: str
    password_hash: str
    tags: list[str] = field(default_factory=list)
    # max-connections and max-channels (broker/limits.py).
    limits: dict[str, int] = field(default_factory=dict)
    # Which of :data:`HASHING` made ``password_hash``.
    hashing_algorithm: str = SHA256


@dataclass
class Permission:
    """configure/write/read regular expressions of a user on a vhost."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def allows(self, kind: str, name: str) -> bool:
        """Whether the ``kind`` ("configure", "write", "read") pattern covers ``name``."""
        pattern: str = getattr(self, kind)
        return bool(pattern) and _compiled(pattern).search(name) is not None


@dataclass
class TopicPermission:
    """write/read regular expressions of a user on one topic exchange of a vhost; they may
    name ``{username}`` and ``{vhost}``, replaced (unescaped) before matching."""

    write: str
    read: str

    def allows(self, kind: str, routing_key: str, user: str, vhost: str) -> bool:
        """Whether the ``kind`` ("write" or "read") pattern covers ``routing_key``."""
        pattern: str = getattr(self, kind) or "^$"
        # expand_topic_permission/2 folds over the variable map in key order.
        pattern = pattern.replace("{username}", user).replace("{vhost}", vhost)
        try:
            return _compiled(pattern).search(routing_key) is not None
        except re.error:  # a name that made the expanded pattern invalid
            return False


def invalid_regexp(pattern: str) -> list[Any] | None:
    """RabbitMQ's reason for refusing ``pattern`` (``["invalid_regexp", PATTERN, ...]``,
    whose last element is the compiler's message and offset), or None when it compiles."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return ["invalid_regexp", pattern, [exc.msg, exc.pos]]
    return None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


class AccessControl:
    """The user database and permission checks of a broker."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}
        # (user, vhost) -> exchange -> its topic permission, in the order they were set.
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}
        # Bumped on every change, so channels can cache successful permission checks.
        self.version = 0
        # Called after every change (the broker persists the user database with it).
        self.listeners: list[Callable[[], None]] = []
        # The password of the node's own connections (a shovel's local end, RabbitMQ's
        # direct connection): any existing user, with this process's random secret,
        # which is never saved or shown.
        self.direct_secret = base64.urlsafe_b64encode(os.urandom(32)).decode()

    def _changed(self) -> None:
        self.version += 1
        for listener in self.listeners:
            listener()

    @classmethod
    def with_users(cls, users: dict[str, str], vhosts: tuple[str, ...]) -> AccessControl:
        """Users from ``name -> password`` with full permissions on ``vhosts``; guest is
        tagged administrator, as RabbitMQ's default user."""
        access = cls()
        for name, password in users.items():
            tags = ["administrator"] if name == "guest" else []
            access.add_user(name, password=password, tags=tags)
            for vhost in vhosts:
                access.set_permissions(name, vhost, Permission())
        return access

    def add_user(
        self,
        name: str,
        password: str | None = None,
        password_hash: str | None = None,
        tags: list[str] | None = None,
        hashing_algorithm: str = SHA256,
    ) -> User:
        """Create or replace a user (from a password, hashed with SHA-256, or a RabbitMQ
        hash made by ``hashing_algorithm``, one of :data:`HASHING`)."""
        if hashing_algorithm not in HASHING:
            raise ValueError(f"unsupported hashing algorithm {hashing_algorithm}")
        if password_hash is None:
            hashing_algorithm = SHA256
            password_hash = hash_password(password or "") if password is not None else ""
        old = self.users.get(name)
        # Replacing a user keeps its limits, as rabbit_auth_backend_internal:put_user/3.
        limits = dict(old.limits) if old else {}
        user = User(name, password_hash, list(tags or []), limits, hashing_algorithm)
        self.users[name] = user
        self._changed()
        return user

    def delete_user(self, name: str) -> bool:
        """Remove a user and its permissions."""
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[key]
        existed = self.users.pop(name, None) is not None
        self._changed()
        return existed

    def set_user_limits(self, name: str, limits: dict[str, int]) -> None:
        """Replace the limits of user ``name`` (which must exist; checked values)."""
        self.users[name].limits = dict(limits)
        self._changed()

    def set_permissions(self, user: str, vhost: str, permission: Permission) -> None:
        """Grant ``permission`` to ``user`` on ``vhost``."""
        self.permissions[(user, vhost)] = permission
        self._changed()

    def clear_permissions(self, user: str, vhost: str) -> bool:
        """Revoke ``user``'s access to ``vhost``."""
        existed = self.permissions.pop((user, vhost), None) is not None
        self._changed()
        return existed

    def set_topic_permission(
        self, user: str, vhost: str, exchange: str, permission: TopicPermission
    ) -> None:
        """Set ``user``'s topic permission on ``exchange`` in ``vhost`` (replacing one)."""
        self.topic_permissions.setdefault((user, vhost), {})[exchange] = permission
        self._changed()

    def clear_topic_permissions(self, user: str, vhost: str) -> bool:
        """Remove all of ``user``'s topic permissions in ``vhost``; whether it had any."""
        existed = self.topic_permissions.pop((user, vhost), None) is not None
        self._changed()
        return existed

    def forget_vhost(self, vhost: str) -> None:
        """Revoke every permission and topic permission on a deleted ``vhost``."""
        for key in [k for k in self.permissions if k[1] == vhost]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == vhost]:
            del self.topic_permissions[key]
        self._changed()

    def topic_permission(self, user: str, vhost: str, exchange: str) -> TopicPermission | None:
        """``user``'s topic permission on ``exchange`` in ``vhost``, if it has one."""
        by_exchange = self.topic_permissions.get((user, vhost))
        return by_exchange.get(exchange) if by_exchange else None

    def check_topic(
        self, user: str, vhost: str, kind: str, exchange: Exchange | None, routing_key: str
    ) -> None:
        """Raise 403 unless ``user`` may ``kind`` (write/read) ``routing_key`` on
        ``exchange``: only a topic exchange is checked (rabbit_channel:
        check_topic_authorisation/6), against the user's topic permission on it, if any
        (rabbit_access_control:check_topic_access/4)."""
        if exchange is None or exchange.type != ExchangeType.TOPIC:
            return
        permission = self.topic_permission(user, vhost, exchange.name)
        if permission is not None and not permission.allows(kind, routing_key, user, vhost):
            # rabbit_misc:rs/1 leaves out the kind of a topic resource: "in exchange 'x'".
            # RabbitMQ 3.10 leaves out the permission too ("access to topic ..."); the
            # text here is 3.13's, as for every other permission.
            raise AMQPChannelError(
                ACCESS_REFUSED,
                f"{kind} access to topic '{routing_key}' in exchange '{exchange.name}' in vhost "
                f"'{vhost}' refused for user '{user}'",
            )

    def topic_permission_rows(
        self, user: str | None = None, vhost: str | None = None
    ) -> list[dict[str, str]]:
        """Topic permissions (optionally of one user and/or vhost) as RabbitMQ lists and
        exports them: ``user``, ``vhost``, ``exchange``, ``write``, ``read``."""
        return [
            {"user": u, "vhost": v, "exchange": exchange, **vars(permission)}
            for (u, v), by_exchange in self.topic_permissions.items()
            if (user is None or u == user) and (vhost is None or v == vhost)
            for exchange, permission in by_exchange.items()
        ]

    def to_document(self) -> dict[str, Any]:
        """Users and permissions in RabbitMQ's definitions.json shape."""
        return {
            "users": [
                {
                    "name": u.name,
                    "password_hash": u.password_hash,
                    "hashing_algorithm": u.hashing_algorithm,
                    "tags": list(u.tags),
                    "limits": dict(u.limits),
                }
                for u in self.users.values()
            ],
            "permissions": [
                {"user": user, "vhost": vhost, **vars(p)}
                for (user, vhost), p in self.permissions.items()
            ],
            "topic_permissions": self.topic_permission_rows(),
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> AccessControl:
        """The inverse of :meth:`to_document`."""
        access = cls()
        for user in document.get("users", []):
            added = access.add_user(
                user["name"],
                password_hash=user["password_hash"],
                tags=list(user["tags"]),
                hashing_algorithm=user.get("hashing_algorithm", SHA256),
            )
            added.limits = dict(user.get("limits") or {})
        for p in document.get("permissions", []):
            access.set_permissions(
                p["user"], p["vhost"], Permission(p["configure"], p["write"], p["read"])
            )
        for p in document.get("topic_permissions", []):
            access.set_topic_permission(
                p["user"], p["vhost"], p["exchange"], TopicPermission(p["write"], p["read"])
            )
        return access

    def authenticate(self, name: str, password: str) -> User | None:
        """The user when ``password`` is right (a user without a hash cannot log in)."""
        user = self.users.get(name)
        if user is None:
            return None
        if hmac.compare_digest(password.encode(), self.direct_secret.encode()):
            return user
        if not user.password_hash:
            return None
        if check_password(password, user.password_hash, user.hashing_algorithm):
            return user
        return None

    def can_access_vhost(self, user: str, vhost: str) -> bool:
        """Whether ``user`` has any permissions on ``vhost``."""
        return (user, vhost) in self.permissions

    def check_linked_exchange(
        self, user: str, vhost: str, resource: str, name: str, arguments: Mapping[str, Any]
    ) -> None:
        """403 unless ``user`` may declare the new ``resource`` ``name`` with an argument that
        sends messages on to another exchange (an exchange's ``alternate-exchange``, a
        queue's ``x-dead-letter-exchange``): read on the new object and write on that
        exchange, or anyone could route into an exchange they may not write to.

        RabbitMQ 3.10.8 checks this in rabbit_channel:handle_method/6 for exchange.declare
        and queue.declare, only when the object does not exist yet (callers ask then); an
        argument of the wrong type is left to the declare's own 406.
        """
        target = arguments.get(LINKED_EXCHANGE_ARGUMENT[resource])
        if isinstance(target, str):
            self.check(user, vhost, "read", resource, name)
            self.check(user, vhost, "write", "exchange", target)

    def check(self, user: str, vhost: str, kind: str, resource: str, name: str) -> None:
        """Raise 403 unless ``user`` may ``kind`` (configure/write/read) the ``resource``
        (``exchange`` or ``queue``) ``name`` in ``vhost`` (rabbit_access_control)."""
        permission = self.permissions.get((user, vhost))
        checked = "amq.default" if resource == "exchange" and name == "" else name
        if permission is None or not permission.allows(kind, checked):
            raise AMQPChannelError(
                ACCESS_REFUSED,
                f"{kind} access to {resource} '{checked}' in vhost '{vhost}' refused for user "
                f"'{user}'",
            )
