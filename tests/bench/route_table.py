"""Route table benchmark: what a route change and an endpoint change cost with many
HTTPRoutes on one workload (controlplane/routes/table.py).

A cluster of Services (one port each, two endpoints) behind one Gateway, each HTTPRoute
routing two paths of its own host to a Service, two routes per Service. Figures: the route
table alone from scratch (`compute_routes`), one HTTPRoute's path changed through the
incremental `Computer` (route table of the workload recomputed, listeners finalized,
snapshot encoded), and one endpoint changed (the route table reused: `computed` must not
move). Quick: 300 routes; full: 3,000.
"""

from __future__ import annotations

import dataclasses
import time

from controlplane.compute import Computer
from controlplane.model import ClusterState, HTTPRoute
from controlplane.publish import Encoder
from controlplane.routes.table import compute_routes
from controlplane.settings.resolver import Resolver
from controlplane.source.convert_gateway import gateway_class_from, gateway_from
from controlplane.source.convert_routes import http_route_from
from tests.bench.common import Result, best_of, log, median
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service

QUICK_ROUTES = 300
FULL_ROUTES = 3000
TARGETS = {
    "route_table_route_change_": "< 1 s",
    "route_table_endpoint_change_": "no route table recomputed",
}

CLASS = gateway_class_from(
    {"metadata": {"name": "p"}, "spec": {"controllerName": "peerplane.dev/gateway-controller"}}
)
GATEWAY = gateway_from(
    {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "gatewayClassName": "p",
            "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}],
        },
    }
)


def http_route(index: int, version: int = 0) -> HTTPRoute:
    target = f"svc-{index // 2}"
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


def routed_cluster(routes: int) -> ClusterState:
    services = [service(f"svc-{i}", expose=False) for i in range(routes // 2)]
    slices = [
        endpoint_slice(f"svc-{i}", [f"10.{i // 250}.{i % 250}.1", f"10.{i // 250}.{i % 250}.2"])
        for i in range(routes // 2)
    ]
    base = cluster(services=services, slices=slices, pods=DEFAULT_PODS)
    return dataclasses.replace(
        base,
        gateway_classes=(CLASS,),
        gateways=(GATEWAY,),
        http_routes=tuple(http_route(i) for i in range(routes)),
    )


def run(quick: bool = False) -> list[Result]:
    routes = QUICK_ROUTES if quick else FULL_ROUTES
    state = routed_cluster(routes)
    ports = Resolver(None).global_settings([])
    refs = ["haproxy-system/haproxy"]
    table_s, _ = best_of(
        lambda: compute_routes(state, refs, ports.http_port, ports.peer_port), 3 if quick else 5
    )
    computer, encoder = Computer(), Encoder()
    result = computer.compute(state, {})
    encoder.encode(result.workloads)
    rules = len(result.workloads[WORKLOAD].http_listeners[0].rules)
    route_times, endpoint_times = [], []
    for step in range(1, 6):
        changed = list(state.http_routes)
        changed[7] = http_route(7, step)
        state = dataclasses.replace(state, http_routes=tuple(changed))
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        route_times.append(time.perf_counter() - start)
        slices = list(state.endpoint_slices)
        slices[3] = endpoint_slice("svc-3", ["10.0.3.1", f"10.0.3.{10 + step}"])
        state = dataclasses.replace(state, endpoint_slices=tuple(slices))
        before = computer._routes.computed
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        encoder.encode(result.workloads)
        endpoint_times.append(time.perf_counter() - start)
        if computer._routes.computed != before:
            raise AssertionError("an endpoint change recomputed the route table")
    log(
        f"route table: {routes} HTTPRoutes, {rules} rules: table from scratch "
        f"{table_s * 1000:.1f} ms, route change {median(route_times) * 1000:.1f} ms, "
        f"endpoint change {median(endpoint_times) * 1000:.2f} ms"
    )
    parameters = {"http_routes": routes, "rules": rules}
    return [
        Result(f"route_table_from_scratch_{routes}", table_s * 1000, "ms", parameters),
        Result(f"route_table_route_change_{routes}", median(route_times) * 1000, "ms", parameters),
        Result(
            f"route_table_endpoint_change_{routes}", median(endpoint_times) * 1000, "ms", parameters
        ),
    ]


if __name__ == "__main__":
    for figure in run(quick=True):
        print(f"{figure.name}: {figure.value:.2f} {figure.unit}")
