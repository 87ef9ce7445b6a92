"""A route table updated for changed HTTPRoutes alone (controlplane/routes/table_update.py)
when the workload has lanes: with the settings' `gateway-address-pool` each Gateway gets an
address of its own and its listeners are computed apart (`placement.lane`), then joined
into the workload's table. After every step of random route, Gateway, pool, HAProxy pod
and status.addresses changes (hypothesis) the incremental table equals the one computed
from scratch; route changes are updates, not tables from scratch; the snapshots and their
bytes through `Computer` and `Encoder` equal a fresh computation."""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controlplane.model import ClusterState, GatewayAddress, TLSSecret
from controlplane.routes.finalize import referenced
from controlplane.routes.route_computer import RouteComputer
from controlplane.routes.table import RouteTable, compute_routes
from controlplane.settings.resolver import Resolver
from controlplane.snapshot import HttpListener
from controlplane.source.convert_gateway import gateway_from
from controlplane.source.convert_routes import grpc_route_from, http_route_from
from tests.helpers import builders
from tests.helpers.builders import DEFAULT_PODS, haproxy_pod, service
from tests.helpers.route_builders import state
from tests.helpers.route_walk import walk_against_fresh
from tests.helpers.tls_certs import make_ca

NOW = time.time()
SHOP = make_ca().issue("shop.example.com")
OLD, NEW = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
REFS = ["haproxy-system/haproxy"]
POOLS = ("", "192.0.2.10-192.0.2.11", "192.0.2.10-192.0.2.20")
"""No pool; a pool of two (some Gateways get none: served on the workload's addresses);
a pool for all."""
TAKEN = haproxy_pod("haproxy-c", "192.0.2.10")
"""A HAProxy pod on the pool's first address: never a Gateway's."""


def _listener(port: int, hostname: str = "", https: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": "https" if https else "http",
        "port": port,
        "protocol": "HTTPS" if https else "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"}},
    }
    if hostname:
        found["hostname"] = hostname
    if https:
        found["tls"] = {"mode": "Terminate", "certificateRefs": [{"name": "shop-tls"}]}
    return found


def _gateway(name: str, namespace: str, created: str, *listeners: dict[str, Any]) -> Any:
    return gateway_from(
        {
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"gatewayClassName": "peerplane", "listeners": list(listeners)},
        }
    )


GATEWAYS = {
    "web": _gateway("web", "default", OLD, _listener(8080)),
    "api": _gateway("api", "default", OLD, _listener(8080, "api.example.com")),
    "bgw": _gateway("bgw", "tenant-b", NEW, _listener(8080, "h1.example.com")),
    "wild": _gateway("wild", "default", OLD, _listener(8080, "*.wild.example.com")),
    # two HTTPS Gateways binding the same certificate: the joined table lists it once
    "sec": _gateway("sec", "default", OLD, _listener(8443, https=True), _listener(8080)),
    "sec2": _gateway("sec2", "default", NEW, _listener(8443, "shop.example.com", https=True)),
}
NAMESPACE_OF = {name: g.namespace for name, g in GATEWAYS.items()}
HOSTS = (
    "h0.example.com",
    "h1.example.com",  # bgw's listener hostname (tenant-b)
    "h2.example.com",
    "h3.example.com",
    "api.example.com",  # api's listener hostname
    "shop.example.com",  # the certificate's
    "x.wild.example.com",  # under wild's listener
)
BACKENDS = {"default": ("shop", "catalog", "missing"), "tenant-b": ("bsvc", "missing")}
SERVICES = (
    service("shop"),
    service("catalog"),
    service("bsvc", namespace="tenant-b", created=NEW),
)
SECRET = TLSSecret(
    namespace="default", name="shop-tls", cert_pem=SHOP.cert_pem, key_pem=SHOP.key_pem
)


def _cluster(
    routes: dict[str, Any],
    gateways: set[str],
    pool: str = POOLS[2],
    taken: bool = False,
    echoed: dict[str, str] | None = None,
) -> ClusterState:
    """The cluster with `routes` (their objects kept), the Gateways named, the pool (none
    when ""), the pod on the pool's first address or not, and Gateways' status.addresses."""
    echoed = echoed or {}
    placed = []
    for name in sorted(gateways):
        found = GATEWAYS[name]
        if name in echoed:
            listed = (GatewayAddress("IPAddress", echoed[name]),)
            found = dataclasses.replace(found, status_addresses=listed)
        placed.append(found)
    config = builders.settings(**({"gateway-address-pool": pool} if pool else {}))
    base = state(*placed, services=SERVICES, pods=(*DEFAULT_PODS, *((TAKEN,) if taken else ())))
    http = tuple(r for r in routes.values() if type(r).__name__ == "HTTPRoute")
    grpc = tuple(r for r in routes.values() if type(r).__name__ == "GRPCRoute")
    return dataclasses.replace(
        base, http_routes=http, grpc_routes=grpc, settings=config, secrets=(SECRET,)
    )


