"""Prometheus metrics of one agent, served by the shared HTTP server (`--metrics-port`).

Each `AgentMetrics` has its own registry, so several agents in one test process do not
clash. The server (`peerplane.runtime.httpserve`) answers `/metrics`, `/healthz` and `/readyz`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from peerplane.runtime import allocator
from peerplane.runtime.httpserve import HttpLimits, MetricsHttpServer
from peerplane.runtime.untrusted import clean

log = logging.getLogger(__name__)

APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
PATHS = ("nothing", "runtime", "reload")
REFUSAL_STAGES = ("descriptors", "check", "reload")
REFUSAL_REASON_CHARS = 1024  # one label value: HAProxy's last ALERT lines fit


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
        self.config_write_failures = Counter(
            "nodeagent_config_write_failures",
            "Writes of haproxy.cfg after the ACK that failed (the next apply writes it first)",
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
        self.open_files_limit = Gauge(
            "nodeagent_open_files_limit",
            "Hard open-files limit HAProxy gets (RLIMIT_NOFILE, read at agent start; absent "
            "when unlimited)",
            registry=r,
        )
        self.descriptors_needed = Gauge(
            "nodeagent_haproxy_descriptors_needed",
            "Open files HAProxy asks for the last config the agent was to reload with",
            registry=r,
        )
        self.refusals = Counter(
            "nodeagent_haproxy_refusals",
            "Configs not run, by stage: descriptors (the agent's count), check (haproxy -c), "
            "reload (HAProxy refused to start or reload)",
            ["stage"],
            registry=r,
        )
        self.last_refusal = Gauge(
            "nodeagent_haproxy_last_refusal",
            "Unix time of the last refusal, one series: its stage and its reason in HAProxy's "
            "words (escaped, bounded)",
            ["stage", "reason"],
            registry=r,
        )
        self.set_aside = Gauge(
            "nodeagent_parts_set_aside",
            "Parts of the applied snapshot left out because the agent or HAProxy refused "
            "them, by kind (certificate, backend, route-rule); the ACK names them",
            ["kind"],
            registry=r,
        )
        r.register(MallocCollector())
        for path in PATHS:
            self.apply_seconds.labels(path)  # export every path from the start
        for stage in REFUSAL_STAGES:
            self.refusals.labels(stage)

    def refused(self, stage: str, reason: str) -> None:
        """Count a refusal and keep its words as the one `last_refusal` series."""
        self.refusals.labels(stage).inc()
        self.last_refusal.clear()
        self.last_refusal.labels(stage, clean(reason, REFUSAL_REASON_CHARS)).set_to_current_time()


MALLOC_HELP = (
    "Bytes of the agent's C heap (glibc malloc) by state: in_use (held), free (kept by "
    "malloc, given back by the trim after applies), mapped (large blocks on their own); "
    "a rising RSS with in_use flat is the allocator's, not a leak"
)


class MallocCollector(Collector):
    """`nodeagent_malloc_bytes{state}`, read at each scrape (`allocator.usage`); none
    without glibc."""

    def collect(self) -> Iterator[Metric]:
        found = allocator.usage()
        if found is None:
            return
        family = GaugeMetricFamily("nodeagent_malloc_bytes", MALLOC_HELP, labels=["state"])
        family.add_metric(["in_use"], found.in_use)
        family.add_metric(["free"], found.free)
        family.add_metric(["mapped"], found.mapped)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("nodeagent_malloc_bytes", MALLOC_HELP, labels=["state"])


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
