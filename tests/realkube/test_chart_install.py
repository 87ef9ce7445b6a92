"""The Helm chart installed by real Helm (tests/helm/build) into the real API server, then
upgraded, as users install it: `helm install` then `helm upgrade` of deploy/chart/peerplane.

The release (`edge`, namespace of its own) sits beside the session's deploy/ install and
shares no name with it. No kubelet runs, so the objects are checked where the API server
keeps them; the DaemonSet's pods are bound and reported Running as the `installed` fixture
does; then `controlplane serve` runs with the flags of the Deployment the chart made (read
back from the API server; only the pod's paths and addresses made local) and a TokenRequest
token of the chart's ServiceAccount, so every call passes the chart's RBAC or shows a 403.
It serves a demo Service to the chart's HAProxy workload, `controlplane status` (NOTES.txt's
next step) shows the workload, and the upgrade's settings reach the running control plane.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.helpers.cluster import RealCluster, daemon_node, wait_until
from tests.helpers.cluster_serve import FORBIDDEN, exposed_service, own_namespace
from tests.helpers.fleet import free_port
from tests.helpers.helm import CHART, Helm, helm_binary
from tests.helpers.server_process import BIN, ServeProcess, grpcurl
from tests.helpers.tls_certs import make_ca

RELEASE = "edge"
PREFIX = "edge-peerplane"  # the chart's fullname for this release
CONTROLPLANE = f"{PREFIX}-controlplane"
PODS = {"node-a": "127.0.2.1", "node-b": "127.0.2.2"}
SELECTOR = "app.kubernetes.io/component=haproxy"
# The flags that name the pod's own files and addresses: made local here.
GATEWAY_CLASS = "edge-gateways"
INGRESS_CLASS = "edge-ingresses"
POD_FLAGS = ("--listen=", "--tls-cert=", "--tls-key=", "--metrics-port=", "--metrics-address=")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(helm_binary(), tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def release(cluster: RealCluster, helm: Helm) -> Iterator[str]:
    """The namespace of a release `edge`; at the end the release is uninstalled (its
    ClusterRole with it), its pods removed at once (no kubelet would confirm a graceful
    deletion: they would stay Terminating, and the namespace with them) and the namespace
    gone, so a later test's fleet never sees its HAProxy pods."""
    namespace = cluster.namespace("chart")
    try:
        yield namespace
    finally:
        helm.run("uninstall", RELEASE, "--namespace", namespace, kubeconfig=cluster.kubeconfig)
        cluster.kubectl(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
            "--ignore-not-found", "--wait=false",
        )  # fmt: skip
        cluster.delete_namespace(namespace)
        wait_until(
            lambda: namespace not in cluster.kubectl("get", "namespaces", "-o", "name"),
            60,
            f"namespace {namespace} gone",
        )
        assert "edge-peerplane" not in cluster.kubectl("get", "clusterroles", "-o", "name")
        assert GATEWAY_CLASS not in cluster.kubectl("get", "gatewayclasses", "-o", "name")


def chart_args(cluster: RealCluster, namespace: str) -> list[str]:
    """`controlplane serve`'s arguments as the Deployment the chart made holds them."""
    apps = client.AppsV1Api(cluster.api_client())
    deployment = apps.read_namespaced_deployment(CONTROLPLANE, namespace)
    (container,) = deployment.spec.template.spec.containers
    assert container.command == ["controlplane"] and container.args[0] == "serve"
    return list(container.args[1:])


def local(args: list[str], kubeconfig: Path, tls: Path, metrics: int) -> list[str]:
    kept = [a for a in args if not a.startswith(POD_FLAGS)]
    return [
        *kept,
        f"--kubeconfig={kubeconfig}",
        f"--tls-cert={tls / 'tls.crt'}",
        f"--tls-key={tls / 'tls.key'}",
        f"--metrics-port={metrics}",
        "--metrics-address=127.0.0.1",
    ]