def _route(
    name: str,
    parents: list[str],
    namespace: str,
    hostnames: list[str],
    rules: list[tuple[str, str]],
    grpc: bool = False,
    created: str = OLD,
) -> Any:
    """A route to `parents` (Gateway names): one rule per (path, backend)."""
    spec: dict[str, Any] = {
        "parentRefs": [{"name": p, "namespace": NAMESPACE_OF[p]} for p in parents],
        "hostnames": hostnames,
    }
    metadata = {"name": name, "namespace": namespace, "creationTimestamp": created}
    if grpc:
        spec["rules"] = [
            {
                "matches": [
                    {"method": {"service": "shop.Cart", "method": path.strip("/") or "Get"}}
                ],
                "backendRefs": [{"name": backend, "port": 80}],
            }
            for path, backend in rules
        ]
        return grpc_route_from({"metadata": metadata, "spec": spec})
    spec["rules"] = [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": path}}],
            "backendRefs": [{"name": backend, "port": 80}],
        }
        for path, backend in rules
    ]
    return http_route_from({"metadata": metadata, "spec": spec})


def _computed(computer: RouteComputer, cluster_state: ClusterState) -> RouteTable:
    ports = Resolver(cluster_state.settings).global_settings([])
    services = {(s.namespace, s.name): s for s in cluster_state.services}
    return computer.compute(
        cluster_state, REFS, ports.http_port, ports.peer_port, services, None, now=NOW
    )


def _from_scratch(cluster_state: ClusterState) -> RouteTable:
    ports = Resolver(cluster_state.settings).global_settings([])
    return compute_routes(cluster_state, REFS, ports.http_port, ports.peer_port, now=NOW)


def _unlisted(table: RouteTable) -> RouteTable:
    """`table` with its Gateways' status.addresses left out: a table kept through their
    echo (the addresses placement gave, `RouteComputer._gateways_read`) still has the
    Gateway objects from before it."""
    gateways = {}
    for key, place in table.placement.gateways.items():
        gateway = dataclasses.replace(place.gateway, status_addresses=())
        listeners = tuple(dataclasses.replace(lp, gateway=gateway) for lp in place.listeners)
        gateways[key] = dataclasses.replace(place, gateway=gateway, listeners=listeners)
    placement = dataclasses.replace(table.placement, gateways=gateways)
    # an update's routes are a persistent map, a table from scratch's a dict
    return dataclasses.replace(table, placement=placement, routes=dict(table.routes))


def _assert_same(found: RouteTable, expected: RouteTable) -> None:
    """Every field equal, the order of rejections, listeners and rules included; the
    backend names a workload's table says it knows are those its listeners reference."""
    assert found.workloads == expected.workloads
    assert found.rejections == expected.rejections
    assert dict(found.routes) == dict(expected.routes)  # an update's: a persistent map
    assert found.demand == expected.demand
    assert _unlisted(found) == _unlisted(expected)
    for workload, routes in found.workloads.items():
        if routes.names is not None:
            assert routes.names == referenced(expected.workloads[workload])


def _addressed(table: RouteTable) -> list[HttpListener]:
    """The listeners bound to a Gateway's own address (its lane's)."""
    return [li for routes in table.workloads.values() for li in routes.listeners if li.address]


def _own(table: RouteTable) -> dict[tuple[str, str], str]:
    """Each Gateway's address of its own, by (namespace, name)."""
    return {key: p.own.address for key, p in table.placement.gateways.items() if p.own}


ROUTE_NAMES = st.sampled_from([f"r{i}" for i in range(8)])


@st.composite
def _routes(draw: st.DrawFn, name: str) -> Any:
    parents = draw(st.lists(st.sampled_from(sorted(GATEWAYS)), min_size=1, max_size=2, unique=True))
    namespace = draw(st.sampled_from(("default", "default", "tenant-b")))
    hostnames = draw(st.lists(st.sampled_from(HOSTS), max_size=2, unique=True))
    path = st.sampled_from(("/", "/a", "/b"))
    backend = st.sampled_from(BACKENDS[namespace])
    rules = draw(st.lists(st.tuples(path, backend), min_size=1, max_size=2))
    grpc = draw(st.integers(0, 7)) == 0
    created = draw(st.sampled_from((OLD, NEW)))
    return _route(name, parents, namespace, hostnames, rules, grpc, created)


