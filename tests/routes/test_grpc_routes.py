"""GRPCRoutes: served as HTTPRoute rules (a method match the Exact path /service/method, a
service match the PathPrefix /service, method POST, header matches kept), what a path
cannot say reported, attachment and status as an HTTPRoute's (its own kind in the
status, the listener's allowedRoutes.kinds, attachedRoutes), and the backends it reaches
speaking HTTP/2. docs/annotations.md, "GRPCRoute"."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.compute import compute
from controlplane.model import GATEWAY_GROUP, RouteGroupKind
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.routes.table import compute_routes
from controlplane.snapshot import RoutePath, RouteRule
from controlplane.source.convert_gateway import reference_grant_from
from tests.helpers.builders import WORKLOAD, endpoint_slice, service
from tests.helpers.route_builders import gateway, grpc_route, prefix_rule, route, state, to

RPC_KEY = StatusKey(GATEWAY_GROUP, "GRPCRoute", "default", "rpc")


def rules_of(*objects: Any) -> list[RouteRule]:
    table = compute_routes(state(*objects), [WORKLOAD], 80, 10000)
    return [rule for listener in table.of(WORKLOAD).listeners for rule in listener.rules]


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    (entry,) = status["parents"]
    return {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}


def test_method_service_and_any_matches_become_paths_with_method_post() -> None:
    rpc = grpc_route(
        "rpc",
        [
            {
                "matches": [
                    {"method": {"service": "shop.Cart", "method": "Add"}},
                    {
                        "method": {"service": "shop.Cart"},
                        "headers": [{"name": "x-t", "value": "1"}],
                    },
                ],
                "backendRefs": [to("shop")],
            },
            {"backendRefs": [to("catalog")]},
        ],
        hostnames=("rpc.example.com",),
    )
    found = {(r.path, r.method, r.headers, r.backends[0].backend) for r in rules_of(gateway(), rpc)}
    assert found == {
        (RoutePath("Exact", "/shop.Cart/Add"), "POST", (), "default_shop_http"),
        (RoutePath("PathPrefix", "/shop.Cart"), "POST", (("x-t", "1"),), "default_shop_http"),
        (RoutePath("PathPrefix", "/"), "POST", (), "default_catalog_http"),
    }
    assert all(r.source.startswith("GRPCRoute default/rpc rule ") for r in rules_of(gateway(), rpc))


@pytest.mark.parametrize(
    ("method", "key", "reason"),
    [
        ({"type": "RegularExpression", "service": "shop\\..*"}, "method.type", "only Exact"),
        ({"method": "Add"}, "method.method", "a method without a service"),
        ({"service": "shop/Cart"}, "method.service", "not a gRPC service name"),
        ({"service": "shop.Cart", "method": "A/dd"}, "method.method", "not a gRPC method name"),
    ],
)
def test_a_match_a_path_cannot_say_is_reported_and_the_others_served(
    method: dict[str, str], key: str, reason: str
) -> None:
    rpc = grpc_route(
        "rpc",
        [
            {"matches": [{"method": method}], "backendRefs": [to("shop")]},
            {"matches": [{"method": {"service": "ok.Svc"}}], "backendRefs": [to("shop")]},
        ],
    )
    table = compute_routes(state(gateway(), rpc), [WORKLOAD], 80, 10000)
    (rejection,) = table.rejections
    assert (rejection.object, rejection.key) == (
        "GRPCRoute default/rpc",
        f"spec.rules[0].matches[0].{key}",
    )
    assert rejection.reason.startswith(reason) and "match not served" in rejection.reason
    assert [r.path for r in rules_of(gateway(), rpc)] == [RoutePath("PathPrefix", "/ok.Svc")]
    assert conditions(route_statuses(state(gateway(), rpc))[RPC_KEY])["Accepted"] == (
        "True",
        "Accepted",
    )


def test_status_attachment_and_attached_routes_as_an_httproutes() -> None:
    """A GRPCRoute and an HTTPRoute of the same name are two objects with two statuses;
    both count on the listener, whose supportedKinds name both."""
    rpc = grpc_route("rpc", [{"backendRefs": [to("shop")]}], hostnames=("rpc.example.com",))
    missing = grpc_route(
        "broken", [{"backendRefs": [to("nowhere")]}], hostnames=("broken.example.com",)
    )
    http = route("rpc", [prefix_rule("/", [to("shop")])], hostnames=("web.example.com",))
    statuses = route_statuses(state(gateway(), rpc, missing, http))
    assert conditions(statuses[RPC_KEY]) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
    }
    broken = statuses[StatusKey(GATEWAY_GROUP, "GRPCRoute", "default", "broken")]
    assert conditions(broken)["ResolvedRefs"] == ("False", "BackendNotFound")
    assert StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", "rpc") in statuses
    (listener,) = statuses[StatusKey(GATEWAY_GROUP, "Gateway", "default", "web")]["listeners"]
    assert listener["attachedRoutes"] == 3
    assert listener["supportedKinds"] == [
        {"group": GATEWAY_GROUP, "kind": "HTTPRoute"},
        {"group": GATEWAY_GROUP, "kind": "GRPCRoute"},
    ]


def test_a_listener_that_allows_httproutes_only_refuses_a_grpcroute() -> None:
    web = gateway()
    only_http = dataclasses.replace(
        web,
        listeners=tuple(
            dataclasses.replace(li, allowed_kinds=(RouteGroupKind(GATEWAY_GROUP, "HTTPRoute"),))
            for li in web.listeners
        ),
    )
    rpc = grpc_route("rpc", [{"backendRefs": [to("shop")]}])
    statuses = route_statuses(state(only_http, rpc))
    assert conditions(statuses[RPC_KEY])["Accepted"] == ("False", "NotAllowedByListeners")
    assert rules_of(only_http, rpc) == []


def test_the_backends_a_grpcroute_reaches_speak_h2_whatever_their_app_protocol() -> None:
    rpc = grpc_route("rpc", [{"backendRefs": [to("shop")]}])
    http = route("web", [prefix_rule("/", [to("catalog")])])
    cluster = state(
        gateway(),
        rpc,
        http,
        endpoint_slices=(
            endpoint_slice("shop", ["10.0.0.5"]),
            endpoint_slice("catalog", ["10.0.0.6"]),
        ),
        services=(service("shop", expose=False), service("catalog", expose=False)),
    )
    backends = {b.name: b.protocol for b in compute(cluster, {}).workloads[WORKLOAD].backends}
    assert backends == {"default_shop_http": "h2", "default_catalog_http": ""}


def test_a_dropped_match_leaves_the_others_their_numbers() -> None:
    """Match 1 of rule 0 is reported under its own index, and match 2 is served as
    "match 2", after match 1 was dropped (a regex)."""
    rpc = grpc_route(
        "rpc",
        [
            {
                "matches": [
                    {"method": {"service": "a.A"}},
                    {"method": {"type": "RegularExpression", "service": "b\\..*"}},
                    {"method": {"service": "c.C"}, "headers": [{"name": "bad name", "value": "1"}]},
                    {"method": {"service": "d.D"}},
                ],
                "backendRefs": [to("shop")],
            }
        ],
    )
    table = compute_routes(state(gateway(), rpc), [WORKLOAD], 80, 10000)
    assert [r.key for r in table.rejections] == [
        "spec.rules[0].matches[1].method.type",
        "spec.rules[0].matches[2].headers[0]",
    ]
    assert sorted(r.source for r in rules_of(gateway(), rpc)) == [
        "GRPCRoute default/rpc rule 0 match 0",
        "GRPCRoute default/rpc rule 0 match 3",
    ]


@pytest.mark.parametrize(
    ("granted_kind", "resolved"),
    [("HTTPRoute", ("False", "RefNotPermitted")), ("GRPCRoute", ("True", "ResolvedRefs"))],
)
def test_a_cross_namespace_backend_needs_a_grant_for_grpcroutes(
    granted_kind: str, resolved: tuple[str, str]
) -> None:
    """A ReferenceGrant names the kind it lets in: one for HTTPRoutes does not let a
    GRPCRoute of the same namespace reference the Service."""
    grant = reference_grant_from(
        {
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {
                "from": [{"group": GATEWAY_GROUP, "kind": granted_kind, "namespace": "default"}],
                "to": [{"group": "", "kind": "Service"}],
            },
        }
    )
    rpc = grpc_route("rpc", [{"backendRefs": [to("shop", namespace="team")]}])
    cluster = state(
        gateway(), rpc, grant, services=(service("shop", namespace="team"), service("catalog"))
    )
    assert conditions(route_statuses(cluster)[RPC_KEY])["ResolvedRefs"] == resolved
