"""The route table's stages, in order: each reads what the stages before it found (`Build`)
and adds its part.

1. Gateway listeners: each workload's HTTP ports and the hostnames its listeners hold.
2. Gateway certificates: the HTTPS listeners' certificates (`crtlist.bind_gateways`).
3. HTTPRoutes and GRPCRoutes: each route's outcome (reused while nothing it reads changed), its
   candidates and the Services it routes to.
4. Ingresses: the same for each Ingress of our classes, oldest first, with its TLS and
   its defaultBackend (the oldest sets it).
5. Workload listeners: per workload, the hostnames each port's namespace holds
   (`ownership.py`), the listeners built from the candidates kept and their certificates;
   a Gateway with an address of its own is a lane of its workload (`placement.lane`),
   built apart, bound to its address, then joined into the workload's table.
6. Hostnames not held: an HTTPRoute none of whose candidates a workload kept is not
   accepted there.
7. TLS and TCP routes: `l4.l4_table`, given the HTTP listeners.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.model import ClusterState, GRPCRoute, HTTPRoute, ReferenceGrant, Service
from controlplane.routes import names, protocols
from controlplane.routes.backends import ServiceKey
from controlplane.routes.crtlist import Edge, WorkloadTLS, bind_gateways, bind_ingress
from controlplane.routes.httproute import RouteOutcome, route_outcome
from controlplane.routes.ingress import IngressOutcome, ingress_outcome
from controlplane.routes.l4 import EMPTY_TABLE as EMPTY_L4
from controlplane.routes.l4 import L4Table, l4_table
from controlplane.routes.l4 import Memo as L4Memo
from controlplane.routes.ownership import ANY_HOST, Claim, Holding, resolve
from controlplane.routes.persistence import Persisted, backend_persistence
from controlplane.routes.placement import (
    LANE_SEPARATOR,
    Placement,
    Verdict,
    lane_workload,
    listener_claim,
)
from controlplane.routes.precedence import Candidate, Origin, Refusals, listeners
from controlplane.routes.table_types import Memo, RouteTable, WorkloadRoutes
from controlplane.snapshot import Certificate, RejectedInput


@dataclass(slots=True)
class _Workload:
    """One workload's part of the table while the stages build it."""

    candidates: list[Candidate] = field(default_factory=list)
    defaults: dict[int, str] = field(default_factory=dict)
    default_owner: dict[int, str] = field(default_factory=dict)
    rejections: list[RejectedInput] = field(default_factory=list)
    https: bool = False  # an Ingress is served on the https port
    # Claims besides the candidates': listener hostnames, Ingress defaultBackends; by port,
    # with the object a refusal is reported on.
    claims: list[tuple[int, Claim, Origin]] = field(default_factory=list)


def _of(per: dict[str, _Workload], workload: str) -> _Workload:
    """`per[workload]`, made when missing (setdefault would build one every call: a
    dataclass of five containers, thousands of times per route change)."""
    found = per.get(workload)
    if found is None:
        found = per[workload] = _Workload()
    return found


def _add(demand: dict[ServiceKey, set[str]], service: ServiceKey, workload: str) -> None:
    if LANE_SEPARATOR in workload:  # a Gateway's lane: its workload routes the Service
        workload = lane_workload(workload)[0]
    found = demand.get(service)
    if found is None:
        demand[service] = {workload}
    else:
        found.add(workload)


@dataclass(frozen=True, slots=True)
class Held:
    """What `workload_listeners` decided for one workload, kept when the build is traced
    (`Build.trace`) so that a route change can update the table (`table_update.py`): its
    candidates, each port's holding, the refusals `_hold` reported, its own rejections'
    count, its ports' default backends, whether it binds certificates, and where its
    conflicts start in the table's rejections."""

    candidates: tuple[Candidate, ...]
    claims: tuple[tuple[int, Claim, Origin], ...]  # its listeners' and defaultBackends'
    holdings: dict[int, Holding]
    refusals: tuple[RejectedInput, ...]
    certificates: tuple[RejectedInput, ...]  # what binding certificates reported
    own: int  # len(mine.rejections): its table's rejections start with them
    routes_from: int  # where the routes' rejections start in them
    defaults: dict[int, str]
    at: int  # index of its first conflict in `Build.rejections`


