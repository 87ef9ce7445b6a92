"""One HTTPRoute to candidate rules on the listeners it attaches to, with the outcome of
each of its parentRefs (for the status) and every rejection.

What cannot be served is reported and left out, the rest served: an invalid hostname is
dropped (all invalid: the route is not accepted); its rules are checked by `httprules`
(matches, filters, weights and backendRefs). The attachment through parentRefs is shared
with TLSRoutes and TCPRoutes (`l4`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from controlplane.model import (
    ANNOTATION_PREFIX,
    GATEWAY_GROUP,
    GRPCRoute,
    HTTPRoute,
    ParentRef,
    ReferenceGrant,
    Service,
    TCPRoute,
    TLSRoute,
)
from controlplane.routes import names, protocols
from controlplane.routes.backends import ServiceKey
from controlplane.routes.backends import resolve_backend as resolve_backend  # l4 reads it here
from controlplane.routes.grpcroute import http_rules
from controlplane.routes.hostnames import intersect
from controlplane.routes.httprules import CheckedRule, checked_rules
from controlplane.routes.ownership import Claim, later
from controlplane.routes.persistence import PersistenceClaim
from controlplane.routes.placement import (
    GatewayPlace,
    ListenerPlace,
    Placement,
    Verdict,
    allows_namespace,
)
from controlplane.routes.precedence import Candidate, Origin
from controlplane.snapshot import RejectedInput, RouteRule
from peerplane import patterns


@dataclass(frozen=True, slots=True)
class ParentOutcome:
    """One parentRef of a route that names one of our Gateways."""

    ref: ParentRef
    gateway: tuple[str, str]
    workload: str  # of the Gateway; "" when none
    accepted: Verdict
    resolved: Verdict
    listeners: tuple[str, ...] = ()  # names of the listeners it attached to
    # Some rules dropped, the others served (`dropped_rules`); None: none dropped.
    partially_invalid: Verdict | None = None


@dataclass(slots=True)
class RouteOutcome:
    """Everything one HTTPRoute gives: candidates per workload, parents, rejections and
    the Services it routes to per workload."""

    parents: list[ParentOutcome] = field(default_factory=list)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    rejections: list[RejectedInput] = field(default_factory=list)
    demand: set[tuple[ServiceKey, str]] = field(default_factory=set)
    # A GRPCRoute's backends (Service, backend name): they speak HTTP/2.
    h2: set[tuple[ServiceKey, str]] = field(default_factory=set)
    # Session persistence its attached rules ask of their backends, by (backend, rule).
    persistence: dict[tuple[str, int], PersistenceClaim] = field(default_factory=dict)
    # The route's metadata.generation (its status documents' observedGeneration).
    generation: int = 0

    @property
    def workloads(self) -> set[str]:
        return {p.workload for p in self.parents if p.workload}


AnyRoute = HTTPRoute | GRPCRoute | TLSRoute | TCPRoute
"""The route kinds that attach to Gateways through parentRefs."""

Parent = tuple[int, ParentRef, tuple[str, str], GatewayPlace]
"""A parentRef naming one of our Gateways: its index, itself, the Gateway's key, its place."""


def our_parents(route: AnyRoute, placement: Placement) -> list[Parent]:
    """The route's parentRefs that name one of our Gateways."""
    ours: list[Parent] = []
    for index, ref in enumerate(route.parent_refs):
        if (ref.group, ref.kind) != (GATEWAY_GROUP, "Gateway"):
            continue
        key = (ref.namespace or route.namespace, ref.name)
        place = placement.gateways.get(key)
        if place is not None:
            ours.append((index, ref, key, place))
    return ours


def ignored_annotations(route: AnyRoute, origin: Origin) -> list[RejectedInput]:
    """Backend-wide annotations on a route: they belong on the Service."""
    return [
        origin.rejection(
            annotation, "haproxy.org annotations belong on the Service; ignored here", annotation
        )
        for annotation in route.annotations
        if annotation.startswith(ANNOTATION_PREFIX)
    ]


def served_hostnames(
    hostnames: tuple[str, ...], origin: Origin, rejections: list[RejectedInput]
) -> tuple[str, ...]:
    """The hostnames that pass the strict pattern; each other one is reported."""
    served = tuple(h for h in hostnames if patterns.is_route_host(h))
    for index, host in enumerate(hostnames):
        if host not in served:
            rejections.append(
                origin.rejection(
                    host,
                    "not a lower-case host name or *. wildcard; dropped",
                    f"spec.hostnames[{index}]",
                )
            )
    return served


