"""Route table benchmark: what a route change and an endpoint change cost with many
HTTPRoutes on one workload (controlplane/routes/table.py).

A cluster of Services (one port each, two endpoints) behind one Gateway, each HTTPRoute
routing two paths of its own host to a Service, two routes per Service. Figures: the route
table alone from scratch (`compute_routes`), one HTTPRoute's path changed through the
incremental `Computer` (route table of the workload updated, listeners finalized,
snapshot encoded), one new HTTPRoute of its own host to a Service already routed, and one
endpoint changed (the route table reused: `computed` must not
move). Each step is followed by the loop's heap policy (`loop/heap.py`: freeze after the
first step, collect and freeze again when many objects outlived it), untimed, as in the
control plane; without it a full collection over millions of objects lands in some steps.
Each size twice: the Gateway's listener of any host, and of a wildcard hostname covering
every route's (`*.example.com`, as the demo's `*.demo.example.com`: the common case, a
held wildcard on the port; figures `route_table_wildcard_*`), then under the wildcard
listener with the settings' `gateway-address-pool` (the Gateway's listeners bound to an
address of its own, a lane of the workload: `placement.lane`; figures
`route_table_pool_*`). Quick: 300 routes; full: 3,000 and 10,000
(`ROUTE_TABLE_SIZES=3000,10000` sets the sizes).
`python -m tests.bench.route_table profile N` prints the cProfile of one route change at
N routes (`... profile N '*.example.com'`: under the wildcard listener; `... profile N
'*.example.com' pool`: with the pool too)."""

from __future__ import annotations

import cProfile
import dataclasses
import os
import pstats
import sys
import time

from controlplane.compute import Computer
from controlplane.loop.heap import Heap
from controlplane.model import ClusterState, Gateway, HTTPRoute
from controlplane.publish import Encoder
from controlplane.routes.table import compute_routes
from controlplane.settings.resolver import Resolver
from controlplane.source.convert_gateway import gateway_class_from, gateway_from
from controlplane.source.convert_routes import http_route_from
from tests.bench.common import Result, best_of, log, median
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    service,
    settings,
)

QUICK_ROUTES = (300,)
FULL_ROUTES = (3000, 10000)
TARGETS = {
    "route_table_route_change_": "< 1 s",
    "route_table_route_added_": "< 1 s",
    "route_table_endpoint_change_": "no route table recomputed",
    "route_table_wildcard_route_change_": "< 1 s",
    "route_table_wildcard_route_added_": "< 1 s",
    "route_table_wildcard_endpoint_change_": "no route table recomputed",
    "route_table_pool_route_change_": "< 1 s",
    "route_table_pool_route_added_": "< 1 s",
    "route_table_pool_endpoint_change_": "no route table recomputed",
}
WILDCARD = "*.example.com"
"""The wildcard variant's listener hostname: it covers every route's host."""
POOL = "192.0.2.10-192.0.2.20"
"""The pool variant's `gateway-address-pool` (in process: nothing binds it)."""

CLASS = gateway_class_from(
    {"metadata": {"name": "p"}, "spec": {"controllerName": "peerplane.dev/gateway-controller"}}
)


def gateway(hostname: str = "") -> Gateway:
    """The Gateway every route attaches to: one HTTP listener, of any host or `hostname`."""
    listener = {"name": "http", "port": 8080, "protocol": "HTTP"}
    if hostname:
        listener["hostname"] = hostname
    return gateway_from(
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"gatewayClassName": "p", "listeners": [listener]},
        }
    )


def http_route(index: int, version: int = 0, service: int | None = None) -> HTTPRoute:
    target = f"svc-{index // 2 if service is None else service}"
    return http_route_from(
        {
            "metadata": {"name": f"r-{index}", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "web"}],
                "hostnames": [f"h{index}.example.com"],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": f"/v{version}"}}],
                        "backendRefs": [{"name": target, "port": 80}],
                    },
                    {
                        "matches": [{"path": {"type": "Exact", "value": "/health"}}],
                        "backendRefs": [{"name": target, "port": 80}],
                    },
                ],
            },
        }
    )


