"""Value types the computation returns besides the snapshots themselves."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from peerplane.v1 import peerplane_pb2 as pb

EndpointKey = tuple[str, int]  # (address, port)


@dataclass(frozen=True, slots=True)
class BackendSlots:
    """Slot assignment of one backend: endpoint -> 1-based slot index, and the slot count.

    The count only grows (in steps of `server-slots`) while the backend exists. `freed`
    maps each free slot that once held an endpoint to when it was freed (wall-clock
    seconds): stick-table entries may still name it, so it is not reused until the
    backend's stick-table expire has passed (docs/design.md, "Slots"). A free slot absent
    from `freed` was never used. `freed_by` names the endpoint that left a freed slot, when
    known: if that endpoint comes back it takes its own slot again at once.
    """

    count: int
    slots: Mapping[EndpointKey, int] = field(default_factory=lambda: MappingProxyType({}))
    freed: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    freed_by: Mapping[int, EndpointKey] = field(default_factory=lambda: MappingProxyType({}))


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


class SnapshotContent:
    """One workload's computed snapshot, unversioned.

    `payload` is the deterministic serialization with version and content_hash unset;
    `content_hash` is its SHA-256. The message is parsed only when someone asks for it
    (inspection, the CLI): streaming sends the bytes.
    """

    __slots__ = ("_message", "backends", "content_hash", "payload", "peers", "warnings", "workload")

    def __init__(
        self,
        workload: str,
        content_hash: str,
        payload: bytes,
        peers: int,
        backends: int,
        warnings: int,
    ) -> None:
        self.workload = workload
        self.content_hash = content_hash
        self.payload = payload
        self.peers = peers
        self.backends = backends
        self.warnings = warnings
        self._message: pb.Snapshot | None = None

    @classmethod
    def from_message(cls, snapshot: pb.Snapshot) -> SnapshotContent:
        """Content of a ready-made message (tests, tools); version and hash are ignored."""
        bare = pb.Snapshot()
        bare.CopyFrom(snapshot)
        bare.version = 0
        bare.content_hash = ""
        payload = bare.SerializeToString(deterministic=True)
        warnings = len(bare.warnings) + sum(len(b.warnings) for b in bare.backends)
        return cls(
            workload=bare.workload,
            content_hash=hashlib.sha256(payload).hexdigest(),
            payload=payload,
            peers=len(bare.peers.peers),
            backends=len(bare.backends),
            warnings=warnings,
        )

    def message(self, version: int = 0) -> pb.Snapshot:
        """A fresh Snapshot message (content hash and `version` set); callers may mutate it."""
        if self._message is None:
            parsed = pb.Snapshot.FromString(self.payload)
            parsed.content_hash = self.content_hash
            self._message = parsed
        copy = pb.Snapshot()
        copy.CopyFrom(self._message)
        copy.version = version
        return copy

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SnapshotContent) and other.payload == self.payload

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def __repr__(self) -> str:
        return f"SnapshotContent({self.workload!r}, {self.content_hash[:12]})"


@dataclass(frozen=True, slots=True)
class ComputeResult:
    """Output of one computation.

    `snapshots` maps workload key -> its unversioned content; the snapshot store numbers
    versions. `pod_workloads` maps "namespace/pod" of every
    HAProxy pod to its workload key, so the server can place an agent from its Hello.
    """

    snapshots: Mapping[str, SnapshotContent]
    assignment: SlotAssignment
    rejections: tuple[Rejection, ...]
    pod_workloads: Mapping[str, str]
