"""The status documents made again in O(changed) (`routes.status_round.StatusRound`) equal
`route_statuses` from scratch over random sequences of route changes (the route
table's own generators, tests/routes/test_table_update.py): conflicts between
namespaces, hostnames refused under another namespace's wildcard, listener isolation,
attachedRoutes; a Gateway changed now and then (every non-route document made again);
and each `Documents.changed` names exactly the documents that differ from the last."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from controlplane.model import ClusterState, ParentRef
from controlplane.routes.route_computer import RouteComputer
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.routes.status_round import Documents, StatusRound
from tests.helpers.route_builders import gateway, prefix, route, to
from tests.routes import test_l4_routes as l4
from tests.routes.test_table_update import (
    ALL,
    BASE,
    NEW,
    WILD_BASE,
    _cluster,
    _computed,
    _route,
    _wild_route,
)


def _check(
    maker: StatusRound,
    computer: RouteComputer,
    cluster_state: ClusterState,
    last: dict[StatusKey, Any],
) -> Documents:
    table = _computed(computer, cluster_state)
    found = maker(cluster_state, table)
    expected = route_statuses(cluster_state, table=table)
    assert dict(found) == expected
    differing = {k for k in found.keys() | last.keys() if found.get(k) != last.get(k)}
    assert differing <= found.changed  # nothing changed goes unnamed
    return found


def _with_gateway_moved(cluster_state: ClusterState, rng: random.Random) -> ClusterState:
    """One more listener-less change: a Gateway added or taken away (placement moves)."""
    extra = gateway("extra", port=8080, hostname="h2.example.com", allowed=ALL, created=NEW)
    gateways = tuple(g for g in cluster_state.gateways if g.name != "extra")
    if rng.random() < 0.5:
        gateways = (*gateways, extra)
    return dataclasses.replace(cluster_state, gateways=gateways)


@pytest.mark.parametrize(
    ("seed", "wild"), [(s, False) for s in range(5)] + [(s, True) for s in range(5)]
)
def test_incremental_documents_equal_from_scratch(seed: int, wild: bool) -> None:
    rng = random.Random(7000 + seed)
    make, base = (_wild_route, WILD_BASE) if wild else (_route, BASE)
    names = [f"r{i}" for i in range(10)]
    routes: dict[str, Any] = {name: make(rng, name) for name in names[:5]}
    maker, computer = StatusRound(), RouteComputer()
    last: dict[StatusKey, Any] = {}
    cluster_state = _cluster(routes, base)
    last = _check(maker, computer, cluster_state, last)
    assert last.since is None
    partial = 0
    for _ in range(40):
        name = rng.choice(names)
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            routes[name] = make(rng, name)
        base_now = base
        if rng.random() < 0.1:
            base_now = _with_gateway_moved(base, rng)
        cluster_state = _cluster(routes, base_now)
        full = maker.full
        found = _check(maker, computer, cluster_state, last)
        assert found.since == last.serial
        partial += maker.full == full
        last = found
    assert partial >= 25, partial  # most rounds made no non-route document again


def test_one_route_changed_makes_its_document_and_its_gateways_alone() -> None:
    """A path changed on one route of many: one route document made, `changed` names it
    and its Gateway only when that Gateway's counts moved (here they do not)."""
    routes = {
        f"r{i}": route(
            f"r{i}",
            [{"matches": [prefix("/a")], "backendRefs": [to("shop")]}],
            hostnames=(f"h{i}.example.com",),
        )
        for i in range(30)
    }
    maker, computer = StatusRound(), RouteComputer()
    first = _check(maker, computer, _cluster(routes), {})
    last = _check(maker, computer, _cluster(routes), first)
    assert last.changed == frozenset() and maker.made_routes == 0
    routes["r3"] = route(
        "r3",
        [{"matches": [prefix("/b")], "backendRefs": [to("catalog")]}],
        hostnames=("h3.example.com",),
    )
    found = _check(maker, computer, _cluster(routes), last)
    assert maker.made_routes == 1
    assert found.changed == {StatusKey("gateway.networking.k8s.io", "HTTPRoute", "default", "r3")}
    routes["new"] = route(
        "new",
        [{"matches": [prefix("/")], "backendRefs": [to("shop")]}],
        hostnames=("new.example.com",),
    )
    after = _check(maker, computer, _cluster(routes), found)
    assert maker.made_routes == 1
    assert {(k.kind, k.name) for k in after.changed} == {("HTTPRoute", "new"), ("Gateway", "web")}


@pytest.mark.parametrize("seed", range(3))
def test_incremental_documents_with_tls_and_tcp_routes_equal_from_scratch(seed: int) -> None:
    """TLSRoutes (SNI names claimed by two namespaces' routes) and TCPRoutes come and go
    beside HTTPRoutes: their documents and the listeners' attachedRoutes as from scratch."""
    rng = random.Random(9000 + seed)
    edge = l4.gw(l4.listener(), l4.listener("tcp", 5432, "TCP"), l4.listener("web", 8080, "HTTP"))
    sni = ("a.example.com", "b.example.com", "c.example.com")
    objects: dict[str, Any] = {}

    def one(name: str) -> Any:
        pick = rng.random()
        if pick < 0.5:
            return l4.tls_route(
                name,
                hostnames=tuple(rng.sample(sni, 1)),
                created=rng.choice((l4.OLD, l4.NEW)),
                namespace=rng.choice(("default", "tenant-b")),
                parent=ParentRef("edge", namespace="default"),
            )
        if pick < 0.75:
            return l4.tcp_route(name, section="tcp")
        return route(
            name,
            [{"matches": [prefix("/")], "backendRefs": [to("shop", port=80)]}],
            hostnames=(rng.choice(sni),),
            parent={"name": "edge", "namespace": "default"},
        )

    maker, computer = StatusRound(), RouteComputer()
    last: dict[StatusKey, Any] = {}
    names = [f"x{i}" for i in range(8)]
    seen: set[tuple[str, bool]] = set()
    for _ in range(30):
        name = rng.choice(names)
        if name in objects and rng.random() < 0.3:
            del objects[name]
        else:
            objects[name] = one(name)
        cluster_state = l4.cluster(edge, *objects.values())
        last = _check(maker, computer, cluster_state, last)
        gateway_doc = last[StatusKey("gateway.networking.k8s.io", "Gateway", "default", "edge")]
        for listener in gateway_doc["listeners"]:
            seen.add((listener["name"], listener["attachedRoutes"] > 0))
        seen.update((k.kind, True) for k in last if k.kind in ("TLSRoute", "TCPRoute"))
    assert {("tls", True), ("tcp", True), ("TLSRoute", True), ("TCPRoute", True)} <= seen
