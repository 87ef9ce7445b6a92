"""Sticky slot assignment, and its JSON form for the slot stores.

An endpoint keeps its slot for as long as it exists. A freed slot may still be named by
stick-table entries (and peers re-send them), so new endpoints take never-used slots first,
then the slot freed longest ago, and a freed slot only once the backend's stick-table
expire has passed since it was freed; a backend with no history is exactly the sorted
order. The slot count grows in steps of `server-slots` when no slot is eligible, and never
shrinks while the backend exists. Why: docs/design.md, "Slots".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeGuard

from controlplane.compute.types import BackendSlots, EndpointKey, SlotAssignment
from peerplane import limits
from peerplane.addresses import AddressError, canonical_address

STATE_FORMAT = 2  # 2 adds `freed`; format 1 is still read


def assign_slots(
    endpoints: Sequence[EndpointKey],
    previous: BackendSlots | None,
    step: int,
    *,
    now: float,
    quarantine_s: float,
    max_slots: int = limits.MAX_SLOTS,
    assign_new: bool = True,
) -> BackendSlots:
    """New assignment for `endpoints` (canonical order) given the previous one.

    `now` is the caller's wall clock (seconds); a vacated slot is recorded as freed then, by
    its endpoint, and is eligible again once `quarantine_s` has passed. An endpoint that
    comes back (a readiness flap) takes the slot it left at once: entries naming that slot
    were written for it. Past `max_slots` the count stops growing: quarantined slots are
    then reused oldest first, and endpoints beyond every slot get none (the caller reports
    them).

    `assign_new=False` is a follower's computation: `previous` is the leader's ledger, and
    only the leader gives out slots. Endpoints the ledger has keep their slots, vacated
    slots are freed, and every other endpoint (even one coming back to the slot it left)
    gets none and no slot is added for it: the caller leaves it out until the ledger has
    it. With a ledger that matches `endpoints` the result is the leader's, count included.
    """
    present = set(endpoints)
    old = previous.slots if previous is not None else {}
    kept = {ep: slot for ep, slot in old.items() if ep in present}
    freed = dict(previous.freed) if previous is not None else {}
    freed_by = dict(previous.freed_by) if previous is not None else {}
    for slot, ep in list(freed_by.items()) if assign_new else ():
        if ep in present and ep not in kept:  # back: its own slot again
            kept[ep] = slot
            del freed[slot], freed_by[slot]
    for ep, slot in old.items():
        if ep not in present:
            freed[slot], freed_by[slot] = now, ep
    new = [ep for ep in endpoints if ep not in kept] if assign_new else []
    count = max(previous.count if previous is not None else 0, min(step, max_slots))
    used = set(kept.values())

    def never_used(upto: int) -> list[int]:
        return [i for i in range(1, upto + 1) if i not in used and i not in freed]

    by_age = sorted(freed, key=lambda slot: (freed[slot], slot))
    eligible = [slot for slot in by_age if freed[slot] + quarantine_s <= now]
    candidates = never_used(count)
    while len(candidates) + len(eligible) < len(new) and count < max_slots:
        count = min(count + step, max_slots)
        candidates = never_used(count)
    order = candidates + eligible
    if len(order) < len(new):  # at max_slots: reuse quarantined slots, oldest first
        lapsed = set(eligible)
        order += [slot for slot in by_age if slot not in lapsed]
    assigned = dict(kept)
    for endpoint, slot in zip(new, order, strict=False):
        assigned[endpoint] = slot
        freed.pop(slot, None)
        freed_by.pop(slot, None)
    return BackendSlots(
        count=count,
        slots=MappingProxyType(assigned),
        freed=MappingProxyType(dict(sorted(freed.items()))),
        freed_by=MappingProxyType(dict(sorted(freed_by.items()))),
    )


def quarantine_seconds(persistence: bool, expire_ms: int) -> float:
    """How long a freed slot waits: the stick-table expire, or nothing without a table.

    Without persistence no entry names a slot, and hash-based balance does not depend on
    slot history, so a freed slot is eligible at once (still after never-used ones).
    """
    return expire_ms / 1000 if persistence else 0.0


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
                "freed": [
                    [slot, at, *slots.freed_by.get(slot, ())]
                    for slot, at in sorted(slots.freed.items())
                ],
            }
            for name, slots in sorted(assignment.items())
        },
    }


class StateError(ValueError):
    """Persisted slot state that cannot be trusted."""


def _integer(value: Any, low: int, high: int) -> TypeGuard[int]:
    """A JSON integer in [low, high]; `true` is not 1."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


def _backend_from_json(name: str, data: Any, fmt: int, now: float) -> BackendSlots:
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
    return BackendSlots(
        count=count,
        slots=MappingProxyType(slots),
        freed=MappingProxyType(dict(sorted(freed.items()))),
        freed_by=MappingProxyType(dict(sorted(freed_by.items()))),
    )


def assignment_from_json(data: Any, now: float) -> tuple[SlotAssignment, list[str]]:
    """Parse persisted state read at wall-clock `now`. Bad backends are dropped (rebuilt
    from sorted order later) and reported; a wholly unreadable document yields an empty
    assignment. Format 1 (no freed times) is read with every free slot freed at `now`."""
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
            assignment[str(name)] = _backend_from_json(str(name), item, fmt, now)
        except StateError as err:
            errors.append(f"slot state dropped: {err}")
    if fmt == 1 and assignment:
        errors.append("slot state is format 1 (no freed times): its free slots count as freed now")
    return assignment, errors
