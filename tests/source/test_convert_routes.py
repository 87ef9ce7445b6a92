"""Route objects to model types (controlplane/source/convert_gateway.py, convert_routes.py,
convert_ingress.py): good objects with the CRDs' defaults filled in, and every bad shape a
ManifestError naming where it is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controlplane.model import (
    GATEWAY_GROUP,
    HeaderModifier,
    HTTPBackendRef,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRetry,
    HTTPRouteRule,
    HTTPRouteTimeouts,
    IngressBackend,
    NameValueMatch,
    ParentRef,
    PathMatch,
    RequestRedirect,
    RouteGroupKind,
    SelectorRequirement,
    URLRewrite,
)
from controlplane.source.convert import ManifestError
from controlplane.source.convert_gateway import (
    gateway_class_from,
    gateway_from,
    namespace_from,
    reference_grant_from,
)
from controlplane.source.convert_ingress import ingress_class_from, ingress_from
from controlplane.source.convert_routes import http_route_from

GATEWAY: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "Gateway",
    "metadata": {
        "name": "web",
        "namespace": "infra",
        "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {"peerplane.dev/workload": "haproxy-system/haproxy"},
    },
    "spec": {
        "gatewayClassName": "peerplane",
        "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP"},
            {
                "name": "shop",
                "port": 8080,
                "protocol": "HTTP",
                "hostname": "*.example.com",
                "allowedRoutes": {
                    "namespaces": {
                        "from": "Selector",
                        "selector": {
                            "matchLabels": {"team": "shop"},
                            "matchExpressions": [
                                {"key": "env", "operator": "In", "values": ["prod", "dev"]}
                            ],
                        },
                    },
                    "kinds": [{"kind": "HTTPRoute"}],
                },
            },
        ],
        "addresses": [{"value": "10.0.0.9"}],
    },
}

ROUTE: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "shop", "namespace": "shop", "generation": 2},
    "spec": {
        "parentRefs": [{"name": "web", "namespace": "infra", "sectionName": "shop"}],
        "hostnames": ["shop.example.com"],
        "rules": [
            {
                "matches": [
                    {
                        "path": {"type": "Exact", "value": "/cart"},
                        "headers": [{"name": "x-canary", "value": "1"}],
                        "queryParams": [{"type": "Exact", "name": "v", "value": "2"}],
                        "method": "POST",
                    },
                    {"headers": [{"name": "x-any", "value": "y"}]},
                ],
                "filters": [
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {
                            "set": [{"name": "x-a", "value": "1"}],
                            "add": [{"name": "x-b", "value": "2"}],
                            "remove": ["x-c"],
                        },
                    },
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "hostname": "x",
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": ""},
                        },
                    },
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"set": [{"name": "x-r", "value": "1"}]},
                    },
                    {"type": "RequestMirror", "requestMirror": {}},
                ],
                "backendRefs": [
                    {"name": "cart", "port": 80, "weight": 90},
                    {"name": "cart-v2", "namespace": "other", "port": 80},
                ],
            },
            {
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {
                            "scheme": "https",
                            "statusCode": 301,
                            "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"},
                        },
                    }
                ]
            },
        ],
    },
}

INGRESS: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "Ingress",
    "metadata": {"name": "shop", "namespace": "shop"},
    "spec": {
        "ingressClassName": "peerplane",
        "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
        "rules": [
            {
                "host": "shop.example.com",
                "http": {
                    "paths": [
                        {
                            "path": "/api",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "api", "port": {"name": "http"}}},
                        },
                        {
                            "path": "/static",
                            "pathType": "Exact",
                            "backend": {
                                "resource": {
                                    "apiGroup": "k8s.example.com",
                                    "kind": "Bucket",
                                    "name": "assets",
                                }
                            },
                        },
                    ]
                },
            }
        ],
    },
}

GRANT: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1beta1",
    "kind": "ReferenceGrant",
    "metadata": {"name": "from-shop", "namespace": "other"},
    "spec": {
        "from": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": "shop"}],
        "to": [{"group": "", "kind": "Service"}, {"kind": "Service", "name": "cart-v2"}],
    },
}


def test_gateway_with_listeners_selectors_and_addresses() -> None:
    gateway = gateway_from(GATEWAY)
    assert (gateway.namespace, gateway.name, gateway.generation) == ("infra", "web", 3)
    assert gateway.gateway_class_name == "peerplane"
    assert gateway.annotations["peerplane.dev/workload"] == "haproxy-system/haproxy"
    plain, shop = gateway.listeners
    assert (plain.port, plain.protocol, plain.hostname, plain.allowed_from) == (
        80,
        "HTTP",
        "",
        "Same",
    )
    assert plain.allowed_selector is None and plain.allowed_kinds == ()
    assert (shop.hostname, shop.allowed_from) == ("*.example.com", "Selector")
    assert shop.allowed_selector is not None
    assert dict(shop.allowed_selector.match_labels) == {"team": "shop"}
    assert shop.allowed_selector.match_expressions == (
        SelectorRequirement("env", "In", ("prod", "dev")),
    )
    assert shop.allowed_kinds == (RouteGroupKind(GATEWAY_GROUP, "HTTPRoute"),)
    assert [(a.type, a.value) for a in gateway.addresses] == [("IPAddress", "10.0.0.9")]


def test_http_route_with_defaults_filled_in() -> None:
    route = http_route_from(ROUTE)
    assert route.parent_refs == (ParentRef("web", GATEWAY_GROUP, "Gateway", "infra", "shop", 0),)
    assert route.hostnames == ("shop.example.com",)
    first, second = route.rules
    exact, headers_only = first.matches
    assert exact == HTTPRouteMatch(
        PathMatch("Exact", "/cart"),
        (NameValueMatch("Exact", "x-canary", "1"),),
        (NameValueMatch("Exact", "v", "2"),),
        "POST",
    )
    assert headers_only.path == PathMatch("PathPrefix", "/")
    assert first.filters == (
        HTTPRouteFilter(
            "RequestHeaderModifier",
            request_header_modifier=HeaderModifier((("x-a", "1"),), (("x-b", "2"),), ("x-c",)),
        ),
        HTTPRouteFilter("URLRewrite", url_rewrite=URLRewrite("x", "ReplacePrefixMatch", "")),
        HTTPRouteFilter(
            "ResponseHeaderModifier", response_header_modifier=HeaderModifier((("x-r", "1"),))
        ),
        HTTPRouteFilter("RequestMirror"),  # kept by type, for compute to report
    )
    assert first.backend_refs == (
        HTTPBackendRef("cart", port=80, weight=90),
        HTTPBackendRef("cart-v2", namespace="other", port=80, weight=1),
    )
    assert second.matches == (HTTPRouteMatch(),)
    assert second.filters[0].request_redirect == RequestRedirect(
        scheme="https", status_code=301, path_type="ReplaceFullPath", path_value="/new"
    )
    assert second.backend_refs == ()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("spec.rules.1.filters.0.requestRedirect.port", 99_999, "redirect port"),
        ("spec.rules.1.filters.0.requestRedirect.port", 0, "redirect port"),
        ("spec.rules.0.backendRefs.0.weight", -5, "weight"),
        ("spec.rules.0.backendRefs.0.weight", 1_000_001, "weight"),
    ],
)
def test_a_rule_value_out_of_range_is_kept_for_compute_to_refuse_that_rule(
    path: str, value: int, field: str
) -> None:
    """A redirect port of 99999 or a weight of -5 refused the whole HTTPRoute, its good
    rules with it. Kept as written, compute refuses that rule alone (tests/routes)."""
    converted = http_route_from(changed(ROUTE, path, value))
    first, second = converted.rules
    if field == "weight":
        assert first.backend_refs[0].weight == value
    else:
        redirect = second.filters[0].request_redirect
        assert redirect is not None and redirect.port == value


def test_rule_timeouts_and_retry_are_kept_as_written() -> None:
    """Durations stay text (an unquoted number too): compute parses them and refuses a bad
    one for its rule alone."""
    document = changed(ROUTE, "spec.rules.0.timeouts", {"request": "10s", "backendRequest": 5})
    document = changed(document, "spec.rules.1.retry", {"codes": [500, 503], "attempts": 3})
    first, second = http_route_from(document).rules
    assert first.timeouts == HTTPRouteTimeouts(request="10s", backend_request="5")
    assert first.retry is None and second.timeouts is None
    assert second.retry == HTTPRouteRetry(codes=(500, 503), attempts=3, backoff=None)


def test_http_route_without_rules_has_one_catch_all_rule() -> None:
    route = http_route_from({"metadata": {"name": "r"}, "spec": {"parentRefs": [{"name": "g"}]}})
    assert route.namespace == "default" and route.rules == (HTTPRouteRule(),)
    assert route.rules[0].matches == (HTTPRouteMatch(PathMatch("PathPrefix", "/")),)


def test_ingress_backends_by_port_number_name_and_resource() -> None:
    ingress = ingress_from(INGRESS)
    assert ingress.ingress_class_name == "peerplane"
    assert ingress.default_backend == IngressBackend("fallback", port_number=80)
    (rule,) = ingress.rules
    api, static = rule.paths
    assert (rule.host, api.path, api.path_type) == ("shop.example.com", "/api", "Prefix")
    assert api.backend == IngressBackend("api", port_name="http")
    assert static.backend == IngressBackend(resource="Bucket/assets")


def test_classes_grants_and_namespaces() -> None:
    gateway_class = gateway_class_from(
        {
            "kind": "GatewayClass",
            "metadata": {"name": "peerplane", "generation": 1},
            "spec": {"controllerName": "peerplane.dev/gateway-controller"},
        }
    )
    assert gateway_class.controller_name == "peerplane.dev/gateway-controller"
    ingress_class = ingress_class_from(
        {
            "kind": "IngressClass",
            "metadata": {
                "name": "peerplane",
                "annotations": {"ingressclass.kubernetes.io/is-default-class": True},
            },
            "spec": {"controller": "peerplane.dev/ingress-controller"},
        }
    )
    assert ingress_class.annotations["ingressclass.kubernetes.io/is-default-class"] == "true"
    grant = reference_grant_from(GRANT)
    assert [(f.kind, f.namespace) for f in grant.from_] == [("HTTPRoute", "shop")]
    assert [(t.kind, t.name) for t in grant.to] == [("Service", ""), ("Service", "cart-v2")]
    namespace = namespace_from({"metadata": {"name": "shop", "labels": {"team": "shop"}}})
    assert (namespace.name, dict(namespace.labels)) == ("shop", {"team": "shop"})


def changed(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `document` with the node at the dotted `path` set (or deleted when
    `value` is DELETE); digits index lists."""
    copied = copy.deepcopy(document)
    *parents, last = path.split(".")
    node: Any = copied
    for step in parents:
        node = node[int(step)] if step.isdigit() else node[step]
    key: Any = int(last) if last.isdigit() else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return copied


