"""Prometheus metrics of one agent, served by the shared HTTP server (`--metrics-port`).

Each `AgentMetrics` has its own registry, so several agents in one test process do not
clash. The server (`peerplane.runtime.httpserve`) answers `/metrics`, `/healthz` and `/readyz`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from peerplane.runtime.httpserve import HttpLimits, MetricsHttpServer

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
        self.deltas = Counter(
            "nodeagent_deltas_received", "SnapshotDelta messages received", registry=r
        )
        self.delta_resyncs = Counter(
            "nodeagent_delta_resyncs",
            "Deltas that did not apply (base not held, hash mismatch, malformed): NACKed "
            "with resync, the full snapshot follows",
            registry=r,
        )
        self.ready = Gauge(
            "nodeagent_ready",
            "1 while /readyz answers 200: an applied snapshot runs and its stick tables are "
            "synced from the peers (or the resync bound passed)",
            registry=r,
        )
        self.peers_connected = Gauge(
            "peerplane_agent_peers_connected",
            "Peer sessions of this HAProxy established (ESTA in `show peers`)",
            registry=r,
        )
        self.peers = Gauge(
            "peerplane_agent_peers",
            "Remote peers configured in this HAProxy's peers section (`show peers`)",
            registry=r,
        )
        self.stick_table_entries = Gauge(
            "peerplane_agent_stick_table_entries",
            "Entries in each stick table of this HAProxy (`show table`)",
            ["table"],
            registry=r,
        )
        for path in PATHS:
            self.apply_seconds.labels(path)  # export every path from the start


class MetricsServer(MetricsHttpServer):
    """`/metrics`, `/healthz` and, given `ready` (`nodeagent.readiness`), `/readyz` of
    `metrics` in a daemon thread (port 0 picks one)."""

    def __init__(
        self,
        metrics: AgentMetrics,
        address: str,
        port: int,
        ready: Callable[[], tuple[bool, str]] | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        super().__init__(metrics.registry, address, port, ready, limits)

    def start(self) -> MetricsServer:
        super().start()
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self
