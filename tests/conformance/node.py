"""The kubelet's part for the conformance suite's pods, on loopback: a Node stand-in.

No kubelet runs on the test cluster (tests/cluster/up), so `NodeStandIn` registers one
Node and does for every pod the cluster's controllers make what a kubelet would: binds it
to the Node, starts its "container" and reports it Running and Ready on its address, stops
it and deletes the pod object when the pod is deleted. Two kinds of container:

- the upstream echo backend (`echo-basic`, built from the very module the suite comes
  from) for every echo pod of the suite (another image, the suite's coredns for UDPRoute
  tests, gets a placeholder process that serves nothing), with the pod's environment
  (POD_NAME, NAMESPACE, ... from `fieldRef`s and values; paths under a Secret volume's
  mount point read from a folder the Secret is written to), in a network namespace of the pod's own
  (tests/helpers/netns.py) on a 10.244.x.y address: a real EndpointSlice refuses loopback
  addresses, the /32 route keeps every packet on this machine;
- peerplane's node agent with its own HAProxy for each pod of the HAProxy DaemonSet,
  on 127.0.201.N (a pod address may be loopback; its HAProxy binds the Gateways' ports
  there, where the Gateway's status address points; off the 127.0.1.x the demo's and the
  test fleets' agents use, whose peer and metrics ports would clash).

Pods of other workloads in haproxy-system (the control plane's Deployment: the harness
runs the control plane itself) are left Pending. Root only (network namespaces).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.helpers.cluster import RealCluster
from tests.helpers.fleet import REPO, stop_orphaned_haproxy, stop_process
from tests.helpers.netns import PodNetwork

NODE = "conformance-node"
PEERPLANE_NS = "haproxy-system"
HAPROXY_LABEL = ("app.kubernetes.io/component", "haproxy")
ECHO_HTTP_PORT = 3000  # echo-basic's HTTP_PORT default
READY_TIMEOUT_S = 20.0
AGENT_ADDRESSES = "127.0.201"  # the HAProxy pods' addresses: 127.0.201.1, .2, ...


@dataclass
class RunningPod:
    """One pod's container: its process and, for an echo pod, its network namespace."""

    key: str
    ip: str
    process: subprocess.Popen[bytes]
    network: PodNetwork | None = None
    directory: Path | None = None  # an agent's: its HAProxy's state (orphans stopped)
    sockets: Path | None = None  # an agent's: its HAProxy's sockets

    def stop(self) -> None:
        stop_process(self.process, timeout=5)
        if self.directory is not None:
            stop_orphaned_haproxy(self.directory)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
        if self.network is not None:
            self.network.close()


def field_value(pod: Any, path: str, ip: str) -> str:
    """A `fieldRef`'s value, for the fields the suite's pods read."""
    values = {
        "metadata.name": pod.metadata.name,
        "metadata.namespace": pod.metadata.namespace,
        "metadata.uid": pod.metadata.uid,
        "spec.nodeName": NODE,
        "spec.serviceAccountName": pod.spec.service_account_name or "default",
        "status.podIP": ip,
        "status.hostIP": ip,
    }
    return str(values.get(path, ""))


def echo_port(container: Any, environment: dict[str, str]) -> int:
    """The port whose answer says the echo server is up: HTTP_PORT, its default 3000, or
    the first declared port of a server of another kind (gRPC, TCP)."""
    if "HTTP_PORT" in environment:
        return int(environment["HTTP_PORT"])
    if any(environment.get(k) for k in ("GRPC_ECHO_SERVER", "TCP_ECHO_SERVER")):
        for port in container.ports or []:
            return int(port.container_port)
    return ECHO_HTTP_PORT


def is_echo(pod: Any) -> bool:
    """Whether the pod's container is the suite's echo backend."""
    return "/gateway-api/echo-" in str(pod.spec.containers[0].image)


def answers(ip: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=0.5):
        return True
    return False