@dataclass(slots=True)
class Trace:
    """What a build decided that a route change updates the table from
    (`table_update.py`): each workload's `Held`, and where the HTTPRoutes' and GRPCRoutes'
    rejections start in the table's rejections and in each workload's (0 for a workload
    the HTTPRoutes stage did not find)."""

    workloads: dict[str, Held] = field(default_factory=dict)
    routes_from: int = 0
    routes_from_of: dict[str, int] = field(default_factory=dict)
    # When a workload has lanes: every workload's and lane's table before the lanes were
    # joined (`join_lanes`), by the keys of `workloads`; {} without lanes.
    parts: dict[str, WorkloadRoutes] = field(default_factory=dict)


@dataclass(slots=True)
class Build:
    """What the stages read (the inputs) and what they found so far."""

    state: ClusterState
    workloads: Collection[str]
    http_port: int
    services: Mapping[ServiceKey, Service]
    edge: Edge
    placement: Placement
    memo: Memo | None = None  # filled with this table's HTTPRoute outcomes
    reuse: Memo | None = None  # the last table's, reused while what they read is unchanged
    l4_memo: L4Memo | None = None
    l4_reuse: L4Memo | None = None
    grants: dict[str, tuple[ReferenceGrant, ...]] = field(default_factory=dict)
    per: dict[str, _Workload] = field(default_factory=dict)
    rejections: list[RejectedInput] = field(default_factory=list)
    tls_of: dict[str, WorkloadTLS] = field(default_factory=dict)
    demand: dict[ServiceKey, set[str]] = field(default_factory=dict)
    routes: dict[tuple[str, str, str], RouteOutcome] = field(default_factory=dict)
    ingresses: dict[tuple[str, str], IngressOutcome] = field(default_factory=dict)
    tables: dict[str, WorkloadRoutes] = field(default_factory=dict)
    tls_conflicts: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # HTTPRoute or GRPCRoute (kind, namespace, name) -> workload -> why none of its
    # candidates is kept there.
    refused_routes: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    # The backends GRPCRoutes reach, by Service: they speak HTTP/2 (`compute/protocol.py`).
    h2_names: dict[ServiceKey, set[str]] = field(default_factory=dict)
    l4: L4Table = EMPTY_L4
    persistence: Persisted = field(default_factory=dict)
    # Filled when not None: what a route change updates the table from.
    trace: Trace | None = None

    def table(self) -> RouteTable:
        return RouteTable(
            placement=self.placement,
            routes=self.routes,
            ingresses=self.ingresses,
            workloads=self.tables,
            demand={service: frozenset(found) for service, found in self.demand.items()},
            rejections=tuple(self.rejections),
            tls_conflicts=self.tls_conflicts,
            l4=self.l4,
            h2_names={key: frozenset(found) for key, found in self.h2_names.items()},
            persistence=self.persistence,
        )


def gateway_listeners(build: Build) -> None:
    """Each workload's HTTP ports (no default backend yet) and its listeners' hostnames
    as claims on their port."""
    per = build.per
    for gateway_place in build.placement.gateways.values():
        if gateway_place.workload:
            mine = _of(per, gateway_place.workload)
            for index, lp in enumerate(gateway_place.listeners):
                if lp.usable and lp.listener.protocol in protocols.HTTP_PROTOCOLS:
                    mine.defaults.setdefault(lp.listener.port, "")
                if lp.holds_hostname and lp.listener.protocol in protocols.HTTP_PROTOCOLS:
                    gateway = lp.gateway
                    origin = Origin.listener_hostname(gateway.namespace, gateway.name, index)
                    mine.claims.append((lp.listener.port, listener_claim(lp), origin))


def gateway_certificates(build: Build) -> None:
    """The HTTPS listeners' certificates by workload, and what binding them refused."""
    build.tls_of, told = bind_gateways(build.placement)
    for workload, rejection in told:
        _of(build.per, workload).rejections.append(rejection)
        build.rejections.append(rejection)


def http_routes(build: Build) -> None:
    """Each HTTPRoute's and GRPCRoute's outcome (the last one while the route is the same
    object and the memo is reused), its candidates by workload and the Services it routes
    to."""
    per, reuse, memo = build.per, build.reuse, build.memo
    if build.trace is not None:  # where the routes' rejections start
        build.trace.routes_from = len(build.rejections)
        build.trace.routes_from_of = {w: len(mine.rejections) for w, mine in per.items()}
    # Sorted: each object's outcome is its own, but rejections list in one order.
    state = build.state
    routes: list[HTTPRoute | GRPCRoute] = [*state.http_routes, *state.grpc_routes]
    for route in sorted(routes, key=lambda r: (r.namespace, r.name, type(r).__name__)):
        kept = reuse.get(id(route)) if reuse is not None else None
        if kept is not None and kept[0] is route:
            outcome = kept[1]
        else:
            outcome = route_outcome(route, build.placement, build.services, build.grants)
        if memo is not None:
            memo[id(route)] = (route, outcome)
        if outcome is None:
            continue
        build.routes[type(route).__name__, route.namespace, route.name] = outcome
        if outcome.rejections:  # most routes have none: their workloads are not looked at
            build.rejections.extend(outcome.rejections)
            for workload in outcome.workloads:
                _of(per, workload).rejections.extend(outcome.rejections)
        for workload, candidates in outcome.candidates.items():
            _of(per, workload).candidates.extend(candidates)
        for service, workload in outcome.demand:
            _add(build.demand, service, workload)
        for service, backend in outcome.h2:
            build.h2_names.setdefault(service, set()).add(backend)


