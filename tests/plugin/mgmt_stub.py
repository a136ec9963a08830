"""A stand-in for RabbitMQ's management HTTP API in front of an in-process Leveret.

Just the requests the plugin makes of an external broker (overview, vhosts, permissions,
queues), answered from a :class:`~broker.inspect.BrokerThread`'s state, so the external
broker switch with per-test vhosts and the HTTP inspector is tested without a RabbitMQ.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from leveret.inspect import BrokerThread
from leveret.node.auth import Permission

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


class ManagementStub:
    """``with ManagementStub(broker) as stub:`` serves ``stub.url`` until the block ends."""

    def __init__(self, broker: BrokerThread) -> None:
        self.broker = broker
        self.requests: list[tuple[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                stub.requests.append((method, self.path))
                if self.headers.get("Authorization") != AUTH:
                    self._answer(401, {"error": "not_authorized"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path.split("?", 1)[0]
                parts = [urllib.parse.unquote(p) for p in path.split("/")[2:]]
                status, answer = stub.handle(method, parts, body)
                self._answer(status, answer)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> ManagementStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        """(status, JSON answer) of one request, computed on the broker's loop."""
        server = self.broker.server

        def run() -> tuple[int, Any]:
            match (method, parts):
                case ("GET", ["overview"]):
                    return 200, {"product_name": "management stub"}
                case ("GET", ["vhosts", name]):
                    if name not in server.state.vhosts:
                        return 404, {"error": "Object Not Found", "reason": "Not Found"}
                    return 200, {"name": name}
                case ("PUT", ["vhosts", name]):
                    server.state.add_vhost(name)
                    return 201, None
                case ("DELETE", ["vhosts", name]):
                    return (204, None) if server.state.delete_vhost(name) else (404, {"error": "x"})
                case ("PUT", ["permissions", vhost, user]):
                    server.state.access.set_permissions(
                        user, vhost, Permission(body["configure"], body["write"], body["read"])
                    )
                    return 201, None
                case ("GET", ["queues", vhost]):
                    host = server.state.vhosts.get(vhost)
                    names = sorted(host.queues) if host else []
                    return 200, [{"name": n, "vhost": vhost} for n in names]
                case ("GET", ["queues", vhost, name]):
                    host = server.state.vhosts.get(vhost)
                    queue = host.queues.get(name) if host else None
                    if queue is None:
                        return 404, {"error": "Object Not Found", "reason": "Not Found"}
                    return 200, {
                        "name": name,
                        "vhost": vhost,
                        "messages": queue.message_count + queue.unacked,
                        "messages_ready": queue.message_count,
                        "messages_unacknowledged": queue.unacked,
                        "consumers": len(queue.consumers),
                        "message_stats": {
                            "publish": queue.published_total,
                            "deliver_get": queue.delivered_total,
                            "ack": queue.acked_total,
                        },
                    }
            return 404, {"error": "Object Not Found", "reason": "Not Found"}

        return self.broker.call(run)
