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

from tests.helpers.cluster import RealCluster, wait_until
from tests.helpers.cluster_demo import demo_objects
from tests.helpers.cluster_serve import FORBIDDEN, serve_args
from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess, grpcurl
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


def test_the_demo_is_served_under_the_shipped_rbac_with_no_403(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    objects, leaf = demo_objects()
    installed.apply(objects)
    with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:
        assert wait_until(lambda: health(serve.address) == "SERVING", 60), serve.lines
        # A replica publishes the backend before it holds the Lease; its endpoints wait
        # for slots until it takes the Lease and assigns them.
        expected = {1: "10.0.2.1", 2: "10.0.2.2", 3: "10.0.2.3"}

        def assigned() -> bool:
            found = snapshot(serve.address)
            return (
                "default_shop_http" in str(found) and slots(found, "default_shop_http") == expected
            )

        assert wait_until(assigned, 30), serve.lines[-20:]
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

        assert wait_until(accepted, 30), serve.lines[-20:]
        store = route_status(installed, "httproutes", "default", "store")["parents"][0]
        assert conditions(store)["ResolvedRefs"] == "True"
        web = route_status(installed, "gateways", "default", "web")
        (listener,) = web["listeners"]
        assert listener["attachedRoutes"] == 1
        assert conditions(web)["Accepted"] == "True"

        # The slot ledger's shards, written under the Role.
        core = client.CoreV1Api(installed.api_client())
        shards = core.list_namespaced_config_map(
            CONTROLPLANE_NS, label_selector="peerplane.dev/slot-ledger"
        ).items
        assert "peerplane-slots.default.shop.http" in {s.metadata.name for s in shards}
        assert leaf.serial_hex  # the certificate used is the one made here
    denied = [line for line in serve.lines if FORBIDDEN.search(line)]
    assert not denied, denied