def ingresses(build: Build) -> None:
    """Each Ingress of our classes, oldest first: its candidates on the http port (and
    the https port with spec.tls), its certificates, and its defaultBackend (the oldest
    Ingress of a workload sets it; the others are reported)."""
    http_port, edge, rejections = build.http_port, build.edge, build.rejections
    by_age = sorted(
        build.state.ingresses, key=lambda i: (i.creation_timestamp or "~", i.namespace, i.name)
    )
    for ingress in by_age:
        found = ingress_outcome(ingress, build.placement, build.services, http_port)
        if found is None:
            continue
        build.ingresses[ingress.namespace, ingress.name] = found
        rejections.extend(found.rejections)
        if not found.workload:
            continue
        mine = _of(build.per, found.workload)
        mine.rejections.extend(found.rejections)
        mine.candidates.extend(found.candidates)
        mine.defaults.setdefault(http_port, "")
        tls = build.tls_of.setdefault(found.workload, WorkloadTLS())
        https, told_tls = bind_ingress(ingress, edge, http_port, tls)
        mine.rejections.extend(told_tls)
        rejections.extend(told_tls)
        if https:  # spec.tls: the rules on the https port too
            port = edge.https_port
            mine.candidates.extend(dataclasses.replace(c, port=port) for c in found.candidates)
            mine.defaults.setdefault(port, "")
            mine.https = True
        for service in found.demand:
            _add(build.demand, service, found.workload)
        if ingress.default_backend is None:
            continue
        owner = mine.default_owner.get(http_port)
        if owner is None:
            mine.defaults[http_port] = found.default_backend
            mine.default_owner[http_port] = f"Ingress {ingress.namespace}/{ingress.name}"
            origin = Origin("Ingress", ingress.namespace, ingress.name, "spec.defaultBackend")
            age = ingress.creation_timestamp or "~"
            holder = f"Ingress {ingress.namespace}/{ingress.name} defaultBackend"
            ports = (http_port, edge.https_port) if https else (http_port,)
            for port in ports:
                mine.claims.append((port, Claim(age, ingress.namespace, holder, ANY_HOST), origin))
        else:
            lost = Origin("Ingress", ingress.namespace, ingress.name, "spec.defaultBackend")
            rejection = lost.rejection(
                ingress.default_backend.service_name,
                f"the older {owner} sets the default backend; ignored",
            )
            mine.rejections.append(rejection)
            rejections.append(rejection)


def workload_listeners(build: Build) -> None:
    """Per workload: the candidates whose hostname their namespace holds, the listeners
    built of them (`precedence.listeners`), and the certificates they bind."""
    http_port, edge = build.http_port, build.edge
    default_certificate = edge.default_certificate()
    for workload in sorted(build.per):
        mine = build.per[workload]
        if mine.https and http_port in mine.default_owner:
            mine.defaults[edge.https_port] = mine.defaults[http_port]
        conflicts: list[RejectedInput] = []
        unheld: dict[tuple[str, str, str], str] = {}
        candidates, closed, holdings = _hold(mine, conflicts, unheld)
        refused = len(conflicts)
        for key, why in unheld.items():
            build.refused_routes.setdefault(key, {})[workload] = why
        built = listeners(candidates, mine.defaults, conflicts)
        if closed:
            built = tuple(
                dataclasses.replace(b, closed_hosts=closed[b.port]) if closed.get(b.port) else b
                for b in built
            )
        certificates: tuple[Certificate, ...] = ()
        crt_lists = build.tls_of.get(workload)
        ordered = len(conflicts)
        if crt_lists is not None:
            built = crt_lists.apply(built, conflicts, default_certificate)
            certificates = crt_lists.bound(built)
            build.tls_conflicts.update(crt_lists.conflicts)
        if build.trace is not None:
            build.trace.workloads[workload] = Held(
                tuple(mine.candidates),
                tuple(mine.claims),
                holdings,
                tuple(conflicts[:refused]),
                tuple(conflicts[ordered:]),
                len(mine.rejections),
                build.trace.routes_from_of.get(workload, 0),
                dict(mine.defaults),
                len(build.rejections),
            )
        build.rejections.extend(conflicts)
        address = lane_workload(workload)[1]
        if address:
            built = tuple(dataclasses.replace(b, address=address) for b in built)
        build.tables[workload] = WorkloadRoutes(built, (*mine.rejections, *conflicts), certificates)
    joined = _joined_lanes(build.tables)
    if build.trace is not None and joined is not build.tables:
        build.trace.parts = build.tables
    build.tables = joined


