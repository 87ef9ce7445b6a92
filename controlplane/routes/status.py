"""The status documents of the route objects: what the Lease holder writes (pure).

`route_statuses` gives, for every object peerplane answers for, the whole `status` body:
our GatewayClasses (Accepted), our Gateways (Accepted, Programmed, each listener's
conditions and attachedRoutes, the addresses: `spec.addresses` when given, else the
serving workload's HAProxy pod IPs), each HTTPRoute, TLSRoute and TCPRoute naming one
of our Gateways (one `parents[]` entry per such parentRef, with Accepted and
ResolvedRefs) and each Ingress of our classes (`loadBalancer.ingress`). Conditions carry
no lastTransitionTime: the writer keeps the old time when status and reason are
unchanged, else sets now. An HTTPRoute's entries for other controllers' parents are not
ours: the writer keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.compute.settings import Resolver
from controlplane.compute.workloads import DEFAULT_SCOPE, WorkloadScope, discover
from controlplane.model import GATEWAY_GROUP, ClusterState, ParentRef
from controlplane.routes import names, protocols
from controlplane.routes.httproute import ParentOutcome
from controlplane.routes.placement import GatewayPlace, ListenerPlace, Verdict
from controlplane.routes.table import RouteTable, compute_routes


@dataclass(frozen=True, slots=True, order=True)
class StatusKey:
    group: str  # "gateway.networking.k8s.io" or "networking.k8s.io"
    kind: str
    namespace: str  # "" when cluster-scoped
    name: str


def condition(kind: str, verdict: Verdict, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if verdict.ok else "False",
        "reason": verdict.reason,
        "message": verdict.message,
        "observedGeneration": generation,
    }


def workload_addresses(state: ClusterState, scope: WorkloadScope) -> dict[str, tuple[str, ...]]:
    """Each workload's ("namespace/name") HAProxy pod IPs, sorted."""
    found = discover(state.haproxy_pods, state.replica_sets, [], scope)
    return {
        workload.short_ref: tuple(sorted(peer.address for peer in peers))
        for workload, peers in found.peers.items()
    }


def _parent_ref(ref: ParentRef) -> dict[str, Any]:
    written: dict[str, Any] = {"group": ref.group, "kind": ref.kind, "name": ref.name}
    if ref.namespace:
        written["namespace"] = ref.namespace
    if ref.section_name:
        written["sectionName"] = ref.section_name
    if ref.port:
        written["port"] = ref.port
    return written


def _listener(
    lp: ListenerPlace, gateway_ok: bool, attached: int, generation: int
) -> dict[str, Any]:
    accepted = lp.accepted
    programmed = Verdict(True, names.PROGRAMMED, "listener programmed")
    if not accepted.ok:
        programmed = Verdict(False, names.INVALID, accepted.message)
    elif not lp.resolved.ok and not lp.usable:  # some bad certificateRefs: still served
        programmed = Verdict(False, names.INVALID, lp.resolved.message)
    elif lp.conflict:
        programmed = Verdict(False, names.INVALID, lp.conflict)
    elif not gateway_ok:
        programmed = Verdict(False, names.INVALID, "Gateway not accepted")
    supported = [{"group": g, "kind": k} for g, k in protocols.route_kinds(lp.listener)]
    conflicted = (
        Verdict(True, names.PROTOCOL_CONFLICT, lp.conflict)
        if lp.conflict
        else Verdict(False, "NoConflicts", "no conflict")
    )
    return {
        "name": lp.listener.name,
        "supportedKinds": supported,
        "attachedRoutes": attached,
        "conditions": [
            condition(names.ACCEPTED, accepted, generation),
            condition(names.PROGRAMMED, programmed, generation),
            condition(names.RESOLVED_REFS, lp.resolved, generation),
            condition(names.CONFLICTED, conflicted, generation),
        ],
    }


