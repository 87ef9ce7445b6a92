"""One HTTPRoute to candidate rules on the listeners it attaches to, with the outcome of
each of its parentRefs (for the status) and every rejection.

What cannot be served is reported and left out, the rest served: an invalid hostname is
dropped (all invalid: the route is not accepted); a match with a regular expression, a
bad path, header, query parameter or method is dropped; a rule with an unsupported or
invalid filter (a redirect port outside 1-65535 too) or a backendRef weight outside
0-1,000,000 is dropped; a backendRef that does not resolve keeps its weight and gets a
500 for its share (ResolvedRefs False).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from controlplane.model import (
    ANNOTATION_PREFIX,
    GATEWAY_GROUP,
    HTTPBackendRef,
    HTTPRoute,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRule,
    ParentRef,
    ReferenceGrant,
    Service,
    TCPRoute,
    TLSRoute,
)
from controlplane.routes import names, protocols
from controlplane.routes.backends import Resolved, ServiceKey, granted, service_port
from controlplane.routes.hostnames import intersect
from controlplane.routes.ownership import Claim, later
from controlplane.routes.placement import (
    GatewayPlace,
    ListenerPlace,
    Placement,
    Verdict,
    allows_namespace,
)
from controlplane.routes.precedence import Candidate, Origin
from controlplane.settings.values import shown
from controlplane.snapshot import (
    HeaderChanges,
    Redirect,
    RejectedInput,
    RoutePath,
    RouteRule,
    WeightedBackend,
)
from peerplane import names as hosts
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


@dataclass(slots=True)
class RouteOutcome:
    """Everything one HTTPRoute gives: candidates per workload, parents, rejections and
    the Services it routes to per workload."""

    parents: list[ParentOutcome] = field(default_factory=list)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    rejections: list[RejectedInput] = field(default_factory=list)
    demand: set[tuple[ServiceKey, str]] = field(default_factory=set)

    @property
    def workloads(self) -> set[str]:
        return {p.workload for p in self.parents if p.workload}


@dataclass(frozen=True, slots=True)
class _Rule:
    """A rule's matches (validated, without hostname) and what it does."""

    index: int
    matches: tuple[
        tuple[int, RoutePath, str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], ...
    ]
    backends: tuple[WeightedBackend, ...]
    services: tuple[ServiceKey, ...]
    request_headers: HeaderChanges | None
    redirect: Redirect | None


def _path(value: str, kind: str) -> RoutePath | None:
    if not patterns.is_path(value) or kind not in ("Exact", "PathPrefix"):
        return None
    if kind == "PathPrefix" and value != "/":
        value = value.rstrip("/") or "/"
    return RoutePath(kind, value)


def _match(
    match: HTTPRouteMatch, where: str, origin: Origin, rejections: list[RejectedInput]
) -> tuple[RoutePath, str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] | None:
    def reject(key: str, value: str, reason: str) -> None:
        rejections.append(origin.rejection(value, f"{reason}; match not served", f"{where}.{key}"))

    if match.path.type not in ("Exact", "PathPrefix"):
        reject("path.type", match.path.type, "only Exact and PathPrefix paths are served")
        return None
    path = _path(match.path.value, match.path.type)
    if path is None:
        reject("path.value", match.path.value, "not a path of letters, digits and -._~%/+,;=:@!")
        return None
    headers: dict[str, tuple[str, str]] = {}
    for index, header in enumerate(match.headers):
        if header.type != "Exact":
            reject(f"headers[{index}].type", header.type, "only Exact header matches are served")
            return None
        if not patterns.is_header_name(header.name) or not patterns.is_header_value(header.value):
            reject(
                f"headers[{index}]",
                f"{header.name}: {header.value}",
                "not a header name and value peerplane serves",
            )
            return None
        headers.setdefault(header.name.lower(), (header.name, header.value))
    query: dict[str, tuple[str, str]] = {}
    for index, param in enumerate(match.query_params):
        if param.type != "Exact":
            reject(
                f"queryParams[{index}].type",
                param.type,
                "only Exact query parameter matches are served",
            )
            return None
        if not patterns.is_query_name(param.name) or not patterns.is_query_value(param.value):
            reject(
                f"queryParams[{index}]",
                f"{param.name}={param.value}",
                "not a query parameter peerplane serves",
            )
            return None
        query.setdefault(param.name, (param.name, param.value))
    if match.method and not patterns.is_method(match.method):
        reject("method", match.method, "not an HTTP method")
        return None
    return path, match.method, tuple(headers.values()), tuple(query.values())