def lane_parts(keys: Collection[str]) -> dict[str, tuple[str, ...]]:
    """The workloads that have lanes (keys `namespace/name@address`, `placement.lane`),
    each with its keys among `keys` in the order they are joined (sorted: its own
    first)."""
    parts: dict[str, list[str]] = {}
    for key in sorted(keys):
        parts.setdefault(lane_workload(key)[0], []).append(key)
    return {
        workload: tuple(found)
        for workload, found in parts.items()
        if len(found) > 1 or workload not in keys
    }


def join_lanes(found: Sequence[WorkloadRoutes]) -> WorkloadRoutes:
    """One workload's table joined from its own and its lanes' (in `lane_parts` order):
    listeners by (port, address), rejections once each, certificates by name."""
    listeners = sorted(
        (li for part in found for li in part.listeners), key=lambda li: (li.port, li.address)
    )
    rejections = dict.fromkeys(r for part in found for r in part.rejections)
    certificates = {c.name: c for part in found for c in part.certificates}
    return WorkloadRoutes(
        tuple(listeners),
        tuple(rejections),
        tuple(certificates[name] for name in sorted(certificates)),
    )


def _joined_lanes(tables: dict[str, WorkloadRoutes]) -> dict[str, WorkloadRoutes]:
    """Each workload's table with its lanes' (its Gateways of their own addresses)
    joined in (`join_lanes`); `tables` itself when no workload has lanes."""
    if not any(LANE_SEPARATOR in key for key in tables):
        return tables
    joined = {lane_workload(key)[0]: tables[key] for key in sorted(tables)}  # no lanes: as is
    for workload, keys in lane_parts(tables).items():
        joined[workload] = join_lanes([tables[key] for key in keys])
    return joined


def hostnames_not_held(build: Build) -> None:
    """An HTTPRoute or GRPCRoute none of whose candidates a workload kept is not accepted
    there."""
    for key, by_workload in build.refused_routes.items():
        build.routes[key] = _not_held(build.routes[key], by_workload)


def session_persistence(build: Build) -> None:
    """Each backend's one session persistence among the rules of the routes accepted
    somewhere (`routes/persistence.py`): a route whose hostnames another namespace holds
    everywhere sets none. A refused claim is reported where its route's are."""
    claims = [
        claim
        for outcome in build.routes.values()
        if outcome.persistence and any(parent.accepted.ok for parent in outcome.parents)
        for claim in outcome.persistence.values()
    ]
    if not claims:
        return
    build.persistence, refused = backend_persistence(claims)
    for rejection in refused:
        build.rejections.append(rejection)
        outcome = build.routes[rejection.kind, rejection.namespace, rejection.name]
        for workload in {lane_workload(w)[0] for w in outcome.workloads}:
            table = build.tables.get(workload)
            if table is not None:
                told = (*table.rejections, rejection)
                build.tables[workload] = dataclasses.replace(table, rejections=told)


def tls_and_tcp_routes(build: Build) -> None:
    """TLSRoutes and TCPRoutes (`l4.l4_table`), given each workload's HTTP listeners."""
    http = {workload: found.listeners for workload, found in build.tables.items()}
    build.l4 = l4_table(
        build.state,
        build.placement,
        build.services,
        build.grants,
        http,
        build.http_port,
        build.l4_memo,
        build.l4_reuse,
    )
    build.rejections.extend(build.l4.rejections)
    for service, workload in build.l4.demand:
        _add(build.demand, service, workload)


Stage = Callable[[Build], None]
STAGES: tuple[tuple[str, Stage], ...] = (
    ("gateway listeners", gateway_listeners),
    ("gateway certificates", gateway_certificates),
    ("HTTPRoutes", http_routes),
    ("Ingresses", ingresses),
    ("workload listeners", workload_listeners),
    ("hostnames not held", hostnames_not_held),
    ("session persistence", session_persistence),
    ("TLS and TCP routes", tls_and_tcp_routes),
)
"""The route table's stages, in the order they run."""


