"""Value types the computation returns besides the snapshots themselves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from peerplane.v1 import peerplane_pb2 as pb

EndpointKey = tuple[str, int]  # (address, port)


@dataclass(frozen=True, slots=True)
class BackendSlots:
    """Slot assignment of one backend: endpoint -> 1-based slot index, and the slot count.

    The count only grows (in steps of `server-slots`) while the backend exists.
    """

    count: int
    slots: Mapping[EndpointKey, int] = field(default_factory=lambda: MappingProxyType({}))


# backend name ("<namespace>_<service>_<port>") -> its slots
SlotAssignment = Mapping[str, BackendSlots]


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected input, with the object it came from (for logs, metrics and Events)."""

    kind: str  # "Service" or "ConfigMap"
    namespace: str
    name: str
    key: str
    value: str
    reason: str

    @property
    def object(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def to_proto(self) -> pb.RejectedInput:
        return pb.RejectedInput(
            object=self.object, key=self.key, value=self.value, reason=self.reason
        )


@dataclass(frozen=True, slots=True)
class ComputeResult:
    """Output of one computation.

    `snapshots` maps workload key -> Snapshot with version 0 and content_hash set; the
    snapshot store numbers versions. `pod_workloads` maps "namespace/pod" of every
    HAProxy pod to its workload key, so the server can place an agent from its Hello.
    """

    snapshots: Mapping[str, pb.Snapshot]
    assignment: SlotAssignment
    rejections: tuple[Rejection, ...]
    pod_workloads: Mapping[str, str]
