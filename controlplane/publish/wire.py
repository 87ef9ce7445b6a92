"""Protobuf wire encoding for the parts of a snapshot that are built most often.

A snapshot of 2,000 backends holds ~84,000 slots. Building a message object per slot and
serializing the whole snapshot on every recompute costs more than the rest of the
computation; instead, each backend is serialized once (slots encoded here directly) and a
snapshot is the concatenation of its parts. The result is byte-identical to
`SerializeToString(deterministic=True)` of the equivalent message, because parts are
emitted in field-number order; `tests/publish/test_encode.py` checks that. Field numbers
are read from the generated descriptors, so the proto file stays their only definition.
"""

from __future__ import annotations

from functools import lru_cache

from google.protobuf.message import Message

from peerplane.names import server_name
from peerplane.protowire import LEN as _LEN
from peerplane.protowire import ONE_BYTE as _ONE_BYTE
from peerplane.protowire import VARINT as _VARINT
from peerplane.protowire import length_delimited, tag, varint
from peerplane.v1 import peerplane_pb2 as pb


def number(message: type[Message], field: str) -> int:
    """The field's number in the generated descriptor (`pb.Backend.DESCRIPTOR`)."""
    return int(message.DESCRIPTOR.fields_by_name[field].number)


_number = number


SNAPSHOT_VERSION = _number(pb.Snapshot, "version")
SNAPSHOT_CONTENT_HASH = _number(pb.Snapshot, "content_hash")
SNAPSHOT_BACKENDS = _number(pb.Snapshot, "backends")
BACKEND_SLOTS = _number(pb.Backend, "slots")
BACKEND_CHECK = _number(pb.Backend, "check")
CHECK_INTERVAL_MS, CHECK_RISE, CHECK_FALL, CHECK_HTTP_PATH = (
    _number(pb.HealthCheck, name) for name in ("interval_ms", "rise", "fall", "http_path")
)
SLOT_INDEX, SLOT_SERVER_NAME, SLOT_ADDRESS, SLOT_PORT, SLOT_ENABLED = (
    _number(pb.Slot, name) for name in ("index", "server_name", "address", "port", "enabled")
)
SERVER_MESSAGE_SNAPSHOT = _number(pb.ServerMessage, "snapshot")


def varint_field(field: int, value: int) -> bytes:
    return tag(field, _VARINT) + varint(value) if value else b""


def string_field(field: int, value: str) -> bytes:
    return length_delimited(field, value.encode()) if value else b""


@lru_cache(maxsize=4096)
def _slot_head(index: int) -> bytes:
    return varint_field(SLOT_INDEX, index) + string_field(SLOT_SERVER_NAME, server_name(index))


@lru_cache(maxsize=4096)
def free_slot(index: int) -> bytes:
    """`slots` entry of a free (disabled) slot: only index and name are set."""
    return length_delimited(BACKEND_SLOTS, _slot_head(index))


_ENABLED = tag(SLOT_ENABLED, _VARINT) + b"\x01"
_ADDRESS_TAG = tag(SLOT_ADDRESS, _LEN)
_SLOTS_TAG = tag(BACKEND_SLOTS, _LEN)


@lru_cache(maxsize=65536)
def _port_and_enabled(port: int) -> bytes:
    return varint_field(SLOT_PORT, port) + _ENABLED


def used_slot(index: int, address: str, port: int) -> bytes:
    """`slots` entry of a slot holding a ready endpoint (the hot path of a full compute:
    one concatenation, every length under 128 so each fits one byte)."""
    raw = address.encode()
    body = _slot_head(index) + _ADDRESS_TAG + _ONE_BYTE[len(raw)] + raw + _port_and_enabled(port)
    return _SLOTS_TAG + varint(len(body)) + body


@lru_cache(maxsize=256)
def health_check(interval_ms: int, rise: int, fall: int, http_path: str) -> bytes:
    """Backend `check` (field 11). It follows the warnings (field 10) in a serialized
    Backend, so a backend's bytes are: fields 1..9, warnings, check."""
    body = (
        varint_field(CHECK_INTERVAL_MS, interval_ms)
        + varint_field(CHECK_RISE, rise)
        + varint_field(CHECK_FALL, fall)
        + string_field(CHECK_HTTP_PATH, http_path)
    )
    return length_delimited(BACKEND_CHECK, body)


def snapshot_message(payload: bytes, version: int, content_hash: str) -> bytes:
    """`ServerMessage(snapshot=...)` around a snapshot payload with version and content
    hash appended. Protobuf merges fields that appear later, so the snapshot parses with
    both set; the payload is never re-serialized and is copied once (8 MB at 8,000
    Services)."""
    trailer = varint_field(SNAPSHOT_VERSION, version) + string_field(
        SNAPSHOT_CONTENT_HASH, content_hash
    )
    size = len(payload) + len(trailer)
    head = tag(SERVER_MESSAGE_SNAPSHOT, _LEN) + varint(size)
    return b"".join((head, payload, trailer))
