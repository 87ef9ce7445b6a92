"""The slot ledger's JSON form, shared by every ledger: a document
`{"format": 2, "backends": {name: backend}}` with one backend object per backend.

The files ledger stores one backend object per row, a Kubernetes shard one document of one
backend, and the single ConfigMap or JSON file of earlier versions a document of all of
them; all are read here. Reading never raises: what cannot be trusted is dropped (that
backend is rebuilt from sorted order later) and reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeGuard

from controlplane.snapshot import BackendSlots, EndpointKey, SlotAssignment
from peerplane import limits, names
from peerplane.addresses import AddressError, canonical_address
from peerplane.runtime import untrusted

STATE_FORMAT = 2  # 2 adds `freed`; format 1 is still read

# Far above any valid ledger (MAX_SLOTS slots of ~75 bytes at most for thousands of
# backends), so a runaway document is refused before it is parsed into memory.
MAX_LEDGER_BYTES = 64 << 20


def parse_json(text: str | bytes) -> tuple[Any, str | None]:
    """JSON of a persisted ledger, or None and why not (never raises: a document nested
    thousands deep makes json raise RecursionError)."""
    if len(text) > MAX_LEDGER_BYTES:
        return None, f"larger than {MAX_LEDGER_BYTES >> 20} MiB"
    try:
        return json.loads(text), None
    except (ValueError, UnicodeDecodeError) as err:
        return None, f"not JSON ({err})"
    except RecursionError:
        return None, "not JSON (nested too deeply)"


def backend_to_json(slots: BackendSlots) -> dict[str, Any]:
    """One backend's object: count, slots sorted by slot, freed slots sorted by slot, and
    the spare section it claimed (only when it did: earlier documents read the same)."""
    found: dict[str, Any] = {
        "count": slots.count,
        "slots": sorted(
            ([addr, port, slot] for (addr, port), slot in slots.slots.items()),
            key=lambda item: item[2],
        ),
        "freed": [
            [slot, at, *slots.freed_by.get(slot, ())] for slot, at in sorted(slots.freed.items())
        ],
    }
    if slots.spare:
        found["spare"] = slots.spare
    return found


def backend_text(slots: BackendSlots) -> str:
    """The compact text of one backend's object (what a row or a shard holds)."""
    return json.dumps(backend_to_json(slots), sort_keys=True, separators=(",", ":"))


def assignment_to_json(assignment: SlotAssignment) -> dict[str, Any]:
    """Deterministic JSON-able document (backends and slots sorted)."""
    return {
        "format": STATE_FORMAT,
        "backends": {name: backend_to_json(slots) for name, slots in sorted(assignment.items())},
    }


class StateError(ValueError):
    """Persisted slot state that cannot be trusted."""


