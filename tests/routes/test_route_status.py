"""The status documents of the route objects (controlplane/routes/status.py): one table
row per condition and reason, asserted on the bodies the status writer would send."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.compute import Computer
from controlplane.model import GATEWAY_GROUP
from controlplane.routes.status import StatusKey, StatusMemo, route_statuses
from controlplane.source.convert_gateway import gateway_class_from, reference_grant_from
from tests.bench.route_table import http_route, routed_cluster
from tests.helpers.builders import DEFAULT_PODS, service
from tests.helpers.route_builders import (
    edge_pod,
    gateway,
    ingress,
    path,
    prefix_rule,
    route,
    state,
    to,
)

GATEWAY = StatusKey(GATEWAY_GROUP, "Gateway", "default", "web")


def conditions(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in body["conditions"]}


def parent(statuses: dict[StatusKey, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    (key,) = [key for key in statuses if key.kind == "HTTPRoute" and key.name == "r"]
    (entry,) = statuses[key]["parents"]
    assert entry["controllerName"] == "peerplane.dev/gateway-controller"
    return conditions(entry)


SERVED = [prefix_rule("/", [to("shop")])]


@pytest.mark.parametrize(
    ("objects", "accepted", "resolved"),
    [
        ((gateway(), route("r", SERVED)), ("True", "Accepted"), ("True", "ResolvedRefs")),
        (
            (
                gateway(),
                route(
                    "r", SERVED, namespace="team", parent={"name": "web", "namespace": "default"}
                ),
            ),
            ("False", "NotAllowedByListeners"),
            ("False", "BackendNotFound"),  # team/shop: references are checked apart
        ),
        (
            (gateway(), route("r", SERVED, parent={"name": "web", "sectionName": "https"})),
            ("False", "NoMatchingParent"),
            ("True", "ResolvedRefs"),
        ),
        (
            (gateway(), route("r", SERVED, parent={"name": "web", "port": 9999})),
            ("False", "NoMatchingParent"),
            ("True", "ResolvedRefs"),
        ),
        (
            (gateway(hostname="*.example.com"), route("r", SERVED, hostnames=("a.example.org",))),
            ("False", "NoMatchingListenerHostname"),
            ("True", "ResolvedRefs"),
        ),
        (
            (
                gateway(),
                route(
                    "r", [{"matches": [{"path": {"type": "RegularExpression", "value": "/.*"}}]}]
                ),
            ),
            ("False", "UnsupportedValue"),
            ("True", "ResolvedRefs"),
        ),
        (
            (gateway(), route("r", SERVED, hostnames=("Not A Host",))),
            ("False", "UnsupportedValue"),
            ("True", "ResolvedRefs"),
        ),
        (
            (gateway(), route("r", [prefix_rule("/", [to("missing")])])),
            ("True", "Accepted"),
            ("False", "BackendNotFound"),
        ),
        (
            (gateway(), route("r", [prefix_rule("/", [to("shop", namespace="team")])])),
            ("True", "Accepted"),
            ("False", "RefNotPermitted"),
        ),
        (
            (
                gateway(),
                route(
                    "r",
                    [prefix_rule("/", [{"name": "b", "group": "example.com", "kind": "Bucket"}])],
                ),
            ),
            ("True", "Accepted"),
            ("False", "InvalidKind"),
        ),
    ],
)
def test_http_route_parent_conditions(
    objects: tuple[Any, ...], accepted: tuple[str, str], resolved: tuple[str, str]
) -> None:
    found = parent(route_statuses(state(*objects)))
    assert found == {"Accepted": accepted, "ResolvedRefs": resolved}


def test_a_reference_grant_resolves_the_cross_namespace_reference() -> None:
    grant = reference_grant_from(
        {
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {
                "from": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": "default"}],
                "to": [{"group": "", "kind": "Service"}],
            },
        }
    )
    objects = (gateway(), route("r", [prefix_rule("/", [to("shop", namespace="team")])]), grant)
    found = parent(route_statuses(state(*objects, services=(service("shop", namespace="team"),))))
    assert found["ResolvedRefs"] == ("True", "ResolvedRefs")


def test_routes_of_other_controllers_and_gateways_get_no_status() -> None:
    theirs = gateway_class_from(
        {"metadata": {"name": "other"}, "spec": {"controllerName": "example.com/gateway"}}
    )
    foreign = dataclasses.replace(gateway(name="foreign"), gateway_class_name="other")
    statuses = route_statuses(
        state(theirs, foreign, route("r", SERVED, parent={"name": "foreign"}))
    )
    assert [key.kind for key in statuses] == ["GatewayClass"]  # ours only
    assert (
        statuses[StatusKey(GATEWAY_GROUP, "GatewayClass", "", "peerplane")]["conditions"][0][
            "status"
        ]
        == "True"
    )


def test_gateway_conditions_listeners_attached_routes_and_addresses() -> None:
    listeners = gateway()
    https = dataclasses.replace(listeners.listeners[0], name="tls", port=8443, protocol="UDP")
    web = dataclasses.replace(listeners, listeners=(*listeners.listeners, https), generation=4)
    statuses = route_statuses(state(web, route("r", SERVED), route("r2", SERVED)))
    body = statuses[GATEWAY]
    assert conditions(body) == {  # accepted for its valid listener, saying one is not
        "Accepted": ("True", "ListenersNotValid"),
        "Programmed": ("True", "Programmed"),
    }
    assert "not served: listener tls" in body["conditions"][0]["message"]
    assert {c["observedGeneration"] for c in body["conditions"]} == {4}
    assert body["addresses"] == [
        {"type": "IPAddress", "value": "127.0.1.1"},
        {"type": "IPAddress", "value": "127.0.1.2"},
    ]
    http, tls = body["listeners"]
    assert (http["name"], http["attachedRoutes"]) == ("http", 2)
    assert conditions(http) == {
        "Accepted": ("True", "Accepted"),
        "Programmed": ("True", "Programmed"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Conflicted": ("False", "NoConflicts"),
    }
    assert http["supportedKinds"] == [
        {"group": GATEWAY_GROUP, "kind": "HTTPRoute"},
        {"group": GATEWAY_GROUP, "kind": "GRPCRoute"},
    ]
    assert (tls["attachedRoutes"], conditions(tls)["Accepted"]) == (
        0,
        ("False", "UnsupportedProtocol"),
    )
    assert conditions(tls)["Programmed"][0] == "False"


@pytest.mark.parametrize(
    ("change", "listener", "reason"),
    [
        ({"port": 10000}, "Accepted", ("False", "PortUnavailable")),  # the peers port
        ({"hostname": "Bad Host"}, "Accepted", ("False", "UnsupportedValue")),
    ],
)
def test_listener_conditions(
    change: dict[str, Any], listener: str, reason: tuple[str, str]
) -> None:
    web = gateway()
    web = dataclasses.replace(web, listeners=(dataclasses.replace(web.listeners[0], **change),))
    body = route_statuses(state(web))[GATEWAY]
    assert conditions(body["listeners"][0])[listener] == reason
    assert conditions(body)["Accepted"] == ("False", "ListenersNotValid")


def test_invalid_route_kinds_are_a_listener_resolved_refs_false() -> None:
    from controlplane.model import RouteGroupKind

    web = gateway()
    only_tcp = dataclasses.replace(
        web.listeners[0], allowed_kinds=(RouteGroupKind(GATEWAY_GROUP, "TCPRoute"),)
    )
    body = route_statuses(state(dataclasses.replace(web, listeners=(only_tcp,))))[GATEWAY]
    (listener,) = body["listeners"]
    assert conditions(listener)["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert listener["supportedKinds"] == []


def test_a_listener_with_some_invalid_route_kinds_carries_the_valid_ones() -> None:
    """The conformance suite's GatewayInvalidRouteKind: kinds [InvalidRoute, HTTPRoute] is
    ResolvedRefs False (InvalidRouteKinds), supportedKinds [HTTPRoute], and the listener
    still serves its HTTPRoutes."""
    from controlplane.model import RouteGroupKind

    web = gateway()
    mixed = dataclasses.replace(
        web.listeners[0],
        allowed_kinds=(
            RouteGroupKind(GATEWAY_GROUP, "InvalidRoute"),
            RouteGroupKind(GATEWAY_GROUP, "HTTPRoute"),
        ),
    )
    statuses = route_statuses(
        state(dataclasses.replace(web, listeners=(mixed,)), route("r", SERVED))
    )
    (listener,) = statuses[GATEWAY]["listeners"]
    assert conditions(listener)["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert "InvalidRoute" in listener["conditions"][2]["message"]
    assert listener["supportedKinds"] == [{"group": GATEWAY_GROUP, "kind": "HTTPRoute"}]
    assert conditions(listener)["Programmed"] == ("True", "Programmed")
    assert listener["attachedRoutes"] == 1
    assert parent(statuses)["Accepted"] == ("True", "Accepted")


def test_a_gateway_naming_no_workload_of_two_is_not_accepted() -> None:
    statuses = route_statuses(
        state(gateway(), route("r", SERVED), pods=(*DEFAULT_PODS, edge_pod()))
    )
    assert conditions(statuses[GATEWAY]) == {
        "Accepted": ("False", "InvalidParameters"),
        "Programmed": ("False", "Invalid"),
    }
    assert statuses[GATEWAY]["addresses"] == []
    assert parent(statuses)["Accepted"] == ("False", "NoMatchingParent")


def test_ingress_load_balancer_is_the_workloads_pod_ips() -> None:
    statuses = route_statuses(state(ingress("i", [{"http": {"paths": [path("/", "Prefix")]}}])))
    assert statuses[StatusKey("networking.k8s.io", "Ingress", "default", "i")] == {
        "loadBalancer": {"ingress": [{"ip": "127.0.1.1"}, {"ip": "127.0.1.2"}]}
    }
    other = ingress("o", [], ingressClassName="nginx")
    assert StatusKey("networking.k8s.io", "Ingress", "default", "o") not in route_statuses(
        state(other)
    )


def test_a_route_change_builds_that_routes_status_alone() -> None:
    """With thousands of routes the writer gets, for each unchanged route, the very dict
    it wrote last time (its outcome is the same object): only the changed route's body is
    built again, and equal to what a fresh call builds."""
    computer, memo = Computer(), StatusMemo()
    cluster_state = routed_cluster(40)
    computer.compute(cluster_state, {})
    table = computer.route_table
    first = route_statuses(cluster_state, table=table, memo=memo)
    assert memo.built == 40
    changed = list(cluster_state.http_routes)
    changed[7] = http_route(7, version=1)
    cluster_state = dataclasses.replace(cluster_state, http_routes=tuple(changed))
    computer.compute(cluster_state, {})
    second = route_statuses(cluster_state, table=computer.route_table, memo=memo)
    assert memo.built == 1
    key = StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", "r-8")
    assert second[key] is first[key]
    assert second == route_statuses(cluster_state, table=computer.route_table)
