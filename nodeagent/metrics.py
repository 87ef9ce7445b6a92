"""Prometheus metrics of one agent, and the HTTP server exposing them (`--metrics-port`).

Each `AgentMetrics` has its own registry, so several agents in one test process do not
clash. The server answers `/metrics` and `/healthz`.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger(__name__)

APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
PATHS = ("nothing", "runtime", "reload")


class AgentMetrics:
    """Every agent series; safe to update from any thread."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.applied_version = Gauge(
            "nodeagent_applied_version", "Version of the snapshot HAProxy runs", registry=r
        )
        self.apply_seconds = Histogram(
            "nodeagent_apply_duration_seconds",
            "Time to apply a snapshot, by path (nothing, runtime, reload)",
            ["path"],
            buckets=APPLY_BUCKETS,
            registry=r,
        )
        self.reloads = Counter("nodeagent_reloads", "HAProxy reloads (and starts)", registry=r)
        self.runtime_updates = Counter(
            "nodeagent_runtime_updates", "Snapshots applied through the runtime API", registry=r
        )
        self.acks = Counter("nodeagent_acks_sent", "ACKs sent to the control plane", registry=r)
        self.nacks = Counter("nodeagent_nacks_sent", "NACKs sent to the control plane", registry=r)
        self.validation_failures = Counter(
            "nodeagent_validation_failures", "Configs rejected by haproxy -c", registry=r
        )
        self.connected = Gauge(
            "nodeagent_connected", "1 while a stream to the control plane is up", registry=r
        )
        self.haproxy_restarts = Counter(
            "nodeagent_haproxy_restarts", "HAProxy masters restarted after dying", registry=r
        )
        self.socket_repairs = Counter(
            "nodeagent_runtime_socket_repairs",
            "Reloads that bound a deleted runtime socket again",
            registry=r,
        )
        for path in PATHS:
            self.apply_seconds.labels(path)  # export every path from the start

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype, code = self.server.metrics.render(), CONTENT_TYPE_LATEST, 200
        elif path == "/healthz":
            body, ctype, code = b"ok\n", "text/plain", 200
        else:
            body, ctype, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class MetricsServer(ThreadingHTTPServer):
    """`/metrics` over HTTP in a daemon thread; `port` is the bound port (0 picks one)."""

    daemon_threads = True

    def __init__(self, metrics: AgentMetrics, address: str, port: int) -> None:
        self.metrics = metrics
        super().__init__((address, port), _Handler)
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.server_address[0], self.port)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)
