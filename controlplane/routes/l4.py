"""TLSRoutes and TCPRoutes to each workload's TLS passthrough listeners and TCP frontends.

A TLSRoute attaches as an HTTPRoute does (`httproute.attach`: sectionName, port,
allowedRoutes, hostnames intersected with a TLS listener's) and gives one `SniRoute` per
rule and SNI name on each port it reaches, ordered exact names before wildcards, longer
first, then the older route (creationTimestamp, namespace/name, rule); the same name twice
on a port: the first keeps it, the other is dropped and reported. Before that, the SNI
names another namespace holds on the port (an older TLS listener's hostname or route
name, `ownership.py`) are dropped and reported. A TCPRoute gives its TCP
listener's port one frontend: the oldest route attached keeps the port, the others are
reported. A TCP frontend has one backend (the agent renders `default_backend`, no weights):
the first backendRef of the first rule with a weight above 0 is served, the others are
reported.

Ports: a TLS or TCP listener on a port the workload serves in HTTP (a Gateway HTTP
listener, the Ingress port, the `http-port` setting) is not served, nor one whose port
an older Gateway's listener of the other family holds; both reported on the Gateway. The
Services reached are mode-tcp backends (`tcp_names`), unless a route reaches the same
Service port in HTTP: HTTP keeps it, and `finalize` leaves the TCP reference unresolved
(connections closed) and reports it. One route's outcome is `l4_outcome.py`'s; here, the
workloads' listeners and frontends made of the outcomes (`l4_table`) and `finalize`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.model import (
    ClusterState,
    ReferenceGrant,
    Service,
)
from controlplane.routes.backends import ServiceKey
from controlplane.routes.l4_outcome import (
    UNSERVED,
    Entry,
    L4Outcome,
    L4Route,
    RouteKey,
    route_outcome,
)
from controlplane.routes.ownership import Claim, resolve
from controlplane.routes.placement import (
    ACCEPT_PROXY_ANNOTATION,
    Placement,
    accept_proxy,
    listener_claim,
)
from controlplane.routes.precedence import Origin, Refusals
from controlplane.settings.values import shown
from controlplane.snapshot import (
    HttpListener,
    RejectedInput,
    SniRoute,
    TcpFrontend,
    TlsPassthroughListener,
    WeightedBackend,
)
from peerplane.patterns import WILDCARD_PREFIX


@dataclass(frozen=True, slots=True)
class WorkloadL4:
    """One workload's passthrough listeners and route TCP frontends, before `finalize`."""

    tls_listeners: tuple[TlsPassthroughListener, ...] = ()
    tcp_frontends: tuple[TcpFrontend, ...] = ()
    rejections: tuple[RejectedInput, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every backend name the listeners and frontends use, sorted."""
        found = {b.backend for t in self.tls_listeners for r in t.routes for b in r.backends}
        found.update(frontend.backend for frontend in self.tcp_frontends)
        found.discard("")
        return tuple(sorted(found))

    @property
    def ports(self) -> tuple[int, ...]:
        found = {listener.port for listener in self.tls_listeners}
        found.update(frontend.port for frontend in self.tcp_frontends)
        return tuple(sorted(found))


EMPTY_WORKLOAD = WorkloadL4()


@dataclass(frozen=True, slots=True)
class L4Table:
    routes: Mapping[RouteKey, L4Outcome] = field(default_factory=dict)
    workloads: Mapping[str, WorkloadL4] = field(default_factory=dict)
    demand: frozenset[tuple[ServiceKey, str]] = frozenset()  # (Service, workload)
    # Service -> its backend names to plan in mode tcp (reached in TCP and not in HTTP).
    tcp_names: Mapping[ServiceKey, frozenset[str]] = field(default_factory=dict)
    rejections: tuple[RejectedInput, ...] = ()

    def of(self, workload: str) -> WorkloadL4:
        return self.workloads.get(workload, EMPTY_WORKLOAD)


EMPTY_TABLE = L4Table()

Memo = dict[int, tuple[L4Route, L4Outcome | None]]
"""id(route) -> the route and its outcome, reused as `table.Memo` is."""


def http_names(listeners: Iterable[HttpListener]) -> set[str]:
    """Every backend name HTTP listeners reach."""
    listeners = tuple(listeners)
    found = {listener.default_backend for listener in listeners}
    found.update(
        backend.backend
        for listener in listeners
        for rule in listener.rules
        for backend in rule.backends
    )
    found.discard("")
    return found


def _gateway_rejection(
    namespace: str, name: str, index: int, value: str, reason: str
) -> RejectedInput:
    return RejectedInput(
        "Gateway", namespace, name, f"spec.listeners[{index}]", shown(value), reason
    )


@dataclass(frozen=True, slots=True)
class _Port:
    protocol: str
    accept_proxy: bool
    owner: str  # "Gateway ns/name"


def _ports(
    placement: Placement,
    http_ports: Mapping[str, Iterable[int]],
    http_port: int,
    rejections: dict[str, list[RejectedInput]],
) -> dict[tuple[str, int], _Port]:
    """(workload, port) -> the TLS or TCP port served there; listeners that cannot have
    their port reported (by workload). Older Gateways first."""
    ports: dict[tuple[str, int], _Port] = {}
    by_age = sorted(
        placement.gateways.values(),
        key=lambda g: (g.gateway.creation_timestamp or "~", g.gateway.namespace, g.gateway.name),
    )
    for place in by_age:
        gateway = place.gateway
        if not place.serving_workload:
            continue
        proxy = accept_proxy(gateway)
        owner = f"Gateway {gateway.namespace}/{gateway.name}"
        for index, lp in enumerate(place.listeners):
            listener = lp.listener
            if not lp.usable or listener.protocol not in ("TLS", "TCP"):
                continue
            port = listener.port
            held = ports.get((place.serving_workload, port))
            reason = ""
            if port == http_port or port in http_ports.get(place.serving_workload, ()):
                reason = f"port {port} is served in HTTP by this HAProxy workload"
            elif held is not None and held.protocol != listener.protocol:
                reason = f"port {port} is a {held.protocol} listener of the older {held.owner}"
            elif held is not None and held.accept_proxy != proxy:
                rejections.setdefault(place.serving_workload, []).append(
                    _gateway_rejection(
                        gateway.namespace,
                        gateway.name,
                        index,
                        listener.name,
                        f"{ACCEPT_PROXY_ANNOTATION} differs from the older {held.owner}'s "
                        f"on port {port}, which the port keeps",
                    )
                )
            if reason:
                rejections.setdefault(place.serving_workload, []).append(
                    _gateway_rejection(
                        gateway.namespace,
                        gateway.name,
                        index,
                        listener.name,
                        f"{reason}: listener not served",
                    )
                )
                continue
            ports.setdefault((place.serving_workload, port), _Port(listener.protocol, proxy, owner))
    return ports


def _sni_rank(entry: Entry) -> tuple[object, ...]:
    """Exact names before wildcards, longer first, any name last; then the older route."""
    host = entry.host
    return (not host, host.startswith(WILDCARD_PREFIX), -len(host), entry.order)


def _lost(entry: Entry, value: str, reason: str) -> RejectedInput:
    return entry.origin.rejection(value, reason)


def _tls_listener(
    port: int, entries: list[Entry], proxy: bool, rejections: list[RejectedInput]
) -> TlsPassthroughListener:
    taken: dict[str, Entry] = {}
    routes: list[SniRoute] = []
    for entry in sorted(entries, key=_sni_rank):
        winner = taken.get(entry.host)
        if winner is None:
            taken[entry.host] = entry
            routes.append(
                SniRoute(entry.source, (entry.host,) if entry.host else (), entry.backends)
            )
        elif winner.source != entry.source:
            rejections.append(
                _lost(
                    entry,
                    entry.host or "*",
                    f"SNI name on port {port} already routed by {winner.source}, which takes "
                    "precedence (older): dropped",
                )
            )
    return TlsPassthroughListener(port, tuple(routes), proxy)


def _listener_claims(
    placement: Placement, ports: Mapping[tuple[str, int], _Port]
) -> dict[tuple[str, int], list[tuple[Claim, Origin]]]:
    """(workload, port) -> the SNI names the served TLS listeners there claim, with the
    Gateway field a refusal is reported on."""
    found: dict[tuple[str, int], list[tuple[Claim, Origin]]] = {}
    for place in placement.gateways.values():
        for index, lp in enumerate(place.listeners):
            key = (place.serving_workload, lp.listener.port)
            held = ports.get(key)
            if held is None or held.protocol != "TLS" or lp.listener.protocol != "TLS":
                continue
            if lp.holds_hostname:
                gateway = lp.gateway
                origin = Origin.listener_hostname(gateway.namespace, gateway.name, index)
                found.setdefault(key, []).append((listener_claim(lp), origin))
    return found


def _held_names(
    port: int,
    entries: list[Entry],
    listeners: list[tuple[Claim, Origin]],
    rejections: list[RejectedInput],
) -> list[Entry]:
    """The entries whose SNI name no other namespace holds on the port (ownership.py);
    the others, and a listener whose name is held, reported."""
    holding = resolve([*(claim for claim, _ in listeners), *(e.claim for e in entries)])
    if not holding.refused:
        return entries
    report = Refusals(rejections)
    for claim, origin in listeners:
        if claim in holding.refused:
            report.refuse(origin, holding, claim, port, "this listener is not served for it")
    kept = []
    for entry in entries:
        if entry.claim in holding.refused:
            report.refuse(entry.origin, holding, entry.claim, port, "dropped")
        else:
            kept.append(entry)
    return kept


def _tcp_frontend(
    port: int, entries: list[Entry], proxy: bool, rejections: list[RejectedInput]
) -> TcpFrontend:
    ordered = sorted(entries, key=lambda e: e.order)
    winner = ordered[0]
    for entry in ordered[1:]:
        if entry.source != winner.source:
            rejections.append(
                _lost(
                    entry,
                    str(port),
                    f"port {port} already routed by the older {winner.source}: not served",
                )
            )
    backend = winner.backends[0].backend if winner.backends else ""
    return TcpFrontend(port, backend, winner.source, proxy)


def l4_table(
    state: ClusterState,
    placement: Placement,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    http: Mapping[str, tuple[HttpListener, ...]],
    http_port: int,
    memo: Memo | None = None,
    reuse: Memo | None = None,
) -> L4Table:
    """Every workload's TLS passthrough listeners and route TCP frontends. `http`: each
    workload's HTTP listeners (their ports are not for TLS or TCP, their backends stay
    HTTP); `memo`/`reuse` as `table._table`'s."""
    mine: dict[str, list[RejectedInput]] = {}
    ports = _ports(placement, {w: [x.port for x in ls] for w, ls in http.items()}, http_port, mine)
    rejections = [r for found in mine.values() for r in found]
    outcomes: dict[RouteKey, L4Outcome] = {}
    routes: list[L4Route] = [*state.tls_routes, *state.tcp_routes]
    for route in sorted(routes, key=lambda r: (type(r).__name__, r.namespace, r.name)):
        kept = reuse.get(id(route)) if reuse is not None else None
        if kept is not None and kept[0] is route:
            outcome = kept[1]
        else:
            outcome = route_outcome(route, placement, services, grants)
        if memo is not None:
            memo[id(route)] = (route, outcome)
        if outcome is not None:
            outcomes[outcome.kind, route.namespace, route.name] = outcome
    per: dict[tuple[str, int], list[Entry]] = {key: [] for key in ports}
    demand: set[tuple[ServiceKey, str]] = set()
    reached: dict[str, ServiceKey] = {}
    for outcome in outcomes.values():
        rejections.extend(outcome.rejections)
        for workload in outcome.workloads:
            mine.setdefault(workload, []).extend(outcome.rejections)
        protocol = "TLS" if outcome.kind == "TLSRoute" else "TCP"
        for entry in outcome.entries:
            held = ports.get((entry.workload, entry.port))
            if held is not None and held.protocol == protocol:
                per[entry.workload, entry.port].append(entry)
        demand |= outcome.demand
        reached.update(outcome.names)
    tls: dict[str, list[TlsPassthroughListener]] = {}
    tcp: dict[str, list[TcpFrontend]] = {}
    sni_claims = _listener_claims(placement, ports)
    for (workload, port), entries in sorted(per.items()):
        held = ports[workload, port]
        lost: list[RejectedInput] = []
        if held.protocol == "TLS":
            entries = _held_names(port, entries, sni_claims.get((workload, port), []), lost)
            tls.setdefault(workload, []).append(
                _tls_listener(port, entries, held.accept_proxy, lost)
            )
        elif entries:
            tcp.setdefault(workload, []).append(
                _tcp_frontend(port, entries, held.accept_proxy, lost)
            )
        rejections.extend(lost)
        mine.setdefault(workload, []).extend(lost)
    # Only when a TLS or TCP route reaches a backend: with none (most clusters, and any
    # HTTPRoute change there) this pass over every HTTP rule is not made.
    in_http = set().union(*(http_names(ls) for ls in http.values())) if reached else set()
    tcp_names: dict[ServiceKey, set[str]] = {}
    for name, service in reached.items():
        if name not in in_http:
            tcp_names.setdefault(service, set()).add(name)
    workloads = {
        workload: WorkloadL4(
            tuple(tls.get(workload, ())),
            tuple(tcp.get(workload, ())),
            tuple(mine.get(workload, ())),
        )
        for workload in sorted({*tls, *tcp, *mine})
    }
    return L4Table(
        routes=outcomes,
        workloads=workloads,
        demand=frozenset(demand),
        tcp_names={service: frozenset(found) for service, found in tcp_names.items()},
        rejections=tuple(rejections),
    )


