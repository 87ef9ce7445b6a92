"""The snapshot the agent holds, kept in parts, and the deltas that move it.

Pure. A `Held` snapshot keeps each backend's framed bytes (its `Snapshot.backends` entry)
beside the message, so a `SnapshotDelta` is applied and its content hash verified in
O(changed backends) plus one SHA-256 over a join of bytes already in hand; the
serialization of the whole snapshot is never rebuilt (docs/design.md, "The agent stream":
deltas on the agent side).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from peerplane.protowire import framed_backend as framed
from peerplane.v1 import peerplane_pb2 as pb


class DeltaError(ValueError):
    """A snapshot or delta the agent cannot hold; the text says why."""


@dataclass(frozen=True)
class ChangeSet:
    """What differs between the snapshot whose hash is `base` and the next one."""

    base: str
    backends: frozenset[str]  # added or changed
    removed: frozenset[str]
    peers: bool
    frontends: bool
    warnings: bool


def _part(**fields: object) -> bytes:
    return pb.Snapshot(**fields).SerializeToString(deterministic=True)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Held:
    """A full snapshot, immutable by convention: messages and bytes are shared between
    versions, never mutated. `names` is sorted; the parts are the serialization's fields in
    number order, so their join (without `version`/`content_hash`) is the hashed payload."""

    workload: str
    version: int
    content_hash: str
    peers: pb.PeerSection | None
    http_frontend: pb.HttpFrontend | None
    tcp_frontends: Sequence[pb.TcpFrontend]
    warnings: Sequence[pb.RejectedInput]
    names: tuple[str, ...]
    backends: Mapping[str, pb.Backend]
    framed: Mapping[str, bytes]
    workload_part: bytes
    peers_part: bytes
    frontends_part: bytes
    warnings_part: bytes

    @classmethod
    def from_snapshot(cls, snapshot: pb.Snapshot) -> Held:
        """Hold a full snapshot (its claimed hash is kept as is); backends by name."""
        backends: dict[str, pb.Backend] = {}
        for b in snapshot.backends:
            if b.name in backends:
                raise DeltaError(f"duplicate backend {b.name!r}")
            backends[b.name] = b
        peers = snapshot.peers if snapshot.HasField("peers") else None
        http = snapshot.http_frontend if snapshot.HasField("http_frontend") else None
        return cls(
            workload=snapshot.workload,
            version=snapshot.version,
            content_hash=snapshot.content_hash,
            peers=peers,
            http_frontend=http,
            tcp_frontends=tuple(snapshot.tcp_frontends),
            warnings=tuple(snapshot.warnings),
            names=tuple(sorted(backends)),
            backends=backends,
            framed={name: framed(b) for name, b in backends.items()},
            workload_part=_part(workload=snapshot.workload),
            peers_part=_part(peers=peers) if peers is not None else b"",
            frontends_part=_frontends_part(http, snapshot.tcp_frontends),
            warnings_part=_part(warnings=snapshot.warnings),
        )

    def payload(self) -> bytes:
        """The deterministic serialization with version and content_hash unset."""
        return b"".join(
            (
                self.workload_part,
                self.peers_part,
                *map(self.framed.__getitem__, self.names),  # no Python frame per backend
                self.frontends_part,
                self.warnings_part,
            )
        )

    def computed_hash(self) -> str:
        """The content hash exactly as the control plane computes it."""
        return hashlib.sha256(self.payload()).hexdigest()

    def serialized(self) -> bytes:
        """The deterministic serialization with version and content_hash (the saved file)."""
        return b"".join(
            (
                self.workload_part,
                _part(version=self.version, content_hash=self.content_hash),
                self.peers_part,
                *map(self.framed.__getitem__, self.names),
                self.frontends_part,
                self.warnings_part,
            )
        )

    def message(self) -> pb.Snapshot:
        """A fresh pb.Snapshot of it (tools and tests; costs a whole parse)."""
        return pb.Snapshot.FromString(self.serialized())

    def apply(self, delta: pb.SnapshotDelta) -> tuple[Held, ChangeSet]:
        """The snapshot `delta` leads to from this one, verified against its hash, and what
        changed; DeltaError (nothing held changes) when it does not apply."""
        if delta.from_content_hash != self.content_hash:
            raise DeltaError(f"it applies to {delta.from_content_hash[:12] or 'nothing'}")
        if delta.workload != self.workload:
            raise DeltaError(f"workload {delta.workload!r} is not {self.workload!r}")
        backends = dict(self.backends)
        framed_by_name = dict(self.framed)
        changed: set[str] = set()
        for b in delta.backends:
            if not b.name:
                raise DeltaError("a backend without a name")
            if b.name in changed:
                raise DeltaError(f"backend {b.name!r} listed twice")
            changed.add(b.name)
            backends[b.name] = b
            framed_by_name[b.name] = framed(b)
        removed = set(delta.removed_backends)
        if len(removed) != len(delta.removed_backends):
            raise DeltaError("a removed backend is named twice")
        for name in removed:
            if name in changed:
                raise DeltaError(f"backend {name!r} both changed and removed")
            if name not in self.backends:
                raise DeltaError(f"removed backend {name!r} is not held")
            del backends[name]
            del framed_by_name[name]
        added = any(name not in self.backends for name in changed)
        names = tuple(sorted(backends)) if added or removed else self.names
        peers, peers_part = self.peers, self.peers_part
        if delta.peers_changed:
            peers = delta.peers if delta.HasField("peers") else None
            peers_part = _part(peers=peers) if peers is not None else b""
        http, tcp, frontends_part = self.http_frontend, self.tcp_frontends, self.frontends_part
        if delta.frontends_changed:
            http = delta.http_frontend if delta.HasField("http_frontend") else None
            tcp = tuple(delta.tcp_frontends)
            frontends_part = _frontends_part(http, tcp)
        warnings, warnings_part = self.warnings, self.warnings_part
        if delta.warnings_changed:
            warnings = tuple(delta.warnings)
            warnings_part = _part(warnings=warnings)
        result = Held(
            workload=self.workload,
            version=delta.version,
            content_hash=delta.to_content_hash,
            peers=peers,
            http_frontend=http,
            tcp_frontends=tcp,
            warnings=warnings,
            names=names,
            backends=backends,
            framed=framed_by_name,
            workload_part=self.workload_part,
            peers_part=peers_part,
            frontends_part=frontends_part,
            warnings_part=warnings_part,
        )
        got = result.computed_hash()
        if got != delta.to_content_hash:
            raise DeltaError(f"the result's content hash is {got[:12]}")
        change = ChangeSet(
            base=self.content_hash,
            backends=frozenset(n for n in changed if self.framed.get(n) != framed_by_name[n]),
            removed=frozenset(removed),
            peers=peers_part != self.peers_part,
            frontends=frontends_part != self.frontends_part,
            warnings=warnings_part != self.warnings_part,
        )
        return result, change


def _frontends_part(http: pb.HttpFrontend | None, tcp: Sequence[pb.TcpFrontend]) -> bytes:
    if http is None:
        return _part(tcp_frontends=tcp)
    return _part(http_frontend=http, tcp_frontends=tcp)


def diff(old: Held, new: Held) -> ChangeSet:
    """What changed from `old` to `new`, by comparing parts: shared bytes compare by
    identity, so after a delta this costs one dict lookup per backend."""
    old_framed, new_framed = old.framed, new.framed
    changed = frozenset(
        name
        for name, data in new_framed.items()
        if (before := old_framed.get(name)) is not data and before != data
    )
    return ChangeSet(
        base=old.content_hash,
        backends=changed,
        removed=frozenset(name for name in old_framed if name not in new_framed),
        peers=old.peers_part != new.peers_part,
        frontends=old.frontends_part != new.frontends_part,
        warnings=old.warnings_part != new.warnings_part,
    )


def describe(delta: pb.SnapshotDelta, why: str) -> str:
    """The resync NACK text."""
    return (
        f"delta from {delta.from_content_hash[:12] or '(none)'} to "
        f"{delta.to_content_hash[:12]} (version {delta.version}): {why}"
    )
