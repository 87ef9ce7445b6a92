"""The one metrics and health HTTP server of both sides (`--metrics-port`).

Each side keeps its own metric definitions in its own registry and hands this server the
registry. Paths: `/metrics` (Prometheus text format), `/healthz` (the process is alive) and,
when the side gives a readiness function, `/readyz` (200 when ready, 503 otherwise: the
control plane's kubelet probe, since kubelet's gRPC probe cannot speak TLS; the agent's,
which also gives the reason, sent as the body). Anything else is 404. Request logging is
off: scrapes every few seconds would drown the decision lines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# Ready or not, optionally with the reason (the body of the answer).
Readiness = Callable[[], bool | tuple[bool, str]]


class MetricsHttpServer:
    """`/metrics`, `/healthz` (and `/readyz`) on HOST:PORT in a daemon thread; port 0
    picks a free port (`port` says which)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        ready: Readiness | None = None,
    ) -> None:
        self._httpd = ThreadingHTTPServer((host, port), _handler(registry, ready))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.2,), name="metrics", daemon=True
        )

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> MetricsHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler(registry: CollectorRegistry, ready: Readiness | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz" and ready is not None:
                answer = ready()
                serving, why = answer if isinstance(answer, tuple) else (answer, "")
                body = f"{why}\n".encode() if why else b"ok\n" if serving else b"not serving\n"
                self._reply(200 if serving else 503, body)
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
