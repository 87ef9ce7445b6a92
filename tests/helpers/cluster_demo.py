"""The demo's objects (deploy/examples/demo and demo-https) as a real cluster takes them.

Two differences from the folder the demo serves, both the real API server's: an
EndpointSlice may not name a loopback address (`may not be in the loopback range
(127.0.0.0/8, ::1/128)`), so the demo's 127.0.x.y pod addresses become 10.0.x.y here (no
traffic goes to them: these tests check what the control plane computes and writes); and
the demo's own HAProxy pods (haproxy.yaml) are left out: the shipped DaemonSet makes the
workload's pods (tests/realkube/conftest.py). The TLS Secret is made on the spot, as
run_demo.py does.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.helpers.cluster import RealCluster
from tests.helpers.netns import PodNetwork
from tests.helpers.tls_certs import Leaf, make_ca, tls_secret

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
DEMO_FILES = (
    EXAMPLES / "demo" / "settings.yaml",
    EXAMPLES / "demo" / "shop.yaml",
    EXAMPLES / "demo" / "catalog.yaml",
    EXAMPLES / "demo" / "db.yaml",
    EXAMPLES / "demo" / "routes.yaml",
    EXAMPLES / "demo-https" / "https.yaml",
)
Obj = dict[str, Any]
NAMESPACE = "haproxy-system"


def off_loopback(address: str) -> str:
    """127.a.b.c -> 10.a.b.c: an address a real EndpointSlice may carry."""
    return "10." + address.split(".", 1)[1] if address.startswith("127.") else address


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def demo_objects(leaf: Leaf | None = None) -> tuple[list[Obj], Leaf]:
    """The demo's objects for a real cluster, and the leaf its Secret `demo-tls` carries
    (made here unless given)."""
    if leaf is None:
        leaf = make_ca("peerplane demo CA").issue("*.demo.example.com", "secure.example.com")
    objects: list[Obj] = []
    for path in DEMO_FILES:
        for obj in documents(path):
            obj["metadata"].pop("creationTimestamp", None)  # the server sets its own
            if obj["kind"] == "EndpointSlice":
                for endpoint in obj["endpoints"]:
                    endpoint["addresses"] = [off_loopback(a) for a in endpoint["addresses"]]
            objects.append(obj)
    objects.append(tls_secret("demo-tls", leaf))
    return objects, leaf


def haproxy_pods(cluster: RealCluster, pods: tuple[tuple[str, str], ...]) -> None:
    """The demo's HAProxy pods, by its names, owned by the installed DaemonSet `haproxy`
    (no Node is registered, so its controller makes none of its own and leaves these
    alone), Running on their loopback addresses (a pod address may be loopback)."""
    apps = client.AppsV1Api(cluster.api_client())
    daemon_set = apps.read_namespaced_daemon_set("haproxy", NAMESPACE)
    labels = dict(daemon_set.spec.template.metadata.labels)
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "haproxy",
        "uid": daemon_set.metadata.uid,
        "controller": True,
    }
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": {
                    "nodeName": f"node-{name[-5:]}",
                    "containers": [{"name": "haproxy", "image": "haproxy"}],
                },
            }
            for name, _ in pods
        ]
    )
    for name, ip in pods:
        cluster.run_pod(NAMESPACE, name, ip)


class DemoCluster:
    """`make demo KUBE=real`'s cluster: a real one from tests/cluster/up, deploy/ installed,
    the demo's objects applied (endpoints off loopback), its backend pods' addresses in a
    network namespace of their own (tests/helpers/netns.py), the control plane's kubeconfig
    a TokenRequest token of the shipped ServiceAccount. Root only (the namespace)."""

    def __init__(
        self,
        workdir: Path,
        leaf: Leaf,
        pods: tuple[tuple[str, str], ...],
        backends: tuple[tuple[str, str, int, str], ...],
    ) -> None:
        self.cluster = RealCluster.up(workdir / "cluster")
        self.network: PodNetwork | None = None
        try:
            self.cluster.apply(self.cluster.kubectl("kustomize", str(ROOT / "deploy")))
            haproxy_pods(self.cluster, pods)
            objects, _ = demo_objects(leaf)
            self.cluster.apply(objects)
            self.kubeconfig = self.cluster.service_account_kubeconfig(
                NAMESPACE, "peerplane-controlplane", workdir / "controlplane.kubeconfig"
            )
            addresses = [off_loopback(address) for _, address, _, _ in backends]
            self.network = PodNetwork(f"ppdemo{os.getpid()}", addresses)
        except BaseException:
            self.close()
            raise

    def pod_network(self) -> contextlib.AbstractContextManager[None]:
        """Sockets made in this block listen in the pods' network namespace."""
        assert self.network is not None
        return self.network.inside()

    def serve_args(self) -> list[str]:
        """What deploy/base/controlplane.yaml runs `serve` with, but the kubeconfig."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect",
            f"--lease-namespace={NAMESPACE}",
            f"--configmap={NAMESPACE}/haproxy-settings",
        ]

    def renew(self, leaf: Leaf) -> float:
        """Apply the renewed Secret; the moment (perf_counter) the apply started."""
        start = time.perf_counter()
        self.cluster.apply([tls_secret("demo-tls", leaf)])
        return start

    def close(self) -> None:
        if self.network is not None:
            self.network.close()
        self.cluster.down()
