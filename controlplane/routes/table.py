"""Every workload's route table: its HTTP listeners, rejections and routed Services.

Each port's hostnames are held by one namespace (`ownership.py`): the candidates whose
hostname another namespace holds are dropped and reported, and the listeners carry the
hostnames whose lookup ends at their own layer (`closed_hosts`). A Gateway with an address
of its own is a lane of its workload (`placement.lane`): its listeners, hostnames and
crt-lists are computed apart and bound to its address, then joined into the workload's
table.

`compute_routes` is the pure function of the cluster state. `RouteComputer` keeps its last
table and computes again only when a route input changed: the route kinds (compared by
identity first: sources keep unchanged objects), the workloads, the HTTP and peer ports,
the ports of a Service a route looked up, a Secret a listener or an Ingress looked up
(each parsed once per object), or the clock passing a used certificate's start or end.
An endpoint or annotation change costs one comparison per changed Service; an HTTPRoute
change costs that route's outcome (the other routes keep theirs while nothing they read
changed), the grouping and the ordering of the workload's rules (docs/design.md, "The
route model"; tests/bench/route_table.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from controlplane.model import (
    ClusterState,
    HTTPRoute,
    ReferenceGrant,
    Service,
    ServicePort,
    TLSSecret,
)
from controlplane.routes import names, protocols
from controlplane.routes.backends import ServiceKey
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.crtlist import Edge, WorkloadTLS, bind_gateways, bind_ingress
from controlplane.routes.httproute import RouteOutcome, route_outcome
from controlplane.routes.ingress import IngressOutcome, ingress_outcome
from controlplane.routes.l4 import EMPTY_TABLE as EMPTY_L4
from controlplane.routes.l4 import L4Table, l4_table
from controlplane.routes.l4 import Memo as L4Memo
from controlplane.routes.ownership import ANY_HOST, Claim, resolve
from controlplane.routes.placement import (
    LANE_SEPARATOR,
    Placement,
    Verdict,
    lane_workload,
    listener_claim,
    place,
)
from controlplane.routes.precedence import Candidate, Origin, Refusals, listeners
from controlplane.routes.termination import SecretKey, SecretLookup
from controlplane.snapshot import Certificate, HttpListener, RejectedInput


@dataclass(frozen=True, slots=True)
class WorkloadRoutes:
    listeners: tuple[HttpListener, ...] = ()
    rejections: tuple[RejectedInput, ...] = ()
    certificates: tuple[Certificate, ...] = ()  # those the listeners bind, sorted by name

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted({listener.port for listener in self.listeners}))


EMPTY = WorkloadRoutes()


@dataclass(frozen=True, slots=True)
class RouteTable:
    placement: Placement
    routes: Mapping[tuple[str, str], RouteOutcome]  # HTTPRoutes naming one of our Gateways
    ingresses: Mapping[tuple[str, str], IngressOutcome]  # Ingresses of our classes
    workloads: Mapping[str, WorkloadRoutes]  # by workload "namespace/name"
    demand: Mapping[ServiceKey, frozenset[str]]  # routed Service -> workloads serving it
    rejections: tuple[RejectedInput, ...]  # all, workload or not
    # Gateway listener (namespace, name, listener) -> why SNI names of its certificates
    # are refused (another namespace's older binding serves them): its Conflicted status.
    tls_conflicts: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    # TLSRoutes and TCPRoutes: their outcomes, each workload's passthrough listeners and
    # TCP frontends, and the backends to plan in mode tcp (`l4.tcp_names`).
    l4: L4Table = EMPTY_L4

    def of(self, workload: str) -> WorkloadRoutes:
        return self.workloads.get(workload, EMPTY)


class _Recording(Mapping[ServiceKey, Service]):
    """The Services by key, remembering every key looked up (found or not): the only
    Services whose ports the table depends on."""

    def __init__(self, services: Mapping[ServiceKey, Service]) -> None:
        self._services = services
        self.looked: dict[ServiceKey, tuple[ServicePort, ...] | None] = {}

    def __getitem__(self, key: ServiceKey) -> Service:
        found = self._services.get(key)
        self.looked[key] = None if found is None else found.ports
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[ServiceKey]:
        return iter(self._services)

    def __len__(self) -> int:
        return len(self._services)


@dataclass(slots=True)
class _Workload:
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


def _by_namespace(grants: tuple[ReferenceGrant, ...]) -> dict[str, tuple[ReferenceGrant, ...]]:
    found: dict[str, list[ReferenceGrant]] = {}
    for grant in grants:
        found.setdefault(grant.namespace, []).append(grant)
    return {namespace: tuple(items) for namespace, items in found.items()}


Memo = dict[int, tuple[HTTPRoute, RouteOutcome | None]]
"""id(route) -> the route and its outcome: reused while nothing else the outcome reads
(classes, Gateways, grants, namespaces, workloads, ports, looked-up Services) changed."""


def _table(
    state: ClusterState,
    workloads: Collection[str],
    http_port: int,
    peer_port: int,
    services: Mapping[ServiceKey, Service],
    memo: Memo | None = None,
    reuse: Memo | None = None,
    l4_memo: L4Memo | None = None,
    l4_reuse: L4Memo | None = None,
    edge: Edge | None = None,
    placement: Placement | None = None,
) -> RouteTable:
    edge = edge or Edge.of(state)
    if placement is None:
        placement = _place(state, workloads, http_port, peer_port, edge)
    grants = _by_namespace(state.reference_grants)
    per: dict[str, _Workload] = {}
    for gateway_place in placement.gateways.values():
        if gateway_place.workload:
            mine = _of(per, gateway_place.workload)
            for index, lp in enumerate(gateway_place.listeners):
                if lp.usable and lp.listener.protocol in protocols.HTTP_PROTOCOLS:
                    mine.defaults.setdefault(lp.listener.port, "")
                if lp.holds_hostname and lp.listener.protocol in protocols.HTTP_PROTOCOLS:
                    gateway = lp.gateway
                    origin = Origin.listener_hostname(gateway.namespace, gateway.name, index)
                    mine.claims.append((lp.listener.port, listener_claim(lp), origin))
    rejections: list[RejectedInput] = []
    tls_of, told = bind_gateways(placement)
    for workload, rejection in told:
        _of(per, workload).rejections.append(rejection)
        rejections.append(rejection)
    demand: dict[ServiceKey, set[str]] = {}
    routes: dict[tuple[str, str], RouteOutcome] = {}
    # Sorted: each object's outcome is its own, but rejections list in one order.
    for route in sorted(state.http_routes, key=lambda r: (r.namespace, r.name)):
        kept = reuse.get(id(route)) if reuse is not None else None
        if kept is not None and kept[0] is route:
            outcome = kept[1]
        else:
            outcome = route_outcome(route, placement, services, grants)
        if memo is not None:
            memo[id(route)] = (route, outcome)
        if outcome is None:
            continue
        routes[route.namespace, route.name] = outcome
        if outcome.rejections:  # most routes have none: their workloads are not looked at
            rejections.extend(outcome.rejections)
            for workload in outcome.workloads:
                _of(per, workload).rejections.extend(outcome.rejections)
        for workload, candidates in outcome.candidates.items():
            _of(per, workload).candidates.extend(candidates)
        for service, workload in outcome.demand:
            _add(demand, service, workload)
    ingresses: dict[tuple[str, str], IngressOutcome] = {}
    by_age = sorted(
        state.ingresses, key=lambda i: (i.creation_timestamp or "~", i.namespace, i.name)
    )
    for ingress in by_age:
        found = ingress_outcome(ingress, placement, services, http_port)
        if found is None:
            continue
        ingresses[ingress.namespace, ingress.name] = found
        rejections.extend(found.rejections)
        if not found.workload:
            continue
        mine = _of(per, found.workload)
        mine.rejections.extend(found.rejections)
        mine.candidates.extend(found.candidates)
        mine.defaults.setdefault(http_port, "")
        tls = tls_of.setdefault(found.workload, WorkloadTLS())
        https, told_tls = bind_ingress(ingress, edge, http_port, tls)
        mine.rejections.extend(told_tls)
        rejections.extend(told_tls)
        if https:  # spec.tls: the rules on the https port too
            port = edge.https_port
            mine.candidates.extend(dataclasses.replace(c, port=port) for c in found.candidates)
            mine.defaults.setdefault(port, "")
            mine.https = True
        for service in found.demand:
            _add(demand, service, found.workload)
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
    tables: dict[str, WorkloadRoutes] = {}
    default_certificate = edge.default_certificate()
    tls_conflicts: dict[tuple[str, str, str], str] = {}
    refused_routes: dict[tuple[str, str], dict[str, str]] = {}
    for workload in sorted(per):
        mine = per[workload]
        if mine.https and http_port in mine.default_owner:
            mine.defaults[edge.https_port] = mine.defaults[http_port]
        conflicts: list[RejectedInput] = []
        unheld: dict[tuple[str, str], str] = {}
        candidates, closed = _hold(mine, conflicts, unheld)
        for key, why in unheld.items():
            refused_routes.setdefault(key, {})[workload] = why
        built = listeners(candidates, mine.defaults, conflicts)
        if closed:
            built = tuple(
                dataclasses.replace(b, closed_hosts=closed[b.port]) if closed.get(b.port) else b
                for b in built
            )
        certificates: tuple[Certificate, ...] = ()
        crt_lists = tls_of.get(workload)
        if crt_lists is not None:
            built = crt_lists.apply(built, conflicts, default_certificate)
            certificates = crt_lists.bound(built)
            tls_conflicts.update(crt_lists.conflicts)
        rejections.extend(conflicts)
        address = lane_workload(workload)[1]
        if address:
            built = tuple(dataclasses.replace(b, address=address) for b in built)
        tables[workload] = WorkloadRoutes(built, (*mine.rejections, *conflicts), certificates)
    tables = _joined_lanes(tables)
    for key, by_workload in refused_routes.items():
        routes[key] = _not_held(routes[key], by_workload)
    http = {workload: found.listeners for workload, found in tables.items()}
    l4_routes = l4_table(state, placement, services, grants, http, http_port, l4_memo, l4_reuse)
    rejections.extend(l4_routes.rejections)
    for service, workload in l4_routes.demand:
        _add(demand, service, workload)
    return RouteTable(
        placement=placement,
        routes=routes,
        ingresses=ingresses,
        workloads=tables,
        demand={service: frozenset(found) for service, found in demand.items()},
        rejections=tuple(rejections),
        tls_conflicts=tls_conflicts,
        l4=l4_routes,
    )


def _joined_lanes(tables: dict[str, WorkloadRoutes]) -> dict[str, WorkloadRoutes]:
    """Each workload's table with its lanes' (its Gateways of their own addresses)
    joined in: listeners by (port, address), rejections once each, certificates by name."""
    if not any(LANE_SEPARATOR in key for key in tables):
        return tables
    parts: dict[str, list[WorkloadRoutes]] = {}
    for key in sorted(tables):
        parts.setdefault(lane_workload(key)[0], []).append(tables[key])
    joined: dict[str, WorkloadRoutes] = {}
    for workload, found in parts.items():
        if len(found) == 1 and workload in tables:
            joined[workload] = found[0]
            continue
        listeners = sorted(
            (li for part in found for li in part.listeners), key=lambda li: (li.port, li.address)
        )
        rejections = dict.fromkeys(r for part in found for r in part.rejections)
        certificates = {c.name: c for part in found for c in part.certificates}
        joined[workload] = WorkloadRoutes(
            tuple(listeners),
            tuple(rejections),
            tuple(certificates[name] for name in sorted(certificates)),
        )
    return joined


def _hold(
    mine: _Workload, rejections: list[RejectedInput], unheld: dict[tuple[str, str], str]
) -> tuple[list[Candidate], dict[int, tuple[str, ...]]]:
    """The workload's candidates but those whose hostname another namespace holds on
    their port (ownership.py), and the hostnames each port closes. A refused claim is
    reported once per object and hostname; a refused defaultBackend is not served; an
    HTTPRoute none of whose candidates is kept goes into `unheld` with why."""
    by_port: dict[int, list[Claim]] = {}
    for port, claim, _ in mine.claims:
        by_port.setdefault(port, []).append(claim)
    for candidate in mine.candidates:
        by_port.setdefault(candidate.port, []).append(candidate.claim)
    holdings = {port: resolve(claims) for port, claims in by_port.items()}
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
    if not any(holding.refused for holding in holdings.values()):
        return mine.candidates, closed  # one namespace per hostname already: most tables
    kept: list[Candidate] = []
    served: set[tuple[str, str]] = set()
    for candidate in mine.candidates:
        origin = candidate.origin
        holding = holdings[candidate.port]
        if candidate.claim in holding.refused:
            refuse(origin, candidate.claim, candidate.port, "dropped")
            if origin.kind == "HTTPRoute":
                unheld.setdefault(
                    (origin.namespace, origin.name), holding.why(candidate.claim, candidate.port)
                )
        else:
            kept.append(candidate)
            if origin.kind == "HTTPRoute":
                served.add((origin.namespace, origin.name))
    for key in served:
        unheld.pop(key, None)
    return kept, closed


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


def _place(
    state: ClusterState, workloads: Collection[str], http_port: int, peer_port: int, edge: Edge
) -> Placement:
    plain = {http_port: "the settings' http-port"}
    return place(state, workloads, {peer_port: "peers"}, edge.secrets, plain)


def compute_routes(
    state: ClusterState,
    workloads: Collection[str],
    http_port: int,
    peer_port: int,
    *,
    https_port: int = 443,
    accept_proxy: bool = False,
    now: float = 0.0,
) -> RouteTable:
    """The route table of every workload ("namespace/name" refs) from `state`; `now`:
    compute's clock (certificates are served between their dates)."""
    services = {(s.namespace, s.name): s for s in state.services}
    secrets = SecretLookup(state.secrets, CertificateCache(), now)
    edge = Edge(secrets, https_port, accept_proxy, state.settings)
    return _table(state, workloads, http_port, peer_port, services, edge=edge)


