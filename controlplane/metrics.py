"""Prometheus metrics of the control plane, served by the shared HTTP server.

Each `Metrics` has its own registry (several servers in one test process do not clash).
The server (`peerplane.httpserve`) answers `/metrics`, `/healthz` and `/readyz` (200 when
the gRPC server reports SERVING, i.e. the leader has published; 503 otherwise). Kubelet's
gRPC probe cannot speak TLS, so with TLS on the gRPC port the readiness probe uses
`/readyz`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from peerplane.httpserve import MetricsHttpServer

log = logging.getLogger(__name__)

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9_./:-]{1,80}$")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def label(value: str) -> str:
    """A label value safe from cardinality blow-ups: odd or long values become 'other'."""
    return value if _LABEL_VALUE.match(value) else "other"


class Metrics:
    """Every control-plane series; methods are called from the event-loop thread."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.snapshot_version = Gauge(
            "peerplane_snapshot_version",
            "Published snapshot version (generation) per workload",
            ["workload"],
            registry=r,
        )
        self.compute_seconds = Histogram(
            "peerplane_compute_duration_seconds",
            "Time of one computation (cluster state to snapshots)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.connected_agents = Gauge(
            "peerplane_connected_agents", "Agent streams past Hello", registry=r
        )
        self.snapshots_sent = Counter(
            "peerplane_snapshots_sent", "Snapshots sent to agents", ["workload"], registry=r
        )
        self.acks = Counter("peerplane_acks", "ACKs received", ["workload"], registry=r)
        self.nacks = Counter("peerplane_nacks", "NACKs received", ["workload"], registry=r)
        self.push_latency = Histogram(
            "peerplane_push_latency_seconds",
            "From a version's publication (or the agent's connection, if later) to its ACK",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rejections = Counter(
            "peerplane_rejections",
            "Rejected inputs (each distinct rejection counted when it first appears)",
            ["kind", "key"],
            registry=r,
        )
        self.refused_streams = Counter(
            "peerplane_refused_streams",
            "Streams or calls refused, by gRPC status",
            ["code"],
            registry=r,
        )
        self.leader = Gauge(
            "peerplane_leader", "1 while this replica leads (or runs unelected)", registry=r
        )

    # The methods the server, the stream handler and the reconcile loop call.

    def published(self, workload: str, version: int) -> None:
        self.snapshot_version.labels(workload=label(workload)).set(version)

    def removed(self, workload: str) -> None:
        with contextlib.suppress(KeyError):
            self.snapshot_version.remove(label(workload))

    def computed(self, seconds: float) -> None:
        self.compute_seconds.observe(seconds)

    def sent(self, workload: str) -> None:
        self.snapshots_sent.labels(workload=label(workload)).inc()

    def acked(self, workload: str, latency_s: float) -> None:
        self.acks.labels(workload=label(workload)).inc()
        self.push_latency.observe(max(0.0, latency_s))

    def nacked(self, workload: str) -> None:
        self.nacks.labels(workload=label(workload)).inc()

    def rejected(self, kind: str, key: str) -> None:
        self.rejections.labels(kind=label(kind), key=label(key)).inc()

    def refused(self, code: str) -> None:
        self.refused_streams.labels(code=code).inc()


class MetricsServer(MetricsHttpServer):
    """`/metrics`, `/healthz`, `/readyz` of `metrics` on HOST:PORT in a daemon thread."""

    def __init__(self, metrics: Metrics, host: str, port: int, ready: Callable[[], bool]) -> None:
        super().__init__(metrics.registry, host, port, ready)
