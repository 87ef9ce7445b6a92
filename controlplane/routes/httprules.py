"""An HTTPRoute's rules, checked: each rule's matches validated, its filters translated
(`controlplane/routes/filters`) and its backendRefs resolved.

A match with a regular expression, a bad path, header, query parameter or method is
dropped; a rule with an unsupported or invalid filter or a backendRef weight outside
0-1,000,000 is dropped; a backendRef that does not resolve keeps its weight and gets a 500
for its share (ResolvedRefs False). Each is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from controlplane.model import (
    HTTPRoute,
    HTTPRouteMatch,
    HTTPRouteRule,
    ReferenceGrant,
    Service,
)
from controlplane.routes import names
from controlplane.routes.backends import ServiceKey, resolve_backend
from controlplane.routes.filters import rule_filters
from controlplane.routes.placement import Verdict
from controlplane.routes.precedence import Origin
from controlplane.snapshot import RejectedInput, RouteFilter, RoutePath, WeightedBackend
from peerplane import patterns


class CheckedMatch(NamedTuple):
    """One match of a rule, validated: its index among the rule's matches and what it
    asks of a request beside the host."""

    number: int
    path: RoutePath
    method: str
    headers: tuple[tuple[str, str], ...]
    query: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CheckedRule:
    """A rule's matches (validated, without hostname) and what it does."""

    index: int
    matches: tuple[CheckedMatch, ...]
    backends: tuple[WeightedBackend, ...]
    services: tuple[ServiceKey, ...]
    filters: tuple[RouteFilter, ...]


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


def checked_rules(
    route: HTTPRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    rejections: list[RejectedInput],
) -> tuple[list[CheckedRule], Verdict]:
    rules: list[CheckedRule] = []
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
) -> tuple[CheckedRule, Verdict | None] | None:
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
    filters = rule_filters(rule.filters, where, origin, rejections)
    if filters is None:
        return None
    matches = []
    for number, match in enumerate(rule.matches):
        checked = _match(match, f"{where}.matches[{number}]", origin, rejections)
        if checked is not None:
            matches.append(CheckedMatch(number, *checked))
    if not matches:
        return None
    backends: list[WeightedBackend] = []
    services_used: list[ServiceKey] = []
    unresolved: Verdict | None = None
    answers = next((f.answers for f in filters if f.answers), "")
    if not answers:
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
                f"a {answers} rule has no backends: backendRefs ignored",
                f"{where}.backendRefs",
            )
        )
    return (
        CheckedRule(index, tuple(matches), tuple(backends), tuple(services_used), filters),
        unresolved,
    )
