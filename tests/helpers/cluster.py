"""A real Kubernetes API server for tests: `tests/cluster/up`'s cluster, driven as an admin.

`RealCluster` is what `tests/cluster/up DIR` left in DIR (the admin kubeconfig, the
binaries' directory, the etcd endpoint) plus the few things a test does as the cluster's
administrator: kubectl, objects applied server-side, a namespace, a ServiceAccount token
from the TokenRequest API with a kubeconfig around it, and the kubelet's part for a pod
(bound to a node, reported Running and Ready on a loopback address), since no kubelet runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.helpers.waiting import WaitTimeout, wait_until

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests" / "cluster"
Obj = dict[str, Any]


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie not yet reaped has stopped: state Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _read_env(root: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (root / "env").read_text().splitlines() if line)
    return dict(pairs)


@dataclass(frozen=True)
class RealCluster:
    root: Path
    kubeconfig: Path
    bin_dir: Path
    etcd: str
    server: str

    @property
    def ca(self) -> Path:
        return self.root / "pki" / "ca.crt"

    @classmethod
    def up(cls, root: Path) -> RealCluster:
        """Start a cluster in `root` (tests/cluster/up): a minute or two, more on a cold build."""
        subprocess.run([str(CLUSTER / "up"), str(root)], check=True, timeout=3600)
        return cls.read(root)

    @classmethod
    def read(cls, root: Path) -> RealCluster:
        env = _read_env(root)
        return cls(
            root=root,
            kubeconfig=Path(env["KUBECONFIG"]),
            bin_dir=Path(env["PEERPLANE_CLUSTER_BIN"]),
            etcd=env["PEERPLANE_CLUSTER_ETCD"],
            server=env["PEERPLANE_CLUSTER_SERVER"],
        )

    def down(self) -> None:
        """Stop the cluster's processes by their PIDs (DIR/pids), SIGKILL to each session at
        once: a test's cluster is thrown away with its folder, so nothing needs their
        graceful stop (`tests/cluster/down`, for a cluster started by hand, took 6 to 10 s
        here: controller manager, API server, etcd one after the other)."""
        pids = self.root / "pids"
        if not pids.exists():
            return
        started = list(self.pids().values())
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        wait_until(lambda: not any(map(_alive, started)), 30, "the cluster's processes gone")
        pids.unlink()

    def pids(self) -> dict[str, int]:
        lines = (self.root / "pids").read_text().splitlines()
        return {name: int(pid) for name, pid in (line.split() for line in lines)}

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop kube-apiserver by its PID (its session: SIGTERM, SIGKILL after 15 s) and
        start it again with the very command line and directory /proc/PID shows, its
        output appended to its log, DIR/pids naming the new PID; return once /readyz is
        ok. Its watch cache starts anew from etcd. Only on a cluster of the test's own."""
        name = "kube-apiserver"
        pid = self.pids()[name]
        proc = Path(f"/proc/{pid}")
        argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        cwd = os.readlink(proc / "cwd")
        os.killpg(pid, signal.SIGTERM)
        gone = Path(f"/proc/{pid}").exists
        try:
            wait_until(lambda: not gone(), 15, f"{name} to exit on SIGTERM", step=0.1)
        except WaitTimeout:
            os.killpg(pid, signal.SIGKILL)
            wait_until(lambda: not gone(), 5, f"{name} to exit on SIGKILL", step=0.1)
        with (self.root / "logs" / f"{name}.log").open("ab") as log:
            started = subprocess.Popen(
                argv,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pids = self.root / "pids"
        lines = pids.read_text().splitlines()
        pids.write_text(
            "".join(
                f"{name} {started.pid}\n" if line.split()[0] == name else f"{line}\n"
                for line in lines
            )
        )

        def ready() -> bool:
            try:
                return self.kubectl("get", "--raw", "/readyz").strip() == "ok"
            except KubectlError:
                return False

        wait_until(ready, timeout, f"{name} ready after its restart", step=0.25)

    def compact_etcd(self) -> None:
        """Compact etcd to its current revision (`etcd-compact`): older revisions are gone."""
        subprocess.run(
            [str(self.bin_dir / "etcd-compact"), self.etcd],
            check=True,
            capture_output=True,
            timeout=30,
        )

    # --- kubectl and the API as the admin -------------------------------------------

    def run_kubectl(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl ARGS` (the admin's unless `kubeconfig`), whatever its exit code."""
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def kubectl(self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
        """`kubectl ARGS` (the admin's unless `kubeconfig`); stdout, failing with stderr."""
        done = self.run_kubectl(*args, stdin=stdin, kubeconfig=kubeconfig)
        if done.returncode != 0:
            raise KubectlError(args, done.stderr)
        return done.stdout

    def apply(self, objects: Iterable[Obj] | str, kubeconfig: Path | None = None) -> str:
        """Server-side apply (`kubectl apply --server-side`), as users apply manifests."""
        text = objects if isinstance(objects, str) else _as_list(objects)
        return self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=peerplane-tests",
            "-f",
            "-",
            stdin=text,
            kubeconfig=kubeconfig,
        )

    def api_client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(kubeconfig or self.kubeconfig), client_configuration=configuration
        )
        configuration.retries = False
        return client.ApiClient(configuration)

    def namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        """A new namespace `PREFIX-xxxxxx`; its default ServiceAccount exists on return."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels or {}},
                }
            ]
        )
        wait_until(lambda: "default" in self.kubectl("get", "sa", "-n", name, "-o", "name"), 30)
        return name

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")

    # --- identities --------------------------------------------------------------------

    def token(self, namespace: str, service_account: str, audience: str | None = None) -> str:
        """A ServiceAccount token from the TokenRequest API (`kubectl create token`)."""
        extra = [f"--audience={audience}"] if audience else []
        return self.kubectl(
            "create", "token", service_account, "-n", namespace, "--duration=2h", *extra
        ).strip()

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig that authenticates with `token` (a bearer token) and trusts the CA."""
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "sa",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "test", "user": "sa"}}],
        }
        path.write_text(json.dumps(kubeconfig))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        return self.token_kubeconfig(self.token(namespace, name), path)

    # --- the kubelet's part ------------------------------------------------------------

    def add_nodes(self, *names: str) -> None:
        """Register Nodes, Ready, as their kubelets would (none runs): a DaemonSet gets a
        pod for each. The API server taints a new Node not-ready (NoSchedule) until the
        node lifecycle controller sees it Ready; that controller does not run here, so its
        part, removing the taint, is done here too."""
        self.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names])
        core = client.CoreV1Api(self.api_client())
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for name in names:
            core.patch_node_status(name, {"status": {"conditions": [ready]}})
            core.patch_node(name, {"spec": {"taints": None}})

    def pods(self, namespace: str, selector: str) -> list[Any]:
        core = client.CoreV1Api(self.api_client())
        return list(core.list_namespaced_pod(namespace, label_selector=selector).items)

    def run_pod(self, namespace: str, name: str, ip: str, ready: bool = True) -> None:
        """Do the scheduler's and the kubelet's part for pod `name` (made by a test or a
        controller): bind it (to the node its DaemonSet affinity names, else `node-<ip>`)
        and report it Running on `ip`, Ready or not."""
        core = client.CoreV1Api(self.api_client())
        pod = core.read_namespaced_pod(name, namespace)
        if not pod.spec.node_name:
            core.create_namespaced_pod_binding(
                name,
                namespace,
                client.V1Binding(
                    metadata=client.V1ObjectMeta(name=name),
                    target=client.V1ObjectReference(
                        kind="Node", name=daemon_node(pod) or f"node-{ip}"
                    ),
                ),
                _preload_content=False,
            )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = "True" if ready else "False"
        body = {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "hostIP": ip,
                "hostIPs": [{"ip": ip}],
                "startTime": now,
                "conditions": [
                    {"type": kind, "status": status, "lastTransitionTime": now}
                    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ],
            }
        }
        core.patch_namespaced_pod_status(name, namespace, body)


def cert_manager_crds() -> list[Path]:
    """cert-manager's CRD files (deploy/crds) at the release tests/cluster/certmanager pins,
    fetched through the Go module proxy and checked against its go.sum."""
    go = shutil.which("go") or "/usr/local/go/bin/go"  # where the machine installs it
    reply = subprocess.run(
        [go, "mod", "download", "-json", "github.com/cert-manager/cert-manager"],
        cwd=ROOT / "tests" / "cluster" / "certmanager",
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return sorted((Path(json.loads(reply.stdout)["Dir"]) / "deploy" / "crds").glob("*.yaml"))


def daemon_node(pod: Any) -> str | None:
    """The node a DaemonSet pod's required node affinity names (metadata.name), if any."""
    affinity = pod.spec.affinity
    required = (
        affinity
        and affinity.node_affinity
        and (affinity.node_affinity.required_during_scheduling_ignored_during_execution)
    )
    for term in (required.node_selector_terms if required else None) or []:
        for field in term.match_fields or []:
            if field.key == "metadata.name" and field.values:
                return str(field.values[0])
    return None


class KubectlError(AssertionError):
    def __init__(self, args: tuple[str, ...], stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)}: {stderr.strip()}")
        self.stderr = stderr


def _as_list(objects: Iterable[Obj]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
