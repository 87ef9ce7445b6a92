"""Assembles one Snapshot per workload from the cluster state and the previous slots."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.compute.endpoints import ready_endpoints
from controlplane.compute.settings import BackendSettings, GlobalSettings, Resolver, lookup
from controlplane.compute.slots import assign_slots
from controlplane.compute.types import BackendSlots, ComputeResult, Rejection, SlotAssignment
from controlplane.compute.values import (
    Invalid,
    is_dns_label,
    is_port_name,
    parse_bool,
    parse_hosts,
    parse_port,
    parse_workload_refs,
    shown,
)
from controlplane.compute.workloads import PeerEntry, Workload, discover
from controlplane.model import ClusterState, EndpointSlice, Service, ServicePort
from peerplane.v1 import peerplane_pb2 as pb

PEER_SECTION = "localinstance"
FREE_SLOT_ADDRESS = ""


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """What one opted-in Service contributes, before it is placed in workloads."""

    service: Service
    workloads: frozenset[str] | None  # "namespace/name" refs, None = every workload
    mode: str
    hosts: tuple[str, ...]
    tcp_port: int | None
    backends: tuple[pb.Backend, ...]

    @property
    def age_key(self) -> tuple[str, str, str]:
        """Older Services first; name breaks ties so the order is total."""
        svc = self.service
        return (svc.creation_timestamp or "~", svc.namespace, svc.name)


def backend_name(service: Service, port: ServicePort) -> str:
    return f"{service.namespace}_{service.name}_{port.name or port.port}"


def _service_rejection(service: Service, key: str, value: str, reason: str) -> Rejection:
    return Rejection("Service", service.namespace, service.name, key, shown(value), reason)


def _opted_in(service: Service, rejections: list[Rejection]) -> bool:
    found = lookup(service.annotations, "expose")
    if found is None:
        return False
    try:
        return parse_bool(found.value)
    except Invalid as err:
        rejections.append(_service_rejection(service, found.key, found.value, str(err)))
        return False


def _valid_identity(service: Service, rejections: list[Rejection]) -> bool:
    """Names become backend names in haproxy.cfg: accept only what Kubernetes accepts."""
    if not is_dns_label(service.namespace) or not is_dns_label(service.name):
        rejections.append(
            _service_rejection(service, "metadata.name", service.name, "not a DNS label")
        )
        return False
    return True


def _render_backend(
    name: str,
    service: Service,
    port: ServicePort,
    mode: str,
    settings: BackendSettings,
    slots: BackendSlots,
    warnings: Iterable[Rejection],
) -> pb.Backend:
    by_slot = {slot: endpoint for endpoint, slot in slots.slots.items()}
    backend = pb.Backend(
        name=name,
        service=f"{service.namespace}/{service.name}",
        service_port=port.name or str(port.port),
        mode=mode,
        balance=settings.balance.algorithm,
        balance_argument=settings.balance.argument,
        hash_type=settings.hash_type,
        warnings=[w.to_proto() for w in warnings],
    )
    if settings.persistence:
        backend.persistence.table_size = settings.table_size
        backend.persistence.expire_ms = settings.expire_ms
    for index in range(1, slots.count + 1):
        endpoint = by_slot.get(index)
        slot = backend.slots.add(index=index, server_name=f"SRV_{index}")
        if endpoint is not None:
            slot.address, slot.port, slot.enabled = endpoint[0], endpoint[1], True
    return backend


class _Planner:
    """Plans every opted-in Service; holds the inputs shared by all of them."""

    def __init__(self, state: ClusterState, previous: SlotAssignment) -> None:
        self.resolver = Resolver(state.settings)
        self.previous = previous
        self.slices: dict[tuple[str, str], list[EndpointSlice]] = defaultdict(list)
        for endpoint_slice in state.endpoint_slices:
            key = (endpoint_slice.namespace, endpoint_slice.service_name)
            self.slices[key].append(endpoint_slice)
        self.assignment: dict[str, BackendSlots] = {}
        self.configmap_rejections: list[Rejection] = []

    def plan(self, service: Service, rejections: list[Rejection]) -> ServicePlan | None:
        if not _opted_in(service, rejections) or not _valid_identity(service, rejections):
            return None
        own: list[Rejection] = []
        workloads: frozenset[str] | None = None
        found = lookup(service.annotations, "workloads")
        if found is not None:
            try:
                workloads = parse_workload_refs(found.value)
            except Invalid as err:
                # Safer to serve nowhere than everywhere when the limit is unreadable.
                rejections.append(
                    _service_rejection(
                        service, found.key, found.value, f"{err}; Service not served"
                    )
                )
                return None
        hosts: tuple[str, ...] = ()
        found = lookup(service.annotations, "hosts")
        if found is not None:
            try:
                hosts = parse_hosts(found.value)
            except Invalid as err:
                own.append(_service_rejection(service, found.key, found.value, str(err)))
        tcp_port: int | None = None
        found = lookup(service.annotations, "tcp-port")
        if found is not None:
            try:
                tcp_port = parse_port(found.value)
                if hosts:
                    tcp_port = None
                    raise Invalid("hosts and tcp-port exclude each other; hosts is used")
            except Invalid as err:
                own.append(_service_rejection(service, found.key, found.value, str(err)))
        mode = "tcp" if tcp_port is not None else "http"
        backends = []
        for port in service.ports:
            if port.protocol != "TCP" or (port.name and not is_port_name(port.name)):
                own.append(
                    _service_rejection(
                        service,
                        "spec.ports",
                        port.name or str(port.port),
                        "only TCP ports with DNS-label names are served",
                    )
                )
                continue
            backends.append(self._backend(service, port, mode, rejections))
        if backends:
            # Service-wide rejections show on the backend that hosts and tcp-port target.
            backends[0].warnings.extend(r.to_proto() for r in own)
        rejections.extend(own)
        return ServicePlan(service, workloads, mode, hosts, tcp_port, tuple(backends))

    def _backend(
        self, service: Service, port: ServicePort, mode: str, rejections: list[Rejection]
    ) -> pb.Backend:
        name = backend_name(service, port)
        warnings: list[Rejection] = []
        settings = self.resolver.backend(service, mode, warnings)
        endpoints = ready_endpoints(self.slices.get((service.namespace, service.name), ()), port)
        slots = assign_slots(endpoints, self.previous.get(name), settings.server_slots)
        self.assignment[name] = slots
        backend_warnings = [w for w in warnings if w.kind == "Service"]
        rejections.extend(backend_warnings)
        # ConfigMap rejections are listed once per snapshot, not on every backend.
        self.configmap_rejections.extend(w for w in warnings if w.kind != "Service")
        return _render_backend(name, service, port, mode, settings, slots, backend_warnings)


def _frontends(
    plans: list[ServicePlan], settings: GlobalSettings, snapshot: pb.Snapshot
) -> list[Rejection]:
    """Host routes and TCP ports; on a conflict the older Service keeps the claim, and
    the younger one's backend carries the rejection."""
    backends = {b.name: b for b in snapshot.backends}
    lost: list[Rejection] = []

    def reject(plan: ServicePlan, key: str, value: str, reason: str) -> None:
        rejection = _service_rejection(plan.service, key, value, reason)
        backends[plan.backends[0].name].warnings.append(rejection.to_proto())
        lost.append(rejection)

    routes: dict[str, str] = {}
    tcp: dict[int, str] = {}
    for plan in sorted(plans, key=lambda p: p.age_key):
        if not plan.backends:
            continue
        target = plan.backends[0].name
        for host in plan.hosts:
            if host in routes:
                reject(plan, "haproxy.org/hosts", host, f"host already routed to {routes[host]}")
            else:
                routes[host] = target
        if plan.tcp_port is not None:
            port = plan.tcp_port
            reserved = {settings.http_port: "the HTTP frontend", settings.peer_port: "peers"}
            owner = tcp.get(port) or reserved.get(port)
            if owner is not None:
                reject(plan, "haproxy.org/tcp-port", str(port), f"port already used by {owner}")
            else:
                tcp[port] = target
    if routes:
        snapshot.http_frontend.port = settings.http_port
        for host in sorted(routes):
            snapshot.http_frontend.routes.add(host=host, backend=routes[host])
    for port in sorted(tcp):
        snapshot.tcp_frontends.add(port=port, backend=tcp[port])
    return lost


