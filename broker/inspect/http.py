"""A small client of RabbitMQ's management HTTP API on the standard library, which the
pytest plugin's fixtures and :class:`leveret.inspect.Inspector` use against an external
broker."""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


# -- the management HTTP API of an external broker -----------------------------------------


class ManagementError(RuntimeError):
    """An HTTP error answer of the management API."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status} {body[:200]}")
        self.status = status


class ManagementAPI:
    """A small client of RabbitMQ's management HTTP API (``/api``), on the standard
    library: vhosts, permissions and queue statistics, what the test fixtures need."""

    def __init__(
        self, base_url: str, username: str = "guest", password: str = "guest", timeout: float = 5
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.timeout = timeout
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._auth = f"Basic {token}"

    def __repr__(self) -> str:
        return f"ManagementAPI({self.base_url!r}, user={self.username!r})"

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """Send one request; returns the decoded JSON answer (None when empty)."""
        # Imported here: http.client and email cost ~3 ms, paid only with an external broker.
        import urllib.error
        import urllib.request

        url = self.base_url + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise ManagementError(method, url, exc.code, body) from None
        return json.loads(raw) if raw.strip() else None

    def probe(self, timeout: float = 1.0) -> str | None:
        """None when ``GET /api/overview`` answers, else why it does not."""
        try:
            self.request("GET", "/api/overview", timeout=timeout)
        except ManagementError as exc:
            return str(exc)
        except (OSError, ValueError) as exc:  # refused, unreachable, timeout, not JSON
            return f"GET {self.base_url}/api/overview: {exc}"
        return None

    @staticmethod
    def _q(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    def create_vhost(self, name: str) -> None:
        """``PUT /api/vhosts/{name}``."""
        self.request("PUT", f"/api/vhosts/{self._q(name)}", {})

    def delete_vhost(self, name: str) -> None:
        """``DELETE /api/vhosts/{name}`` (absent is fine)."""
        try:
            self.request("DELETE", f"/api/vhosts/{self._q(name)}")
        except ManagementError as exc:
            if exc.status != 404:
                raise

    def vhost_exists(self, name: str) -> bool:
        """Whether ``GET /api/vhosts/{name}`` finds the vhost."""
        try:
            self.request("GET", f"/api/vhosts/{self._q(name)}")
        except ManagementError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def set_permissions(
        self, vhost: str, user: str, configure: str = ".*", write: str = ".*", read: str = ".*"
    ) -> None:
        """``PUT /api/permissions/{vhost}/{user}``."""
        self.request(
            "PUT",
            f"/api/permissions/{self._q(vhost)}/{self._q(user)}",
            {"configure": configure, "write": write, "read": read},
        )

    def queue(self, vhost: str, name: str) -> dict[str, Any] | None:
        """``GET /api/queues/{vhost}/{name}``, or None when the queue does not exist."""
        try:
            answer = self.request("GET", f"/api/queues/{self._q(vhost)}/{self._q(name)}")
        except ManagementError as exc:
            if exc.status == 404:
                return None
            raise
        return answer if isinstance(answer, dict) else None

    def queue_names(self, vhost: str) -> list[str]:
        """Names of the queues in ``vhost`` (``GET /api/queues/{vhost}``)."""
        answer = self.request("GET", f"/api/queues/{self._q(vhost)}?columns=name")
        items = answer.get("items", []) if isinstance(answer, dict) else answer
        return sorted(str(item["name"]) for item in items or [])