def _source_rejection(source: str, value: str, reason: str) -> RejectedInput:
    kind, ref = source.split(" ")[:2]
    namespace, _, name = ref.partition("/")
    return RejectedInput(kind, namespace, name, "backend", shown(value), reason)


_NOT_TCP = (
    "backend not served in mode tcp (an HTTP route or the Service's own annotations reach "
    "this Service port in HTTP, which keeps it; or the Service is refused)"
)


def finalize(
    routes: WorkloadL4, mode_of: Callable[[str], str | None]
) -> tuple[tuple[TlsPassthroughListener, ...], tuple[TcpFrontend, ...], tuple[RejectedInput, ...]]:
    """The passthrough listeners and route TCP frontends as the snapshot carries them: a
    backend that is not a mode-tcp backend of the snapshot becomes unresolved (reported);
    a TCP frontend left without a backend is not in the snapshot (the contract's TCP
    frontends always name one), its port not bound."""
    rejections: list[RejectedInput] = []

    def served(source: str, backend: str) -> str:
        if backend and mode_of(backend) != "tcp":
            kind = source.split(" ")[0]
            reason = f"{_NOT_TCP}: {UNSERVED.get(kind, 'not served')}"
            rejections.append(_source_rejection(source, backend, reason))
            return ""
        return backend

    listeners = tuple(
        dataclasses.replace(
            listener,
            routes=tuple(
                dataclasses.replace(
                    route,
                    backends=tuple(
                        WeightedBackend(served(route.source, b.backend), b.weight)
                        for b in route.backends
                    ),
                )
                for route in listener.routes
            ),
        )
        for listener in routes.tls_listeners
    )
    frontends = tuple(
        dataclasses.replace(frontend, backend=served(frontend.source, frontend.backend))
        for frontend in routes.tcp_frontends
    )
    frontends = tuple(frontend for frontend in frontends if frontend.backend)
    if not rejections:
        return routes.tls_listeners, frontends, ()
    return listeners, frontends, tuple(rejections)
