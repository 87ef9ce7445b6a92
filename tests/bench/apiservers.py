"""The fake API server beside a real one: the same cluster, the same writes, side by side.

For each variant, a cluster of N opted-in Services (three endpoints each, health checks on,
as production runs) and two HAProxy pods of one DaemonSet is written over HTTP by the same
client code (the Kubernetes Python client, eight writers); then `controlplane serve
--source kubernetes --leader-elect` starts with the slot ledger in ConfigMap shards (its
leader creates one shard per backend before the first snapshot), two stream agents
(tests/helpers/replicas.py `StreamAgent`: they ACK every snapshot, no HAProxy behind them)
connect, one endpoint of Service `shop` moves MOVES times, one write each, then MOVES new
HTTPRoutes (to Services no route used before) are created one at a time.

- fake: `tests/kubeapi` in a process of its own (`python -m tests.bench.apiservers fake`);
- real: `tests/cluster/up`'s etcd, kube-apiserver (RBAC, admission) and controller manager.

Figures (`api_servers.<variant>.*`): `load_s` (writing the cluster), `first_ack_s` (serve's
start to both agents holding the first snapshot, all shards written), `shards`,
`endpoint_change_ack_p50_ms` / `_p99_ms` (the EndpointSlice write to both agents holding
the moved address), `route_create_ack_p50_ms` / `_p99_ms` (an HTTPRoute's create to both
agents holding a new snapshot). Endpoint addresses are 10.x (a real EndpointSlice may not carry a
loopback one) and nothing is sent to them: the agents have no HAProxy. The control plane
authenticates as the cluster's admin in both (the RBAC path is tests/realkube's).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.bench.common import Child, Result, log, percentile, work_dir
from tests.helpers.cluster import RealCluster
from tests.helpers.fleet import REPO
from tests.helpers.replicas import SHOP, StreamAgent
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import write_kubeconfig

NS = "haproxy-system"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
ENDPOINTS = 3
PODS = (("haproxy-a", "127.0.1.1"), ("haproxy-b", "127.0.1.2"))
WRITERS = 8
Obj = dict[str, Any]
TARGETS = {
    "api_servers.*.endpoint_change_ack_p50_ms": "tens of ms (the promise)",
}


def address(service: int, endpoint: int) -> str:
    n = service * ENDPOINTS + endpoint
    return f"10.{64 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"


def service_objects(index: int) -> tuple[Obj, Obj]:
    name = SHOP.split("_")[1] if index == 0 else f"svc-{index}"
    svc: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"haproxy.org/expose": "true", "haproxy.org/hosts": f"{name}.ex"},
        },
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8888}]},
    }
    slice_: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-abc12",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8888, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [address(index, e)], "conditions": {"ready": True}}
            for e in range(ENDPOINTS)
        ],
    }
    return svc, slice_


GATEWAY_API = "gateway.networking.k8s.io/v1"


def gateway_objects() -> list[Obj]:
    return [
        {
            "apiVersion": GATEWAY_API,
            "kind": "GatewayClass",
            "metadata": {"name": "peerplane"},
            "spec": {"controllerName": "peerplane.dev/gateway-controller"},
        },
        {
            "apiVersion": GATEWAY_API,
            "kind": "Gateway",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "gatewayClassName": "peerplane",
                "listeners": [{"name": "http", "port": 18080, "protocol": "HTTP"}],
            },
        },
    ]


def http_route(index: int) -> Obj:
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": {"name": f"route-{index}", "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "web"}],
            "hostnames": [f"r{index}.routes.example"],
            "rules": [{"backendRefs": [{"name": f"svc-{index + 1}", "port": 80}]}],
        },
    }


def settings() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "haproxy-settings", "namespace": NS},
        "data": {"http-port": "18080", "peer-port": "10000", "check": "true"},
    }


class Writer:
    """Creates and replaces objects through the Python client, as a user's tool does."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def create(self, obj: Obj) -> None:
        ns = obj["metadata"].get("namespace", "")
        kind = obj["kind"]
        quiet = {"_preload_content": False}
        if kind == "Service":
            self.core.create_namespaced_service(ns, obj, **quiet)
        elif kind == "EndpointSlice":
            self.discovery.create_namespaced_endpoint_slice(ns, obj, **quiet)
        elif kind == "ConfigMap":
            self.core.create_namespaced_config_map(ns, obj, **quiet)
        elif kind == "Namespace":
            self.core.create_namespace(obj, **quiet)
        elif kind == "GatewayClass":
            self.custom.create_cluster_custom_object(
                "gateway.networking.k8s.io", "v1", "gatewayclasses", obj, **quiet
            )
        elif kind in ("Gateway", "HTTPRoute"):
            plural = kind.lower() + "s"
            self.custom.create_namespaced_custom_object(
                "gateway.networking.k8s.io", "v1", ns, plural, obj, **quiet
            )
        else:
            raise ValueError(kind)

    def move(self, name: str, old: str, new: str) -> None:
        found = self.discovery.read_namespaced_endpoint_slice(f"{name}-abc12", "default")
        for endpoint in found.endpoints:
            endpoint.addresses = [new if a == old else a for a in endpoint.addresses]
        self.discovery.replace_namespaced_endpoint_slice(
            f"{name}-abc12", "default", found, _preload_content=False
        )