@dataclass
class NodeStandIn:
    """Registers `NODE` and runs every pod bound (or bindable) to it until `stop()`."""

    cluster: RealCluster
    workdir: Path
    echo_basic: Path
    # (pod name, ip, its folder, a short folder for its sockets) -> argv
    agent_argv: Callable[[str, str, Path, Path], list[str]]
    pods: dict[str, RunningPod] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _next_pod: int = 0
    _next_agent: int = 0
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.cluster.add_nodes(NODE)
        self.core = client.CoreV1Api(self.cluster.api_client())
        self._thread = threading.Thread(target=self._loop, name="node-stand-in", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for pod in list(self.pods.values()):
            pod.stop()
        self.pods.clear()

    # --- the loop --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self._sync()
            except Exception as error:  # a kubelet keeps going
                self.errors.append(repr(error))
                print(f"node stand-in: {error!r}", file=sys.stderr, flush=True)

    def _sync(self) -> None:
        listed = self.core.list_pod_for_all_namespaces().items
        seen = set()
        for pod in listed:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            seen.add(key)
            if pod.metadata.deletion_timestamp is not None:
                self._delete(pod, key)
            elif key not in self.pods and self._ours(pod):
                self._run(pod, key)
        for key in set(self.pods) - seen:
            self.pods.pop(key).stop()

    def _ours(self, pod: Any) -> bool:
        if pod.spec.node_name not in (None, NODE):
            return False
        if pod.status.phase in ("Succeeded", "Failed"):
            return False
        labels = pod.metadata.labels or {}
        if pod.metadata.namespace == PEERPLANE_NS:
            return labels.get(HAPROXY_LABEL[0]) == HAPROXY_LABEL[1]
        return True

    def _delete(self, pod: Any, key: str) -> None:
        """The container stopped: the pod object goes (grace period 0), as a kubelet ends it."""
        running = self.pods.pop(key, None)
        if running is not None:
            running.stop()
        if pod.spec.node_name == NODE:
            with contextlib.suppress(client.ApiException):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )

    def _run(self, pod: Any, key: str) -> None:
        labels = pod.metadata.labels or {}
        if pod.metadata.namespace == PEERPLANE_NS and labels.get(HAPROXY_LABEL[0]):
            running = self._run_agent(pod, key)
            port = None
        else:
            running, port = self._run_echo(pod, key)
        self.pods[key] = running
        if not pod.spec.node_name:
            self.core.create_namespaced_pod_binding(
                pod.metadata.name,
                pod.metadata.namespace,
                client.V1Binding(
                    metadata=client.V1ObjectMeta(name=pod.metadata.name),
                    target=client.V1ObjectReference(kind="Node", name=NODE),
                ),
                _preload_content=False,
            )
        threading.Thread(
            target=self._report_when_ready,
            args=(pod.metadata.namespace, pod.metadata.name, running, port),
            daemon=True,
        ).start()

    def _report_when_ready(
        self, namespace: str, name: str, running: RunningPod, port: int | None
    ) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while port is not None and not answers(running.ip, port):
            if time.monotonic() > deadline or running.process.poll() is not None:
                self.errors.append(f"{namespace}/{name}: no answer on {running.ip}:{port}")
                break
            time.sleep(0.1)
        with contextlib.suppress(client.ApiException):
            self.cluster.run_pod(namespace, name, running.ip)

    # --- containers ------------------------------------------------------------------

    def _run_agent(self, pod: Any, key: str) -> RunningPod:
        self._next_agent += 1
        ip = f"{AGENT_ADDRESSES}.{self._next_agent}"
        directory = self.workdir / "agents" / pod.metadata.name
        directory.mkdir(parents=True, exist_ok=True)
        # A Unix socket's path has at most 107 bytes: the sockets go under /tmp.
        sockets = Path(tempfile.mkdtemp(prefix="ppc-", dir="/tmp"))
        argv = self.agent_argv(pod.metadata.name, ip, directory, sockets)
        process = self._spawn(argv, directory / "agent.log", cwd=REPO)
        return RunningPod(key, ip, process, directory=directory, sockets=sockets)

    def _run_echo(self, pod: Any, key: str) -> tuple[RunningPod, int | None]:
        self._next_pod += 1
        n = self._next_pod
        ip = f"10.244.{n // 250}.{n % 250 + 1}"
        network = PodNetwork(
            f"pc{os.getpid() % 1000:03d}{n:05d}",  # 10 characters: its veths are NAMEh, NAMEp
            [ip],
            host_side=f"10.253.{n // 64}.{(n % 64) * 4 + 1}",
            pod_side=f"10.253.{n // 64}.{(n % 64) * 4 + 2}",
        )
        try:
            container = pod.spec.containers[0]
            volumes = self._volumes(pod, n)
            environment = self._environment(pod, container, ip, volumes)
            argv = [
                "ip",
                "netns",
                "exec",
                network.name,
                "env",
                "-i",
                *(f"{k}={v}" for k, v in sorted(environment.items())),
                *self._command(pod),
            ]
            log = self.workdir / "pods" / f"{pod.metadata.namespace}_{pod.metadata.name}.log"
            process = self._spawn(argv, log)
        except BaseException:
            network.close()
            raise
        port = echo_port(container, environment) if is_echo(pod) else None
        return RunningPod(key, ip, process, network=network), port

    def _command(self, pod: Any) -> list[str]:
        """echo-basic for the suite's echo pods; for another image (the suite's coredns,
        for UDPRoute tests only, outside GATEWAY-HTTP) a placeholder that serves nothing,
        said in the pod's log, so the namespace's pods are all Ready as the suite waits."""
        if is_echo(pod):
            return [str(self.echo_basic)]
        image = pod.spec.containers[0].image
        return ["sh", "-c", f"echo 'node stand-in: image {image} not run' && exec sleep infinity"]

    def _volumes(self, pod: Any, n: int) -> dict[str, Path]:
        """Each Secret volume's mount path -> a folder holding the Secret's keys."""
        container = pod.spec.containers[0]
        secrets = {
            v.name: v.secret.secret_name for v in pod.spec.volumes or [] if v.secret is not None
        }
        mounted: dict[str, Path] = {}
        for mount in container.volume_mounts or []:
            if mount.name not in secrets:
                continue
            folder = self.workdir / "volumes" / str(n) / mount.name
            folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(client.ApiException):
                secret = self.core.read_namespaced_secret(
                    secrets[mount.name], pod.metadata.namespace
                )
                for name, value in (secret.data or {}).items():
                    (folder / name).write_bytes(base64.b64decode(value))
            mounted[mount.mount_path.rstrip("/")] = folder
        return mounted

    def _environment(
        self, pod: Any, container: Any, ip: str, volumes: dict[str, Path]
    ) -> dict[str, str]:
        environment = {"PATH": "/usr/bin:/bin"}
        for variable in container.env or []:
            if variable.value is not None:
                value = variable.value
            elif variable.value_from is not None and variable.value_from.field_ref is not None:
                value = field_value(pod, variable.value_from.field_ref.field_path, ip)
            else:
                continue
            for mount_path, folder in volumes.items():
                if value.startswith(mount_path + "/"):
                    value = str(folder) + value[len(mount_path) :]
            environment[variable.name] = value
        return environment

    def _spawn(
        self, argv: list[str], log: Path, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            return subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,
            )
