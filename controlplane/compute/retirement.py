"""Slot retirement: backends no Service claims any more, kept for a quarantine.

A backend whose Service went keeps its last slots (`slots.retire`) until its stick-table
entries can no longer name them, so a Service that comes back continues them. Kept in
O(leaving + due) when continuing from the assignment returned last, with a heap of when
each retired backend changes next.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from controlplane.compute.plan_cache import PlanCache
from controlplane.compute.slots import retire, retired_until
from controlplane.settings.resolver import Resolver
from controlplane.snapshot import BackendSlots


class RetiredSlots:
    """The retired backends' slots, with the heap of when each changes next."""

    def __init__(self) -> None:
        self.slots: dict[str, BackendSlots] = {}
        self._due: list[tuple[float, str]] = []

    def update(
        self,
        plans: PlanCache,
        previous: Mapping[str, BackendSlots],
        now: float,
        resolver: Resolver,
        assign_new: bool,
        continuing: bool,
    ) -> None:
        """Retire the backends whose plan went (`plans.leaving`, emptied here) and the
        retired whose quarantine step is due, from `previous` instead when not
        continuing (a restart, a new ledger, new settings), as a fresh computation does.
        A backend whose retired slots changed is added to `plans.touched`."""
        leaving, plans.leaving = plans.leaving, {}
        if not assign_new:  # a follower saves nothing: the leader's ledger remembers
            self.slots, self._due = {}, []
            return
        quarantine = resolver.retired_quarantine_s()
        if not continuing:
            self.slots, self._due = {}, []
            leaving = {name: previous[name] for name in previous.keys() - plans.slots.keys()}
        for name in plans.touched & self.slots.keys():
            if name in plans.slots:  # claimed again: its plan continued the record
                del self.slots[name]
        while self._due and self._due[0][0] <= now:
            _, name = heapq.heappop(self._due)
            if name in self.slots and name not in leaving:
                leaving[name] = self.slots[name]
        for name, slots in leaving.items():
            if name in plans.slots:
                continue  # planned again under the same name this step
            kept = retire(slots, now, quarantine)
            if kept is self.slots.get(name):
                continue
            plans.touched.add(name)
            if kept is None:
                self.slots.pop(name, None)
                continue
            self.slots[name] = kept
            heapq.heappush(self._due, (retired_until(kept, quarantine), name))
