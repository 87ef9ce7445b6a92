"""TLSRoute and TCPRoute on a real API server: created at `v1` (the standard channel's
version since Gateway API v1.5), served as passthrough and TCP frontends, and their
status written through the real `/status` subresources under the shipped RBAC.

A Gateway of the test's own namespace with a TLS passthrough listener and a TCP listener
(ports no other test uses), a Service with its EndpointSlice, one route of each kind.
The control plane finds the served version (`kube/served_version.py`) and writes each
route's parent status at it; the Gateway's listeners count one attached route each.
"""

from __future__ import annotations

from collections.abc import Callable
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
TLS_PORT, TCP_PORT = 19443, 19432
Obj = dict[str, Any]


def gateway(namespace: str) -> Obj:
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": "l4", "namespace": namespace},
        "spec": {
            "gatewayClassName": "peerplane",
            "listeners": [
                {
                    "name": "tls",
                    "port": TLS_PORT,
                    "protocol": "TLS",
                    "hostname": "db.l4.example.com",
                    "tls": {"mode": "Passthrough"},
                },
                {"name": "tcp", "port": TCP_PORT, "protocol": "TCP"},
            ],
        },
    }


def route(kind: str, namespace: str, section: str) -> Obj:
    spec: Obj = {
        "parentRefs": [{"name": "l4", "sectionName": section}],
        "rules": [{"backendRefs": [{"name": "db", "port": 80}]}],
    }
    if kind == "TLSRoute":
        spec["hostnames"] = ["db.l4.example.com"]
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": kind,
        "metadata": {"name": kind.lower(), "namespace": namespace},
        "spec": spec,
    }


def parents(cluster: RealCluster, plural: str, namespace: str, name: str) -> list[Obj]:
    return [dict(p) for p in route_status(cluster, plural, namespace, name).get("parents") or []]


def test_tls_and_tcp_routes_are_served_and_their_status_written_at_v1(
    serving: ServeProcess, classes: RealCluster, tmp_path: Path
) -> None:
    cluster = classes
    with own_namespace(cluster, "l4") as namespace:
        db = exposed_service(namespace, "db", ("10.4.0.1", "10.4.0.2"))
        db[0]["metadata"]["annotations"].pop("haproxy.org/expose")  # routed, not exposed
        cluster.apply(
            [
                *db,
                gateway(namespace),
                route("TLSRoute", namespace, "tls"),
                route("TCPRoute", namespace, "tcp"),
            ]
        )
        backend = backend_name(namespace, "db")

        def served() -> bool:
            found = snapshot(serving.address)
            passthrough = [
                listener
                for listener in found.get("tls_listeners") or []
                if listener.get("port") == TLS_PORT
            ]
            tcp = [f for f in found.get("tcp_frontends") or [] if f.get("port") == TCP_PORT]
            return (
                bool(passthrough)
                and backend in str(passthrough)
                and "db.l4.example.com" in str(passthrough)
                and bool(tcp)
                and tcp[0].get("backend") == backend
            )

        wait_until(served, 60, message=lambda: serving.lines[-20:])

        def accepted(plural: str, name: str) -> Callable[[], bool]:
            def check() -> bool:
                found = parents(cluster, plural, namespace, name)
                return len(found) == 1 and conditions(found[0]).get("Accepted") == "True"

            return check

        for plural, name in (("tlsroutes", "tlsroute"), ("tcproutes", "tcproute")):
            wait_until(accepted(plural, name), 30, message=lambda: serving.lines[-20:])
            (parent,) = parents(cluster, plural, namespace, name)
            assert conditions(parent) == {"Accepted": "True", "ResolvedRefs": "True"}
            assert parent["controllerName"] == "peerplane.dev/gateway-controller"
            assert parent["parentRef"]["name"] == "l4"

        def listeners_counted() -> bool:
            listeners = route_status(cluster, "gateways", namespace, "l4").get("listeners") or []
            return {entry["name"]: entry["attachedRoutes"] for entry in listeners} == {
                "tls": 1,
                "tcp": 1,
            }

        wait_until(listeners_counted, 30, message=lambda: serving.lines[-20:])
        listeners = route_status(cluster, "gateways", namespace, "l4")["listeners"]
        kinds = {entry["name"]: entry["supportedKinds"] for entry in listeners}
        assert [k["kind"] for k in kinds["tls"]] == ["TLSRoute"]
        assert [k["kind"] for k in kinds["tcp"]] == ["TCPRoute"]
    denied = [line for line in serving.lines if FORBIDDEN.search(line)]
    assert not denied, denied
