"""Places Service plans in a workload: its peers, backends, frontends and warnings."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from controlplane.compute.plan import ServicePlan, service_rejection
from controlplane.settings.resolver import GlobalSettings
from controlplane.settings.workloads import PeerEntry, Workload
from controlplane.snapshot import (
    BackendSpec,
    HostRoute,
    HttpFrontend,
    Peer,
    PeerSection,
    RejectedInput,
    TcpFrontend,
    WorkloadSnapshot,
)
from peerplane.names import PEERS_SECTION as PEER_SECTION


def frontends(
    plans: Sequence[ServicePlan],
    settings: GlobalSettings,
    listener_ports: Sequence[int] = (),
) -> tuple[HttpFrontend | None, tuple[TcpFrontend, ...], dict[str, list[RejectedInput]]]:
    """The HTTP frontend (None without routes), the TCP frontends, and the rejections of
    lost claims by backend name: the older Service keeps a contested host or port, and
    the route model's listeners keep theirs (`listener_ports`)."""
    routes: dict[str, str] = {}
    tcp: dict[int, str] = {}
    lost: dict[str, list[RejectedInput]] = {}
    reserved = {port: "a Gateway or Ingress route listener" for port in listener_ports}
    reserved |= {settings.http_port: "the HTTP frontend", settings.peer_port: "peers"}
    claims = [p for p in plans if p.backends and (p.hosts or p.tcp_port is not None)]
    for plan in sorted(claims, key=lambda p: p.age_key):
        target = plan.backends[0].name

        def reject(key: str, value: str, reason: str, plan: ServicePlan = plan) -> None:
            rejection = service_rejection(plan.service, key, value, reason)
            lost.setdefault(plan.backends[0].name, []).append(rejection)

        for host in plan.hosts:
            if host in routes:
                reject("haproxy.org/hosts", host, f"host already routed to {routes[host]}")
            else:
                routes[host] = target
        if plan.tcp_port is not None:
            owner = tcp.get(plan.tcp_port) or reserved.get(plan.tcp_port)
            if owner is not None:
                reject("haproxy.org/tcp-port", str(plan.tcp_port), f"port already used by {owner}")
            else:
                tcp[plan.tcp_port] = target
    http = None
    if routes:
        http = HttpFrontend(
            settings.http_port, tuple(HostRoute(host, routes[host]) for host in sorted(routes))
        )
    return http, tuple(TcpFrontend(port, tcp[port]) for port in sorted(tcp)), lost


def _spec_name(spec: BackendSpec) -> str:
    return spec.name


def assemble(
    workload: Workload,
    peers: Sequence[PeerEntry],
    plans: Sequence[ServicePlan],
    settings: GlobalSettings,
    global_warnings: Sequence[RejectedInput],
    listener_ports: Sequence[int] = (),
) -> tuple[WorkloadSnapshot, list[RejectedInput]]:
    """The workload's snapshot (without the route model's listeners: the Computer adds
    them) and the lost-claim rejections.

    Backends nobody adds warnings to are the planned specs themselves (the encoder reuses
    their bytes); the others are copies with the added warnings after their own.
    """
    snapshot, lost = assemble_with_claims(
        workload, peers, plans, settings, global_warnings, listener_ports
    )
    return snapshot, [r for rs in lost.values() for r in rs]


def assemble_with_claims(
    workload: Workload,
    peers: Sequence[PeerEntry],
    plans: Sequence[ServicePlan],
    settings: GlobalSettings,
    global_warnings: Sequence[RejectedInput],
    listener_ports: Sequence[int] = (),
) -> tuple[WorkloadSnapshot, dict[str, list[RejectedInput]]]:
    """`assemble`, the lost-claim rejections by the claiming backend's name."""
    ref = workload.short_ref
    mine = [p for p in plans if p.places(ref)]
    http, tcp, lost = frontends([p for p in mine if p.claims_in(ref)], settings, listener_ports)

    # Warnings this snapshot adds to a backend: Service-wide ones go on the Service's
    # first backend, lost claims on the claiming backend.
    added: dict[str, tuple[RejectedInput, ...]] = {}
    for plan in mine:
        if plan.service_warnings and plan.backends:
            added[plan.backends[0].name] = plan.service_warnings
    for name, rejections in lost.items():
        added[name] = (*added.get(name, ()), *rejections)
    backends = sorted((spec for plan in mine for spec in plan.backends), key=_spec_name)
    if added:
        backends = [
            spec
            if spec.name not in added
            else dataclasses.replace(spec, warnings=(*spec.warnings, *added[spec.name]))
            for spec in backends
        ]
    port = settings.peer_port
    snapshot = WorkloadSnapshot(
        workload=workload.key,
        peers=PeerSection(
            PEER_SECTION, port, tuple(Peer(peer.name, peer.address, port) for peer in peers)
        ),
        backends=tuple(backends),
        http_frontend=http,
        tcp_frontends=tcp,
        warnings=tuple(global_warnings),
    )
    return snapshot, lost