DELETE = object()

BAD = [
    (gateway_from, GATEWAY, "spec.gatewayClassName", DELETE, "spec.gatewayClassName is missing"),
    (gateway_from, GATEWAY, "spec.listeners", [], "spec.listeners is empty"),
    (gateway_from, GATEWAY, "spec.listeners.0.port", 0, "spec.listeners[0].port 0 is not in"),
    (
        gateway_from,
        GATEWAY,
        "spec.listeners.0.port",
        "80",
        "spec.listeners[0].port is not an integer",
    ),
    (gateway_from, GATEWAY, "spec.listeners.1.name", "http", "name 'http' is used twice"),
    (
        gateway_from,
        GATEWAY,
        "spec.listeners.0.protocol",
        DELETE,
        "spec.listeners[0].protocol is missing",
    ),
    (
        gateway_from,
        GATEWAY,
        "spec.listeners.1.allowedRoutes.namespaces.selector.matchExpressions.0.operator",
        "Gt",
        "operator 'Gt' is not one of",
    ),
    (
        gateway_from,
        GATEWAY,
        "spec.listeners.1.allowedRoutes.kinds",
        {"kind": "x"},
        "kinds is not a list",
    ),
    (gateway_from, GATEWAY, "spec.addresses.0", "10.0.0.9", "spec.addresses[0] is not a map"),
    (gateway_from, GATEWAY, "metadata.generation", "3", "metadata.generation is not an integer"),
    (
        http_route_from,
        ROUTE,
        "spec.parentRefs.0.name",
        DELETE,
        "spec.parentRefs[0].name is missing",
    ),
    (http_route_from, ROUTE, "spec.parentRefs.0.port", 70000, "spec.parentRefs[0].port 70000"),
    (http_route_from, ROUTE, "spec.hostnames.0", 5, "spec.hostnames[0] is not a string"),
    (
        http_route_from,
        ROUTE,
        "spec.rules.0.matches.0.path",
        "/cart",
        "spec.rules[0].matches[0].path is not a map",
    ),
    (
        http_route_from,
        ROUTE,
        "spec.rules.0.matches.0.headers.0.name",
        DELETE,
        "headers[0].name is missing",
    ),
    (http_route_from, ROUTE, "spec.rules.0.matches.0.method", ["GET"], "method is not a string"),
    (
        http_route_from,
        ROUTE,
        "spec.rules.0.filters.0.type",
        DELETE,
        "spec.rules[0].filters[0].type is missing",
    ),
    (
        http_route_from,
        ROUTE,
        "spec.rules.0.filters.0.requestHeaderModifier.remove",
        "x-c",
        "remove is not a list",
    ),
    (http_route_from, ROUTE, "spec.rules.0.backendRefs.0.weight", True, "weight is not an integer"),
    (
        http_route_from,
        ROUTE,
        "spec.rules.1.filters.0.requestRedirect.statusCode",
        "301",
        "statusCode is not an integer",
    ),
    (http_route_from, ROUTE, "spec.rules", {"matches": []}, "spec.rules is not a list"),
    (
        ingress_from,
        INGRESS,
        "spec.defaultBackend",
        {},
        "spec.defaultBackend has neither service nor resource",
    ),
    (
        ingress_from,
        INGRESS,
        "spec.defaultBackend.service.port",
        {"number": 80, "name": "http"},
        "needs exactly one of number and name",
    ),
    (
        ingress_from,
        INGRESS,
        "spec.defaultBackend.service.port",
        {},
        "needs exactly one of number and name",
    ),
    (ingress_from, INGRESS, "spec.rules.0.http.paths.0.pathType", DELETE, "pathType is missing"),
    (ingress_from, INGRESS, "spec.rules.0.host", 1, "spec.rules[0].host is not a string"),
    (
        ingress_from,
        INGRESS,
        "spec.rules.0.http.paths.1.backend.resource.kind",
        DELETE,
        "resource.kind is missing",
    ),
    (
        reference_grant_from,
        GRANT,
        "spec.from.0.namespace",
        DELETE,
        "spec.from[0].namespace is missing",
    ),
    (reference_grant_from, GRANT, "spec.to.0", [], "spec.to[0] is not a map"),
    (http_route_from, ROUTE, "spec.rules.0.timeouts", "1s", "spec.rules[0].timeouts is not a map"),
    (http_route_from, ROUTE, "spec.rules.0.retry", {"codes": ["5xx"]}, "codes[0] is not an int"),
]


@pytest.mark.parametrize(
    ("convert", "document", "path", "value", "reason"),
    BAD,
    ids=[f"{c.__name__}:{p}" for c, _, p, _, _ in BAD],
)
def test_bad_shapes_are_manifest_errors_naming_the_field(
    convert: Any, document: dict[str, Any], path: str, value: Any, reason: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        convert(changed(document, path, value))
    assert reason in str(caught.value), str(caught.value)


def test_cluster_scoped_kinds_need_their_controller_fields() -> None:
    with pytest.raises(ManifestError, match=r"spec\.controllerName is missing"):
        gateway_class_from({"metadata": {"name": "x"}, "spec": {}})
    with pytest.raises(ManifestError, match=r"metadata\.name is missing"):
        namespace_from({"metadata": {}})
    with pytest.raises(ManifestError, match=r"spec\.controller is not a string"):
        ingress_class_from({"metadata": {"name": "x"}, "spec": {"controller": 5}})
