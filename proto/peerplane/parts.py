"""The parts of a snapshot, their join (the hashed payload) and the content hash, and which
backends changed between two versions' parts.

The content hash is defined here, once: SHA-256 over the deterministic serialization of a
`Snapshot` with `version` and `content_hash` unset, which is the join of its encoded
fields in number order. The control plane's encoder builds `ContentParts` from the bytes
it encodes (and deltas from two of them); the agent holds one per snapshot and moves it
with deltas (docs/design.md, "Deltas").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from peerplane.protowire import framed_backend, length_delimited
from peerplane.v1 import peerplane_pb2 as pb

SNAPSHOT_CERTIFICATES = int(pb.Snapshot.DESCRIPTOR.fields_by_name["certificates"].number)


def payload_hash(payload: bytes) -> str:
    """The content hash of a payload (the join of a snapshot's parts)."""
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True, slots=True, eq=False)
class ContentParts:
    """A snapshot's encoded fields, in field-number order; their concatenation is the
    payload. `backends` holds each backend's framed bytes (its `Snapshot.backends` entry:
    tag, length, deterministic serialization) by name, in the payload's order. Bytes
    objects are shared between versions whose part did not change (compared by identity
    first), never mutated."""

    workload: bytes  # field 1
    peers: bytes  # field 4
    backends: Mapping[str, bytes]  # field 5 entries, by name, in payload order
    frontends: bytes  # fields 6 and 7
    warnings: bytes  # field 8
    # Field 14 (the route model's HTTP listeners): changes with `frontends` as one part of a
    # delta (`frontends_changed`), kept apart so the join stays in field order.
    listeners: bytes = b""
    # Field 15 entries (each certificate's framed bytes) by name, in name order: like the
    # backends, a delta carries only those that changed.
    # repr=False: they hold the private keys.
    certificates: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    # Field 16 (TLS passthrough listeners): changes with `frontends`, like `listeners`.
    tls_listeners: bytes = b""

    def join(self) -> bytes:
        """The payload: the deterministic serialization without version and hash."""
        return b"".join(
            (
                self.workload,
                self.peers,
                *self.backends.values(),
                self.frontends,
                self.warnings,
                self.listeners,
                *self.certificates.values(),
                self.tls_listeners,
            )
        )

    def frontends_differ(self, other: ContentParts) -> bool:
        """Whether the delta part "frontends" (fields 6, 7, 14 and 16) differs."""
        return (
            self.frontends != other.frontends
            or self.listeners != other.listeners
            or self.tls_listeners != other.tls_listeners
        )

    def content_hash(self) -> str:
        return payload_hash(self.join())

    @classmethod
    def of_message(cls, snapshot: pb.Snapshot, sort_backends: bool = False) -> ContentParts:
        """The parts of a message; version and content hash are ignored. The backends
        follow the message's order, or their names' with `sort_backends`; ValueError when
        one name is listed twice."""
        listed: Iterable[pb.Backend] = snapshot.backends
        if sort_backends:
            listed = sorted(snapshot.backends, key=lambda b: b.name)
        backends: dict[str, bytes] = {}
        for backend in listed:
            if backend.name in backends:
                raise ValueError(f"snapshot lists backend {backend.name!r} twice")
            backends[backend.name] = framed_backend(backend)
        certificates: dict[str, bytes] = {}
        for certificate in sorted(snapshot.certificates, key=lambda c: c.name):
            if certificate.name in certificates:
                raise ValueError(f"snapshot lists certificate {certificate.name!r} twice")
            certificates[certificate.name] = framed_certificate(certificate)
        return cls(
            workload=workload_part(snapshot.workload),
            peers=peers_part(snapshot.peers if snapshot.HasField("peers") else None),
            backends=backends,
            frontends=frontends_part(
                snapshot.http_frontend if snapshot.HasField("http_frontend") else None,
                snapshot.tcp_frontends,
            ),
            warnings=warnings_part(snapshot.warnings),
            listeners=listeners_part(snapshot.http_listeners),
            certificates=certificates,
            tls_listeners=tls_listeners_part(snapshot.tls_listeners),
        )


def workload_part(workload: str) -> bytes:
    return pb.Snapshot(workload=workload).SerializeToString()


def peers_part(peers: pb.PeerSection | None) -> bytes:
    if peers is None:
        return b""
    return pb.Snapshot(peers=peers).SerializeToString(deterministic=True)


def frontends_part(http: pb.HttpFrontend | None, tcp: Sequence[pb.TcpFrontend]) -> bytes:
    if http is None:
        return pb.Snapshot(tcp_frontends=tcp).SerializeToString(deterministic=True)
    return pb.Snapshot(http_frontend=http, tcp_frontends=tcp).SerializeToString(deterministic=True)


def warnings_part(warnings: Sequence[pb.RejectedInput]) -> bytes:
    return pb.Snapshot(warnings=warnings).SerializeToString(deterministic=True)


def listeners_part(listeners: Sequence[pb.HttpListener]) -> bytes:
    if not listeners:
        return b""
    return pb.Snapshot(http_listeners=listeners).SerializeToString(deterministic=True)


def tls_listeners_part(listeners: Sequence[pb.TlsPassthroughListener]) -> bytes:
    if not listeners:
        return b""
    return pb.Snapshot(tls_listeners=listeners).SerializeToString(deterministic=True)


def framed_certificate(certificate: pb.Certificate) -> bytes:
    """The certificate's entry in a serialized Snapshot: tag, length, deterministic bytes."""
    return length_delimited(
        SNAPSHOT_CERTIFICATES, certificate.SerializeToString(deterministic=True)
    )


def certificate_changes(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
    """The framed certificates of `new` that `old` lacks or holds differently (name
    order), and the names `old` has and `new` has not (sorted)."""
    before = old.certificates
    changed = {
        name: framed
        for name, framed in new.certificates.items()
        if (held := before.get(name)) is not framed and held != framed
    }
    removed = sorted(name for name in before if name not in new.certificates)
    return changed, removed


def backend_changes(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
    """The framed backends of `new` that `old` lacks or holds differently, by name in
    `new`'s order, and the names `old` has and `new` has not (sorted). Compared by
    identity first (shared bytes), then equality: one dict lookup per backend."""
    before = old.backends
    changed = {
        name: framed
        for name, framed in new.backends.items()
        if (held := before.get(name)) is not framed and held != framed
    }
    after = new.backends
    removed = sorted(name for name in before if name not in after)
    return changed, removed
