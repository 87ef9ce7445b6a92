"""A route table updated for changed HTTPRoutes alone (controlplane/routes/table_update.py)
equals the table computed from scratch, over random sequences of route changes: routes
added, removed, re-pointed, their hostnames changed, a route taking another namespace's
hostname, conflicting matches, beside Ingress rules, a hostname listener and a wildcard
listener."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from controlplane.compute import Computer, compute
from controlplane.model import ClusterState
from controlplane.publish import Encoder, encode
from controlplane.routes.finalize import referenced
from controlplane.routes.route_computer import RouteComputer
from controlplane.routes.table import RouteTable, compute_routes
from controlplane.settings.resolver import Resolver
from tests.helpers.builders import service
from tests.helpers.route_builders import (
    gateway,
    grpc_route,
    ingress,
    path,
    prefix,
    route,
    state,
    to,
)

OLD, NEW = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
HOSTS = (
    "h0.example.com",
    "h1.example.com",
    "h2.example.com",
    "h3.example.com",
    "h4.example.com",
    "h5.example.com",
    "l1.example.com",  # a listener's hostname
    "ing.example.com",  # an Ingress rule's
    "x.wild.example.com",  # under the wildcard listener
)
SERVICES = (
    service("shop"),
    service("catalog"),
    service("bsvc", namespace="tenant-b", created=NEW),
)
BACKENDS = {"default": ("shop", "catalog"), "tenant-b": ("bsvc",)}
REFS = ["haproxy-system/haproxy"]
ALL = {"from": "All"}


def _static() -> tuple[Any, ...]:
    return (
        gateway("web", port=8080, allowed=ALL, created=OLD),
        gateway("bgw", namespace="tenant-b", port=8080, hostname="h1.example.com", created=NEW),
        gateway("named", port=8080, hostname="l1.example.com", allowed=ALL, created=OLD),
        gateway("wild", port=9090, hostname="*.wild.example.com", allowed=ALL, created=OLD),
        ingress(
            "shop",
            [{"host": "ing.example.com", "http": {"paths": [path("/", "Prefix", svc="shop")]}}],
        ),
    )


def _route(rng: random.Random, name: str) -> Any:
    parent = rng.choice(("web", "web", "web", "web", "bgw", "named", "wild"))
    namespace = "tenant-b" if parent == "bgw" else rng.choice(("default", "default", "tenant-b"))
    hostnames = tuple(rng.sample(HOSTS, rng.choice((1, 1, 2))))
    if rng.random() < 0.1:
        hostnames = ()  # any host
    rules = [
        {
            "matches": [prefix(rng.choice(("/", "/a", "/b")))],
            "backendRefs": [to(rng.choice((*BACKENDS[namespace], "missing")))],
        }
        for _ in range(rng.choice((1, 2)))
    ]
    if rng.random() < 0.15:  # a GRPCRoute: its backends speak HTTP/2
        method = {"method": {"service": "shop.Cart", "method": rng.choice(("Get", "Put"))}}
        grpc_rules = [{"matches": [method], "backendRefs": r["backendRefs"]} for r in rules]
        return grpc_route(
            name,
            grpc_rules,
            namespace=namespace,
            hostnames=hostnames,
            created=rng.choice((OLD, NEW)),
            parent={"name": parent, "namespace": "tenant-b" if parent == "bgw" else "default"},
        )
    return route(
        name,
        rules,
        namespace=namespace,
        hostnames=hostnames,
        created=rng.choice((OLD, NEW)),
        parent={"name": parent, "namespace": "tenant-b" if parent == "bgw" else "default"},
    )


BASE = state(*_static(), services=SERVICES)


def _cluster(routes: dict[str, Any]) -> ClusterState:
    """The base cluster with `routes`: every other object the same, as sources keep them."""
    http = tuple(r for r in routes.values() if type(r).__name__ == "HTTPRoute")
    grpc = tuple(r for r in routes.values() if type(r).__name__ == "GRPCRoute")
    return dataclasses.replace(BASE, http_routes=http, grpc_routes=grpc)


def _from_scratch(cluster_state: ClusterState) -> RouteTable:
    ports = Resolver(cluster_state.settings).global_settings([])
    return compute_routes(cluster_state, REFS, ports.http_port, ports.peer_port)


def _computed(computer: RouteComputer, cluster_state: ClusterState) -> RouteTable:
    ports = Resolver(cluster_state.settings).global_settings([])
    services = {(s.namespace, s.name): s for s in cluster_state.services}
    return computer.compute(cluster_state, REFS, ports.http_port, ports.peer_port, services, None)


def _assert_same(found: RouteTable, expected: RouteTable) -> None:
    """Every field equal, the order of the rejections and listeners' rules included."""
    assert found.workloads == expected.workloads
    assert found.rejections == expected.rejections
    assert found.routes == expected.routes
    assert found.demand == expected.demand
    assert found == expected
    for workload, routes in found.workloads.items():  # the names it says it knows
        if routes.names is not None:
            assert routes.names == referenced(expected.workloads[workload])