def haproxy_pods(writer: Writer, real: RealCluster | None) -> None:
    """Two HAProxy pods owned by DaemonSet haproxy (a real one, matching no node, on the
    real server: ownerReferences need its uid), Running on PODS' addresses."""
    uid = "0d6f3a52-2c1e-4b7a-9a55-6e1f0c9b7a01"
    if real is not None:
        labels = {"app.kubernetes.io/component": "haproxy"}
        daemon_set = writer.apps.create_namespaced_daemon_set(
            NS,
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "haproxy", "namespace": NS},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {"peerplane.dev/bench": "no-node"},
                            "containers": [{"name": "haproxy", "image": "haproxy"}],
                        },
                    },
                },
            },
        )
        uid = daemon_set.metadata.uid
    for name, ip in PODS:
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"app.kubernetes.io/component": "haproxy"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "haproxy",
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": f"node-{name}", "containers": [{"name": "h", "image": "h"}]},
            "status": {"phase": "Running", "podIP": ip},
        }
        writer.core.create_namespaced_pod(NS, pod, _preload_content=False)
        if real is not None:
            real.run_pod(NS, name, ip)


def load(writer: Writer, services: int, real: RealCluster | None) -> float:
    start = time.perf_counter()
    writer.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    writer.create(settings())
    for obj in gateway_objects():
        writer.create(obj)
    haproxy_pods(writer, real)
    objects = [obj for index in range(services) for obj in service_objects(index)]
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(writer.create, objects))
    return time.perf_counter() - start


def serve_fake() -> None:
    """The child of the fake variant: a FakeKubeAPI; prints its URL, runs until stdin ends."""
    api = FakeKubeAPI(bookmark_interval=10.0).start()
    sys.stdout.write(json.dumps({"url": api.url}) + "\n")
    sys.stdout.flush()
    for _ in sys.stdin:
        pass
    api.stop()


