"""The saved snapshot's journal: the changes since the last whole snapshot written, as
delta records appended to one file (docs/design.md, "The saved snapshot: a base and a
journal").

Pure: bytes in, bytes out; `saved.StateStore` does the reads, writes and fsyncs.

A journal file is a header that names the base it extends (the SHA-256 and length of the
base file's bytes) and then records, each `>II` (payload length, CRC-32 of the payload)
followed by the payload: a `SnapshotDelta` from the state before to the state after, built
from the held parts (a backend's framed bytes are field 5 of a Snapshot and of a
SnapshotDelta alike, and so are the other parts), so it costs O(changed) and is verified
on load by the very `Held.apply` that verifies the control plane's deltas. A record cut at
any byte, or not whole by its length or CRC, ends the replay: the state is the last whole
one. A header that names other base bytes (a crash between a new base's rename and the
journal's reset) makes the whole journal stale: the base alone is the state.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from nodeagent.held import ChangeSet, Held
from peerplane.v1 import peerplane_pb2 as pb

MAGIC = b"peerplane-journal-1\n"
_BASE = struct.Struct(">32sQ")  # SHA-256 and length of the base file's bytes
_RECORD = struct.Struct(">II")  # payload length, CRC-32 of the payload
HEADER_SIZE = len(MAGIC) + _BASE.size


def base_digest(pieces: Iterable[bytes]) -> bytes:
    """What a journal's header names of its base (the bytes `pieces` join to): nothing
    shorter tells two bases apart when a crash left a new base beside the old base's
    journal."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest.digest()


def header(digest: bytes, length: int) -> bytes:
    """The header of a journal extending the base whose bytes have `digest` and `length`."""
    return MAGIC + _BASE.pack(digest, length)


def framed(payload: bytes) -> bytes:
    """One record: its length and CRC-32, then `payload`."""
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def delta_payload(old: Held, new: Held, change: ChangeSet) -> bytes:
    """The `SnapshotDelta` leading from `old` to `new`, serialized from the parts `change`
    names (its base is `old`): the head's fields, then the changed parts' bytes as held
    (field numbers are the same in both messages)."""
    assert change.base == old.content_hash, "a record leads from the state before it"
    head = pb.SnapshotDelta(
        workload=new.workload,
        version=new.version,
        to_content_hash=new.content_hash,
        from_content_hash=old.content_hash,
        removed_backends=sorted(change.removed),
        removed_certificates=sorted(change.removed_certificates),
        removed_route_groups=sorted(change.removed_route_groups),
        peers_changed=change.peers,
        frontends_changed=change.frontends,
        warnings_changed=change.warnings,
    )
    parts = new.parts
    chunks = [head.SerializeToString(deterministic=True)]
    if change.peers:
        chunks.append(parts.peers)
    chunks += [parts.backends[name] for name in sorted(change.backends)]
    if change.frontends:
        chunks += [parts.frontends, parts.listeners, parts.tls_listeners]
    if change.warnings:
        chunks.append(parts.warnings)
    chunks += [parts.certificates[name] for name in sorted(change.certificates)]
    chunks += [parts.route_groups[key] for key in sorted(change.route_groups)]
    return b"".join(chunks)


@dataclass(frozen=True)
class Record:
    """A whole record: its payload and the offset just past it in the journal."""

    payload: bytes
    end: int


def extends(journal: bytes, digest: bytes, length: int) -> bool:
    """The journal's header names the base whose bytes have `digest` and `length`."""
    return journal[:HEADER_SIZE] == header(digest, length)


def records(journal: bytes) -> Iterator[Record]:
    """The whole records after the header, in order, up to the first that is not whole
    (cut short, or its CRC-32 differs: a write a crash interrupted)."""
    at = HEADER_SIZE
    while at + _RECORD.size <= len(journal):
        length, crc = _RECORD.unpack_from(journal, at)
        start, end = at + _RECORD.size, at + _RECORD.size + length
        if end > len(journal):
            return
        payload = journal[start:end]
        if zlib.crc32(payload) != crc:
            return
        yield Record(payload, end)
        at = end
