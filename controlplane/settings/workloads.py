"""Workload discovery and peer lists.

A workload is a HAProxy pod's top owner: Pod -> ReplicaSet -> Deployment, or a
DaemonSet, StatefulSet or bare ReplicaSet. All ReplicaSets of one Deployment are one
workload, so old and new pods peer during a rollout. Only workloads in the
`WorkloadScope` (namespaces, owner kinds, a count) whose key the agent accepts are served;
the pods of any other are reported, so one stray pod never costs a snapshot or blocks one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.model import Pod, ReplicaSet
from controlplane.settings.values import is_dns_subdomain, shown
from controlplane.snapshot import RejectedInput
from peerplane import limits
from peerplane.addresses import AddressError, canonical_address

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# Controller kinds a HAProxy workload may be by default: a bare pod (kind Pod) is not one.
DEFAULT_WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet"})
DEFAULT_MAX_WORKLOADS = 32


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


def haproxy_peer_address(pod: Pod) -> str | None:
    """The pod's IP in the shared canonical text form when it may peer, else None.

    AddressError when it has an IP that is not an address without zone: every agent
    would refuse that peer line, so the caller reports the pod and leaves it out.

    A terminating pod (deletionTimestamp set) keeps its peer entry while it still runs:
    dropped from its own list, its HAProxy would lose the peers section (2.6 drops a
    section without the local peer) and hand no table over while it drains.
    """
    if not pod.ip or pod.phase in FINISHED_PHASES:
        return None
    return canonical_address(pod.ip)


@dataclass(frozen=True, slots=True)
class WorkloadScope:
    """Which HAProxy pods may form workloads. The label alone is not enough: whoever may
    create a pod anywhere would add a workload, and each workload costs one snapshot of
    every exposed Service (memory, bytes on the wire, a stream per pod)."""

    namespaces: frozenset[str] | None = None  # None: any namespace
    kinds: frozenset[str] = DEFAULT_WORKLOAD_KINDS  # of the top owner (see workload_of)
    max_workloads: int = DEFAULT_MAX_WORKLOADS

    def refusal(self, workload: Workload) -> str | None:
        """Why `workload` may not be served, or None."""
        if not limits.is_workload_key(workload.key):
            # The agent refuses such a snapshot; say so here rather than serve it to no one.
            return (
                f"workload name is not {limits.MAX_WORKLOAD_KEY} characters or less of "
                "letters, digits, / _ . -"
            )
        if self.namespaces is not None and workload.namespace not in self.namespaces:
            return "namespace not allowed to hold HAProxy workloads (--workload-namespaces)"
        if workload.kind not in self.kinds:
            return f"owner kind {workload.kind} is not a HAProxy workload kind (--workload-kinds)"
        return None


DEFAULT_SCOPE = WorkloadScope()


def _pod_rejection(pod: Pod, key: str, value: str, reason: str) -> RejectedInput:
    return RejectedInput("Pod", pod.namespace, shown(pod.name, 63), key, shown(value), reason)


def _refused(pod: Pod, workload: Workload, reason: str) -> RejectedInput:
    return _pod_rejection(pod, "metadata.ownerReferences", workload.key, reason)


def admit(
    pods: Iterable[Pod],
    replica_sets: Mapping[tuple[str, str], ReplicaSet],
    scope: WorkloadScope,
    rejections: list[RejectedInput],
) -> list[tuple[Pod, Workload]]:
    """Each pod whose workload is in `scope`, with its workload; every other pod is reported.

    Past `max_workloads` the workloads first by key are kept: deterministic, so every
    replica keeps the same ones, whatever order the pods came in.
    """
    in_scope: list[tuple[Pod, Workload]] = []
    for pod in pods:
        workload = workload_of(pod, replica_sets)
        reason = scope.refusal(workload)
        if reason is None:
            in_scope.append((pod, workload))
        else:
            rejections.append(_refused(pod, workload, reason))
    keys = sorted({workload.key for _, workload in in_scope})
    if len(keys) <= scope.max_workloads:
        return in_scope
    kept = set(keys[: scope.max_workloads])
    over = (
        f"more than {scope.max_workloads} HAProxy workloads (--max-workloads): only the "
        "first by namespace/Kind/name are served"
    )
    admitted: list[tuple[Pod, Workload]] = []
    for pod, workload in in_scope:
        if workload.key in kept:
            admitted.append((pod, workload))
        else:
            rejections.append(_refused(pod, workload, over))
    return admitted


@dataclass(frozen=True, slots=True)
class Workloads:
    """Every workload with its sorted peers, and the workload of every HAProxy pod."""

    peers: Mapping[Workload, tuple[PeerEntry, ...]]
    pod_workloads: Mapping[str, str]  # "namespace/pod" -> workload key


def discover(
    pods: Iterable[Pod],
    replica_sets: Iterable[ReplicaSet],
    rejections: list[RejectedInput],
    scope: WorkloadScope = DEFAULT_SCOPE,
) -> Workloads:
    by_ref = {(rs.namespace, rs.name): rs for rs in replica_sets}
    peers: dict[Workload, list[PeerEntry]] = defaultdict(list)
    pod_workloads: dict[str, str] = {}
    for pod, workload in admit(pods, by_ref, scope, rejections):
        peers.setdefault(workload, [])
        pod_workloads[f"{pod.namespace}/{pod.name}"] = workload.key
        if not is_dns_subdomain(pod.name) or len(pod.name) > 63:
            # Pod names become peer names in haproxy.cfg; Kubernetes never allows these.
            rejections.append(
                _pod_rejection(
                    pod, "metadata.name", pod.name, "not a DNS label: cannot be a peer name"
                )
            )
            continue
        try:
            address = haproxy_peer_address(pod)
        except AddressError:
            rejections.append(
                _pod_rejection(
                    pod,
                    "status.podIP",
                    pod.ip,
                    "not an IPv4 or IPv6 address without zone: cannot be a peer",
                )
            )
            continue
        if address is not None:
            peers[workload].append(PeerEntry(pod.name, address))
    return Workloads(
        peers={w: tuple(sorted(p, key=lambda e: e.name)) for w, p in peers.items()},
        pod_workloads=pod_workloads,
    )
