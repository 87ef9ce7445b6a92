"""The addresses a workload's Gateways and Ingresses publish (controlplane/routes/addresses.py):
a `publish-service` Service's load balancer, else the pods' host or pod addresses; and
what a Gateway's `spec.addresses` makes of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.model import GATEWAY_GROUP, GatewayAddress, LoadBalancerIngress, frozen_map
from controlplane.routes.addresses import (
    Published,
    gateway_addresses,
    pod_address,
    pod_addresses,
    published_addresses,
)
from controlplane.routes.status import StatusKey, route_statuses
from tests.helpers.builders import DEFAULT_PODS, haproxy_pod, replica_set, service, settings
from tests.helpers.route_builders import edge_pod, gateway, ingress, path, state

GATEWAY = StatusKey(GATEWAY_GROUP, "Gateway", "default", "web")
INGRESS = StatusKey("networking.k8s.io", "Ingress", "default", "i")
LABELS = frozen_map({"app.kubernetes.io/component": "haproxy"})


def ip(value: str) -> GatewayAddress:
    return GatewayAddress("IPAddress", value)


def host(value: str) -> GatewayAddress:
    return GatewayAddress("Hostname", value)


def pod(name: str, pod_ip: str, **change: Any) -> Any:
    return dataclasses.replace(haproxy_pod(name, pod_ip), labels=LABELS, **change)


def balancer(
    name: str = "haproxy-lb",
    *entries: LoadBalancerIngress,
    namespace: str = "haproxy-system",
    selector: dict[str, str] | None = None,
) -> Any:
    return dataclasses.replace(
        service(name, namespace=namespace, expose=False),
        selector=frozen_map(dict(LABELS) if selector is None else selector),
        load_balancer=entries,
    )


def conditions(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in body["conditions"]}


# ------------------------------------------------------------------ the pods' addresses


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, "10.1.0.5"),
        ({"host_network": True, "host_ip": "192.0.2.7"}, "192.0.2.7"),  # the node's
        ({"host_ip": "192.0.2.7"}, "10.1.0.5"),  # a pod network pod: its own
        ({"phase": "Pending"}, None),  # not serving yet
        ({"deleting": True}, None),  # going away
        ({"ip": ""}, None),
        ({"ip": "fe80::1%eth0"}, None),  # not an address a client can use
        ({"ip": "2001:DB8::0:1"}, "2001:db8::1"),  # canonical text
    ],
)
def test_a_pods_address_is_the_nodes_with_host_network_else_its_own(
    change: dict[str, Any], expected: str | None
) -> None:
    assert pod_address(pod("p", "10.1.0.5", **change)) == expected


def test_pod_addresses_are_deduplicated_and_sorted_numerically_ipv4_first() -> None:
    pods = [
        pod("a", "10.0.0.10"),
        pod("b", "2001:db8::1"),
        pod("c", "10.0.0.9"),
        pod("d", "10.9.0.1", host_network=True, host_ip="10.0.0.9"),  # same node as c
    ]
    assert pod_addresses(pods) == (ip("10.0.0.9"), ip("10.0.0.10"), ip("2001:db8::1"))
    assert pod_addresses(reversed(pods)) == pod_addresses(pods)


# ------------------------------------------------------------------ publish-service


def test_a_listed_service_selecting_the_workload_publishes_its_load_balancer() -> None:
    pods = {"haproxy-system/haproxy": [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")]}
    lb = balancer(
        "haproxy-lb",
        LoadBalancerIngress(hostname="LB.Example.com"),
        LoadBalancerIngress(ip="203.0.113.9"),
        LoadBalancerIngress(ip="203.0.113.9", hostname="x.example.com"),  # the IP, once
        LoadBalancerIngress(hostname="not a host"),  # the CRD would refuse it: left out
    )
    found = published_addresses(pods, [lb], {"haproxy-system/haproxy-lb"})
    assert found["haproxy-system/haproxy"] == Published(
        (ip("203.0.113.9"), host("lb.example.com")),
        "the load balancer of Service haproxy-system/haproxy-lb",
    )


def test_a_pending_load_balancer_publishes_no_address_rather_than_the_pods() -> None:
    pods = {"haproxy-system/haproxy": [pod("a", "10.0.0.1")]}
    found = published_addresses(pods, [balancer()], {"haproxy-system/haproxy-lb"})
    assert found["haproxy-system/haproxy"].addresses == ()


@pytest.mark.parametrize(
    ("lb", "publish"),
    [
        (balancer("haproxy-lb", LoadBalancerIngress(ip="203.0.113.9")), set()),  # not listed
        (  # listed, but in another namespace
            balancer("haproxy-lb", LoadBalancerIngress(ip="203.0.113.9"), namespace="team"),
            {"team/haproxy-lb"},
        ),
        (  # listed, selecting other pods
            balancer("haproxy-lb", LoadBalancerIngress(ip="203.0.113.9"), selector={"a": "b"}),
            {"haproxy-system/haproxy-lb"},
        ),
        (  # listed, without a selector: it selects nothing
            balancer("haproxy-lb", LoadBalancerIngress(ip="203.0.113.9"), selector={}),
            {"haproxy-system/haproxy-lb"},
        ),
    ],
)
def test_a_workload_no_listed_service_selects_publishes_its_pods(
    lb: Any, publish: set[str]
) -> None:
    pods = {"haproxy-system/haproxy": [pod("a", "10.0.0.1")]}
    found = published_addresses(pods, [lb], publish)["haproxy-system/haproxy"]
    assert found == Published((ip("10.0.0.1"),), "the pods of workload haproxy-system/haproxy")


# ------------------------------------------------------------------ spec.addresses

PUBLISHED = Published((ip("10.0.0.1"), ip("2001:db8::1"), host("lb.example.com")), "the pods")


@pytest.mark.parametrize(
    ("requested", "addresses", "problem"),
    [
        ((), PUBLISHED.addresses, None),
        ((ip("2001:DB8:0::1"),), (ip("2001:db8::1"),), None),  # compared canonically
        ((host("LB.example.com"), ip("10.0.0.1")), (host("lb.example.com"), ip("10.0.0.1")), None),
        ((ip("10.0.0.7"), ip("10.0.0.1")), (ip("10.0.0.1"),), "AddressNotUsable"),
        ((host("10.0.0.1"),), (), "AddressNotUsable"),  # the type counts
    ],
)
def test_spec_addresses_are_given_when_the_workload_has_them(
    requested: tuple[GatewayAddress, ...],
    addresses: tuple[GatewayAddress, ...],
    problem: str | None,
) -> None:
    given = gateway_addresses(requested, PUBLISHED)
    assert given.addresses == addresses
    assert (given.problem.reason if given.problem else None) == problem


def test_an_unusable_address_is_named_with_what_the_workload_has() -> None:
    given = gateway_addresses((ip("10.0.0.7"),), PUBLISHED)
    assert given.problem is not None
    assert "IPAddress 10.0.0.7" in given.problem.message
    assert "10.0.0.1, 2001:db8::1, lb.example.com" in given.problem.message


@pytest.mark.parametrize("requested", [(), (ip("10.0.0.1"),)])
def test_a_workload_without_address_leaves_the_gateway_not_assigned(
    requested: tuple[GatewayAddress, ...],
) -> None:
    given = gateway_addresses(requested, Published((), "the load balancer of Service x/y"))
    assert given.addresses == ()
    assert given.problem is not None
    assert (given.problem.reason, given.problem.message) == (
        "AddressNotAssigned",
        "no address yet: the load balancer of Service x/y has none",
    )


# ------------------------------------------------------------------ in the status documents


def test_a_host_network_daemonset_publishes_its_nodes() -> None:
    nodes = tuple(
        dataclasses.replace(p, host_network=True, host_ip=f"192.0.2.{i}")
        for i, p in enumerate(DEFAULT_PODS, start=1)
    )
    statuses = route_statuses(
        state(gateway(), ingress("i", [{"http": {"paths": [path("/", "Prefix")]}}]), pods=nodes)
    )
    assert statuses[GATEWAY]["addresses"] == [
        {"type": "IPAddress", "value": "192.0.2.1"},
        {"type": "IPAddress", "value": "192.0.2.2"},
    ]
    assert conditions(statuses[GATEWAY])["Programmed"] == ("True", "Programmed")
    assert statuses[INGRESS] == {
        "loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}]}
    }


def test_a_deployment_behind_a_load_balancer_publishes_its_ingress() -> None:
    pods = tuple(
        dataclasses.replace(p, owner=dataclasses.replace(p.owner, kind="ReplicaSet", name="h-1"))
        for p in (pod("h-1-a", "10.0.0.1"), pod("h-1-b", "10.0.0.2"))
    )
    lb = balancer("haproxy", LoadBalancerIngress(hostname="abc.elb.example.com"))
    cluster_state = state(
        gateway(),
        ingress("i", [{"http": {"paths": [path("/", "Prefix")]}}]),
        services=(service("shop"), lb),
        pods=pods,
        replica_sets=(replica_set("h-1", "haproxy"),),
        config=settings(**{"publish-service": "haproxy-system/haproxy"}),
    )
    statuses = route_statuses(cluster_state)
    assert statuses[GATEWAY]["addresses"] == [{"type": "Hostname", "value": "abc.elb.example.com"}]
    assert statuses[INGRESS] == {"loadBalancer": {"ingress": [{"hostname": "abc.elb.example.com"}]}}
    pending = dataclasses.replace(lb, load_balancer=())
    statuses = route_statuses(
        dataclasses.replace(cluster_state, services=(service("shop"), pending))
    )
    assert statuses[GATEWAY]["addresses"] == []
    assert conditions(statuses[GATEWAY])["Programmed"] == ("False", "AddressNotAssigned")
    assert conditions(statuses[GATEWAY])["Accepted"] == ("True", "Accepted")
    assert statuses[INGRESS] == {"loadBalancer": {}}


def test_each_workload_publishes_its_own_addresses() -> None:
    web = dataclasses.replace(
        gateway(), annotations=frozen_map({"peerplane.dev/workload": "haproxy-system/edge"})
    )
    statuses = route_statuses(state(web, pods=(*DEFAULT_PODS, edge_pod())))
    assert statuses[GATEWAY]["addresses"] == [{"type": "IPAddress", "value": "127.0.1.9"}]


def test_spec_addresses_the_workload_lacks_leave_the_gateway_accepted_not_programmed() -> None:
    web = dataclasses.replace(gateway(), addresses=(ip("127.0.1.2"), ip("198.51.100.1")))
    body = route_statuses(state(web))[GATEWAY]
    assert body["addresses"] == [{"type": "IPAddress", "value": "127.0.1.2"}]
    assert conditions(body) == {
        "Accepted": ("True", "Accepted"),
        "Programmed": ("False", "AddressNotUsable"),
    }
    usable = dataclasses.replace(web, addresses=(ip("127.0.1.2"),))
    body = route_statuses(state(usable))[GATEWAY]
    assert body["addresses"] == [{"type": "IPAddress", "value": "127.0.1.2"}]
    assert conditions(body)["Programmed"] == ("True", "Programmed")


def test_an_unsupported_address_type_is_not_accepted() -> None:
    web = dataclasses.replace(
        gateway(), addresses=(GatewayAddress("test/fake-invalid-type", "x"), ip("127.0.1.1"))
    )
    body = route_statuses(state(web))[GATEWAY]
    assert conditions(body)["Accepted"] == ("False", "UnsupportedAddress")
    assert conditions(body)["Programmed"][0] == "False"
    assert body["addresses"] == []


def test_a_gateway_lists_at_most_the_16_addresses_its_crd_allows() -> None:
    many = Published(tuple(ip(f"10.0.0.{i}") for i in range(1, 21)), "the pods")
    assert gateway_addresses((), many).addresses == many.addresses[:16]


def test_an_unusable_address_message_names_at_most_16_of_the_workloads() -> None:
    many = Published(tuple(ip(f"10.0.{i}.1") for i in range(1, 201)), "the pods")
    given = gateway_addresses((ip("10.9.9.9"),), many)
    assert given.problem is not None
    assert "10.0.16.1 and 184 more)" in given.problem.message
    assert "10.0.17.1" not in given.problem.message