def _served_https(placement: Placement) -> tuple[tuple[str, str, str, bool], ...]:
    """Whether each HTTPS listener is served: what HTTPRoute outcomes read of the
    certificates (a route attaches to a served listener only)."""
    return tuple(
        (*key, lp.listener.name, lp.usable)
        for key, gateway_place in placement.gateways.items()
        for lp in gateway_place.listeners
        if lp.listener.protocol == "HTTPS"
    )


class RouteComputer:
    """`compute_routes` that answers its last table while no route input changed.

    `computed` counts the tables computed (not reused), for tests and benchmarks."""

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._looked: dict[ServiceKey, tuple[ServicePort, ...] | None] = {}
        self._table: RouteTable | None = None
        self._memo: Memo = {}
        self._l4_memo: L4Memo = {}
        # The Secrets: parsed once per object; those the last table looked up (the only
        # ones it depends on), and when the clock next changes one's answer.
        self._certificates = CertificateCache()
        self._secrets: tuple[TLSSecret, ...] = ()
        self._secrets_looked: dict[SecretKey, TLSSecret | None] = {}
        self._changes_at = math.inf
        self.computed = 0

    def compute(
        self,
        state: ClusterState,
        workloads: Collection[str],
        http_port: int,
        peer_port: int,
        services: Mapping[ServiceKey, Service],
        changed_services: Collection[ServiceKey] | None,
        *,
        https_port: int = 443,
        accept_proxy: bool = False,
        now: float = 0.0,
    ) -> RouteTable:
        """The table; `services` by key as of `state`, `changed_services` the keys whose
        Service may differ since the last call (None: unknown, look at all looked up);
        `now`: compute's clock."""
        context = (
            state.gateway_classes,
            state.gateways,
            state.reference_grants,
            state.ingress_classes,
            state.namespaces,
            frozenset(workloads),
            http_port,
            peer_port,
            https_port,
            accept_proxy,
            state.settings,
        )
        inputs = (context, state.http_routes, state.ingresses, state.tls_routes, state.tcp_routes)
        table = self._table
        moved = table is not None and self._ports_moved(services, changed_services)
        secrets_moved = self._secrets_moved(state.secrets, now)
        if table is not None and inputs == self._inputs and not moved and not secrets_moved:
            self._secrets = state.secrets  # what the table read of them is unchanged
            return table
        # Each unchanged HTTPRoute keeps its outcome while what it reads is unchanged: a
        # route change costs that route, the grouping and the ordering. Of the Secrets,
        # outcomes read only whether each HTTPS listener is served.
        if state.secrets is not self._secrets:
            self._certificates.keep_only(state.secrets)
        secrets = SecretLookup(state.secrets, self._certificates, now)
        placement = _place(state, workloads, http_port, peer_port, Edge(secrets))
        last = self._inputs
        reuse = (
            self._memo
            if last is not None
            and last[0] == context
            and not moved
            and (
                table is None
                or not secrets_moved
                or _served_https(table.placement) == _served_https(placement)
            )
            else None
        )
        recording = _Recording(services)
        if reuse is not None:
            recording.looked.update(self._looked)
        memo: Memo = {}
        l4_memo: L4Memo = {}
        l4_reuse = self._l4_memo if reuse is not None else None
        edge = Edge(secrets, https_port, accept_proxy, state.settings)
        table = _table(
            state,
            workloads,
            http_port,
            peer_port,
            recording,
            memo,
            reuse,
            l4_memo,
            l4_reuse,
            edge=edge,
            placement=placement,
        )
        self._inputs, self._looked, self._table, self._memo = inputs, recording.looked, table, memo
        self._secrets, self._secrets_looked = state.secrets, secrets.looked
        self._changes_at = secrets.changes_at
        self._l4_memo = l4_memo
        self.computed += 1
        return table

    @property
    def changes_at(self) -> float:
        """When the clock next changes the last table's answer (a used certificate's start
        or end, wall-clock seconds); inf when never."""
        return self._changes_at

    def _secrets_moved(self, secrets: tuple[TLSSecret, ...], now: float) -> bool:
        """Whether a Secret the last table looked up is another object (or gone, or
        new), or the clock passed a looked-up certificate's start or end."""
        if now >= self._changes_at:
            return True
        if secrets is self._secrets or not self._secrets_looked:
            return False
        index = {(s.namespace, s.name): s for s in secrets}
        return any(index.get(key) is not found for key, found in self._secrets_looked.items())

    def _ports_moved(
        self, services: Mapping[ServiceKey, Service], changed: Collection[ServiceKey] | None
    ) -> bool:
        keys = self._looked.keys() if changed is None else [k for k in changed if k in self._looked]
        for key in keys:
            found = services.get(key)
            if (None if found is None else found.ports) != self._looked[key]:
                return True
        return False