def routed_cluster(routes: int, hostname: str = "", pool: str = "") -> ClusterState:
    services = [service(f"svc-{i}", expose=False) for i in range(routes // 2)]
    slices = [
        endpoint_slice(f"svc-{i}", [f"10.{i // 250}.{i % 250}.1", f"10.{i // 250}.{i % 250}.2"])
        for i in range(routes // 2)
    ]
    config = settings(**{"gateway-address-pool": pool}) if pool else None
    base = cluster(services=services, slices=slices, pods=DEFAULT_PODS, config=config)
    return dataclasses.replace(
        base,
        gateway_classes=(CLASS,),
        gateways=(gateway(hostname),),
        http_routes=tuple(http_route(i) for i in range(routes)),
    )


def sizes(quick: bool) -> tuple[int, ...]:
    """The route counts to measure: `ROUTE_TABLE_SIZES` ("3000,10000") when set."""
    told = os.environ.get("ROUTE_TABLE_SIZES", "")
    if told:
        return tuple(int(n) for n in told.split(","))
    return QUICK_ROUTES if quick else FULL_ROUTES


def run(quick: bool = False) -> list[Result]:
    results: list[Result] = []
    for routes in sizes(quick):
        results.extend(run_size(routes, quick))
        results.extend(run_size(routes, quick, WILDCARD))
        results.extend(run_size(routes, quick, WILDCARD, POOL))
    return results


def _changed_route(state: ClusterState, step: int) -> ClusterState:
    """`state` with route 7's first path changed (version `step`)."""
    changed = list(state.http_routes)
    changed[7] = http_route(7, step)
    return dataclasses.replace(state, http_routes=tuple(changed))


def run_size(routes: int, quick: bool, hostname: str = "", pool: str = "") -> list[Result]:
    """The figures at `routes` routes, the Gateway's listener of `hostname` (any host when
    empty), with a `gateway-address-pool` when `pool` is given."""
    state = routed_cluster(routes, hostname, pool)
    ports = Resolver(None).global_settings([])
    refs = ["haproxy-system/haproxy"]
    table_s, _ = best_of(
        lambda: compute_routes(state, refs, ports.http_port, ports.peer_port), 3 if quick else 5
    )
    computer, encoder, heap = Computer(), Encoder(), Heap()
    result = computer.compute(state, {})
    encoder.encode(result.workloads)
    heap.settle(encoder.encoded)  # as the loop does after each step (untimed)
    rules = len(result.workloads[WORKLOAD].http_listeners[0].rules)
    route_times, endpoint_times, added_times = [], [], []
    for step in range(1, 6):
        state = _changed_route(state, step)
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        route_times.append(time.perf_counter() - start)
        heap.settle(encoder.encoded)
        # a new HTTPRoute, its own host, to a Service already routed
        added = http_route(routes + step, service=step)
        state = dataclasses.replace(state, http_routes=(*state.http_routes, added))
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        added_times.append(time.perf_counter() - start)
        heap.settle(encoder.encoded)
        slices = list(state.endpoint_slices)
        slices[3] = endpoint_slice("svc-3", ["10.0.3.1", f"10.0.3.{10 + step}"])
        state = dataclasses.replace(state, endpoint_slices=tuple(slices))
        before = computer._routes.computed
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        endpoint_times.append(time.perf_counter() - start)
        heap.settle(encoder.encoded)
        if computer._routes.computed != before:
            raise AssertionError("an endpoint change recomputed the route table")
    updated = getattr(computer._routes, "updated", 0)  # tables updated, not rebuilt
    log(
        f"route table: {routes} HTTPRoutes, {rules} rules, listener {hostname or 'any host'}"
        f"{', pool ' + pool if pool else ''} (tables updated {updated} of 10): "
        f"table from scratch "
        f"{table_s * 1000:.1f} ms, route change {median(route_times) * 1000:.1f} ms, "
        f"route added {median(added_times) * 1000:.1f} ms, "
        f"endpoint change {median(endpoint_times) * 1000:.2f} ms"
    )
    parameters: dict[str, object] = {"http_routes": routes, "rules": rules}
    prefix = "route_table_"
    if hostname:
        parameters["listener_hostname"] = hostname
        prefix = "route_table_wildcard_"
    if pool:
        parameters["gateway_address_pool"] = pool
        prefix = "route_table_pool_"
    return [
        Result(f"{prefix}from_scratch_{routes}", table_s * 1000, "ms", parameters),
        Result(f"{prefix}route_change_{routes}", median(route_times) * 1000, "ms", parameters),
        Result(f"{prefix}route_added_{routes}", median(added_times) * 1000, "ms", parameters),
        Result(
            f"{prefix}endpoint_change_{routes}", median(endpoint_times) * 1000, "ms", parameters
        ),
    ]


def profile(routes: int, top: int = 25, hostname: str = "", pool: str = "") -> None:
    """The cProfile of one route change at `routes` routes (computed and encoded), by
    cumulative then internal time; the listener of `hostname` (any host when empty), with
    a `gateway-address-pool` when `pool` is given."""
    state = routed_cluster(routes, hostname, pool)
    computer, encoder, heap = Computer(), Encoder(), Heap()
    result = computer.compute(state, {})
    encoder.encode(result.workloads)
    heap.settle(encoder.encoded)
    for step in range(1, 3):  # warm: the first change after a start may differ
        state = _changed_route(state, step)
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        heap.settle(encoder.encoded)
    state = _changed_route(state, 3)
    profiler = cProfile.Profile()
    profiler.enable()
    result = computer.compute(state, result.assignment)
    encoder.encode(result.workloads)
    profiler.disable()
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    if sys.argv[1:2] == ["profile"]:
        hostname = sys.argv[3] if len(sys.argv) > 3 else ""  # e.g. "*.example.com"
        pool = POOL if sys.argv[4:5] == ["pool"] else ""
        profile(int(sys.argv[2]) if len(sys.argv) > 2 else 10000, hostname=hostname, pool=pool)
        raise SystemExit
    for figure in run(quick=True):
        print(f"{figure.name}: {figure.value:.2f} {figure.unit}")