@pytest.mark.parametrize("seed", range(8))
def test_updated_table_equals_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(10)]
    routes: dict[str, Any] = {name: _route(rng, name) for name in names[:5]}
    computer = RouteComputer()
    cluster_state = _cluster(routes)
    _assert_same(_computed(computer, cluster_state), _from_scratch(cluster_state))
    for _ in range(40):
        name = rng.choice(names)
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            routes[name] = _route(rng, name)
        cluster_state = _cluster(routes)  # the other routes keep their objects
        _assert_same(_computed(computer, cluster_state), _from_scratch(cluster_state))
    assert computer.updated >= 15, computer.updated  # most changes were updates


def test_a_route_change_updates_the_table() -> None:
    """A path changed on one route of many: an update (no table from scratch), equal to
    the one computed from scratch, the other hostnames' rules the same objects."""
    routes = {
        f"r{i}": route(
            f"r{i}",
            [{"matches": [prefix("/a")], "backendRefs": [to("shop")]}],
            hostnames=(f"h{i}.example.com",),
        )
        for i in range(20)
    }
    computer = RouteComputer()
    first = _computed(computer, _cluster(routes))
    routes["r3"] = route(
        "r3",
        [{"matches": [prefix("/b")], "backendRefs": [to("catalog")]}],
        hostnames=("h3.example.com",),
    )
    cluster_state = _cluster(routes)
    before = computer.updated
    found = _computed(computer, cluster_state)
    assert computer.updated == before + 1
    assert computer.changed_hosts == {(REFS[0], 8080): frozenset({"h3.example.com"})}
    _assert_same(found, _from_scratch(cluster_state))
    old_rules = {r.source: r for li in first.workloads[REFS[0]].listeners for r in li.rules}
    kept = [
        r
        for li in found.workloads[REFS[0]].listeners
        for r in li.rules
        if old_rules.get(r.source) is r
    ]
    assert len(kept) == 20  # the 19 other routes' and the Ingress's


@pytest.mark.parametrize("seed", range(3))
def test_snapshots_and_bytes_after_route_changes_equal_a_fresh_computation(seed: int) -> None:
    """Through the incremental `Computer` and `Encoder` (the final assembly reusing what
    the updated table tells it): the snapshots and their encoded bytes equal a fresh
    `compute` and `encode` at every step."""
    rng = random.Random(100 + seed)
    names = [f"r{i}" for i in range(8)]
    routes: dict[str, Any] = {name: _route(rng, name) for name in names[:4]}
    computer, encoder = Computer(), Encoder()
    previous: dict[str, Any] = {}
    for _ in range(25):
        cluster_state = _cluster(routes)
        incremental = computer.compute(cluster_state, previous)
        fresh = compute(cluster_state, previous)
        assert incremental.workloads == fresh.workloads
        assert encoder.encode(incremental.workloads) == encode(fresh.workloads)
        assert incremental.rejections == fresh.rejections
        previous = dict(incremental.assignment)
        name = rng.choice(names)
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            routes[name] = _route(rng, name)
    assert computer._routes.updated > 0


def test_a_route_taking_another_namespaces_host_is_computed_from_scratch() -> None:
    """tenant-b's route for h1.example.com, which default's older route serves: the
    hostname is claimed by two namespaces, outside what the update covers; the table is
    computed from scratch and refuses the newer claim."""
    mine = route(
        "mine",
        [{"matches": [prefix("/")], "backendRefs": [to("shop")]}],
        hostnames=("h1.example.com",),
        created=OLD,
    )
    routes = {"mine": mine}
    computer = RouteComputer()
    _computed(computer, _cluster(routes))
    routes["steal"] = route(
        "steal",
        [{"matches": [prefix("/")], "backendRefs": [to("bsvc")]}],
        namespace="tenant-b",
        hostnames=("h1.example.com",),
        created=NEW,
        parent={"name": "bgw", "namespace": "tenant-b"},
    )
    cluster_state = _cluster(routes)
    before = (computer.computed, computer.updated)
    found = _computed(computer, cluster_state)
    assert (computer.computed, computer.updated) == (before[0] + 1, before[1])
    assert computer.changed_hosts is None
    _assert_same(found, _from_scratch(cluster_state))
    assert any(r.name == "steal" and "held by the older" in r.reason for r in found.rejections)
