"""The Kubernetes slot ledger's layout, pure: one ConfigMap shard per backend.

A shard is named `<ledger>.<namespace>.<service>.<port>` (the backend name with `_` made
`.`: readable in `kubectl get configmaps`, and injective, since no part holds a dot), with
a hash-based name for a backend name that does not fit a Kubernetes object name. It is
labelled `peerplane.dev/slot-ledger=<ledger>` (followers watch that label) and holds:

- `backend`: the backend's name;
- `slots.json`: a ledger document (`codec`) of that one backend;
- `sha256`: the SHA-256 of `slots.json` as the leader wrote it. A shard whose hash does not
  match was edited by something other than a leader: followers keep serving the last good
  copy and the leader writes its own again (docs/design.md, "The slot ledger").

The largest shard is one backend at `MAX_SLOTS` slots, every slot freed by the longest
IPv6 endpoint: `max_shard_bytes()` (~770 KB) stays under the API's 1 MiB limit, so no
shard ever needs splitting; a 20-endpoint backend's shard is about 1 KiB.

Many new backends at once (a first start) are written first into a few *bulk objects*
(`<ledger>.bulk-<hash>`, label `peerplane.dev/slot-ledger-bulk`, `bulk.json` holding many
backends, `sha256`), read where a backend has no shard yet; the leader then makes them
shards and deletes the bulk objects (docs/design.md, "The slot ledger").

The single ConfigMap of earlier versions (`<ledger>`, key `slots.json`, every backend) is
still read; once the leader has written every shard it annotates that object
`peerplane.dev/ledger-migrated` and nothing reads its content again (an older replica
still running during a rollout keeps reading it, frozen: the slots it names stay right).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from controlplane.ledger.codec import assignment_from_json, assignment_to_json, parse_json
from controlplane.snapshot import BackendSlots, SlotAssignment
from peerplane import limits, names

LEDGER_LABEL = "peerplane.dev/slot-ledger"
MIGRATED_ANNOTATION = "peerplane.dev/ledger-migrated"
MANAGED_BY = {"app.kubernetes.io/managed-by": "peerplane"}
BACKEND_KEY = "backend"
SLOTS_KEY = "slots.json"
HASH_KEY = "sha256"
WRITER_KEY = "written-by"
# The API server refuses a ConfigMap whose data and binaryData values exceed 1 MiB (422:
# "[]: Too long: may not be more than 1048576 bytes").
MAX_OBJECT_BYTES = 1 << 20

_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shard_name(ledger: str, backend: str) -> str:
    """The shard object's name: readable where the backend name allows, hashed otherwise."""
    readable = f"{ledger}.{backend.replace('_', '.')}"
    if len(readable) <= 253 and _OBJECT_NAME.fullmatch(readable):
        return readable
    return f"{ledger}.h-{_digest(backend)[:40]}"


def ledger_label(ledger: str) -> str:
    """The label value naming the ledger a shard belongs to (a label value: 63 chars)."""
    if len(ledger) <= 63 and _LABEL_VALUE.fullmatch(ledger):
        return ledger
    return "h-" + _digest(ledger)[:40]


def shard_text(backend: str, slots: BackendSlots) -> str:
    """`slots.json` of one backend's shard: a format-2 document of that backend only."""
    document = assignment_to_json({backend: slots})
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def shard_data(backend: str, slots: BackendSlots, writer: str) -> tuple[dict[str, str], str]:
    """The shard's `data` and the hash it carries."""
    text = shard_text(backend, slots)
    digest = _digest(text)
    data = {BACKEND_KEY: backend, SLOTS_KEY: text, HASH_KEY: digest, WRITER_KEY: writer}
    return data, digest