def content_hash(snapshot: pb.Snapshot) -> str:
    """SHA-256 of the deterministic serialization, version and hash cleared."""
    content = pb.Snapshot()
    content.CopyFrom(snapshot)
    content.version = 0
    content.content_hash = ""
    return hashlib.sha256(content.SerializeToString(deterministic=True)).hexdigest()


def _snapshot(
    workload: Workload,
    peers: tuple[PeerEntry, ...],
    plans: list[ServicePlan],
    settings: GlobalSettings,
    global_warnings: list[pb.RejectedInput],
    rejections: list[Rejection],
) -> pb.Snapshot:
    mine = [p for p in plans if p.workloads is None or workload.short_ref in p.workloads]
    snapshot = pb.Snapshot(workload=workload.key)
    snapshot.peers.name = PEER_SECTION
    snapshot.peers.port = settings.peer_port
    for peer in peers:
        snapshot.peers.peers.add(name=peer.name, address=peer.address, port=settings.peer_port)
    for backend in sorted((b for p in mine for b in p.backends), key=lambda b: b.name):
        snapshot.backends.add().CopyFrom(backend)
    rejections.extend(_frontends(mine, settings, snapshot))
    snapshot.warnings.extend(global_warnings)
    snapshot.content_hash = content_hash(snapshot)
    return snapshot


def _dedupe(rejections: Iterable[Rejection]) -> list[Rejection]:
    return sorted(set(rejections), key=lambda r: (r.object, r.key, r.value, r.reason))


def compute(state: ClusterState, previous: Mapping[str, BackendSlots]) -> ComputeResult:
    """Snapshots of every workload (version 0, content hash set) and the new slots."""
    rejections: list[Rejection] = []
    planner = _Planner(state, previous)
    global_settings = planner.resolver.global_settings(planner.configmap_rejections)
    plans = [
        plan
        for service in sorted(state.services, key=lambda s: (s.namespace, s.name))
        if (plan := planner.plan(service, rejections)) is not None
    ]
    workloads = discover(state.haproxy_pods, state.replica_sets, rejections)
    configmap_rejections = _dedupe(planner.configmap_rejections)
    global_warnings = [r.to_proto() for r in configmap_rejections]
    snapshots = {
        workload.key: _snapshot(
            workload, peers, plans, global_settings, global_warnings, rejections
        )
        for workload, peers in sorted(workloads.peers.items(), key=lambda item: item[0].key)
    }
    return ComputeResult(
        snapshots=snapshots,
        assignment=planner.assignment,
        rejections=tuple(_dedupe([*rejections, *configmap_rejections])),
        pod_workloads=workloads.pod_workloads,
    )
