"""A GRPCRoute's rules as HTTPRoute rules: gRPC is HTTP/2 POSTs to `/<service>/<method>`.

A match on a service and method is the Exact path `/service/method`, a match on a service
alone the PathPrefix `/service` (element-wise: `/service/...`), a match on neither any
path; every one asks for method POST and keeps its header matches. The rules are then
checked, attached and ordered as an HTTPRoute's are (`httproute.route_outcome`), and the
backends they reach speak HTTP/2 (`proto h2`, `compute/protocol.py`) whatever their
Service port's appProtocol. What a path cannot say is reported and its match dropped: a
RegularExpression method match, a method without a service, a service or method name
that is not one.
"""

from __future__ import annotations

import re

from controlplane.model import (
    GRPCRoute,
    GRPCRouteMatch,
    HTTPRouteMatch,
    HTTPRouteRule,
    PathMatch,
)
from controlplane.routes.httprules import DROPPED_MATCH
from controlplane.routes.precedence import Origin
from controlplane.snapshot import RejectedInput

# A gRPC service is a dotted protobuf name ("grpc.health.v1.Health"), a method an
# identifier (the Gateway API CRD's own patterns).
_SERVICE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_][A-Za-z_0-9]*)*")
_METHOD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _http_match(
    match: GRPCRouteMatch, where: str, origin: Origin, rejections: list[RejectedInput]
) -> HTTPRouteMatch | None:
    """The HTTPRoute match of one GRPCRoute match, or None (reported)."""

    def reject(key: str, value: str, reason: str) -> None:
        rejections.append(origin.rejection(value, f"{reason}; match not served", f"{where}.{key}"))

    found = match.method
    path = PathMatch("PathPrefix", "/")
    if found is not None:
        if found.type != "Exact":
            reject("method.type", found.type, "only Exact method matches are served")
            return None
        if found.service and not _SERVICE.fullmatch(found.service):
            reject("method.service", found.service, "not a gRPC service name")
            return None
        if found.method and not _METHOD.fullmatch(found.method):
            reject("method.method", found.method, "not a gRPC method name")
            return None
        if found.method and not found.service:
            reject("method.method", found.method, "a method without a service is not served")
            return None
        if found.service and found.method:
            path = PathMatch("Exact", f"/{found.service}/{found.method}")
        elif found.service:
            path = PathMatch("PathPrefix", f"/{found.service}")
    return HTTPRouteMatch(path=path, headers=match.headers, method="POST")


def http_rules(route: GRPCRoute, rejections: list[RejectedInput]) -> tuple[HTTPRouteRule, ...]:
    """The route's rules as HTTPRoute rules, index for index and match for match: a match
    reported here is `DROPPED_MATCH` (skipped by `httprules`, the others keep their
    numbers), so a rule none of whose matches can be served is not served."""
    rules = []
    for index, rule in enumerate(route.rules):
        matches = []
        for number, match in enumerate(rule.matches):
            where = f"spec.rules[{index}].matches[{number}]"
            origin = Origin("GRPCRoute", route.namespace, route.name, where)
            found = _http_match(match, where, origin, rejections)
            matches.append(DROPPED_MATCH if found is None else found)
        rules.append(
            HTTPRouteRule(
                matches=tuple(matches),
                filters=rule.filters,
                backend_refs=rule.backend_refs,
                name=rule.name,
            )
        )
    return tuple(rules)
