"""The benchmarks' real API server: `tests/cluster/up`'s cluster with deploy/ installed, as
a user has it, and a network namespace of its own for the endpoints.

`RealApi` starts etcd, kube-apiserver and the controller manager (`RealCluster.up`, half
a minute here), applies `kubectl kustomize deploy/` (the namespace, settings, RBAC, the
DaemonSet), makes the fleet's HAProxy pods under the installed DaemonSet (no Node is
registered, so its controller makes none of its own) Running on their loopback addresses,
and gives the control plane a kubeconfig with a TokenRequest token of deploy/'s
ServiceAccount: `serve` runs under the shipped RBAC, never as the admin. The benchmark
writes as the admin (the user), with `WRITERS` writers in parallel for bulk loads.

A real EndpointSlice may not carry a loopback address, and no traffic may leave the
machine: the benchmarks' endpoints move from 127.x.y.z to 10.x.y.z (`off_loopback`) and
whole prefixes of those are routed into a network namespace where they are local
(`tests.helpers.netns.PodNetwork`, `prefixes`): backends serve there, and a health check
to an address nothing serves is refused there. Root only; `close()` removes the namespace
and stops the cluster by PID.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from controlplane.ledger.shards import BULK_LABEL, LEDGER_LABEL
from tests.bench.apiservers import Writer
from tests.helpers.cluster import CLUSTER, ROOT, RealCluster
from tests.helpers.cluster_demo import haproxy_pods, off_loopback
from tests.helpers.cluster_serve import forbidden
from tests.helpers.netns import PodNetwork
from tests.kubeapi.server import data_bytes

Obj = dict[str, Any]
NAMESPACE = "haproxy-system"
SERVICE_ACCOUNT = "peerplane-controlplane"
LEDGER = "peerplane-slots"  # `controlplane serve`'s default ledger (--slots-configmap)
WRITERS = 8
GATEWAY = ("gateway.networking.k8s.io", "v1")

__all__ = ["RealApi", "off_loopback", "refused_calls", "unavailable"]


def unavailable() -> str:
    """Why the real-API-server variants cannot run here ("" when they can)."""
    if os.geteuid() != 0:
        return "not root (the endpoints' network namespace needs it)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) for the endpoints' network namespace"
    cache = os.environ.get("PEERPLANE_CLUSTER_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "peerplane" / "cluster"
    )
    built = glob.glob(f"{cache}/*/bin/kube-apiserver")
    go = shutil.which("go") or Path("/usr/local/go/bin/go").exists()
    if not built and not go:
        return f"no cluster binaries in {cache} and no Go to build them (tests/cluster/build)"
    if not (CLUSTER / "up").exists():
        return "no tests/cluster/up"
    return ""


def without_server_fields(obj: Obj) -> Obj:
    """`obj` as a user applies it: the server sets creationTimestamp itself."""
    obj["metadata"].pop("creationTimestamp", None)
    return obj


def endpoints_off_loopback(obj: Obj) -> Obj:
    """An EndpointSlice with its 127.x addresses moved to 10.x (other objects as they are)."""
    if obj.get("kind") == "EndpointSlice":
        for endpoint in obj["endpoints"]:
            endpoint["addresses"] = [off_loopback(a) for a in endpoint["addresses"]]
    return obj


class RealApi:
    """One real cluster with deploy/ installed and the endpoints' network namespace."""

    def __init__(
        self,
        workdir: Path,
        pods: tuple[tuple[str, str], ...],
        network: str,
        prefixes: list[str],
        host_side: str,
        pod_side: str,
    ) -> None:
        """`pods`: the fleet's HAProxy pods (name, loopback address); `network`: the
        namespace's name (short: veth names derive from it), `prefixes` the blocks routed
        into it, `host_side`/`pod_side` its veth pair's addresses (apart from other
        namespaces on the machine)."""
        started = time.perf_counter()
        self.cluster = RealCluster.up(workdir / "cluster")
        self.network: PodNetwork | None = None
        try:
            self.cluster.apply(self.cluster.kubectl("kustomize", str(ROOT / "deploy")))
            haproxy_pods(self.cluster, pods)
            self.kubeconfig = self.cluster.service_account_kubeconfig(
                NAMESPACE, SERVICE_ACCOUNT, workdir / "controlplane.kubeconfig"
            )
            self.network = PodNetwork(
                network, [], host_side=host_side, pod_side=pod_side, prefixes=prefixes
            )
            self.api = self.cluster.api_client()
            self.api.configuration.connection_pool_maxsize = 4 * WRITERS
            self.writer = Writer(self.api)
        except BaseException:
            self.close()
            raise
        self.up_s = time.perf_counter() - started

    def server_args(self) -> list[str]:
        """What deploy/base/controlplane.yaml runs `serve` with, but the kubeconfig (the
        shipped ServiceAccount's token)."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect",
            f"--lease-namespace={NAMESPACE}",
            f"--configmap={NAMESPACE}/haproxy-settings",
            f"--slots-configmap={NAMESPACE}/{LEDGER}",
        ]

    def apply(self, objects: Iterable[Obj]) -> None:
        """Server-side apply as the admin (kubectl), for the few objects of a setup."""
        self.cluster.apply([without_server_fields(o) for o in objects])

    def create_all(self, objects: Iterable[Obj]) -> float:
        """Create every object as the admin, `WRITERS` requests at a time; seconds."""
        start = time.perf_counter()
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(self.writer.create, (without_server_fields(o) for o in objects)))
        return time.perf_counter() - start

    def move(self, namespace: str, slice_name: str, old: str, new: str) -> None:
        """Replace one address of an EndpointSlice (a GET and a PUT, as kubectl edit)."""
        found = self.writer.discovery.read_namespaced_endpoint_slice(slice_name, namespace)
        for endpoint in found.endpoints:
            endpoint.addresses = [new if a == old else a for a in endpoint.addresses]
        self.writer.discovery.replace_namespaced_endpoint_slice(
            slice_name, namespace, found, _preload_content=False
        )

    def ledger_stats(self) -> dict[str, int]:
        """The slot ledger's shards now: how many, the largest's data bytes, all of them;
        and how many bulk objects are left (a first start's, until made shards)."""
        core = client.CoreV1Api(self.api)
        reply = core.list_namespaced_config_map(
            NAMESPACE, label_selector=f"{LEDGER_LABEL}={LEDGER}", _preload_content=False
        )
        sizes = [data_bytes(obj) for obj in json.loads(reply.data)["items"]]
        bulk = core.list_namespaced_config_map(
            NAMESPACE, label_selector=f"{BULK_LABEL}={LEDGER}", _preload_content=False
        )
        return {
            "shards": len(sizes),
            "largest_shard": max(sizes, default=0),
            "total": sum(sizes),
            "bulk": len(json.loads(bulk.data)["items"]),
        }

    def route_counts(self) -> dict[str, int]:
        """HTTPRoutes stored, and those whose status names a parent (the leader wrote it)."""
        reply = self.writer.custom.list_cluster_custom_object(
            *GATEWAY, "httproutes", _preload_content=False
        )
        routes = json.loads(reply.data)["items"]
        written = sum(1 for r in routes if (r.get("status") or {}).get("parents"))
        return {"routes": len(routes), "with_status": written}

    def close(self) -> None:
        if self.network is not None:
            self.network.close()
            self.network = None
        self.cluster.down()


def refused_calls(log: Path) -> int:
    """Lines of `serve`'s log about a call the shipped RBAC refused (403, Forbidden)."""
    try:
        return len(forbidden(log.read_text(errors="replace").splitlines()))
    except OSError:
        return 0