class Variant:
    """One API server, started and stopped by PID; `kubeconfig` reaches it as an admin."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind = kind
        self.real: RealCluster | None = None
        self.child: Child | None = None
        if kind == "real":
            self.real = RealCluster.up(work / "cluster")
            self.kubeconfig = self.real.kubeconfig
            self.api = self.real.api_client()
        else:
            env = {"PYTHONPATH": str(REPO)}
            self.child = Child(
                [sys.executable, "-m", "tests.bench.apiservers", "fake"], work / "fake.log", env
            )
            url = str(self.child.read(30)["url"])
            self.kubeconfig = write_kubeconfig(url, work / "kubeconfig")
            configuration = client.Configuration()
            configuration.host = url
            configuration.connection_pool_maxsize = 32
            self.api = client.ApiClient(configuration)
        self.api.configuration.connection_pool_maxsize = 32

    def shards(self) -> int:
        found = client.CoreV1Api(self.api).list_namespaced_config_map(
            NS, label_selector="peerplane.dev/slot-ledger"
        )
        return len(found.items)

    def stop(self) -> None:
        if self.real is not None:
            self.real.down()
        if self.child is not None:
            self.child.stop()


def measure(kind: str, services: int, moves: int) -> dict[str, float]:
    with work_dir(f"bench-apiservers-{kind}-") as work:
        return _measure(work, kind, services, moves)


def _measure(work: Path, kind: str, services: int, moves: int) -> dict[str, float]:
    variant = Variant(kind, work)
    agents: list[StreamAgent] = []
    try:
        writer = Writer(variant.api)
        load_s = load(writer, services, variant.real)
        log(f"  {kind}: {services} Services written in {load_s:.1f} s")
        args = (
            "--source=kubernetes",
            f"--kubeconfig={variant.kubeconfig}",
            "--leader-elect",
            f"--lease-namespace={NS}",
            f"--configmap={NS}/haproxy-settings",
        )
        with ServeProcess(*args) as serve:
            start = time.monotonic()
            # An agent reconnects as the real one does: a replica refuses streams until it
            # has written its ledger and published its first computation.
            agents = [
                StreamAgent(serve.address, pod, reconnect=lambda: serve.address) for pod, _ in PODS
            ]
            full = len(service_objects(0)[1]["endpoints"])
            wait_until(
                lambda: all(a.first_with(lambda slots: len(slots) == full) for a in agents),
                120 + services * 0.1,
                lambda: serve.lines[-20:],
                step=0.01,
            )
            first_ack = max(a.first_with(lambda s: len(s) == full) or 0.0 for a in agents) - start
            latencies: list[float] = []
            old = address(0, ENDPOINTS - 1)
            for move in range(moves):
                new = f"10.99.0.{move + 1}"
                began = time.monotonic()
                writer.move("shop", old, new)
                wait_until(
                    lambda new=new, began=began: all(
                        a.first_with(lambda s, new=new: new in s.values(), began) for a in agents
                    ),
                    30,
                    f"move {move} not held",
                    step=0.002,
                )
                held = max(
                    a.first_with(lambda s, new=new: new in s.values(), began) or 0.0 for a in agents
                )
                latencies.append((held - began) * 1000)
                old = new
            routes: list[float] = []
            for index in range(min(moves, services - 1)):
                before = {id(a): a.last().content_hash for a in agents}
                began = time.monotonic()
                writer.create(http_route(index))

                def new_held(began: float = began, before: dict[int, str] = before) -> bool:
                    return all(changed(a, before[id(a)], began) is not None for a in agents)

                wait_until(new_held, 30, f"route {index} not held", step=0.002)
                held = max(changed(a, before[id(a)], began) or 0.0 for a in agents)
                routes.append((held - began) * 1000)
            shards = variant.shards()
    finally:
        for agent in agents:
            agent.close()
        variant.stop()
    return {
        "load_s": load_s,
        "first_ack_s": first_ack,
        "shards": float(shards),
        "endpoint_change_ack_p50_ms": percentile(latencies, 50),
        "endpoint_change_ack_p99_ms": percentile(latencies, 99),
        "route_create_ack_p50_ms": percentile(routes, 50),
        "route_create_ack_p99_ms": percentile(routes, 99),
    }


def changed(agent: StreamAgent, old_hash: str, since: float) -> float | None:
    """When `agent` first held another content than `old_hash`, at or after `since`."""
    return next(
        (h.at for h in list(agent.snapshots) if h.at >= since and h.content_hash != old_hash),
        None,
    )


UNITS = {
    "load_s": "s",
    "first_ack_s": "s",
    "shards": "",
    "endpoint_change_ack_p50_ms": "ms",
    "endpoint_change_ack_p99_ms": "ms",
    "route_create_ack_p50_ms": "ms",
    "route_create_ack_p99_ms": "ms",
}


def run(quick: bool = False, sizes: tuple[int, int] | None = None) -> list[Result]:
    """Both variants at (services, moves): quick 200 and 10, full 8,000 and 20."""
    services, moves = sizes or ((200, 10) if quick else (8000, 20))
    results: list[Result] = []
    for kind in ("fake", "real"):
        log(f"api_servers: {kind} API server, {services} Services")
        figures = measure(kind, services, moves)
        for name, value in figures.items():
            results.append(
                Result(
                    f"api_servers.{kind}.{name}",
                    value,
                    UNITS[name],
                    {"services": services, "moves": moves, "endpoints": ENDPOINTS},
                )
            )
    return results


def _rows(results: list[Result]) -> Iterator[str]:
    for r in results:
        yield f"{r.name:55} {r.value:12.2f} {r.unit}"


if __name__ == "__main__":
    if sys.argv[1:] == ["fake"]:
        serve_fake()
    else:
        print("\n".join(_rows(run(quick="--full" not in sys.argv))))