def _gateway(
    place: GatewayPlace, attached: Mapping[str, int], addresses: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    gateway = place.gateway
    generation = gateway.generation
    ok = place.accepted.ok
    programmed = (
        Verdict(True, names.PROGRAMMED, f"served by HAProxy workload {place.workload}")
        if ok
        else Verdict(False, names.INVALID, place.accepted.message)
    )
    if gateway.addresses:
        listed = [{"type": a.type, "value": a.value} for a in gateway.addresses]
    else:
        listed = [{"type": "IPAddress", "value": ip} for ip in addresses.get(place.workload, ())]
    return {
        "addresses": listed if ok else [],
        "conditions": [
            condition(names.ACCEPTED, place.accepted, generation),
            condition(names.PROGRAMMED, programmed, generation),
        ],
        "listeners": [
            _listener(lp, ok, attached.get(lp.listener.name, 0), generation)
            for lp in place.listeners
        ],
    }


def _route_parents(
    parents: Sequence[ParentOutcome],
    generation: int,
    attached: dict[tuple[str, str], dict[str, int]],
) -> dict[str, Any]:
    """A route's status (HTTPRoute, TLSRoute, TCPRoute): one entry per parentRef naming one
    of our Gateways; counts the listeners it attached to in `attached`."""
    written = []
    for parent in parents:
        counts = attached.setdefault(parent.gateway, {})
        for listener in parent.listeners:
            counts[listener] = counts.get(listener, 0) + 1
        written.append(
            {
                "parentRef": _parent_ref(parent.ref),
                "controllerName": names.GATEWAY_CONTROLLER,
                "conditions": [
                    condition(names.ACCEPTED, parent.accepted, generation),
                    condition(names.RESOLVED_REFS, parent.resolved, generation),
                ],
            }
        )
    return {"parents": written}


def route_statuses(
    state: ClusterState,
    scope: WorkloadScope = DEFAULT_SCOPE,
    table: RouteTable | None = None,
    now: float = 0.0,
) -> dict[StatusKey, dict[str, Any]]:
    """Every status body peerplane writes, by object. `table`: the route table compute
    made of `state` (computed here at `now`, compute's clock, when not given)."""
    addresses = workload_addresses(state, scope)
    if table is None:
        ports = Resolver(state.settings).global_settings([])
        table = compute_routes(
            state,
            list(addresses),
            ports.http_port,
            ports.peer_port,
            https_port=ports.https_port,
            accept_proxy=ports.accept_proxy,
            now=now,
        )
    placement = table.placement
    out: dict[StatusKey, dict[str, Any]] = {}
    by_class = {c.name: c for c in state.gateway_classes}
    for name, verdict in placement.classes.items():
        generation = by_class[name].generation
        out[StatusKey(GATEWAY_GROUP, "GatewayClass", "", name)] = {
            "conditions": [condition(names.ACCEPTED, verdict, generation)]
        }
    attached: dict[tuple[str, str], dict[str, int]] = {}
    by_route = {(r.namespace, r.name): r for r in state.http_routes}
    for key, outcome in table.routes.items():
        out[StatusKey(GATEWAY_GROUP, "HTTPRoute", *key)] = _route_parents(
            outcome.parents, by_route[key].generation, attached
        )
    generations = {("TLSRoute", r.namespace, r.name): r.generation for r in state.tls_routes}
    generations.update({("TCPRoute", r.namespace, r.name): r.generation for r in state.tcp_routes})
    for (kind, namespace, name), l4_outcome in table.l4.routes.items():
        out[StatusKey(GATEWAY_GROUP, kind, namespace, name)] = _route_parents(
            l4_outcome.parents, generations[kind, namespace, name], attached
        )
    for key, place in placement.gateways.items():
        out[StatusKey(GATEWAY_GROUP, "Gateway", *key)] = _gateway(
            place, attached.get(key, {}), addresses
        )
    for key, found in table.ingresses.items():
        ips = addresses.get(found.workload, ()) if found.workload else ()
        out[StatusKey("networking.k8s.io", "Ingress", *key)] = {
            "loadBalancer": {"ingress": [{"ip": ip} for ip in ips]} if ips else {}
        }
    return dict(sorted(out.items()))
