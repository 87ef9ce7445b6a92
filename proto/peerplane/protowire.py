"""Protobuf wire encoding shared by both sides: varints, length-delimited fields, and a
backend's framed entry in a serialized Snapshot.

The control plane builds snapshots and deltas from parts (`controlplane/publish/wire.py`)
and the agent hashes what it materializes from the same parts (`nodeagent/held.py`): the
content hash is defined over these bytes, so both take them from here.
"""

from __future__ import annotations

from peerplane.v1 import peerplane_pb2 as pb

VARINT = 0
LEN = 2

SNAPSHOT_BACKENDS = int(pb.Snapshot.DESCRIPTOR.fields_by_name["backends"].number)

ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def varint(value: int) -> bytes:
    if value < 0x80:
        return ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def length_delimited(field: int, payload: bytes) -> bytes:
    return tag(field, LEN) + varint(len(payload)) + payload


def framed_backend(backend: pb.Backend) -> bytes:
    """The backend's entry in a serialized Snapshot: tag, length, deterministic bytes."""
    return length_delimited(SNAPSHOT_BACKENDS, backend.SerializeToString(deterministic=True))
