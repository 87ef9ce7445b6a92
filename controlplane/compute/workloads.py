"""Workload discovery and peer lists.

A workload is a HAProxy pod's top owner: Pod -> ReplicaSet -> Deployment, or a
DaemonSet, StatefulSet or bare ReplicaSet. All ReplicaSets of one Deployment are one
workload, so old and new pods peer during a rollout.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.compute.types import Rejection
from controlplane.compute.values import is_dns_subdomain, shown
from controlplane.model import Pod, ReplicaSet

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    @property
    def short_ref(self) -> str:
        """ "namespace/name", as the haproxy.org/workloads annotation names it."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PeerEntry:
    name: str
    address: str


def workload_of(pod: Pod, replica_sets: Mapping[tuple[str, str], ReplicaSet]) -> Workload:
    """The top owner of `pod` (the pod itself when it has no controller)."""
    owner = pod.owner
    if owner is None:
        return Workload(pod.namespace, "Pod", pod.name)
    if owner.kind == "ReplicaSet":
        rs = replica_sets.get((pod.namespace, owner.name))
        if rs is not None and rs.owner is not None:
            return Workload(pod.namespace, rs.owner.kind, rs.owner.name)
    return Workload(pod.namespace, owner.kind, owner.name)


def peer_address(pod: Pod) -> str | None:
    """The pod's IP in canonical text form when it may peer, else None."""
    if not pod.ip or pod.deleting or pod.phase in FINISHED_PHASES:
        return None
    try:
        return str(ipaddress.ip_address(pod.ip))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Workloads:
    """Every workload with its sorted peers, and the workload of every HAProxy pod."""

    peers: Mapping[Workload, tuple[PeerEntry, ...]]
    pod_workloads: Mapping[str, str]  # "namespace/pod" -> workload key


def discover(
    pods: Iterable[Pod], replica_sets: Iterable[ReplicaSet], rejections: list[Rejection]
) -> Workloads:
    by_ref = {(rs.namespace, rs.name): rs for rs in replica_sets}
    peers: dict[Workload, list[PeerEntry]] = defaultdict(list)
    pod_workloads: dict[str, str] = {}
    for pod in pods:
        workload = workload_of(pod, by_ref)
        peers.setdefault(workload, [])
        pod_workloads[f"{pod.namespace}/{pod.name}"] = workload.key
        if not is_dns_subdomain(pod.name) or len(pod.name) > 63:
            # Pod names become peer names in haproxy.cfg; Kubernetes never allows these.
            rejections.append(
                Rejection(
                    "Pod",
                    pod.namespace,
                    shown(pod.name, 63),
                    "metadata.name",
                    shown(pod.name),
                    "not a DNS label: cannot be a peer name",
                )
            )
            continue
        address = peer_address(pod)
        if address is not None:
            peers[workload].append(PeerEntry(pod.name, address))
    return Workloads(
        peers={w: tuple(sorted(p, key=lambda e: e.name)) for w, p in peers.items()},
        pod_workloads=pod_workloads,
    )
