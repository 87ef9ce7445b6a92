"""Sticky slot assignment (its persisted form: controlplane.ledger.codec).

An endpoint keeps its slot for as long as it exists. A freed slot may still be named by
stick-table entries (and peers re-send them), so new endpoints take never-used slots first,
then the slot freed longest ago, and a freed slot only once the backend's stick-table
expire has passed since it was freed; a backend with no history is exactly the sorted
order. The slot count grows in steps of `server-slots` when no slot is eligible, and never
shrinks while the backend exists. Why: docs/design.md, "Slots".
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from controlplane.snapshot import BackendSlots, EndpointKey
from peerplane import limits


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
    its endpoint, and is eligible again once `quarantine_s` has passed: its record is then
    dropped (no entry can name it any more), so the slot counts as never used and the
    ledger's history stays bounded by what one quarantine holds. An endpoint that comes
    back (a readiness flap) within the quarantine takes the slot it left at once: entries
    naming that slot were written for it. Past `max_slots` the count stops growing:
    quarantined slots are then reused oldest first, and endpoints beyond every slot get
    none (the caller reports them).

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
    if assign_new:  # history past its quarantine names nothing: forget it (bounded ledger)
        for slot in [slot for slot, at in freed.items() if at + quarantine_s <= now]:
            del freed[slot]
            freed_by.pop(slot, None)
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
        spare=previous.spare if previous is not None else "",
    )


def quarantine_seconds(persistence: bool, expire_ms: int, session_s: float = 0.0) -> float:
    """How long a freed slot waits: the stick-table expire, or nothing without a table;
    at least `session_s`, how long session persistence (a cookie HAProxy still honours, a
    header's stick entry) may name the slot after it was freed.

    Without persistence no entry names a slot, and hash-based balance does not depend on
    slot history, so a freed slot is eligible at once (still after never-used ones).
    """
    return max(expire_ms / 1000 if persistence else 0.0, session_s)


def retire(slots: BackendSlots, now: float, quarantine_s: float) -> BackendSlots | None:
    """A backend no Service claims any more: every slot it used is freed at `now` by its
    endpoint, records past `quarantine_s` are dropped, and None once nothing is left.

    Kept in the assignment (and the ledger) meanwhile, so a Service re-created under the
    same name within the quarantine continues it: its endpoints come back to their own
    slots, others avoid the slots stick entries may still name. A retired backend with
    nothing lapsed is returned as the same object.
    """
    freed = {slot: at for slot, at in slots.freed.items() if at + quarantine_s > now}
    if not slots.slots and len(freed) == len(slots.freed):
        return slots if freed else None
    freed_by = {slot: ep for slot, ep in slots.freed_by.items() if slot in freed}
    for endpoint, slot in slots.slots.items():
        freed[slot], freed_by[slot] = now, endpoint
    if not freed:
        return None
    return BackendSlots(
        count=slots.count,
        slots=MappingProxyType({}),
        freed=MappingProxyType(dict(sorted(freed.items()))),
        freed_by=MappingProxyType(dict(sorted(freed_by.items()))),
        spare=slots.spare,  # a re-created Service continues in its section too
    )


def retired_until(slots: BackendSlots, quarantine_s: float) -> float:
    """When the first record of a retired backend lapses (and `retire` changes it)."""
    return min(slots.freed.values()) + quarantine_s