def _filters(
    filters: tuple[HTTPRouteFilter, ...],
    where: str,
    origin: Origin,
    rejections: list[RejectedInput],
) -> tuple[HeaderChanges | None, Redirect | None] | None:
    """The rule's header changes and redirect; None (reported) when a filter is not
    served, so the rule is not served at all rather than served without it."""
    changes: HeaderChanges | None = None
    redirect: Redirect | None = None

    def reject(index: int, value: str, reason: str) -> None:
        rejections.append(
            origin.rejection(value, f"{reason}; rule not served", f"{where}.filters[{index}]")
        )

    for index, item in enumerate(filters):
        modifier, wanted = item.request_header_modifier, item.request_redirect
        if item.type == "RequestHeaderModifier" and modifier is not None:
            pairs = [*modifier.set, *modifier.add]
            if not all(
                patterns.is_header_name(n) and patterns.is_header_value(v) for n, v in pairs
            ) or not all(patterns.is_header_name(n) for n in modifier.remove):
                reject(index, item.type, "a header name or value peerplane does not serve")
                return None
            if changes is None:
                changes = HeaderChanges(modifier.set, modifier.add, modifier.remove)
        elif item.type == "RequestRedirect" and wanted is not None:
            problem = ""
            if wanted.scheme and wanted.scheme not in patterns.REDIRECT_SCHEMES:
                problem = f"scheme {wanted.scheme} (http or https only)"
            elif wanted.hostname and not hosts.is_host_name(wanted.hostname):
                problem = "hostname is not a lower-case host name"
            elif wanted.port is not None and not 1 <= wanted.port <= 65535:
                problem = f"port {shown(str(wanted.port), 20)} is not in 1-65535"
            elif wanted.status_code not in patterns.REDIRECT_CODES:
                problem = f"status code {wanted.status_code} (301 or 302 only)"
            elif wanted.path_type not in ("", "ReplaceFullPath"):
                problem = f"path {wanted.path_type} (only ReplaceFullPath is served)"
            elif wanted.path_type and not patterns.is_path(wanted.path_value):
                problem = "replaceFullPath is not a path peerplane serves"
            if problem:
                reject(index, item.type, problem)
                return None
            if redirect is None:
                redirect = Redirect(
                    wanted.scheme,
                    wanted.hostname,
                    wanted.port or 0,
                    wanted.status_code,
                    wanted.path_value,
                )
        else:
            reject(
                index,
                item.type,
                "filter type not served (RequestHeaderModifier and RequestRedirect are)",
            )
            return None
    return changes, redirect