def _integer(value: Any, low: int, high: int) -> TypeGuard[int]:
    """A JSON integer in [low, high]; `true` is not 1."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _shown(value: Any) -> str:
    """An entry as an error quotes it: its JSON text, by the one rule for quoted values."""
    try:
        return untrusted.shown(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return untrusted.shown(value)


def _endpoint(name: str, addr: Any, port: Any, item: Any) -> EndpointKey:
    if not isinstance(addr, str) or not _integer(port, 1, 65535):
        raise StateError(f"backend {name!r}: bad entry {_shown(item)}")
    try:
        return canonical_address(addr), port
    except AddressError as e:
        raise StateError(f"backend {name!r}: {e}") from None


def _freed_from_json(
    name: str, data: Any, count: int
) -> tuple[dict[int, float], dict[int, EndpointKey]]:
    """`[[slot, time], [slot, time, address, port], ...]` -> freed times, freed-by."""
    if not isinstance(data, list):
        raise StateError(f"backend {name!r}: freed is not a list")
    freed: dict[int, float] = {}
    freed_by: dict[int, EndpointKey] = {}
    for item in data:
        if not isinstance(item, list) or len(item) not in (2, 4):
            raise StateError(f"backend {name!r}: bad freed entry {_shown(item)}")
        slot, at = item[0], item[1]
        number = isinstance(at, int | float) and not isinstance(at, bool)
        if not _integer(slot, 1, count) or not number or not math.isfinite(at) or at < 0:
            raise StateError(f"backend {name!r}: bad freed entry {_shown(item)}")
        if slot in freed:
            raise StateError(f"backend {name!r}: slot {slot} freed twice")
        freed[slot] = float(at)
        if len(item) == 4:
            endpoint = _endpoint(name, item[2], item[3], item)
            if endpoint in freed_by.values():
                raise StateError(f"backend {name!r}: {endpoint[0]} left two slots")
            freed_by[slot] = endpoint
    return freed, freed_by


def backend_from_json(name: str, data: Any, fmt: int, now: float) -> BackendSlots:
    """One backend's object read at wall-clock `now`; StateError when it cannot be trusted."""
    if not isinstance(data, Mapping):
        raise StateError(f"backend {name!r}: not an object")
    count = data.get("count")
    if not _integer(count, 1, limits.MAX_SLOTS):
        raise StateError(
            f"backend {name!r}: bad count {_shown(count)} (1..{limits.MAX_SLOTS} slots)"
        )
    items = data.get("slots") or []
    if not isinstance(items, list):
        raise StateError(f"backend {name!r}: slots is not a list")
    slots: dict[EndpointKey, int] = {}
    taken: set[int] = set()
    for item in items:
        if not isinstance(item, list) or len(item) != 3:
            raise StateError(f"backend {name!r}: bad slot entry {_shown(item)}")
        addr, port, slot = item
        if (
            not isinstance(addr, str)
            or not _integer(port, 1, 65535)
            or not _integer(slot, 1, count)
        ):
            raise StateError(f"backend {name!r}: bad slot entry {_shown(item)}")
        try:
            addr = canonical_address(addr)  # the same text compute keys slots by
        except AddressError as e:
            raise StateError(f"backend {name!r}: {e}") from None
        if (addr, port) in slots or slot in taken:
            raise StateError(f"backend {name!r}: slot {slot} duplicated")
        slots[(addr, port)] = slot
        taken.add(slot)
    freed_by: dict[int, EndpointKey] = {}
    if fmt == 1:  # no freed times: every free slot may be named, count it freed now
        freed = {slot: now for slot in range(1, count + 1) if slot not in taken}
    else:
        freed, freed_by = _freed_from_json(name, data.get("freed") or [], count)
        if taken & freed.keys():
            raise StateError(f"backend {name!r}: a slot is both used and freed")
        if slots.keys() & set(freed_by.values()):
            raise StateError(f"backend {name!r}: an endpoint both holds and left a slot")
    spare = data.get("spare", "")
    if spare != "" and not (isinstance(spare, str) and names.spare_index(spare) is not None):
        raise StateError(f"backend {name!r}: bad spare {_shown(spare)}")
    return BackendSlots(
        count=count,
        slots=MappingProxyType(slots),
        freed=MappingProxyType(dict(sorted(freed.items()))),
        freed_by=MappingProxyType(dict(sorted(freed_by.items()))),
        spare=spare,
    )


def assignment_from_json(data: Any, now: float) -> tuple[SlotAssignment, list[str]]:
    """Parse a persisted document read at wall-clock `now`. Bad backends are dropped
    (rebuilt from sorted order later) and reported; a wholly unreadable document yields an
    empty assignment. Format 1 (no freed times) is read with every free slot freed at `now`."""
    fmt = data.get("format") if isinstance(data, Mapping) else None
    if not _integer(fmt, 1, STATE_FORMAT):
        return {}, [f"slot state has unknown format (expected format 1 or {STATE_FORMAT})"]
    backends = data.get("backends")
    if not isinstance(backends, Mapping):
        return {}, ["slot state has no backends object"]
    assignment: dict[str, BackendSlots] = {}
    errors: list[str] = []
    for name, item in backends.items():
        try:
            assignment[str(name)] = backend_from_json(str(name), item, fmt, now)
        except StateError as err:
            errors.append(f"slot state dropped: {err}")
    if fmt == 1 and assignment:
        errors.append("slot state is format 1 (no freed times): its free slots count as freed now")
    return assignment, errors
