"""The status documents of the route objects: what the Lease holder writes (pure).

`route_statuses` gives, for every object peerplane answers for, the whole `status` body:
our GatewayClasses (Accepted), our Gateways (Accepted, Programmed, each listener's
conditions and attachedRoutes, the addresses the serving workload publishes, see
`routes.addresses`), each HTTPRoute, TLSRoute and TCPRoute naming one
of our Gateways (one `parents[]` entry per such parentRef, with Accepted and
ResolvedRefs, and PartiallyInvalid when some of its rules are dropped), each Ingress of
our classes (`loadBalancer.ingress`: its workload's addresses) and each
SourceIPPersistencePolicy (`ancestors`: one entry per targetRef, the targeted Service as
ancestor, with Accepted; `settings.policies`). Conditions carry
no lastTransitionTime: the writer keeps the old time when status and reason are
unchanged, else sets now. An HTTPRoute's entries for other controllers' parents are not
ours: the writer keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.model import (
    GATEWAY_GROUP,
    POLICY_GROUP,
    ClusterState,
    ParentRef,
    Pod,
    PolicyTargetRef,
)
from controlplane.routes import names, protocols
from controlplane.routes.addresses import (
    Published,
    gateway_addresses,
    ingress_entries,
    published_addresses,
)
from controlplane.routes.httproute import ParentOutcome
from controlplane.routes.placement import GatewayPlace, ListenerPlace, Verdict
from controlplane.routes.table import RouteTable, compute_routes
from controlplane.settings.policies import POLICY_KIND, PolicyOutcome, resolve_policies
from controlplane.settings.resolver import Resolver
from controlplane.settings.workloads import DEFAULT_SCOPE, WorkloadScope, discover


@dataclass(frozen=True, slots=True, order=True)
class StatusKey:
    group: str  # "gateway.networking.k8s.io", "networking.k8s.io" or "peerplane.dev"
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


def workload_addresses(state: ClusterState, scope: WorkloadScope) -> dict[str, Published]:
    """Each workload's ("namespace/name") published addresses (`routes.addresses`)."""
    found = discover(state.haproxy_pods, state.replica_sets, [], scope)
    short = {workload.key: workload.short_ref for workload in found.peers}
    pods: dict[str, list[Pod]] = {ref: [] for ref in short.values()}
    for pod in state.haproxy_pods:
        key = found.pod_workloads.get(f"{pod.namespace}/{pod.name}")
        if key is not None:
            pods[short[key]].append(pod)
    publish = Resolver(state.settings).publish_services()
    return published_addresses(pods, state.services, publish)


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
    lp: ListenerPlace, gateway_ok: bool, attached: int, generation: int, tls_conflict: str = ""
) -> dict[str, Any]:
    """A listener's status; `tls_conflict`: why some SNI names of its certificates are
    refused (Conflicted, HostnameConflict; it is still programmed with the others)."""
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
    if lp.conflict:
        conflicted = Verdict(True, lp.conflict_reason, lp.conflict)
    elif tls_conflict:
        conflicted = Verdict(True, names.HOSTNAME_CONFLICT, tls_conflict)
    else:
        conflicted = Verdict(False, "NoConflicts", "no conflict")
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


