"""`controlplane serve` against the real API server (tests/realkube), and a test's Services.

The flags deploy/base/controlplane.yaml runs `serve` with (but the kubeconfig, a short
Lease where a test waits on it), an exposed Service of a test's own namespace with its
EndpointSlice (10.x addresses: a real EndpointSlice may not carry loopback ones), the
namespace deleted on the way out, the shipped Lease `haproxy-system/peerplane-controlplane`
(the Role allows no other name) made free for the next replicas, and what a replica
serves for one backend.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.helpers.cluster import RealCluster
from tests.helpers.replicas import health, role_of
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.waiting import wait_until

CONTROLPLANE_NS = "haproxy-system"
LEASE = "peerplane-controlplane"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
HAPROXY_SELECTOR = "app.kubernetes.io/component=haproxy"
Obj = dict[str, Any]
Slots = dict[int, str]
# A 403 status, not a log timestamp's milliseconds ("06:30:05,403 INFO ...": a false alarm
# that failed test_ledger once in a few hundred lines).
FORBIDDEN = re.compile(r"(?<!\d\d,)\b403\b|Forbidden|forbidden")


def serve_args(kubeconfig: Path, *extra: str, lease_s: float | None = None) -> tuple[str, ...]:
    """The flags deploy/base/controlplane.yaml runs `serve` with, but the kubeconfig (and
    `--lease-duration` when given)."""
    lease = (f"--lease-duration={lease_s}",) if lease_s is not None else ()
    return (
        "--source=kubernetes",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect",
        f"--lease-namespace={CONTROLPLANE_NS}",
        f"--configmap={CONTROLPLANE_NS}/haproxy-settings",
        *lease,
        *extra,
    )


def exposed_service(
    namespace: str, name: str, addresses: tuple[str, ...], **annotations: str
) -> list[Obj]:
    """Service `name` (port `http`, exposed on the fleet) and its EndpointSlice, every
    address ready; `annotations` are `haproxy.org/<key>` (underscores made dashes)."""
    notes = {"haproxy.org/expose": "true"}
    notes.update({f"haproxy.org/{k.replace('_', '-')}": v for k, v in annotations.items()})
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "annotations": notes},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        },
        endpoint_slice(namespace, name, addresses),
    ]


def endpoint_slice(namespace: str, service: str, addresses: tuple[str, ...]) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-abc",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
    }


def backend_name(namespace: str, service: str) -> str:
    return f"{namespace}_{service}_http"


@contextlib.contextmanager
def own_namespace(cluster: RealCluster, prefix: str) -> Iterator[str]:
    """A namespace of the test's own, deleted on the way out (whatever happened)."""
    name = cluster.namespace(prefix)
    try:
        yield name
    finally:
        cluster.delete_namespace(name)


def settled(cluster: RealCluster, timeout: float = 60.0) -> None:
    """Wait until no namespace is being deleted: an earlier test's Services are gone, so
    what the fleet serves changes no more unless this test changes it."""
    core = client.CoreV1Api(cluster.api_client())

    def none_terminating() -> bool:
        return all(n.status.phase != "Terminating" for n in core.list_namespace().items)

    wait_until(none_terminating, timeout, "no namespace terminating", step=0.25)


def lease(cluster: RealCluster) -> Obj:
    """The shipped Lease's spec ({} when there is none)."""
    coordination = client.CoordinationV1Api(cluster.api_client())
    try:
        found = coordination.read_namespaced_lease(LEASE, CONTROLPLANE_NS, _preload_content=False)
    except ApiException as error:
        if error.status == 404:
            return {}
        raise
    spec: Obj = json.loads(found.data).get("spec") or {}
    return spec


def free_lease(cluster: RealCluster) -> None:
    """Delete the shipped Lease (as the admin): an earlier test's replica, killed by PID,
    left it held for its duration. Only between tests, when no replica runs."""
    coordination = client.CoordinationV1Api(cluster.api_client())
    with contextlib.suppress(ApiException):
        coordination.delete_namespaced_lease(LEASE, CONTROLPLANE_NS)


def snapshot(address: str) -> Obj:
    found: Obj = json.loads(
        grpcurl(
            address, "peerplane.v1.PeerPlane/GetSnapshot", data=json.dumps({"workload": WORKLOAD})
        )
    )
    return found


def backend_of(found: Obj, backend: str) -> Obj | None:
    return next((b for b in found.get("backends") or [] if b["name"] == backend), None)


def served(address: str, backend: str) -> tuple[str, Slots]:
    """The workload's content hash and `backend`'s enabled slots (slot -> address)."""
    found = snapshot(address)
    chosen = backend_of(found, backend) or {}
    slots = {int(s["index"]): s["address"] for s in chosen.get("slots", []) if s.get("enabled")}
    return str(found.get("content_hash", "")), slots


def forbidden(lines: list[str]) -> list[str]:
    """The log lines of a call the shipped RBAC refused (none, when it grants all)."""
    return [line for line in lines if FORBIDDEN.search(line)]


def leader_and_follower(a: ServeProcess, b: ServeProcess) -> tuple[ServeProcess, ServeProcess]:
    """Once both replicas serve and one holds the Lease: (leader, follower)."""
    wait_until(lambda: health(a.address) == health(b.address) == "SERVING", 30)
    wait_until(lambda: {role_of(a.address), role_of(b.address)} == {"leader", "follower"}, 15)
    return (a, b) if role_of(a.address) == "leader" else (b, a)
