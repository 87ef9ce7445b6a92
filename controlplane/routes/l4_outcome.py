"""What one TLSRoute or TCPRoute gives (`route_outcome`): its parents' verdicts, the SNI
names or frontend it asks of each workload's port (`Entry`), the Services it reaches and
what it had to refuse. `l4.py` makes each workload's listeners and frontends of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.model import (
    HTTPBackendRef,
    ReferenceGrant,
    Service,
    TCPRoute,
    TLSRoute,
)
from controlplane.routes import names
from controlplane.routes.backends import ServiceKey
from controlplane.routes.httproute import (
    ParentOutcome,
    attach_parent,
    ignored_annotations,
    our_parents,
    resolve_backend,
    served_hostnames,
)
from controlplane.routes.ownership import Claim, later
from controlplane.routes.placement import Placement, Verdict
from controlplane.routes.precedence import Origin
from controlplane.snapshot import RejectedInput, WeightedBackend

L4Route = TLSRoute | TCPRoute
RouteKey = tuple[str, str, str]  # (kind, namespace, name)


@dataclass(frozen=True, slots=True)
class Entry:
    """One SNI name (TLS) or one frontend (TCP) a route asks of a workload's port."""

    workload: str
    port: int
    host: str  # TLS: the SNI name, "" any; TCP: ""
    backends: tuple[WeightedBackend, ...]
    source: str  # "TLSRoute ns/name rule 0"
    origin: Origin
    order: tuple[str, str, str, int]  # age, namespace, name, rule
    claim: Claim  # TLS: the SNI name, held by the listener's namespace (ownership.py)


@dataclass(slots=True)
class L4Outcome:
    """Everything one TLSRoute or TCPRoute gives."""

    kind: str
    parents: list[ParentOutcome] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    rejections: list[RejectedInput] = field(default_factory=list)
    demand: set[tuple[ServiceKey, str]] = field(default_factory=set)
    names: dict[str, ServiceKey] = field(default_factory=dict)  # backends resolved

    @property
    def workloads(self) -> set[str]:
        return {p.workload for p in self.parents if p.workload}


UNSERVED = {
    "TLSRoute": "its connections are closed",
    "TCPRoute": "the port is not served (no frontend without a backend: connections refused)",
}
"""What an unresolved backend costs, by route kind."""


def _rule_backends(
    route: L4Route,
    rule_index: int,
    refs: Iterable[tuple[int, HTTPBackendRef]],
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    outcome: L4Outcome,
    origin: Origin,
) -> tuple[tuple[WeightedBackend, ...], set[ServiceKey], Verdict | None]:
    """The backends of refs (numbered in their rule), unresolved ones "" and reported."""
    backends: list[WeightedBackend] = []
    found_services: set[ServiceKey] = set()
    unresolved: Verdict | None = None
    for number, ref in refs:
        found = resolve_backend(ref, route, services, grants)
        backends.append(WeightedBackend(found.backend, ref.weight))
        if found.service is not None:
            found_services.add(found.service)
            outcome.names[found.backend] = found.service
            continue
        if unresolved is None:
            unresolved = Verdict(False, found.reason, found.message)
        outcome.rejections.append(
            origin.rejection(
                ref.name,
                f"{found.message}: {UNSERVED[outcome.kind]}",
                f"spec.rules[{rule_index}].backendRefs[{number}]",
            )
        )
    return tuple(backends), found_services, unresolved


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    backends: tuple[WeightedBackend, ...]
    services: frozenset[ServiceKey]


def _tcp_rule(
    route: TCPRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    outcome: L4Outcome,
    origin: Origin,
) -> tuple[list[_Rule], Verdict | None]:
    """A TCPRoute's one served backend: the first rule's first backendRef weighted above
    0; every other rule and backendRef reported."""
    for index in range(1, len(route.rules)):
        outcome.rejections.append(
            origin.rejection(
                "rules",
                "a TCP frontend serves one rule (the first): ignored",
                f"spec.rules[{index}]",
            )
        )
    if not route.rules:
        return [], None
    refs = list(enumerate(route.rules[0].backend_refs))
    chosen = [(n, ref) for n, ref in refs if ref.weight > 0][:1]
    for number, ref in refs:
        if (number, ref) not in chosen:
            outcome.rejections.append(
                origin.rejection(
                    ref.name,
                    "a TCP frontend has one backend (no weights): the first backendRef with "
                    "a weight above 0 is served; this one is not",
                    f"spec.rules[0].backendRefs[{number}]",
                )
            )
    backends, found, unresolved = _rule_backends(
        route, 0, chosen, services, grants, outcome, origin
    )
    served = tuple(WeightedBackend(b.backend, 1) for b in backends)
    return [_Rule(0, served, frozenset(found))], unresolved


def _tls_rules(
    route: TLSRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    outcome: L4Outcome,
    origin: Origin,
) -> tuple[list[_Rule], Verdict | None]:
    rules: list[_Rule] = []
    unresolved: Verdict | None = None
    for index, rule in enumerate(route.rules):
        backends, found, missing = _rule_backends(
            route, index, enumerate(rule.backend_refs), services, grants, outcome, origin
        )
        unresolved = unresolved or missing
        rules.append(_Rule(index, backends, frozenset(found)))
    return rules, unresolved


def route_outcome(
    route: L4Route,
    placement: Placement,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> L4Outcome | None:
    """The outcome of a TLSRoute or TCPRoute; None when no parentRef names one of our
    Gateways."""
    ours = our_parents(route, placement)
    if not ours:
        return None
    kind = type(route).__name__
    outcome = L4Outcome(kind)
    origin = Origin(kind, route.namespace, route.name, "spec")
    outcome.rejections.extend(ignored_annotations(route, origin))
    hostnames: tuple[str, ...] = ()
    refused: Verdict | None = None
    if isinstance(route, TLSRoute):
        hostnames = served_hostnames(route.hostnames, origin, outcome.rejections)
        if route.hostnames and not hostnames:
            refused = Verdict(
                False, names.UNSUPPORTED_VALUE, "no hostname of the route can be served"
            )
        rules, unresolved = _tls_rules(route, services, grants, outcome, origin)
    else:
        rules, unresolved = _tcp_rule(route, services, grants, outcome, origin)
    if not rules and refused is None:
        refused = Verdict(False, names.UNSUPPORTED_VALUE, "the route has no rule")
    resolved = unresolved or Verdict(True, names.RESOLVED_REFS, "all references resolved")
    age = route.creation_timestamp or "~"
    source = f"{kind} {route.namespace}/{route.name}"
    for parent in ours:
        attached = attach_parent(
            route, parent, hostnames, placement, (refused, resolved), origin, outcome
        )
        place = parent[3]
        for rule in rules:
            if attached:
                outcome.demand.update(
                    (service, place.serving_workload) for service in rule.services
                )
            for lp, common in attached:
                gateway = lp.gateway
                holder = (
                    f"{source} on Gateway {gateway.namespace}/{gateway.name} "
                    f"listener {lp.listener.name}"
                )
                since = later(gateway.creation_timestamp, age)
                for host in common if kind == "TLSRoute" and common else ("",):
                    outcome.entries.append(
                        Entry(
                            place.serving_workload,
                            lp.listener.port,
                            host,
                            rule.backends,
                            f"{source} rule {rule.index}",
                            Origin(kind, route.namespace, route.name, f"spec.rules[{rule.index}]"),
                            (age, route.namespace, route.name, rule.index),
                            Claim(since, gateway.namespace, holder, host),
                        )
                    )
    return outcome
