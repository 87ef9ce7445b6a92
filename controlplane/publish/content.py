"""`SnapshotContent`: one workload's snapshot as bytes and content hash, unversioned.

This is what the store versions and the streams send; the message object is parsed only
when someone asks for it (inspection, the CLI).
"""

from __future__ import annotations

import hashlib

from peerplane.v1 import peerplane_pb2 as pb


class SnapshotContent:
    """One workload's encoded snapshot, unversioned.

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
    def of_payload(
        cls, workload: str, payload: bytes, peers: int, backends: int, warnings: int
    ) -> SnapshotContent:
        """Content of encoded bytes: the hash is computed here, the one place it is."""
        digest = hashlib.sha256(payload).hexdigest()
        return cls(workload, digest, payload, peers, backends, warnings)

    @classmethod
    def from_message(cls, snapshot: pb.Snapshot) -> SnapshotContent:
        """Content of a ready-made message (tests, tools); version and hash are ignored."""
        bare = pb.Snapshot()
        bare.CopyFrom(snapshot)
        bare.version = 0
        bare.content_hash = ""
        warnings = len(bare.warnings) + sum(len(b.warnings) for b in bare.backends)
        return cls.of_payload(
            bare.workload,
            bare.SerializeToString(deterministic=True),
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


def content_hash(snapshot: pb.Snapshot) -> str:
    """SHA-256 of the deterministic serialization, version and hash cleared."""
    return SnapshotContent.from_message(snapshot).content_hash
