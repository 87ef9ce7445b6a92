"""`controlplane serve` on a real API server, with the shipped RBAC and a real token.

The control plane authenticates with a TokenRequest token of deploy/'s ServiceAccount,
so every list, watch, status update, Lease, ledger shard and Event it makes passes the
ClusterRole and Role users apply, or shows up as a 403 here. The cluster holds the demo's
Services, EndpointSlices, Gateways, HTTPRoute, Ingresses and TLS Secret, applied
server-side through the published CRDs' schemas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_demo import demo_objects
from tests.helpers.cluster_serve import FORBIDDEN, forbidden, serve_args
from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.waiting import wait_until
from tests.realkube.conftest import CONTROLPLANE_NS, HAPROXY_PODS, WORKLOAD

GATEWAY_GROUP = "gateway.networking.k8s.io"


def snapshot(address: str) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(
        grpcurl(
            address,
            "peerplane.v1.PeerPlane/GetSnapshot",
            data=json.dumps({"workload": WORKLOAD}),
        )
    )
    return reply


def slots(found: dict[str, Any], backend: str) -> dict[int, str]:
    (chosen,) = [b for b in found.get("backends", []) if b["name"] == backend]
    return {int(s["index"]): s["address"] for s in chosen["slots"] if s.get("enabled")}


def route_status(cluster: RealCluster, plural: str, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(cluster.api_client())
    found: dict[str, Any] = custom.get_namespaced_custom_object(
        GATEWAY_GROUP, "v1", namespace, plural, name
    )
    return dict(found.get("status") or {})


def conditions(entry: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in entry.get("conditions") or []}


def ingress_addresses(cluster: RealCluster, namespace: str, name: str) -> list[dict[str, str]]:
    networking = client.NetworkingV1Api(cluster.api_client())
    found = networking.read_namespaced_ingress(name, namespace, _preload_content=False)
    status = json.loads(found.data).get("status") or {}
    return list((status.get("loadBalancer") or {}).get("ingress") or [])


def test_the_demo_is_served_under_the_shipped_rbac_with_no_403(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    objects, leaf = demo_objects()
    installed.apply(objects)
    with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 60, message=lambda: serve.lines)
        # A replica publishes the backend before it holds the Lease; its endpoints wait
        # for slots until it takes the Lease and assigns them.
        expected = {1: "10.0.2.1", 2: "10.0.2.2", 3: "10.0.2.3"}

        def assigned() -> bool:
            found = snapshot(serve.address)
            shop = "default_shop_http"
            return shop in str(found) and slots(found, shop) == expected

        wait_until(assigned, 30, message=lambda: serve.lines[-20:])
        found = snapshot(serve.address)
        peers = found["peers"]["peers"]
        assert sorted(p["address"] for p in peers) == sorted(HAPROXY_PODS.values())
        text = json.dumps(found)
        assert "store.demo.example.com" in text and "secure.example.com" in text
        certificates = found.get("certificates") or []
        assert certificates, "the demo's Secret reached no listener"

        # Route status through the real /status subresources, by the Lease holder.
        def accepted() -> bool:
            parents = route_status(installed, "httproutes", "default", "store").get("parents")
            return bool(parents) and conditions(parents[0]).get("Accepted") == "True"

        wait_until(accepted, 30, message=lambda: serve.lines[-20:])
        store = route_status(installed, "httproutes", "default", "store")["parents"][0]
        assert conditions(store)["ResolvedRefs"] == "True"
        web = route_status(installed, "gateways", "default", "web")
        (listener,) = web["listeners"]
        assert listener["attachedRoutes"] == 1
        assert conditions(web)["Accepted"] == "True"
        # No publish-service: the DaemonSet's pods' addresses, on the Gateway and Ingress.
        pods = sorted(HAPROXY_PODS.values())
        assert [a["value"] for a in web["addresses"]] == pods
        assert conditions(web)["Programmed"] == "True"

        def ingress_published() -> bool:
            return ingress_addresses(installed, "default", "catalog") == [{"ip": ip} for ip in pods]

        wait_until(ingress_published, 30, message=lambda: serve.lines[-20:])

        # The slot ledger's shards, written under the Role.
        core = client.CoreV1Api(installed.api_client())
        shards = core.list_namespaced_config_map(
            CONTROLPLANE_NS, label_selector="peerplane.dev/slot-ledger"
        ).items
        assert "peerplane-slots.default.shop.http" in {s.metadata.name for s in shards}
        assert leaf.serial_hex  # the certificate used is the one made here
    denied = [line for line in serve.lines if FORBIDDEN.search(line)]
    assert not denied, denied


def test_published_load_balancer_addresses_pass_the_real_status_schemas_and_rbac(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    """`publish-service` names a LoadBalancer Service selecting the HAProxy pods: its
    load balancer's IP and hostname are written to a Gateway's `status.addresses`
    (IPAddress, Hostname: the CRD's patterns) and an Ingress's `status.loadBalancer`
    through the real /status subresources, under the shipped RBAC."""
    objects, _ = demo_objects()
    installed.apply(objects)
    core = client.CoreV1Api(installed.api_client())
    balancer = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "haproxy-lb", "namespace": CONTROLPLANE_NS},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app.kubernetes.io/component": "haproxy"},
            "ports": [{"name": "http", "port": 80, "targetPort": 18080}],
        },
    }
    installed.apply([balancer])
    ingress = [{"ip": "203.0.113.10"}, {"hostname": "lb.example.com"}]
    core.patch_namespaced_service_status(
        "haproxy-lb", CONTROLPLANE_NS, {"status": {"loadBalancer": {"ingress": ingress}}}
    )
    core.patch_namespaced_config_map(
        "haproxy-settings",
        CONTROLPLANE_NS,
        {"data": {"publish-service": f"{CONTROLPLANE_NS}/haproxy-lb"}},
    )
    expected = [
        {"type": "IPAddress", "value": "203.0.113.10"},
        {"type": "Hostname", "value": "lb.example.com"},
    ]
    try:
        with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:

            def published() -> bool:
                web = route_status(installed, "gateways", "default", "web")
                return web.get("addresses") == expected and (
                    ingress_addresses(installed, "default", "catalog") == ingress
                )

            wait_until(published, 30, message=lambda: serve.lines[-20:])
            web = route_status(installed, "gateways", "default", "web")
            assert conditions(web) == {"Accepted": "True", "Programmed": "True"}
        denied = [line for line in serve.lines if FORBIDDEN.search(line)]
        assert not denied, denied
    finally:
        core.patch_namespaced_config_map(
            "haproxy-settings", CONTROLPLANE_NS, {"data": {"publish-service": None}}
        )
        core.delete_namespaced_service("haproxy-lb", CONTROLPLANE_NS)


def test_a_refused_call_is_found_in_the_log_but_not_a_timestamps_milliseconds() -> None:
    """Pure. A log line stamped at ",403" ms once failed test_ledger's check that the
    shipped RBAC refused nothing; a 403 or Forbidden anywhere else is still found."""
    lines = [
        "2026-12-06 06:30:05,403 INFO controlplane.server.stream: snapshot sent to a v1",
        "2026-12-06 06:30:05,404 WARNING controlplane.kube: (403) Reason: Forbidden",
        "2026-12-06 06:30:05,405 WARNING controlplane.kube: HTTP 403 on configmaps",
    ]
    assert forbidden(lines) == lines[1:]
