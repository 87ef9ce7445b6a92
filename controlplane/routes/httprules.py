"""An HTTPRoute's rules, checked: each rule's matches validated, its filters translated
(`controlplane/routes/filters`) and its backendRefs resolved.

A match with a regular expression, a bad path, header, query parameter or method is
dropped; a rule with an unsupported or invalid filter or a backendRef weight outside
0-1,000,000 is dropped; a backendRef that does not resolve keeps its weight and gets a 500
for its share (ResolvedRefs False). Each is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from controlplane.model import (
    GRPCRoute,
    HTTPRoute,
    HTTPRouteMatch,
    HTTPRouteRule,
    NameValueMatch,
    PathMatch,
    ReferenceGrant,
    Service,
)
from controlplane.routes import names
from controlplane.routes.backends import ServiceKey, resolve_backend
from controlplane.routes.filters import rule_filters, rule_parts
from controlplane.routes.persistence import checked_persistence
from controlplane.routes.placement import Verdict
from controlplane.routes.precedence import Origin
from controlplane.snapshot import (
    RejectedInput,
    RouteFilter,
    RoutePath,
    SessionPersistence,
    WeightedBackend,
)
from peerplane import patterns

DROPPED_MATCH = HTTPRouteMatch(path=PathMatch("Dropped", ""))
"""A match its route's own kind already reported and dropped (a GRPCRoute's that a path
cannot say, `grpcroute.http_rules`): skipped, so the others keep their numbers."""


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
    # sessionPersistence, checked (None: absent or refused), and the backends it asks of:
    # (Service, backend name) of each resolved backendRef.
    persistence: SessionPersistence | None = None
    persisted: tuple[tuple[ServiceKey, str], ...] = ()


def _path(value: str, kind: str) -> RoutePath | None:
    if not patterns.is_path(value) or kind not in ("Exact", "PathPrefix"):
        return None
    if kind == "PathPrefix" and value != "/":
        value = value.rstrip("/") or "/"
    return RoutePath(kind, value)


class _PairKind(NamedTuple):
    """How one kind of name/value match (headers, query parameters) is checked and keyed."""

    noun: str  # in the refusal: "only Exact <noun> matches are served"
    separator: str  # between name and value in the refusal
    is_name: Callable[[str], bool]
    is_value: Callable[[str], bool]
    folds_case: bool  # header names are case-insensitive, query parameter names are not
    refusal: str  # for a name or value peerplane does not serve


_HEADER = _PairKind(
    "header",
    ": ",
    patterns.is_header_name,
    patterns.is_header_value,
    True,
    "not a header name and value peerplane serves",
)
_QUERY = _PairKind(
    "query parameter",
    "=",
    patterns.is_query_name,
    patterns.is_query_value,
    False,
    "not a query parameter peerplane serves",
)


def _exact_pairs(
    items: Sequence[NameValueMatch],
    field: str,
    kind: _PairKind,
    reject: Callable[[str, str, str], None],
) -> tuple[tuple[str, str], ...] | None:
    """The Exact name/value matches, the first of each name kept; None (reported) when
    one is not Exact or not a name and value peerplane serves."""
    found: dict[str, tuple[str, str]] = {}
    for index, item in enumerate(items):
        if item.type != "Exact":
            reject(
                f"{field}[{index}].type", item.type, f"only Exact {kind.noun} matches are served"
            )
            return None
        if not kind.is_name(item.name) or not kind.is_value(item.value):
            shown = f"{item.name}{kind.separator}{item.value}"
            reject(f"{field}[{index}]", shown, kind.refusal)
            return None
        found.setdefault(
            item.name.lower() if kind.folds_case else item.name, (item.name, item.value)
        )
    return tuple(found.values())


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
    headers = _exact_pairs(match.headers, "headers", _HEADER, reject)
    query = _exact_pairs(match.query_params, "queryParams", _QUERY, reject)
    if headers is None or query is None:
        return None
    if match.method and not patterns.is_method(match.method):
        reject("method", match.method, "not an HTTP method")
        return None
    return path, match.method, headers, query


def checked_rules(
    route: HTTPRoute | GRPCRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    rejections: list[RejectedInput],
    given: Sequence[HTTPRouteRule],
) -> tuple[list[CheckedRule], Verdict]:
    """The route's rules checked: `given` are its rules as HTTPRoute rules (a GRPCRoute's
    made so by `grpcroute.http_rules`), reported under the route's own kind."""
    rules: list[CheckedRule] = []
    resolved = Verdict(True, names.RESOLVED_REFS, "all references resolved")
    kind = type(route).__name__
    for index, rule in enumerate(given):
        where = f"spec.rules[{index}]"
        origin = Origin(kind, route.namespace, route.name, where)
        built = _rule(route, rule, index, origin, services, grants, rejections)
        if built is None:
            continue
        found, unresolved = built
        if unresolved is not None and resolved.ok:
            resolved = unresolved
        rules.append(found)
    return rules, resolved


def _rule(
    route: HTTPRoute | GRPCRoute,
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
    filters = rule_filters(rule.filters, rule.matches, where, origin, rejections)
    parts = rule_parts(rule, where, origin, rejections) if filters is not None else None
    if filters is None or parts is None:
        return None
    filters += parts
    matches = []
    for number, match in enumerate(rule.matches):
        if match is DROPPED_MATCH:
            continue
        checked = _match(match, f"{where}.matches[{number}]", origin, rejections)
        if checked is not None:
            matches.append(CheckedMatch(number, *checked))
    if not matches:
        return None
    backends: list[WeightedBackend] = []
    services_used: list[ServiceKey] = []
    persisted: list[tuple[ServiceKey, str]] = []
    unresolved: Verdict | None = None
    answers = next((f.answers for f in filters if f.answers), "")
    if not answers:
        for number, ref in enumerate(rule.backend_refs):
            found = resolve_backend(ref, route, services, grants)
            backends.append(WeightedBackend(found.backend, ref.weight))
            if found.service is not None:
                services_used.append(found.service)
                persisted.append((found.service, found.backend))
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
    persistence = checked_persistence(rule.session_persistence, where, origin, rejections)
    return (
        CheckedRule(
            index,
            tuple(matches),
            tuple(backends),
            tuple(services_used),
            filters,
            persistence,
            tuple(persisted) if persistence is not None else (),
        ),
        unresolved,
    )
