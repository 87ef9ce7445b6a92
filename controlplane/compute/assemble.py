"""Places Service plans in a workload: frontends, then the snapshot's bytes and hash."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from controlplane.compute import wire
from controlplane.compute.plan import BackendPart, ServicePlan, service_rejection, warnings_bytes
from controlplane.compute.settings import GlobalSettings
from controlplane.compute.types import Rejection, SnapshotContent
from controlplane.compute.workloads import PeerEntry, Workload
from peerplane.v1 import peerplane_pb2 as pb

PEER_SECTION = "localinstance"


def frontends(
    plans: Sequence[ServicePlan], settings: GlobalSettings
) -> tuple[pb.Snapshot, dict[str, list[Rejection]]]:
    """Host routes and TCP ports in a Snapshot holding only fields 6 and 7, and the
    rejections of lost claims by backend name: the older Service keeps a contested host
    or port."""
    routes: dict[str, str] = {}
    tcp: dict[int, str] = {}
    lost: dict[str, list[Rejection]] = {}
    reserved = {settings.http_port: "the HTTP frontend", settings.peer_port: "peers"}
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
    out = pb.Snapshot()
    if routes:
        out.http_frontend.port = settings.http_port
        for host in sorted(routes):
            out.http_frontend.routes.add(host=host, backend=routes[host])
    for port in sorted(tcp):
        out.tcp_frontends.add(port=port, backend=tcp[port])
    return out, lost


def _part_name(part: BackendPart) -> str:
    return part.name


def _reframed(part: BackendPart, added: tuple[Rejection, ...]) -> bytes:
    body = part.body + warnings_bytes((*part.warnings, *added)) + part.tail
    return wire.length_delimited(wire.SNAPSHOT_BACKENDS, body)


def assemble(
    workload: Workload,
    peers: Sequence[PeerEntry],
    plans: Sequence[ServicePlan],
    settings: GlobalSettings,
    global_warnings: Sequence[Rejection],
) -> tuple[SnapshotContent, list[Rejection]]:
    """The workload's snapshot, serialized in field order, and the lost-claim rejections."""
    mine = [p for p in plans if p.workloads is None or workload.short_ref in p.workloads]
    head = pb.Snapshot(workload=workload.key)
    head.peers.name = PEER_SECTION
    head.peers.port = settings.peer_port
    for peer in peers:
        head.peers.peers.add(name=peer.name, address=peer.address, port=settings.peer_port)
    tail, lost = frontends(mine, settings)
    tail.warnings.extend(r.to_proto() for r in global_warnings)

    # Warnings this snapshot adds to a backend: Service-wide ones go on the Service's
    # first backend, lost claims on the claiming backend.
    added: dict[str, tuple[Rejection, ...]] = {}
    for plan in mine:
        if plan.service_warnings and plan.backends:
            added[plan.backends[0].name] = plan.service_warnings
    for name, rejections in lost.items():
        added[name] = (*added.get(name, ()), *rejections)
    backends = sorted((part for plan in mine for part in plan.backends), key=_part_name)
    parts = [head.SerializeToString(deterministic=True)]
    parts.extend(
        part.framed if part.name not in added else _reframed(part, added[part.name])
        for part in backends
    )
    warning_count = len(global_warnings) + sum(len(part.warnings) for part in backends)
    warning_count += sum(len(rejections) for rejections in added.values())
    parts.append(tail.SerializeToString(deterministic=True))
    payload = b"".join(parts)
    content = SnapshotContent(
        workload=workload.key,
        content_hash=hashlib.sha256(payload).hexdigest(),
        payload=payload,
        peers=len(peers),
        backends=len(backends),
        warnings=warning_count,
    )
    return content, [r for rs in lost.values() for r in rs]
