"""Everything against a real Kubernetes API server (tests/cluster/up): etcd, kube-apiserver
with RBAC and the admission plugins a cluster runs, kube-controller-manager, the Gateway API
CRDs of the pinned module and deploy/ applied as users apply it.

One cluster per session (`cluster`), started by the very script users run and stopped by
PID at the end; PEERPLANE_CLUSTER_DIR=DIR reuses a cluster `tests/cluster/up DIR` started
(left running). The control plane under test never runs as the admin: `controlplane_kubeconfig`
holds a TokenRequest token of deploy/'s ServiceAccount, so every call it makes passes the
shipped RBAC or fails. Each test works in namespaces of its own. Marked `integration` and
`realkube` (`-m "not realkube"` leaves them out).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cluster import ROOT, RealCluster, daemon_node
from tests.helpers.cluster_demo import EXAMPLES, documents
from tests.helpers.cluster_serve import serve_args
from tests.helpers.levels import in_folder, mark_folder
from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until

FOLDER = Path(__file__).resolve().parent
CONTROLPLANE_NS = "haproxy-system"
CONTROLPLANE_SA = "peerplane-controlplane"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")
    for item in items:
        if in_folder(item, FOLDER):
            item.add_marker(pytest.mark.realkube)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    reuse = os.environ.get("PEERPLANE_CLUSTER_DIR")
    if reuse:
        yield RealCluster.read(Path(reuse))
        return
    started = RealCluster.up(tmp_path_factory.mktemp("cluster"))
    try:
        yield started
    finally:
        started.down()


HAPROXY_PODS = {"node-a": "127.0.1.1", "node-b": "127.0.1.2"}
HAPROXY_SELECTOR = "app.kubernetes.io/component=haproxy"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"


@pytest.fixture(scope="session")
def installed(cluster: RealCluster) -> RealCluster:
    """deploy/ as `kubectl apply --server-side -k deploy/` installs it: the namespace, the
    settings ConfigMap, the RBAC, the Deployment and the DaemonSet. Two Nodes make the
    DaemonSet controller create two HAProxy pods, which are bound and reported Running on
    127.0.1.1 and 127.0.1.2 (no scheduler or kubelet runs): the fleet's one workload,
    WORKLOAD, as the shipped manifests make it."""
    rendered = cluster.kubectl("kustomize", str(ROOT / "deploy"))
    cluster.apply(rendered)
    cluster.add_nodes(*HAPROXY_PODS)
    wait_until(lambda: len(cluster.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR)) == 2, 60)
    for pod in cluster.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR):
        node = daemon_node(pod)
        assert node is not None, pod.metadata.name
        cluster.run_pod(CONTROLPLANE_NS, pod.metadata.name, HAPROXY_PODS[node])
    return cluster


@pytest.fixture(scope="session")
def controlplane_kubeconfig(
    installed: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig with a TokenRequest token of deploy/'s control-plane ServiceAccount."""
    path = tmp_path_factory.mktemp("controlplane") / "kubeconfig"
    return installed.service_account_kubeconfig(CONTROLPLANE_NS, CONTROLPLANE_SA, path)


@pytest.fixture(scope="session")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A second cluster, apart from the session's installation (20 to 35 s to start, 7 to
    14 s to stop here, so one per session, not one per module): for tests that restart its
    API server or apply what would clash with the installation. Its users keep to
    namespaces of their own and leave the server running: test_examples applies the
    examples, test_informer compacts etcd and restarts the API server (after which it
    serves as before). Stopped by PID at the end of the session, even with
    PEERPLANE_CLUSTER_DIR set."""
    started = RealCluster.up(tmp_path_factory.mktemp("own-cluster"))
    try:
        yield started
    finally:
        started.down()


@pytest.fixture
def classes(installed: RealCluster) -> RealCluster:
    """The demo's settings (its HTTP and HTTPS ports), GatewayClass and IngressClass, as
    the operator installs them (idempotent: test_serve applies the same)."""
    wanted = {"ConfigMap", "GatewayClass", "IngressClass"}
    objects = [
        d
        for f in ("settings.yaml", "routes.yaml")
        for d in documents(EXAMPLES / "demo" / f)
        if d["kind"] in wanted
    ]
    for obj in objects:
        obj["metadata"].pop("creationTimestamp", None)
    installed.apply(objects)
    return installed


@pytest.fixture
def serving(classes: RealCluster, controlplane_kubeconfig: Path) -> Iterator[ServeProcess]:
    with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 60, message=lambda: serve.lines)
        yield serve
