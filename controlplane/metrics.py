"""Prometheus metrics of the control plane, served by the shared HTTP server.

Each `Metrics` has its own registry (several servers in one test process do not clash).
The server (`peerplane.runtime.httpserve`) answers `/metrics`, `/healthz` and `/readyz` (200 when
the gRPC server reports SERVING, i.e. the leader has published; 503 otherwise). Kubelet's
gRPC probe cannot speak TLS, so with TLS on the gRPC port the readiness probe uses
`/readyz`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Hashable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from controlplane.convergence import ConvergenceTracker
from peerplane.runtime.httpserve import MetricsHttpServer

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
        self.deltas_sent = Counter(
            "peerplane_deltas_sent", "Snapshot deltas sent to agents", ["workload"], registry=r
        )
        self.sent_bytes = Counter(
            "peerplane_sent_bytes",
            'Bytes of snapshots and deltas written to agent streams, by kind ("snapshot", "delta")',
            ["kind"],
            registry=r,
        )
        self.too_large_messages = Counter(
            "peerplane_messages_too_large",
            "Snapshots or deltas not sent: larger than --max-send-message-bytes",
            ["workload"],
            registry=r,
        )
        self.delta_resyncs = Counter(
            "peerplane_delta_resyncs",
            "Full snapshots sent because an agent Nacked a delta with resync",
            ["workload"],
            registry=r,
        )
        self.retained_versions = Gauge(
            "peerplane_retained_versions",
            "Snapshot contents retained as delta bases, all workloads (current ones included)",
            registry=r,
        )
        self.retained_bytes = Gauge(
            "peerplane_retained_bytes",
            "Bytes held only as delta bases: what retained contents hold and no current "
            "version does, shared bytes once (estimate; at most --retained-bytes)",
            registry=r,
        )
        self.delta_cache_bytes = Gauge(
            "peerplane_delta_cache_bytes",
            "Bytes of built delta messages cached for streams at the same base "
            "(at most --delta-cache-bytes)",
            registry=r,
        )
        self.acks = Counter("peerplane_acks", "ACKs received", ["workload"], registry=r)
        self.nacks = Counter("peerplane_nacks", "NACKs received", ["workload"], registry=r)
        self.push_latency = Histogram(
            "peerplane_push_latency_seconds",
            "From a version's publication (or the agent's connection, if later) to its ACK",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.convergence_time = Histogram(
            "peerplane_convergence_seconds",
            "From the control plane seeing a change to every connected agent of the "
            "workload ACKing a version that includes it (Istio: pilot_proxy_convergence_time)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.convergence = ConvergenceTracker(self.convergence_time.observe)
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
        self.source_files_parsed = Counter(
            "peerplane_source_files_parsed",
            "Manifest files read and parsed by the folder source (only changed files are)",
            registry=r,
        )
        self.role = Gauge(
            "peerplane_replica_role",
            "1 for this replica's role: single, leader or follower",
            ["role"],
            registry=r,
        )
        self.ready = Gauge(
            "peerplane_replica_ready",
            "1 once informers synced, the slot ledger was read and a computation published",
            registry=r,
        )
        self.not_ready = Gauge(
            "peerplane_replica_not_ready",
            "1 for the reason this replica is not ready: informers, ledger or unpublished",
            ["cause"],
            registry=r,
        )
        self.ledger_version = Gauge(
            "peerplane_slot_ledger_resource_version",
            "resourceVersion of the slot ledger ConfigMap last seen (0: none)",
            registry=r,
        )
        self.ledger_problems = Gauge(
            "peerplane_slot_ledger_problems",
            "Shards of the slot ledger not as the leader wrote them (deleted, edited, corrupt)"
            " and labelled objects not read (not a shard under its canonical name)",
            registry=r,
        )
        self.ledger_write_failures = Counter(
            "peerplane_slot_ledger_write_failures",
            "Slot ledger writes that failed, by cause (invalid, too-large, forbidden: "
            "permanent; others transient)",
            ["cause"],
            registry=r,
        )
        self.ledger_unpersisted = Gauge(
            "peerplane_slot_ledger_unpersisted",
            "1 while the leader cannot persist the slot ledger (and so does not publish what "
            "it could not write)",
            registry=r,
        )
        self.route_status_writes = Counter(
            "peerplane_route_status_writes",
            "Route objects' status subresource handled by the Lease holder, by result "
            "(written, conflict, missing, failed; unchanged objects are not counted)",
            ["result"],
            registry=r,
        )
        self.endpoints_waiting = Gauge(
            "peerplane_endpoints_waiting",
            "Endpoints left out of this follower's snapshots until the ledger gives them a slot",
            registry=r,
        )
        self.spare_claims = Counter(
            "peerplane_spare_claims",
            "New backends that claimed a spare section (claimed: served without a reload while "
            "the agents hold it) or that no spare could hold (refused: a reload, as before)",
            ["result"],
            registry=r,
        )

    # The methods the server, the stream handler and the reconcile loop call.

    def published(self, workload: str, version: int, seen_at: float | None = None) -> None:
        """`seen_at`: when the first change this version includes was seen (monotonic)."""
        self.snapshot_version.labels(workload=label(workload)).set(version)
        self.convergence.published(workload, version, seen_at)

    def removed(self, workload: str) -> None:
        self.convergence.removed(workload)
        with contextlib.suppress(KeyError):
            self.snapshot_version.remove(label(workload))

    def computed(self, seconds: float) -> None:
        self.compute_seconds.observe(seconds)

    def sent(self, workload: str, size: int = 0) -> None:
        self.snapshots_sent.labels(workload=label(workload)).inc()
        self.sent_bytes.labels(kind="snapshot").inc(size)

    def delta_sent(self, workload: str, size: int) -> None:
        self.deltas_sent.labels(workload=label(workload)).inc()
        self.sent_bytes.labels(kind="delta").inc(size)

    def too_large(self, workload: str) -> None:
        self.too_large_messages.labels(workload=label(workload)).inc()

    def resynced(self, workload: str) -> None:
        self.delta_resyncs.labels(workload=label(workload)).inc()

    def retained(self, versions: int, size: int, delta_cache: int) -> None:
        self.retained_versions.set(versions)
        self.retained_bytes.set(size)
        self.delta_cache_bytes.set(delta_cache)

    def acked(
        self, workload: str, latency_s: float, agent: Hashable = None, version: int = 0
    ) -> None:
        self.acks.labels(workload=label(workload)).inc()
        self.push_latency.observe(max(0.0, latency_s))
        if agent is not None:
            self.convergence.acked(workload, agent, version)

    def nacked(self, workload: str) -> None:
        self.nacks.labels(workload=label(workload)).inc()

    def rejected(self, kind: str, key: str) -> None:
        self.rejections.labels(kind=label(kind), key=label(key)).inc()

    def refused(self, code: str) -> None:
        self.refused_streams.labels(code=code).inc()

    def ledger_write_failed(self, cause: str) -> None:
        self.ledger_write_failures.labels(cause=label(cause)).inc()

    def route_status(self, result: str) -> None:
        self.route_status_writes.labels(result=label(result)).inc()

    def replica(
        self, role: str, cause: str, ledger_version: str, waiting: int, ledger_problems: int = 0
    ) -> None:
        """The replica's state (controlplane.loop.replica.ReplicaStatus's fields)."""
        for name in ("single", "leader", "follower"):
            self.role.labels(role=name).set(int(name == role))
        self.ready.set(int(not cause))
        self.ledger_problems.set(ledger_problems)
        self.ledger_unpersisted.set(int(cause == "ledger-write"))
        for name in ("informers", "ledger", "ledger-write", "unpublished"):
            self.not_ready.labels(cause=name).set(int(name == cause))
        self.ledger_version.set(int(ledger_version) if ledger_version.isdigit() else 0)
        self.endpoints_waiting.set(waiting)


class MetricsServer(MetricsHttpServer):
    """`/metrics`, `/healthz`, `/readyz` of `metrics` on HOST:PORT in a daemon thread."""

    def __init__(self, metrics: Metrics, host: str, port: int, ready: Callable[[], bool]) -> None:
        super().__init__(metrics.registry, host, port, ready)