_ROUTE_KINDS = ("HTTPRoute", "GRPCRoute")
"""The kinds whose outcome `hostnames_not_held` may refuse (Ingresses have no parents)."""


def _hold(
    mine: _Workload, rejections: list[RejectedInput], unheld: dict[tuple[str, str, str], str]
) -> tuple[list[Candidate], dict[int, tuple[str, ...]], dict[int, Holding]]:
    """The workload's candidates but those whose hostname another namespace holds on
    their port or a more specific listener of their namespace takes (ownership.py), and
    the hostnames each port closes. A refused claim is reported once per object and
    hostname; a refused defaultBackend is not served; an HTTPRoute none of whose
    candidates is kept goes into `unheld` with why (one none of whose candidates is
    served because more specific listeners take them stays accepted: the spec's rule)."""
    by_port: dict[int, list[Claim]] = {}
    listener_claims: dict[int, list[Claim]] = {}
    for port, claim, origin in mine.claims:
        by_port.setdefault(port, []).append(claim)
        if origin.kind == "Gateway":
            listener_claims.setdefault(port, []).append(claim)
    for candidate in mine.candidates:
        by_port.setdefault(candidate.port, []).append(candidate.claim)
    holdings = {
        port: resolve(claims, listener_claims.get(port, ())) for port, claims in by_port.items()
    }
    report = Refusals(rejections)

    def refuse(origin: Origin, claim: Claim, port: int, outcome: str) -> None:
        report.refuse(origin, holdings[port], claim, port, outcome)

    for port, claim, origin in mine.claims:
        if claim not in holdings[port].refused:
            continue
        if origin.key == "spec.defaultBackend":
            mine.defaults[port] = ""
            mine.default_owner.pop(port, None)
            refuse(origin, claim, port, "the default backend is not served")
        else:
            refuse(origin, claim, port, "this listener is not served for it")
    closed = {port: holding.closed for port, holding in holdings.items() if holding.closed}
    isolating = any(holding.isolating for holding in holdings.values())
    if not isolating and not any(holding.refused for holding in holdings.values()):
        return mine.candidates, closed, holdings  # one namespace per hostname: most tables
    kept: list[Candidate] = []
    served: set[tuple[str, str, str]] = set()
    # a route's rules and matches share their listener and host: each asked once
    shadowed: dict[tuple[int, str, Claim], bool] = {}
    for candidate in mine.candidates:
        origin = candidate.origin
        holding = holdings[candidate.port]
        if candidate.listener is not None:
            asked = (candidate.port, candidate.listener, candidate.claim)
            found = shadowed.get(asked)
            if found is None:
                host, namespace = candidate.claim.host, candidate.claim.namespace
                found = bool(holding.shadowing(candidate.listener, host, namespace))
                shadowed[asked] = found
            if found:
                continue  # a more specific listener of its namespace takes these requests
        if candidate.claim in holding.refused:
            refuse(origin, candidate.claim, candidate.port, "dropped")
            if origin.kind in _ROUTE_KINDS:
                unheld.setdefault(
                    (origin.kind, origin.namespace, origin.name),
                    holding.why(candidate.claim, candidate.port),
                )
        else:
            kept.append(candidate)
            if origin.kind in _ROUTE_KINDS:
                served.add((origin.kind, origin.namespace, origin.name))
    for key in served:
        unheld.pop(key, None)
    return kept, closed, holdings


def _not_held(outcome: RouteOutcome, why: Mapping[str, str]) -> RouteOutcome:
    """`outcome` with its accepted parents on the workloads of `why` not accepted: every
    hostname it serves there is held by another namespace (a copy: the memo keeps the
    outcome as computed)."""
    parents = [
        dataclasses.replace(
            parent,
            accepted=Verdict(
                False, names.HOSTNAME_CONFLICT, f"{why[parent.workload]}; not attached"
            ),
            listeners=(),
        )
        if parent.accepted.ok and parent.workload in why
        else parent
        for parent in outcome.parents
    ]
    return dataclasses.replace(outcome, parents=parents)


def by_namespace(grants: tuple[ReferenceGrant, ...]) -> dict[str, tuple[ReferenceGrant, ...]]:
    found: dict[str, list[ReferenceGrant]] = {}
    for grant in grants:
        found.setdefault(grant.namespace, []).append(grant)
    return {namespace: tuple(items) for namespace, items in found.items()}