def shard_bytes(data: Mapping[str, str]) -> int:
    """The shard's size against MAX_OBJECT_BYTES: keys and values of `data` (the API
    counts the values only: the keys are a margin of a few bytes)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def largest_shard(count: int = limits.MAX_SLOTS) -> tuple[str, BackendSlots, str]:
    """The largest shard any backend can have (backend name, slots, writer): `count`
    (MAX_SLOTS) slots, all freed by distinct IPv6 endpoints of the longest text, at the
    longest time text, on a 143-char name, by a 253-char writer."""
    name = "n" * 63 + "_" + "s" * 63 + "_" + "p" * 15
    freed = {slot: 1_799_999_999.123456 + slot / 7 for slot in range(1, count + 1)}
    freed_by = {slot: (f"ffff:ffff:ffff:ffff:ffff:ffff:ffff:{slot:x}", 65535) for slot in freed}
    slots = BackendSlots(
        count=count,
        slots=MappingProxyType({}),
        freed=MappingProxyType(freed),
        freed_by=MappingProxyType(freed_by),
        spare=names.spare_name(names.MAX_SPARE_INDEX),
    )
    return name, slots, "x" * 253


def max_shard_bytes() -> int:
    """The size of `largest_shard()`: what no shard ever exceeds."""
    name, slots, writer = largest_shard()
    data, _ = shard_data(name, slots, writer)
    return shard_bytes(data)


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard object as read. `slots` is None when its content cannot be read;
    `signed` says its hash matches (a leader wrote it as it is)."""

    name: str  # the object's name
    version: str  # its resourceVersion
    backend: str
    slots: BackendSlots | None
    digest: str  # SHA-256 of slots.json as found ("" when absent)
    signed: bool
    problem: str  # why slots is None or unsigned; "" for a good shard


def _string(mapping: Any, key: str) -> str | None:
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    return value if isinstance(value, str) else None


def shard_from(
    raw: Mapping[str, Any],
    now: float,
    known: Callable[[str, str], BackendSlots | None] | None = None,
) -> Shard:
    """A shard object -> its content; never raises (what cannot be read is said).

    `known(backend, digest)`: the slots this replica wrote with that hash, if any (the
    leader's echoes): a signed shard of that hash holds exactly them, so they are taken
    without parsing `slots.json` again (at a first start, 8,000 echoes parsed beside
    8,000 writes)."""
    meta = raw.get("metadata")
    name = _string(meta, "name") or ""
    version = _string(meta, "resourceVersion") or ""
    data = raw.get("data")
    backend = _string(data, BACKEND_KEY) or ""
    text = _string(data, SLOTS_KEY)
    if not backend or text is None:
        missing = BACKEND_KEY if not backend else SLOTS_KEY
        return Shard(name, version, backend, None, "", False, f"key {missing} is missing")
    digest = _digest(text)
    signed = _string(data, HASH_KEY) == digest
    if signed and known is not None and (mine := known(backend, digest)) is not None:
        return Shard(name, version, backend, mine, digest, True, "")
    parsed, problem = parse_json(text)
    if problem is not None:
        return Shard(name, version, backend, None, digest, signed, f"{SLOTS_KEY} is {problem}")
    assignment, problems = assignment_from_json(parsed, now)
    if set(assignment) != {backend} or problems:
        why = "; ".join(problems) or f"{SLOTS_KEY} does not hold backend {backend!r} alone"
        return Shard(name, version, backend, None, digest, signed, why)
    unsigned = "" if signed else f"edited: its {HASH_KEY} does not match {SLOTS_KEY}"
    return Shard(name, version, backend, assignment[backend], digest, signed, unsigned)


@dataclass(frozen=True, slots=True)
class Legacy:
    """The single ConfigMap of earlier versions, as read."""

    version: str
    assignment: SlotAssignment
    problems: tuple[str, ...]
    migrated: bool  # the shards replaced it: its content is not read any more


def legacy_from(raw: Mapping[str, Any], now: float) -> Legacy:
    """The earlier single-object ledger -> its assignment; never raises."""
    meta = raw.get("metadata")
    version = _string(meta, "resourceVersion") or ""
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if _string(annotations, MIGRATED_ANNOTATION):
        return Legacy(version, {}, (), True)
    text = _string(raw.get("data"), SLOTS_KEY)
    if text is None:
        return Legacy(version, {}, (f"key {SLOTS_KEY} is missing",), False)
    parsed, problem = parse_json(text)
    if problem is not None:
        return Legacy(version, {}, (f"key {SLOTS_KEY} is {problem}",), False)
    assignment, problems = assignment_from_json(parsed, now)
    return Legacy(version, assignment, tuple(problems), False)