def ready(metrics: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def snapshot(address: str, tls: list[str], workload: str) -> Obj:
    found: Obj = json.loads(
        grpcurl(
            address,
            "peerplane.v1.PeerPlane/GetSnapshot",
            data=json.dumps({"workload": workload}),
            tls=tls,
        )
    )
    return found


def class_accepted(cluster: RealCluster) -> str:
    """The status of GATEWAY_CLASS's Accepted condition ("" while it has none)."""
    custom = client.CustomObjectsApi(cluster.api_client())
    found = custom.get_cluster_custom_object(
        "gateway.networking.k8s.io", "v1", "gatewayclasses", GATEWAY_CLASS
    )
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((str(c["status"]) for c in conditions if c["type"] == "Accepted"), "")


def slots_of(found: Obj, backend: str) -> list[Obj]:
    chosen = [b for b in found.get("backends") or [] if b["name"] == backend]
    return list(chosen[0]["slots"]) if chosen else []


def test_helm_install_then_upgrade_serves_a_demo_service_under_the_chart_s_rbac(
    cluster: RealCluster, helm: Helm, release: str, tmp_path: Path
) -> None:
    namespace = release
    install = helm.check(
        "install", RELEASE, str(CHART), "--namespace", namespace, kubeconfig=cluster.kubeconfig
    )
    print(install)
    assert "STATUS: deployed" in install and "controlplane status" in install

    # What the chart made, where the API server keeps it.
    made = cluster.kubectl(
        "get", "-n", namespace, "-o", "name",
        "deployment,daemonset,service,serviceaccount,configmap,role,rolebinding,"
        "poddisruptionbudget,networkpolicy",
    ).split()  # fmt: skip
    for name in (
        f"deployment.apps/{CONTROLPLANE}",
        "daemonset.apps/haproxy",
        f"service/{CONTROLPLANE}",
        f"serviceaccount/{CONTROLPLANE}",
        "serviceaccount/haproxy",
        "configmap/haproxy-settings",
        f"role.rbac.authorization.k8s.io/{CONTROLPLANE}",
        f"rolebinding.rbac.authorization.k8s.io/{CONTROLPLANE}",
        f"poddisruptionbudget.policy/{CONTROLPLANE}",
        "networkpolicy.networking.k8s.io/haproxy-ingress",
        f"networkpolicy.networking.k8s.io/{CONTROLPLANE}-grpc",
    ):
        assert name in made, (name, made)
    cluster.kubectl("get", f"clusterrole/{CONTROLPLANE}", f"clusterrolebinding/{CONTROLPLANE}")

    # The kubelet's part for the DaemonSet's pods: the fleet's workload.
    cluster.add_nodes(*PODS)
    wait_until(lambda: len(cluster.pods(namespace, SELECTOR)) == len(PODS), 60)
    for pod in cluster.pods(namespace, SELECTOR):
        cluster.run_pod(namespace, pod.metadata.name, PODS[str(daemon_node(pod))])
    workload = f"{namespace}/DaemonSet/haproxy"

    # The control plane's TLS pair (what the Secret would hold) and its ServiceAccount.
    server_name = f"{CONTROLPLANE}.{namespace}.svc"
    leaf = make_ca("chart test CA").issue(server_name)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    (tls_dir / "tls.crt").write_bytes(leaf.cert_pem)
    (tls_dir / "tls.key").write_bytes(leaf.key_pem)
    (tls_dir / "ca.crt").write_bytes(leaf.ca.pem)
    kubeconfig = cluster.service_account_kubeconfig(namespace, CONTROLPLANE, tmp_path / "kc")
    # An inspection token that is not an agent's (NOTES.txt's), checked by TokenReview.
    token = cluster.token(namespace, CONTROLPLANE, audience="peerplane")
    (tmp_path / "token").write_text(token)
    tls = ["-cacert", str(tls_dir / "ca.crt"), "-authority", server_name]
    inspect = [*tls, "-H", f"authorization: Bearer {token}"]

    metrics = free_port()
    args = local(chart_args(cluster, namespace), kubeconfig, tls_dir, metrics)
    with contextlib.ExitStack() as stack:
        demo = stack.enter_context(own_namespace(cluster, "chart-demo"))
        cluster.apply(exposed_service(demo, "shop", ("10.0.3.1", "10.0.3.2")))
        backend = f"{demo}_shop_http"
        serve = stack.enter_context(ServeProcess(*args, insecure=False))
        wait_until(lambda: ready(metrics), 60, message=lambda: serve.lines[-20:])

        def served() -> bool:
            enabled = [s for s in slots_of(snapshot(serve.address, inspect, workload), backend)
                       if s.get("enabled")]  # fmt: skip
            return sorted(s["address"] for s in enabled) == ["10.0.3.1", "10.0.3.2"]

        wait_until(served, 60, message=lambda: serve.lines[-20:])
        found = snapshot(serve.address, inspect, workload)
        assert sorted(p["address"] for p in found["peers"]["peers"]) == sorted(PODS.values())
        assert len(slots_of(found, backend)) == 42  # the chart's server-slots

        # NOTES.txt's next step: `controlplane status` shows the chart's workload.
        shown = subprocess.run(
            [
                str(BIN / "controlplane"), "status", "--control-plane", serve.address,
                "--ca", str(tls_dir / "ca.crt"), "--server-name", server_name,
                "--token-file", str(tmp_path / "token"),
            ],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        print(shown.stdout)
        assert workload in shown.stdout, shown.stdout + shown.stderr

        # The upgrade: a new settings value reaches the running control plane, and the
        # classes the chart now creates pass the real API server (the Gateway API CRD's
        # schema) and are accepted by it.
        upgrade = helm.check(
            "upgrade", RELEASE, str(CHART), "--namespace", namespace,
            "--set", "settings.server-slots=50",
            "--set", f"gatewayClass.create=true,gatewayClass.name={GATEWAY_CLASS}",
            "--set", f"ingressClass.create=true,ingressClass.name={INGRESS_CLASS}",
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        print(upgrade)
        assert "STATUS: deployed" in upgrade and "REVISION: 2" in upgrade
        wait_until(
            lambda: len(slots_of(snapshot(serve.address, inspect, workload), backend)) == 50,
            60,
            message=lambda: serve.lines[-20:],
        )
        cluster.kubectl("get", f"ingressclass/{INGRESS_CLASS}")
        wait_until(lambda: class_accepted(cluster) == "True", 30, message=lambda: serve.lines[-20:])
        history = helm.check(
            "history", RELEASE, "--namespace", namespace, kubeconfig=cluster.kubeconfig
        )
        print(history)
    denied = [line for line in serve.lines if FORBIDDEN.search(line)]
    assert not denied, denied
