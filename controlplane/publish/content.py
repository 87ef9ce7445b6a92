"""`SnapshotContent`: one workload's snapshot as bytes and content hash, unversioned.

This is what the store versions and the streams send; the message object is parsed only
when someone asks for it (inspection, the CLI). Its `parts` (the shared `ContentParts`:
head, each backend's framed bytes, frontends, warnings) are what deltas are built from
(`controlplane/publish/delta.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from peerplane.parts import ContentParts
from peerplane.v1 import peerplane_pb2 as pb


@dataclass(frozen=True, slots=True)
class Derived:
    """What the encoder says a content can differ in from the content it was built from
    (`parts`): the backends it re-encoded or dropped, the route group keys it grouped
    again (added, changed or removed); None: not known (compare all)."""

    parts: ContentParts
    backends: tuple[str, ...] | None
    groups: tuple[str, ...] | None


class SnapshotContent:
    """One workload's encoded snapshot, unversioned.

    `payload` is the deterministic serialization with version and content_hash unset;
    `content_hash` is SHA-256 over its parts' digests (`peerplane.parts`). The payload is
    joined from the parts only when someone asks for it (a full snapshot sent, inspection):
    at 8,000 Services it is 8 MB, and a change that only deltas carry needs none of it. The
    message is parsed only when someone asks for it (inspection, the CLI): streaming sends
    the bytes.

    `derived`, set by the encoder, says which backends and route groups can differ from
    the content it was built from (`Derived`); the store reads it to follow what a change
    replaced, and to build the delta from it, without comparing all.
    """

    __slots__ = (
        "_message",
        "_payload",
        "backends",
        "content_hash",
        "derived",
        "parts",
        "peers",
        "warnings",
        "workload",
    )

    def __init__(
        self,
        workload: str,
        content_hash: str,
        parts: ContentParts,
        peers: int,
        backends: int,
        warnings: int,
        payload: bytes | None = None,
        derived: Derived | None = None,
    ) -> None:
        self.workload = workload
        self.content_hash = content_hash
        self.parts = parts
        self._payload = payload
        self.peers = peers
        self.backends = backends
        self.warnings = warnings
        self.derived = derived
        self._message: pb.Snapshot | None = None

    @property
    def payload(self) -> bytes:
        """The deterministic serialization (version and hash unset), joined on first use."""
        if self._payload is None:
            self._payload = self.parts.join()
        return self._payload

    @classmethod
    def of_parts(
        cls,
        workload: str,
        parts: ContentParts,
        peers: int,
        backends: int,
        warnings: int,
        derived: Derived | None = None,
    ) -> SnapshotContent:
        """Content of encoded parts, hashed as `peerplane.parts` defines it. The joined
        payload is not kept: most versions only ever travel as deltas."""
        return cls(
            workload, parts.content_hash(), parts, peers, backends, warnings, derived=derived
        )

    @classmethod
    def from_message(cls, snapshot: pb.Snapshot) -> SnapshotContent:
        """Content of a ready-made message (tests, tools); version and hash are ignored."""
        warnings = len(snapshot.warnings) + sum(len(b.warnings) for b in snapshot.backends)
        return cls.of_parts(
            snapshot.workload,
            ContentParts.of_message(snapshot),
            peers=len(snapshot.peers.peers),
            backends=len(snapshot.backends),
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
        """Same content: the content hash stands for the payload (no 8 MB compare)."""
        return isinstance(other, SnapshotContent) and other.content_hash == self.content_hash

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def __repr__(self) -> str:
        return f"SnapshotContent({self.workload!r}, {self.content_hash[:12]})"


def content_hash(snapshot: pb.Snapshot) -> str:
    """The content hash (`peerplane.parts`: over the parts' digests), version and hash
    cleared."""
    return SnapshotContent.from_message(snapshot).content_hash


def without_keys(snapshot: pb.Snapshot) -> pb.Snapshot:
    """`snapshot` with every certificate's `pem` (chain and private key) cleared, in place:
    what inspection shows. Name, Secret, fingerprint, serial, notAfter and DNS names stay,
    and so does `content_hash`, the hash of the real content (pem included), so an
    operator compares it with what the agents acknowledged."""
    for certificate in snapshot.certificates:
        certificate.ClearField("pem")
    return snapshot
