"""The protocol of each backend (`compute/protocol.py`): a Service port's appProtocol
(kubernetes.io/h2c, ws, wss; any other value HTTP/1.1), none in mode tcp, h2 for the
backends a GRPCRoute reaches, and the incremental computation following a GRPCRoute
that comes and goes. docs/annotations.md, "Backend protocol"."""

from __future__ import annotations

import dataclasses

from controlplane.compute import Computer, compute
from controlplane.model import ServicePort
from tests.helpers.builders import WORKLOAD, endpoint_slice, service
from tests.helpers.route_builders import gateway, grpc_route, prefix_rule, route, state, to


def _with_app_protocols(**by_name: str) -> object:
    shop = service("shop", ports=[(name, 80 + i) for i, name in enumerate(by_name)])
    ports = tuple(dataclasses.replace(port, app_protocol=by_name[port.name]) for port in shop.ports)
    return dataclasses.replace(shop, ports=ports)


def test_app_protocols_choose_the_backend_protocol() -> None:
    shop = _with_app_protocols(
        h2c="kubernetes.io/h2c", ws="kubernetes.io/ws", wss="kubernetes.io/wss", x="example/x"
    )
    cluster = state(services=(shop,))  # type: ignore[arg-type]
    backends = {b.name: b.protocol for b in compute(cluster, {}).workloads[WORKLOAD].backends}
    assert backends == {
        "default_shop_h2c": "h2",
        "default_shop_ws": "ws",
        "default_shop_wss": "wss",
        "default_shop_x": "",
    }


def test_a_tcp_backend_has_no_protocol() -> None:
    shop = dataclasses.replace(
        service("shop", annotations={"haproxy.org/tcp-port": "5000"}),
        ports=(ServicePort("http", 80, app_protocol="kubernetes.io/h2c"),),
    )
    (found,) = compute(state(services=(shop,)), {}).workloads[WORKLOAD].backends
    assert (found.mode, found.protocol) == ("tcp", "")


def test_the_incremental_computation_follows_a_grpcroute_that_comes_and_goes() -> None:
    slices = (endpoint_slice("shop", ["10.0.0.5"]),)
    services = (service("shop", expose=False),)
    http = route("web", [prefix_rule("/", [to("shop")])])
    rpc = grpc_route("rpc", [{"backendRefs": [to("shop")]}])
    computer = Computer()

    def protocol(*routes: object) -> str:
        cluster = state(gateway(), *routes, endpoint_slices=slices, services=services)
        (found,) = computer.compute(cluster, {}).workloads[WORKLOAD].backends
        return found.protocol

    assert protocol(http) == ""
    assert protocol(http, rpc) == "h2"
    assert protocol(http) == ""
