"""The encoder: a workload's typed snapshot -> snapshot bytes and content hash.

The computation returns `WorkloadSnapshot`s and knows no protobuf; this is the one place
they become the wire form (docs/design.md, "Architecture"). A snapshot is its
`ContentParts`: workload, peers, each backend's framed bytes in name order, frontends,
warnings: the fields in number order, so the bytes equal protobuf's deterministic
serialization. Encoding 84,000 slots is most of a full computation, so an `Encoder`
keeps each backend's bytes by the identity of its `BackendSpec`: the incremental
`Computer` hands back the same spec objects for unchanged Services, and only changed
backends are encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.compute.types import BackendSpec, Rejection, WorkloadSnapshot
from controlplane.publish import wire
from controlplane.publish.content import ContentParts, SnapshotContent
from peerplane import protowire
from peerplane.v1 import peerplane_pb2 as pb

# id(spec) -> (spec, its Snapshot.backends entry); the spec is held so its id stays unique.
_BackendCache = dict[int, tuple[BackendSpec, bytes]]


def rejected_input(rejection: Rejection) -> pb.RejectedInput:
    return pb.RejectedInput(
        object=rejection.object, key=rejection.key, value=rejection.value, reason=rejection.reason
    )


def _warnings(rejections: Sequence[Rejection]) -> bytes:
    """Backend `warnings` entries (field 10: after the slots, before the check)."""
    if not rejections:
        return b""
    return pb.Backend(warnings=[rejected_input(r) for r in rejections]).SerializeToString()


def backend_bytes(spec: BackendSpec) -> bytes:
    """The `Snapshot.backends` entry of `spec`: framing, fields 1..9 (slots encoded
    directly), warnings, check."""
    head = pb.Backend(
        name=spec.name,
        service=spec.service,
        service_port=spec.service_port,
        mode=spec.mode,
        balance=spec.balance,
        balance_argument=spec.balance_argument,
        hash_type=spec.hash_type,
    )
    if spec.persistence is not None:
        head.persistence.table_size = spec.persistence.table_size
        head.persistence.expire_ms = spec.persistence.expire_ms
    parts = [head.SerializeToString(deterministic=True)]
    slots = spec.slots
    by_slot = {slot: endpoint for endpoint, slot in slots.slots.items()}
    for index in range(1, slots.count + 1):
        endpoint = by_slot.get(index)
        if endpoint is None:
            parts.append(wire.free_slot(index))
        else:
            parts.append(wire.used_slot(index, endpoint[0], endpoint[1]))
    parts.append(_warnings(spec.warnings))
    check = spec.check
    if check is not None:
        parts.append(wire.health_check(check.interval_ms, check.rise, check.fall, check.http_path))
    return protowire.length_delimited(wire.SNAPSHOT_BACKENDS, b"".join(parts))


def _peers(snapshot: WorkloadSnapshot) -> bytes:
    """Field 4: the peers section."""
    head = pb.Snapshot()
    section = snapshot.peers
    head.peers.name = section.name
    head.peers.port = section.port
    for peer in section.peers:
        head.peers.peers.add(name=peer.name, address=peer.address, port=peer.port)
    return head.SerializeToString(deterministic=True)


def _frontends(snapshot: WorkloadSnapshot) -> bytes:
    """Fields 6 and 7: the HTTP and TCP frontends."""
    tail = pb.Snapshot()
    http = snapshot.http_frontend
    if http is not None:
        tail.http_frontend.port = http.port
        for route in http.routes:
            tail.http_frontend.routes.add(host=route.host, backend=route.backend)
    for frontend in snapshot.tcp_frontends:
        tail.tcp_frontends.add(port=frontend.port, backend=frontend.backend)
    return tail.SerializeToString(deterministic=True)


def _snapshot_warnings(snapshot: WorkloadSnapshot) -> bytes:
    """Field 8: the snapshot's own warnings."""
    tail = pb.Snapshot(warnings=[rejected_input(r) for r in snapshot.warnings])
    return tail.SerializeToString(deterministic=True)


class Encoder:
    """Encodes computations one after the other, reusing unchanged backends' bytes.

    The cache holds exactly the specs of the last `encode` call, so it is bounded by the
    current cluster and a spec no computation returns any more is released.
    """

    def __init__(self) -> None:
        self._backends: _BackendCache = {}
        self.encoded = 0  # backends encoded (not reused) by the last call

    def encode(self, snapshots: Mapping[str, WorkloadSnapshot]) -> dict[str, SnapshotContent]:
        """Every workload's content, in the order given."""
        previous: _BackendCache = self._backends
        current: _BackendCache = {}
        self.encoded = 0
        encoded = {key: self._content(s, previous, current) for key, s in snapshots.items()}
        self._backends = current
        return encoded

    def _content(
        self, snapshot: WorkloadSnapshot, previous: _BackendCache, current: _BackendCache
    ) -> SnapshotContent:
        backends: dict[str, bytes] = {}
        for spec in snapshot.backends:
            key = id(spec)
            hit = current.get(key)
            if hit is None:
                hit = previous.get(key)
                if hit is None or hit[0] is not spec:
                    hit = (spec, backend_bytes(spec))
                    self.encoded += 1
                current[key] = hit
            backends[spec.name] = hit[1]
        parts = ContentParts(
            workload=pb.Snapshot(workload=snapshot.workload).SerializeToString(),
            peers=_peers(snapshot),
            backends=backends,
            frontends=_frontends(snapshot),
            warnings=_snapshot_warnings(snapshot),
        )
        return SnapshotContent.of_parts(
            snapshot.workload,
            parts,
            peers=len(snapshot.peers.peers),
            backends=len(snapshot.backends),
            warnings=snapshot.warning_count,
        )


def encode(snapshots: Mapping[str, WorkloadSnapshot]) -> dict[str, SnapshotContent]:
    """Every workload's content, encoded from scratch (one-shot callers: CLI, tests)."""
    return Encoder().encode(snapshots)


def encode_one(snapshot: WorkloadSnapshot) -> SnapshotContent:
    """One workload's content, encoded from scratch."""
    return Encoder().encode({snapshot.workload: snapshot})[snapshot.workload]