def gateway_document(
    place: GatewayPlace,
    attached: Mapping[str, int],
    addresses: Mapping[str, Published],
    tls_conflicts: Mapping[tuple[str, str, str], str],
) -> dict[str, Any]:
    gateway = place.gateway
    generation = gateway.generation
    ok = place.accepted.ok
    workload = place.serving_workload
    published = addresses.get(workload) or Published((), f"workload {workload}")
    given = gateway_addresses(gateway.addresses, published, place.own)
    if not ok:
        programmed = Verdict(False, names.INVALID, place.accepted.message)
    elif given.problem is not None:
        programmed = Verdict(False, given.problem.reason, given.problem.message)
    else:
        served = f"served by HAProxy workload {workload}"
        own = place.own
        if own is not None and own.address:
            served += f" on its own address {own.address}"
        elif own is not None and own.why_none:
            served += f" on the workload's addresses: {own.why_none}"
        programmed = Verdict(True, names.PROGRAMMED, served)
    listed = [{"type": a.type, "value": a.value} for a in given.addresses] if ok else []
    return {
        "addresses": listed,
        "conditions": [
            condition(names.ACCEPTED, place.accepted, generation),
            condition(names.PROGRAMMED, programmed, generation),
        ],
        "listeners": [
            _listener(
                lp,
                ok,
                attached.get(lp.listener.name, 0),
                generation,
                tls_conflicts.get((gateway.namespace, gateway.name, lp.listener.name), ""),
            )
            for lp in place.listeners
        ],
    }


def _count_attached(
    parents: Sequence[ParentOutcome], attached: dict[tuple[str, str], dict[str, int]]
) -> None:
    """Count in `attached` the listeners each parentRef attached to (Gateway status)."""
    for parent in parents:
        counts = attached.setdefault(parent.gateway, {})
        for listener in parent.listeners:
            counts[listener] = counts.get(listener, 0) + 1


def route_parents_document(parents: Sequence[ParentOutcome], generation: int) -> dict[str, Any]:
    """A route's status (HTTPRoute, TLSRoute, TCPRoute): one entry per parentRef naming one
    of our Gateways."""
    written = []
    for parent in parents:
        conditions = [
            condition(names.ACCEPTED, parent.accepted, generation),
            condition(names.RESOLVED_REFS, parent.resolved, generation),
        ]
        if parent.partially_invalid is not None:
            conditions.append(
                condition(names.PARTIALLY_INVALID, parent.partially_invalid, generation)
            )
        written.append(
            {
                "parentRef": _parent_ref(parent.ref),
                "controllerName": names.GATEWAY_CONTROLLER,
                "conditions": conditions,
            }
        )
    return {"parents": written}


def _ancestor_ref(namespace: str, target: PolicyTargetRef) -> dict[str, Any]:
    written: dict[str, Any] = {
        "group": target.group,
        "kind": target.kind,
        "namespace": namespace,
        "name": target.name,
    }
    if target.section_name:
        written["sectionName"] = target.section_name
    return written


def policy_status(outcome: PolicyOutcome) -> dict[str, Any]:
    """A policy's status: one `ancestors` entry per targetRef (the targeted object as its
    ancestor, at most 16 as the CRD's targetRefs), with its Accepted condition."""
    policy = outcome.policy
    ancestors = []
    seen: set[PolicyTargetRef] = set()
    for target in outcome.targets:
        if target.target in seen:  # a repeated targetRef: one entry (the list's map key)
            continue
        seen.add(target.target)
        verdict = Verdict(target.accepted, target.reason, target.message)
        ancestors.append(
            {
                "ancestorRef": _ancestor_ref(policy.namespace, target.target),
                "controllerName": names.GATEWAY_CONTROLLER,
                "conditions": [condition(names.ACCEPTED, verdict, policy.generation)],
            }
        )
    return {"ancestors": ancestors}


class StatusMemo:
    """Route status bodies kept by their outcome's identity and the route's generation:
    the route table keeps an unchanged route's outcome object, so with thousands of routes
    a change builds the bodies of the routes it touched, and hands the others' very same
    dicts (the writer compares them by identity first). One per writer; not thread-safe."""

    def __init__(self) -> None:
        self._bodies: dict[int, tuple[object, int, dict[str, Any]]] = {}
        self._next: dict[int, tuple[object, int, dict[str, Any]]] = {}
        self.built = 0  # bodies built (not reused) by the last call, for tests

    def start(self) -> None:
        self._next, self.built = {}, 0

    def body(
        self, outcome: object, parents: Sequence[ParentOutcome], generation: int
    ) -> dict[str, Any]:
        hit = self._bodies.get(id(outcome))
        if hit is None or hit[0] is not outcome or hit[1] != generation:
            hit = (outcome, generation, route_parents_document(parents, generation))
            self.built += 1
        self._next[id(outcome)] = hit
        return hit[2]

    def finish(self) -> None:
        """Keep the bodies of this call's outcomes only."""
        self._bodies, self._next = self._next, {}