# ---------------------------------------------------------------------------- bulk objects

# A first start (or any save creating this many shards at once) writes the new backends
# into a few bulk objects, publishes, and turns them into shards in later saves
# (docs/design.md, "The slot ledger"): 8,000 creates cost about 7 ms of CPU each against a
# real API server (client and server), 80 bulk objects about 1 s in all.
BULK_LABEL = "peerplane.dev/slot-ledger-bulk"
BULK_KEY = "bulk.json"
BULK_MIN = 256  # new backends in one save from which they are written in bulk
# A bulk object's `bulk.json` budget. A backend is never split: one larger than the budget
# goes alone, and no backend's text exceeds `max_shard_bytes()` (~731 KB): every bulk
# object stays under MAX_OBJECT_BYTES.
BULK_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class Bulk:
    """One bulk object as read: the backends it holds (empty when unreadable)."""

    name: str
    version: str
    assignment: SlotAssignment
    digest: str
    signed: bool
    problem: str  # "" for a good bulk object


def bulk_name(ledger: str, backends: list[str]) -> str:
    """A bulk object's name: the hash of the backends it holds (a rewrite of the same
    backends replaces it; two bulk objects never hold one backend)."""
    prefix = ledger if len(ledger) <= 200 else f"h-{_digest(ledger)[:40]}"
    return f"{prefix}.bulk-{_digest(chr(10).join(sorted(backends)))[:40]}"


def pack_bulks(assignment: Mapping[str, BackendSlots]) -> list[tuple[list[str], str]]:
    """The backends of `assignment` in groups of at most BULK_BYTES of text (a larger
    backend alone), each group with its `bulk.json`; in name order."""
    groups: list[tuple[list[str], str]] = []
    names_now: list[str] = []
    size = 0

    def close() -> None:
        if names_now:
            part = {name: assignment[name] for name in names_now}
            text = json.dumps(assignment_to_json(part), sort_keys=True, separators=(",", ":"))
            groups.append((list(names_now), text))
            names_now.clear()

    for name in sorted(assignment):
        one = len(shard_text(name, assignment[name]))
        if names_now and size + one > BULK_BYTES:
            close()
            size = 0
        names_now.append(name)
        size += one
    close()
    return groups


def bulk_data(text: str, writer: str) -> tuple[dict[str, str], str]:
    """A bulk object's `data` and the hash it carries."""
    digest = _digest(text)
    return {BULK_KEY: text, HASH_KEY: digest, WRITER_KEY: writer}, digest


def bulk_from(
    raw: Mapping[str, Any],
    now: float,
    known: Callable[[str, str], SlotAssignment | None] | None = None,
) -> Bulk:
    """A bulk object -> the backends it holds; never raises. `known(name, digest)`: what
    this replica wrote under that name and hash (the leader's echo, not parsed again).
    An unsigned (edited) bulk object is not read: its backends keep their last good copy."""
    meta = raw.get("metadata")
    name = _string(meta, "name") or ""
    version = _string(meta, "resourceVersion") or ""
    text = _string(raw.get("data"), BULK_KEY)
    if text is None:
        return Bulk(name, version, {}, "", False, f"key {BULK_KEY} is missing")
    digest = _digest(text)
    if _string(raw.get("data"), HASH_KEY) != digest:
        edited = f"edited: its {HASH_KEY} does not match {BULK_KEY}; not read"
        return Bulk(name, version, {}, digest, False, edited)
    if known is not None and (mine := known(name, digest)) is not None:
        return Bulk(name, version, mine, digest, True, "")
    parsed, problem = parse_json(text)
    if problem is not None:
        return Bulk(name, version, {}, digest, True, f"{BULK_KEY} is {problem}")
    assignment, problems = assignment_from_json(parsed, now)
    if problems:
        return Bulk(name, version, {}, digest, True, "; ".join(problems))
    return Bulk(name, version, assignment, digest, True, "")
