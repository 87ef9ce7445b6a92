"""Sticky slot assignment, and its JSON form for the slot stores.

An endpoint keeps its slot for as long as it exists; new endpoints take the lowest free
slots in canonical order, so a backend with no history is exactly the sorted order. The
slot count grows in steps of `server-slots` and never shrinks while the backend exists.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from controlplane.compute.types import BackendSlots, EndpointKey, SlotAssignment

STATE_FORMAT = 1


def assign_slots(
    endpoints: Sequence[EndpointKey], previous: BackendSlots | None, step: int
) -> BackendSlots:
    """New assignment for `endpoints` (canonical order) given the previous one."""
    present = set(endpoints)
    kept = {ep: slot for ep, slot in previous.slots.items() if ep in present} if previous else {}
    count = max(previous.count if previous else 0, step)
    while count < len(endpoints):
        count += step
    used = set(kept.values())
    free = (slot for slot in range(1, count + 1) if slot not in used)
    assigned = dict(kept)
    for endpoint in endpoints:
        if endpoint not in assigned:
            assigned[endpoint] = next(free)
    return BackendSlots(count=count, slots=MappingProxyType(assigned))


def assignment_to_json(assignment: SlotAssignment) -> dict[str, Any]:
    """Deterministic JSON-able form (backends and slots sorted)."""
    return {
        "format": STATE_FORMAT,
        "backends": {
            name: {
                "count": slots.count,
                "slots": sorted(
                    ([addr, port, slot] for (addr, port), slot in slots.slots.items()),
                    key=lambda item: item[2],
                ),
            }
            for name, slots in sorted(assignment.items())
        },
    }


class StateError(ValueError):
    """Persisted slot state that cannot be trusted."""


def _backend_from_json(name: str, data: Any) -> BackendSlots:
    if not isinstance(data, Mapping):
        raise StateError(f"backend {name!r}: not an object")
    count = data.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1_000_000:
        raise StateError(f"backend {name!r}: bad count {count!r}")
    slots: dict[EndpointKey, int] = {}
    for item in data.get("slots") or []:
        if not isinstance(item, list) or len(item) != 3:
            raise StateError(f"backend {name!r}: bad slot entry {item!r}")
        addr, port, slot = item
        if not isinstance(addr, str) or not isinstance(port, int) or not isinstance(slot, int):
            raise StateError(f"backend {name!r}: bad slot entry {item!r}")
        try:
            addr = str(ipaddress.ip_address(addr))
        except ValueError:
            raise StateError(f"backend {name!r}: bad address {addr!r}") from None
        if not 1 <= slot <= count or (addr, port) in slots or slot in slots.values():
            raise StateError(f"backend {name!r}: slot {slot} out of range or duplicated")
        slots[(addr, port)] = slot
    return BackendSlots(count=count, slots=MappingProxyType(slots))


def assignment_from_json(data: Any) -> tuple[SlotAssignment, list[str]]:
    """Parse persisted state. Bad backends are dropped (rebuilt from sorted order later)
    and reported; a wholly unreadable document yields an empty assignment."""
    if not isinstance(data, Mapping) or data.get("format") != STATE_FORMAT:
        return {}, [f"slot state has unknown format (expected format {STATE_FORMAT})"]
    backends = data.get("backends")
    if not isinstance(backends, Mapping):
        return {}, ["slot state has no backends object"]
    assignment: dict[str, BackendSlots] = {}
    errors: list[str] = []
    for name, item in backends.items():
        try:
            assignment[str(name)] = _backend_from_json(str(name), item)
        except StateError as err:
            errors.append(f"slot state dropped: {err}")
    return assignment, errors