class _Outcome(Protocol):
    @property
    def parents(self) -> list[ParentOutcome]: ...

    @property
    def rejections(self) -> list[RejectedInput]: ...


def attach_parent(
    route: AnyRoute,
    parent: Parent,
    hostnames: tuple[str, ...],
    placement: Placement,
    verdicts: tuple[Verdict | None, Verdict],
    origin: Origin,
    outcome: _Outcome,
) -> list[tuple[ListenerPlace, tuple[str, ...]]]:
    """Attach the route through one parentRef: the listeners and hosts it is served on
    (those of the listeners it attaches to that are usable). `verdicts`: why the route is
    refused as a whole (None: it is not), and its ResolvedRefs. Its ParentOutcome (every
    listener it attaches to, served or not) and any rejection go into `outcome`."""
    refused, resolved = verdicts
    index, ref, key, place = parent
    accepted, attached = (
        (refused, []) if refused is not None else attach(route, ref, place, hostnames, placement)
    )
    if not accepted.ok and refused is None:
        outcome.rejections.append(
            origin.rejection(
                f"{key[0]}/{key[1]}",
                f"{accepted.reason}: {accepted.message}; not attached",
                f"spec.parentRefs[{index}]",
            )
        )
    outcome.parents.append(
        ParentOutcome(
            ref,
            key,
            place.workload,
            accepted,
            resolved,
            tuple(lp.listener.name for lp, _ in attached),
        )
    )
    return [(lp, common) for lp, common in attached if lp.usable]


def attach(
    route: AnyRoute,
    ref: ParentRef,
    place: GatewayPlace,
    hostnames: tuple[str, ...],
    placement: Placement,
) -> tuple[Verdict, list[tuple[ListenerPlace, tuple[str, ...]]]]:
    """Whether the route attaches through `ref`, and to which listeners (those carrying its
    kind) with which hosts."""
    kind = (GATEWAY_GROUP, type(route).__name__)
    if not place.accepted.ok:
        return Verdict(
            False, names.NO_MATCHING_PARENT, f"Gateway not accepted: {place.accepted.message}"
        ), []
    named = [
        lp
        for lp in place.listeners
        if (not ref.section_name or lp.listener.name == ref.section_name)
        and (not ref.port or lp.listener.port == ref.port)
    ]
    if not named:
        return Verdict(
            False,
            names.NO_MATCHING_PARENT,
            "no listener of the Gateway has this sectionName and port",
        ), []
    allowed = [
        lp
        for lp in named
        if lp.attachable
        and kind in protocols.route_kinds(lp.listener)
        and allows_namespace(lp, route.namespace, placement)
    ]
    if not allowed:
        conflicted = next((lp.conflict for lp in named if lp.conflict), "")
        return Verdict(
            False,
            names.NOT_ALLOWED_BY_LISTENERS,
            f"no listener allows {kind[1]}s from namespace {route.namespace}"
            + (f" (conflicted: {conflicted})" if conflicted else ""),
        ), []
    attached = []
    for lp in allowed:
        common = intersect(hostnames, lp.listener.hostname)
        if common is not None:
            attached.append((lp, common))
    if not attached:
        return Verdict(
            False,
            names.NO_MATCHING_LISTENER_HOSTNAME,
            "no hostname of the route matches a listener's",
        ), []
    return Verdict(True, names.ACCEPTED, "route accepted"), attached