def _sort_key(item: tuple[StatusKey, Any]) -> tuple[str, str, str, str]:
    key = item[0]
    return (key.group, key.kind, key.namespace, key.name)


def route_statuses(
    state: ClusterState,
    scope: WorkloadScope = DEFAULT_SCOPE,
    table: RouteTable | None = None,
    now: float = 0.0,
    memo: StatusMemo | None = None,
) -> dict[StatusKey, dict[str, Any]]:
    """Every status body peerplane writes, by object. `table`: the route table compute
    made of `state` (computed here at `now`, compute's clock, when not given). `memo`:
    the caller's across calls, so unchanged routes' bodies are not built again."""
    memo = memo or StatusMemo()
    memo.start()
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
    out: dict[StatusKey, dict[str, Any]] = {}
    attached: dict[tuple[str, str], dict[str, int]] = {}
    by_route = {
        (type(r).__name__, r.namespace, r.name): r.generation
        for r in (*state.http_routes, *state.grpc_routes)
    }
    for route_key, outcome in table.routes.items():
        _count_attached(outcome.parents, attached)
        out[StatusKey(GATEWAY_GROUP, *route_key)] = memo.body(
            outcome, outcome.parents, by_route[route_key]
        )
    generations = {("TLSRoute", r.namespace, r.name): r.generation for r in state.tls_routes}
    generations.update({("TCPRoute", r.namespace, r.name): r.generation for r in state.tcp_routes})
    for (kind, namespace, name), l4_outcome in table.l4.routes.items():
        _count_attached(l4_outcome.parents, attached)
        out[StatusKey(GATEWAY_GROUP, kind, namespace, name)] = memo.body(
            l4_outcome, l4_outcome.parents, generations[kind, namespace, name]
        )
    memo.finish()
    out.update(non_route_documents(state, table, attached, addresses))
    return dict(sorted(out.items(), key=_sort_key))


def non_route_documents(
    state: ClusterState,
    table: RouteTable,
    attached: Mapping[tuple[str, str], Mapping[str, int]],
    addresses: Mapping[str, Published],
) -> dict[StatusKey, dict[str, Any]]:
    """Every GatewayClass, Gateway, Ingress and policy document: `attached`, the routes
    counted per Gateway listener; `addresses`, each workload's published addresses."""
    made: dict[StatusKey, dict[str, Any]] = {}
    placement = table.placement
    by_class = {c.name: c for c in state.gateway_classes}
    for name, verdict in placement.classes.items():
        made[StatusKey(GATEWAY_GROUP, "GatewayClass", "", name)] = {
            "conditions": [condition(names.ACCEPTED, verdict, by_class[name].generation)]
        }
    for key, place in placement.gateways.items():
        made[StatusKey(GATEWAY_GROUP, "Gateway", *key)] = gateway_document(
            place, attached.get(key, {}), addresses, table.tls_conflicts
        )
    for key, found in table.ingresses.items():
        published = addresses.get(found.workload) if found.workload else None
        entries = ingress_entries(published)
        made[StatusKey("networking.k8s.io", "Ingress", *key)] = {
            "loadBalancer": {"ingress": entries} if entries else {}
        }
    if state.source_ip_persistence_policies:
        services = {(s.namespace, s.name): s for s in state.services}
        policies = resolve_policies(state.source_ip_persistence_policies, services)
        for policy_outcome in policies.outcomes:
            policy = policy_outcome.policy
            status_key = StatusKey(POLICY_GROUP, POLICY_KIND, policy.namespace, policy.name)
            made[status_key] = policy_status(policy_outcome)
    return made
