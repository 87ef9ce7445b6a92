"""What the fan-out benchmark's simulated agents do with what they receive: pure functions.

A real agent parses every snapshot; a thousand simulated agents on two cores cannot
(9.6 ms per 2 MB snapshot), and would then measure themselves instead of the server. So
they read only the envelope (nonce, version, content hash: a scan of the top-level
fields) and ACK; agents that accept deltas parse each content once per worker process,
and materialize each delta independently of the server's code (`apply_delta`, from the
proto's rules) and check the result's SHA-256 against `to_content_hash`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.publish import content_hash
from peerplane.v1 import peerplane_pb2 as pb

_SERVER_NONCE = pb.ServerMessage.DESCRIPTOR.fields_by_name["nonce"].number
_SERVER_SNAPSHOT = pb.ServerMessage.DESCRIPTOR.fields_by_name["snapshot"].number
_SNAPSHOT_VERSION = pb.Snapshot.DESCRIPTOR.fields_by_name["version"].number
_SNAPSHOT_HASH = pb.Snapshot.DESCRIPTOR.fields_by_name["content_hash"].number


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def fields(data: bytes | memoryview) -> list[tuple[int, int | memoryview]]:
    """Top-level (field number, varint value or length-delimited bytes) in wire order;
    fixed-width fields are skipped (none of the envelope's fields is one)."""
    view = memoryview(data)
    found: list[tuple[int, int | memoryview]] = []
    pos = 0
    while pos < len(view):
        key, pos = _varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(view, pos)
            found.append((number, value))
        elif wire_type == 2:
            length, pos = _varint(view, pos)
            if pos + length > len(view):
                raise WireError("truncated field")
            found.append((number, view[pos : pos + length]))
            pos += length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
    if pos != len(view):
        raise WireError("truncated fixed-width field")
    return found


@dataclass(frozen=True, slots=True)
class SnapshotEnvelope:
    """A `ServerMessage(snapshot=...)` read without parsing the snapshot's body."""

    nonce: str
    version: int
    content_hash: str
    snapshot: bytes


def snapshot_envelope(raw: bytes) -> SnapshotEnvelope | None:
    """The envelope of a ServerMessage carrying a snapshot; None for any other message.
    Later occurrences of a field win, as when protobuf merges them."""
    nonce = ""
    body: memoryview | None = None
    for number, value in fields(raw):
        if number == _SERVER_NONCE and isinstance(value, memoryview):
            nonce = bytes(value).decode()
        elif number == _SERVER_SNAPSHOT and isinstance(value, memoryview):
            body = value
    if body is None:
        return None
    version, digest = 0, ""
    for number, value in fields(body):
        if number == _SNAPSHOT_VERSION and isinstance(value, int):
            version = value
        elif number == _SNAPSHOT_HASH and isinstance(value, memoryview):
            digest = bytes(value).decode()
    return SnapshotEnvelope(nonce, version, digest, bytes(body))


class DeltaError(ValueError):
    """A delta that cannot be applied to the snapshot held: the agent NACKs with resync."""


def apply_delta(held: pb.Snapshot, delta: pb.SnapshotDelta) -> pb.Snapshot:
    """The snapshot `delta` makes of `held`, by the proto's rules: listed backends replace
    or add by name, removed ones are dropped, backends stay sorted by name; peers,
    frontends and warnings are replaced only when flagged. Version and hash are the
    delta's; whether the content matches them is `verify`'s job."""
    if held.content_hash != delta.from_content_hash:
        raise DeltaError(
            f"delta from {delta.from_content_hash[:12]} but holding {held.content_hash[:12]}"
        )
    removed = set(delta.removed_backends)
    missing = removed - {b.name for b in held.backends}
    if missing:
        raise DeltaError(f"delta removes backends not held: {sorted(missing)[:3]}")
    backends = {b.name: b for b in held.backends if b.name not in removed}
    for backend in delta.backends:
        backends[backend.name] = backend
    result = pb.Snapshot(
        workload=held.workload,
        version=delta.version,
        content_hash=delta.to_content_hash,
        backends=[backends[name] for name in sorted(backends)],
    )
    peers = delta if delta.peers_changed else held
    if peers.HasField("peers"):
        result.peers.CopyFrom(peers.peers)
    frontends = delta if delta.frontends_changed else held
    if frontends.HasField("http_frontend"):
        result.http_frontend.CopyFrom(frontends.http_frontend)
    result.tcp_frontends.extend(frontends.tcp_frontends)
    result.warnings.extend(delta.warnings if delta.warnings_changed else held.warnings)
    return result


def verify(snapshot: pb.Snapshot) -> bool:
    """The content hash computed as the control plane computes it equals the one stated."""
    return content_hash(snapshot) == snapshot.content_hash