def resolve_backend(
    ref: HTTPBackendRef,
    route: HTTPRoute | TLSRoute | TCPRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> Resolved:
    """A backendRef to a Service port's backend, or why not (ResolvedRefs reasons)."""
    kind = type(route).__name__
    namespace = ref.namespace or route.namespace
    if (ref.group, ref.kind) != names.SERVICE_KIND:
        return Resolved(
            "",
            reason=names.INVALID_KIND,
            message=f"backendRef kind {ref.group}/{ref.kind} is not a core Service",
        )
    if namespace != route.namespace and not granted(
        grants, kind, route.namespace, namespace, ref.name
    ):
        return Resolved(
            "",
            reason=names.REF_NOT_PERMITTED,
            message=(
                f"no ReferenceGrant in {namespace} lets {kind}s of {route.namespace} "
                f"reference Service {ref.name}"
            ),
        )
    if not ref.port:
        return Resolved(
            "",
            reason=names.BACKEND_NOT_FOUND,
            message=f"backendRef to Service {namespace}/{ref.name} has no port",
        )
    if ref.filters:
        return Resolved(
            "", reason=names.UNSUPPORTED_VALUE, message="backendRef filters are not served"
        )
    return service_port(services, namespace, ref.name, ref.port)


def _rules(
    route: HTTPRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    rejections: list[RejectedInput],
) -> tuple[list[_Rule], Verdict]:
    rules: list[_Rule] = []
    resolved = Verdict(True, names.RESOLVED_REFS, "all references resolved")
    for index, rule in enumerate(route.rules):
        where = f"spec.rules[{index}]"
        origin = Origin("HTTPRoute", route.namespace, route.name, where)
        built = _rule(route, rule, index, origin, services, grants, rejections)
        if built is None:
            continue
        found, unresolved = built
        if unresolved is not None and resolved.ok:
            resolved = unresolved
        rules.append(found)
    return rules, resolved


def _rule(
    route: HTTPRoute,
    rule: HTTPRouteRule,
    index: int,
    origin: Origin,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    rejections: list[RejectedInput],
) -> tuple[_Rule, Verdict | None] | None:
    where = origin.key
    for number, ref in enumerate(rule.backend_refs):
        if not 0 <= ref.weight <= patterns.MAX_WEIGHT:
            # The split written cannot be kept: the rule is not served rather than served
            # with another (what an invalid filter does too).
            rejections.append(
                origin.rejection(
                    str(ref.weight),
                    f"weight is not in 0-{patterns.MAX_WEIGHT}; rule not served",
                    f"{where}.backendRefs[{number}].weight",
                )
            )
            return None
    done = _filters(rule.filters, where, origin, rejections)
    if done is None:
        return None
    changes, redirect = done
    matches = []
    for number, match in enumerate(rule.matches):
        checked = _match(match, f"{where}.matches[{number}]", origin, rejections)
        if checked is not None:
            matches.append((number, *checked))
    if not matches:
        return None
    backends: list[WeightedBackend] = []
    services_used: list[ServiceKey] = []
    unresolved: Verdict | None = None
    if redirect is None:
        for number, ref in enumerate(rule.backend_refs):
            found = resolve_backend(ref, route, services, grants)
            backends.append(WeightedBackend(found.backend, ref.weight))
            if found.service is not None:
                services_used.append(found.service)
            elif unresolved is None:
                unresolved = Verdict(False, found.reason, found.message)
                rejections.append(
                    origin.rejection(
                        ref.name,
                        f"{found.message}: its share gets a 500",
                        f"{where}.backendRefs[{number}]",
                    )
                )
    elif rule.backend_refs:
        rejections.append(
            origin.rejection(
                "backendRefs",
                "a redirect rule has no backends: backendRefs ignored",
                f"{where}.backendRefs",
            )
        )
    return (
        _Rule(index, tuple(matches), tuple(backends), tuple(services_used), changes, redirect),
        unresolved,
    )


Parent = tuple[int, ParentRef, tuple[str, str], GatewayPlace]
"""A parentRef naming one of our Gateways: its index, itself, the Gateway's key, its place."""


def our_parents(route: HTTPRoute | TLSRoute | TCPRoute, placement: Placement) -> list[Parent]:
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


def ignored_annotations(
    route: HTTPRoute | TLSRoute | TCPRoute, origin: Origin
) -> list[RejectedInput]:
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
    route: HTTPRoute | TLSRoute | TCPRoute,
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
    route: HTTPRoute | TLSRoute | TCPRoute,
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
    route: HTTPRoute,
    placement: Placement,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> RouteOutcome | None:
    """The outcome of `route`; None when no parentRef names one of our Gateways."""
    ours = our_parents(route, placement)
    if not ours:
        return None
    outcome = RouteOutcome()
    rejections = outcome.rejections
    origin = Origin("HTTPRoute", route.namespace, route.name, "metadata.annotations")
    rejections.extend(ignored_annotations(route, origin))
    hostnames = served_hostnames(route.hostnames, origin, rejections)
    rules, resolved = _rules(route, services, grants, rejections)
    refused: Verdict | None = None
    if route.hostnames and not hostnames:
        refused = Verdict(False, names.UNSUPPORTED_VALUE, "no hostname of the route can be served")
    elif not rules:
        refused = Verdict(False, names.UNSUPPORTED_VALUE, "no rule of the route can be served")
    age = route.creation_timestamp or "~"
    for parent in ours:
        attached = attach_parent(
            route, parent, hostnames, placement, (refused, resolved), origin, outcome
        )
        place = parent[3]
        if not attached:
            continue
        mine = outcome.candidates.setdefault(place.workload, [])
        for rule in rules:
            outcome.demand.update((service, place.workload) for service in rule.services)
            for lp, common in attached:
                mine.extend(_candidates(route, rule, lp, common, age))
    return outcome


def _candidates(
    route: HTTPRoute, rule: _Rule, lp: ListenerPlace, hostnames: tuple[str, ...], age: str
) -> list[Candidate]:
    """One candidate per hostname (or one for any host) and match of a rule; each host
    claimed by the listener's namespace since the later of the Gateway and the route."""
    source = f"HTTPRoute {route.namespace}/{route.name} rule {rule.index}"
    gateway = lp.gateway
    port = lp.listener.port
    holder = (
        f"HTTPRoute {route.namespace}/{route.name} on Gateway {gateway.namespace}/"
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
                        request_headers=rule.request_headers,
                        redirect=rule.redirect,
                    ),
                    Origin("HTTPRoute", route.namespace, route.name, key),
                    age,
                    (rule.index, number),
                    claim,
                )
            )
    return found