def route_outcome(
    route: HTTPRoute | GRPCRoute,
    placement: Placement,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> RouteOutcome | None:
    """The outcome of `route` (an HTTPRoute, or a GRPCRoute as HTTPRoute rules); None
    when no parentRef names one of our Gateways."""
    ours = our_parents(route, placement)
    if not ours:
        return None
    outcome = RouteOutcome(generation=route.generation)
    rejections = outcome.rejections
    kind = type(route).__name__
    origin = Origin(kind, route.namespace, route.name, "metadata.annotations")
    rejections.extend(ignored_annotations(route, origin))
    hostnames = served_hostnames(route.hostnames, origin, rejections)
    given = http_rules(route, rejections) if isinstance(route, GRPCRoute) else route.rules
    rules, resolved = checked_rules(route, services, grants, rejections, given)
    refused: Verdict | None = None
    if route.hostnames and not hostnames:
        refused = Verdict(False, names.UNSUPPORTED_VALUE, "no hostname of the route can be served")
    elif not rules:
        refused = Verdict(False, names.UNSUPPORTED_VALUE, "no rule of the route can be served")
    age = route.creation_timestamp or "~"
    partial = dropped_rules(route, rules, rejections) if rules else None
    for parent in ours:
        attached = attach_parent(
            route, parent, hostnames, placement, (refused, resolved), origin, outcome
        )
        if partial is not None and outcome.parents[-1].accepted.ok:
            outcome.parents[-1] = replace(outcome.parents[-1], partially_invalid=partial)
        place = parent[3]
        if not attached:
            continue
        mine = outcome.candidates.setdefault(place.workload, [])
        for rule in rules:
            outcome.demand.update((service, place.workload) for service in rule.services)
            if kind == "GRPCRoute":  # resolved backends, in order, each with its Service
                named = [b.backend for b in rule.backends if b.backend]
                outcome.h2.update(zip(rule.services, named, strict=True))
            _claim_persistence(route, rule, age, outcome)
            for lp, common in attached:
                mine.extend(_candidates(route, rule, lp, common, age))
    return outcome


MAX_DROPPED_MESSAGE = 1024  # characters of the PartiallyInvalid message (a Kubernetes
# condition message holds 32,768)


def dropped_rules(
    route: HTTPRoute | GRPCRoute, rules: list[CheckedRule], rejections: list[RejectedInput]
) -> Verdict | None:
    """The PartiallyInvalid condition of a route some of whose rules are dropped (a filter,
    timeouts, retry or weight refused, or every match): "Dropped Rule" and each dropped
    rule's index with its first reason; None when every rule is served."""
    served = {rule.index for rule in rules}
    dropped = [index for index in range(len(route.rules)) if index not in served]
    if not dropped:
        return None
    parts = []
    for index in dropped:
        where = f"spec.rules[{index}]"
        why = next((r for r in rejections if r.key.startswith(where)), None)
        parts.append(f"{index} ({why.key}: {why.reason})" if why is not None else str(index))
    message = f"Dropped Rule {'; '.join(parts)}"
    if len(message) > MAX_DROPPED_MESSAGE:
        message = message[: MAX_DROPPED_MESSAGE - 3] + "..."
    return Verdict(True, names.UNSUPPORTED_VALUE, message)


def _claim_persistence(
    route: HTTPRoute | GRPCRoute, rule: CheckedRule, age: str, outcome: RouteOutcome
) -> None:
    """What the rule's sessionPersistence asks of each backend it reaches."""
    if rule.persistence is None:
        return
    origin = Origin(
        type(route).__name__,
        route.namespace,
        route.name,
        f"spec.rules[{rule.index}].sessionPersistence",
    )
    for service, backend in rule.persisted:
        outcome.persistence[backend, rule.index] = PersistenceClaim(
            (age, route.namespace, route.name, rule.index),
            service,
            backend,
            rule.persistence,
            origin,
        )


def _candidates(
    route: HTTPRoute | GRPCRoute,
    rule: CheckedRule,
    lp: ListenerPlace,
    hostnames: tuple[str, ...],
    age: str,
) -> list[Candidate]:
    """One candidate per hostname (or one for any host) and match of a rule; each host
    claimed by the listener's namespace since the later of the Gateway and the route."""
    kind = type(route).__name__
    source = f"{kind} {route.namespace}/{route.name} rule {rule.index}"
    gateway = lp.gateway
    port = lp.listener.port
    holder = (
        f"{kind} {route.namespace}/{route.name} on Gateway {gateway.namespace}/"
        f"{gateway.name} listener {lp.listener.name}"
    )
    since = later(gateway.creation_timestamp, age)
    found = []
    for host in hostnames or ("",):
        claim = Claim(since, gateway.namespace, holder, host)
        for number, path, method, headers, query in rule.matches:
            key = f"spec.rules[{rule.index}].matches[{number}]"
            found.append(
                Candidate(
                    port,
                    RouteRule(
                        source=f"{source} match {number}",
                        hostnames=(host,) if host else (),
                        path=path,
                        method=method,
                        headers=headers,
                        query_params=query,
                        backends=rule.backends,
                        filters=rule.filters,
                    ),
                    Origin(kind, route.namespace, route.name, key),
                    age,
                    (rule.index, number),
                    claim,
                    lp.listener.hostname,
                )
            )
    return found
