"""GRPCRoute on a real API server: created at `v1` (standard channel), served as HTTP/2
rules of a Gateway's HTTP listener, and its status written through the real `/status`
subresource under the shipped RBAC.

A Gateway of the test's own namespace with one HTTP listener (a port no other test uses),
a Service with its EndpointSlice, a GRPCRoute with a service-and-method match and a
service-only match. The snapshot must carry the Exact path `/svc/Method` and the PathPrefix
`/svc` with method POST, and the backend must speak HTTP/2 (`proto h2`) though its port
has no appProtocol; the route is Accepted with ResolvedRefs, the listener counts it and
lists GRPCRoute among its kinds, and no call of `serve` is refused (403).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_serve import (
    FORBIDDEN,
    backend_name,
    exposed_service,
    own_namespace,
    snapshot,
)
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until
from tests.realkube.test_serve import conditions, route_status

GATEWAY_GROUP = "gateway.networking.k8s.io"
GRPC_PORT = 19480
SERVICE = "shop.v1.Cart"
Obj = dict[str, Any]


def gateway(namespace: str) -> Obj:
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": "rpc", "namespace": namespace},
        "spec": {
            "gatewayClassName": "peerplane",
            "listeners": [
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "protocol": "HTTP",
                    "hostname": "rpc.example.com",
                }
            ],
        },
    }


def grpc_route(namespace: str) -> Obj:
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "GRPCRoute",
        "metadata": {"name": "cart", "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "rpc"}],
            "rules": [
                {
                    "matches": [{"method": {"service": SERVICE, "method": "Add"}}],
                    "backendRefs": [{"name": "cart", "port": 80}],
                },
                {
                    "matches": [{"method": {"service": SERVICE}}],
                    "backendRefs": [{"name": "cart", "port": 80}],
                },
            ],
        },
    }


def test_a_grpc_route_is_served_as_http2_rules_and_its_status_written_at_v1(
    serving: ServeProcess, classes: RealCluster, tmp_path: Path
) -> None:
    cluster = classes
    with own_namespace(cluster, "rpc") as namespace:
        cart = exposed_service(namespace, "cart", ("10.5.0.1", "10.5.0.2"))
        cart[0]["metadata"]["annotations"].pop("haproxy.org/expose")  # routed, not exposed
        cluster.apply([*cart, gateway(namespace), grpc_route(namespace)])
        backend = backend_name(namespace, "cart")

        def rules() -> list[Obj]:
            found = snapshot(serving.address)
            return [  # contract 2: a listener's rules travel in its route groups
                rule
                for group in found.get("route_groups") or []
                if group.get("listener") == str(GRPC_PORT)
                for rule in group.get("rules") or []
            ]

        wait_until(lambda: len(rules()) == 2, 60, message=lambda: serving.lines[-20:])
        paths = {
            (rule["path"].get("type", "PATH_PREFIX"), rule["path"]["value"], rule.get("method"))
            for rule in rules()
        }
        assert paths == {
            ("EXACT", f"/{SERVICE}/Add", "POST"),
            ("PATH_PREFIX", f"/{SERVICE}", "POST"),
        }
        assert all(rule["hostnames"] == ["rpc.example.com"] for rule in rules())
        assert all(rule["backends"][0]["backend"] == backend for rule in rules())
        (served,) = [b for b in snapshot(serving.address)["backends"] if b["name"] == backend]
        assert served.get("protocol") == "h2"

        def accepted() -> bool:
            found = route_status(cluster, "grpcroutes", namespace, "cart").get("parents") or []
            return len(found) == 1 and conditions(found[0]).get("Accepted") == "True"

        wait_until(accepted, 30, message=lambda: serving.lines[-20:])
        (parent,) = route_status(cluster, "grpcroutes", namespace, "cart")["parents"]
        assert conditions(parent) == {"Accepted": "True", "ResolvedRefs": "True"}
        assert parent["controllerName"] == "peerplane.dev/gateway-controller"

        def counted() -> bool:
            listeners = route_status(cluster, "gateways", namespace, "rpc").get("listeners") or []
            return [entry.get("attachedRoutes") for entry in listeners] == [1]

        wait_until(counted, 30, message=lambda: serving.lines[-20:])
        (listener,) = route_status(cluster, "gateways", namespace, "rpc")["listeners"]
        assert "GRPCRoute" in [kind["kind"] for kind in listener["supportedKinds"]]
    denied = [line for line in serving.lines if FORBIDDEN.search(line)]
    assert not denied, denied