class LanesMachine(RuleBasedStateMachine):
    """Random route changes and, between them, placement changes (a Gateway added or
    removed, the pool changed, a HAProxy pod taking a pool address or leaving it, a
    Gateway's status.addresses written); after each, the `RouteComputer`'s table equals
    the one computed from scratch."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, Any] = {}
        self.gateways = set(GATEWAYS)
        self.pool = POOLS[2]
        self.taken = False
        self.echoed: dict[str, str] = {}
        self.computer = RouteComputer()

    @initialize(data=st.data())
    def some_routes(self, data: st.DataObject) -> None:
        for name in ("r0", "r1", "r2", "r3"):
            self.routes[name] = data.draw(_routes(name))

    @rule(data=st.data(), name=ROUTE_NAMES)
    def put_route(self, data: st.DataObject, name: str) -> None:
        self.routes[name] = data.draw(_routes(name))

    @rule(name=ROUTE_NAMES)
    def delete_route(self, name: str) -> None:
        self.routes.pop(name, None)

    @rule(
        change=st.one_of(
            st.tuples(st.just("gateway"), st.sampled_from(sorted(GATEWAYS))),
            st.tuples(st.just("pool"), st.sampled_from(POOLS)),
            st.tuples(st.just("pod"), st.none()),
            st.tuples(
                st.just("status"), st.tuples(st.sampled_from(sorted(GATEWAYS)), st.integers(10, 12))
            ),
        )
    )
    def change_placement(self, change: tuple[str, Any]) -> None:
        kind, value = change
        if kind == "gateway":
            self.gateways ^= {value}
        elif kind == "pool":
            self.pool = value
        elif kind == "pod":
            self.taken = not self.taken
        else:  # the Lease holder's write: the address the Gateway was given, or another
            self.echoed[value[0]] = f"192.0.2.{value[1]}"

    @rule()
    def prepare(self) -> None:
        self.computer.prepare()

    @invariant()
    def same_as_from_scratch(self) -> None:
        cluster_state = _cluster(self.routes, self.gateways, self.pool, self.taken, self.echoed)
        _assert_same(_computed(self.computer, cluster_state), _from_scratch(cluster_state))


LanesMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_lanes_machine = LanesMachine.TestCase


def _random_route(rng: random.Random, name: str, present: set[str]) -> Any:
    parents = rng.sample(sorted(present), rng.choice((1, 1, 1, 2)))
    namespace = rng.choice(("default", "default", "tenant-b"))
    hostnames = rng.sample(HOSTS, rng.choice((1, 1, 2)))
    if rng.random() < 0.08:
        hostnames = []  # any host: outside what the update covers
    rules = [
        (rng.choice(("/", "/a", "/b")), rng.choice(BACKENDS[namespace]))
        for _ in range(rng.choice((1, 2)))
    ]
    grpc = rng.random() < 0.1
    return _route(name, parents, namespace, hostnames, rules, grpc, rng.choice((OLD, NEW)))


@pytest.mark.parametrize("seed", range(6))
def test_route_changes_with_lanes_are_updates_equal_to_from_scratch(seed: int) -> None:
    """Every Gateway a lane of its own (a pool for all): random route changes, on one or
    two lanes, with conflicts, rejections and certificates; each step's table equals the
    one from scratch, and most are updates (0 before: lanes made every route change a
    table from scratch)."""
    rng = random.Random(seed)
    present = set(GATEWAYS)
    names = [f"r{i}" for i in range(10)]
    routes = {name: _random_route(rng, name, present) for name in names[:5]}
    computer = RouteComputer()
    cluster_state = _cluster(routes, present)
    first = _computed(computer, cluster_state)
    _assert_same(first, _from_scratch(cluster_state))
    assert len(_addressed(first)) >= len(GATEWAYS)  # each Gateway's listeners a lane's
    for _ in range(40):
        name = rng.choice(names)
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            routes[name] = _random_route(rng, name, present)
        cluster_state = _cluster(routes, present)
        _assert_same(_computed(computer, cluster_state), _from_scratch(cluster_state))
        if seed % 2:
            computer.prepare()
    assert computer.updated >= 15, computer.updated


def _on(parent: str, name: str, host: str, path: str = "/a", backend: str = "shop") -> Any:
    return _route(name, [parent], "default", [host], [(path, backend)])


def test_a_route_change_on_a_lane_updates_the_table() -> None:
    """With a pool, one route's path changed on a Gateway of its own address: an update
    (before: a table from scratch, 0.16-1 s at 10,000 routes), equal to the table from
    scratch; only that lane's hostname is decided again, every other rule is the same
    object, the other lanes' listeners too."""
    routes = {
        f"r{i}": _on("web" if i % 2 else "sec", f"r{i}", f"h{i}.example.com") for i in range(20)
    }
    present = {"web", "sec"}
    computer = RouteComputer()
    first = _computed(computer, _cluster(routes, present))
    lanes = {li.address for li in _addressed(first)}
    assert len(lanes) == 2
    routes["r3"] = _on("web", "r3", "h3.example.com", "/b", "catalog")
    cluster_state = _cluster(routes, present)
    found = _computed(computer, cluster_state)
    assert (computer.computed, computer.updated) == (2, 1)
    web = _own(found)[("default", "web")]
    assert computer.changed_hosts == {(f"{REFS[0]}@{web}", 8080): frozenset({"h3.example.com"})}
    _assert_same(found, _from_scratch(cluster_state))
    old = {(li.address, r.source): r for li in _addressed(first) for r in li.rules}
    kept = [r for li in _addressed(found) for r in li.rules if old.get((li.address, r.source)) is r]
    assert len(kept) == 19
    other = _own(found)[("default", "sec")]
    assert [li for li in _addressed(found) if li.address == other] == [
        li for li in _addressed(first) if li.address == other
    ]
    assert found.workloads[REFS[0]].names is not None  # known: no pass over every rule


def test_a_route_on_two_lanes_lists_its_rejection_once() -> None:
    """A route on two Gateways of their own addresses, one of its backends missing: its
    rejection is each lane's and listed once in the workload's table; adding and removing
    it are updates equal to the table from scratch."""
    present = {"web", "sec"}
    routes = {"r0": _on("web", "r0", "h0.example.com")}
    computer = RouteComputer()
    _computed(computer, _cluster(routes, present))
    routes["both"] = _route(
        "both", ["web", "sec"], "default", ["h1.example.com"], [("/", "missing")]
    )
    for step in ("added", "removed"):
        if step == "removed":
            del routes["both"]
        cluster_state = _cluster(routes, present)
        found = _computed(computer, cluster_state)
        _assert_same(found, _from_scratch(cluster_state))
        told = [r for r in found.workloads[REFS[0]].rejections if r.name == "both"]
        assert len(told) == (1 if step == "added" else 0)
    assert computer.updated == 2


@pytest.mark.parametrize(
    "change",
    ["gateway added", "gateway removed", "pool shrunk", "pod takes an address", "no pool"],
)
def test_a_placement_change_is_computed_from_scratch_and_the_next_route_change_updates(
    change: str,
) -> None:
    """A Gateway added or removed, the pool shrunk, a HAProxy pod taking a Gateway's
    address, the pool gone: the table from scratch (lanes move); the route change after
    it is an update again, on the new lanes, equal to the table from scratch."""
    present, pool, taken = {"web", "api", "sec"}, POOLS[2], False
    routes = {
        f"r{i}": _on(("web", "api", "sec")[i % 3], f"r{i}", f"h{i}.example.com") for i in range(6)
    }
    computer = RouteComputer()
    _computed(computer, _cluster(routes, present, pool, taken))
    if change == "gateway added":
        present = {*present, "sec2"}
    elif change == "gateway removed":
        present = {"web", "sec"}
    elif change == "pool shrunk":
        pool = POOLS[1]
    elif change == "pod takes an address":
        taken = True
    else:
        pool = POOLS[0]
    cluster_state = _cluster(routes, present, pool, taken)
    found = _computed(computer, cluster_state)
    assert (computer.computed, computer.updated) == (2, 0)
    _assert_same(found, _from_scratch(cluster_state))
    computer.prepare()
    routes["r1"] = _on("web", "r1", "h1.example.com", "/b", "catalog")
    cluster_state = _cluster(routes, present, pool, taken)
    _assert_same(_computed(computer, cluster_state), _from_scratch(cluster_state))
    assert (computer.computed, computer.updated) == (3, 1)


@pytest.mark.parametrize("seed", range(3))
def test_snapshots_and_bytes_with_lanes_equal_a_fresh_computation(seed: int) -> None:
    """Through the incremental `Computer` and `Encoder` with a pool (the joined table's
    listeners and names as the final assembly reads them): the snapshots and their bytes
    equal a fresh `compute` and `encode` at every step."""
    rng = random.Random(200 + seed)
    present = set(GATEWAYS)
    computer, incremental = walk_against_fresh(
        rng,
        lambda name: _random_route(rng, name, present),
        lambda routes: _cluster(routes, present),
        now=NOW,
    )
    assert computer._routes.updated > 0
    assert any(li.address for w in incremental.workloads.values() for li in w.http_listeners)
