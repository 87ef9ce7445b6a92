"""The plan cache: each Service's plan with the inputs it came from, and what is derived.

A Service whose object, EndpointSlices, settings ConfigMap, policies' settings and previous
slots are unchanged reuses its plan (and its `BackendSpec` objects, whose bytes the encoder keeps).
The Services that changed come from the change index (`change_index.py`). The indexes derived from
the plans (keys with rejections, the slot assignment, owners, lapses) are kept in step per
re-planned Service, so a small change costs little.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from controlplane.compute.assemble_incremental import PlanKey
from controlplane.compute.change_index import ChangeIndex, slices_of
from controlplane.compute.plan import Planned, ServicePlan, plan_service
from controlplane.compute.spares import Claims
from controlplane.model import ClusterState, ConfigMap, EndpointSlice, Service
from controlplane.routes.table import RouteTable
from controlplane.settings.policies import NO_OVERRIDES, PersistenceOverride
from controlplane.settings.resolver import Resolver
from controlplane.snapshot import BackendSlots, RejectedInput, SessionPersistence

NOWHERE: frozenset[str] = frozenset()
NO_PERSISTENCE: Mapping[str, SessionPersistence] = MappingProxyType({})
NO_SLICES: dict[int, EndpointSlice] = {}


@dataclass(frozen=True, slots=True)
class CachedPlan:
    service: Service
    slices: tuple[EndpointSlice, ...]
    settings: ConfigMap | None
    planned: Planned
    assign_new: bool
    routed_to: frozenset[str] = frozenset()
    tcp_names: frozenset[str] = frozenset()
    # by port name
    policies: Mapping[str, PersistenceOverride] = field(default_factory=lambda: NO_OVERRIDES)
    h2_names: frozenset[str] = frozenset()
    persistence: Mapping[str, SessionPersistence] = field(default_factory=lambda: NO_PERSISTENCE)

    def reusable(
        self,
        service: Service,
        slices: tuple[EndpointSlice, ...],
        settings: ConfigMap | None,
        previous: Mapping[str, BackendSlots],
        assign_new: bool,
        now: float,
        routed_to: frozenset[str] = frozenset(),
        tcp_names: frozenset[str] = frozenset(),
        policies: Mapping[str, PersistenceOverride] = NO_OVERRIDES,
        h2_names: frozenset[str] = frozenset(),
        persistence: Mapping[str, SessionPersistence] = NO_PERSISTENCE,
    ) -> bool:
        if self.planned.plan is not None and now >= self.planned.plan.lapses_at:
            return False  # planning now forgets history past its quarantine
        if not (
            self.assign_new == assign_new
            and self.routed_to == routed_to
            and self.tcp_names == tcp_names
            and self.h2_names == h2_names
            and self.persistence == persistence
            and (self.service is service or self.service == service)
            and self.slices == slices
            and (self.settings is settings or self.settings == settings)
            and (self.policies is policies or self.policies == policies)
        ):
            return False
        plan = self.planned.plan
        # Unchanged endpoints and the slots this plan produced give the same slots again.
        return plan is None or all(
            (previous.get(part.name) is part.slots or previous.get(part.name) == part.slots)
            for part in plan.backends
        )


class PlanCache:
    """Every Service's cached plan, the indexes of the state they came from, and the
    indexes derived from them (read by the assembly and by slot retirement)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, str], CachedPlan] = {}
        # The state's Services and their slices, and which changed (`change_index.py`).
        self.index = ChangeIndex()
        self.by_key = self.index.by_key
        # Derived from `cache`, maintained per re-planned Service so a small change
        # costs little: plans by key, keys with rejections, the slot assignment.
        self.plans: dict[PlanKey, ServicePlan] = {}
        self.rejecting: set[PlanKey] = set()
        self.configmap_rejecting: set[PlanKey] = set()  # plans with configmap_rejections
        self.waiting_keys: set[PlanKey] = set()  # plans leaving endpoints out
        self.slots: dict[str, BackendSlots] = {}
        self.touched: set[str] = set()  # backends whose slots changed since the last return
        # Which Service owns each backend: a follower is handed a new ledger mapping on
        # every change, and only the Services whose backends it changed are planned again
        # (by identity: the ledger watch keeps unchanged backends' objects).
        self.owners: dict[str, tuple[str, str]] = {}
        # The last slots of backends whose plan went this step (slot retirement reads them).
        self.leaving: dict[str, BackendSlots] = {}
        # Keys whose plan changed since the assemblies last saw them; one assembly per
        # workload key (docs/design.md, "The computation and the encoder").
        self.changed: set[PlanKey] = set()
        # (lapses_at, key) of plans holding freed slots: due ones are planned again even
        # when nothing of theirs changed, so history is forgotten exactly as a fresh
        # computation forgets it, at the cost of the plans due (a heap, not a scan). At
        # most one entry per key (`_queued`: its time): each re-plan of a Service with
        # freed slots would otherwise add one, thousands an hour kept for a quarantine.
        self._lapses: list[tuple[float, tuple[str, str]]] = []
        self._queued: dict[tuple[str, str], float] = {}
        self.planned = 0  # Services planned (not reused) by the last call
        self.checked = 0  # Services looked at (planned, or checked for reuse) by it

    def lapsed(self, now: float) -> set[tuple[str, str]]:
        """Keys of plans whose freed slots' history lapsed by `now` (stale entries,
        re-planned since, cost one reuse check)."""
        due: set[tuple[str, str]] = set()
        while self._lapses and self._lapses[0][0] <= now:
            _, key = heapq.heappop(self._lapses)
            del self._queued[key]
            due.add(key)
        for key in due:  # a plan made since lapses later: its own time again (a due one
            cached = self.cache.get(key)  # is planned again now, and queued by `_replace`)
            plan = cached.planned.plan if cached is not None else None
            if plan is not None and plan.lapses_at > now:
                self._queue(key, plan.lapses_at)
        return due

    def _queue(self, key: tuple[str, str], at: float) -> None:
        """Plan `key` again at `at` (inf: never), unless it is queued as early already:
        that entry's turn re-plans it or queues it again for its plan's time."""
        queued = self._queued.get(key)
        if at == math.inf or (queued is not None and queued <= at):
            return
        self._queued[key] = at
        heapq.heappush(self._lapses, (at, key))

    def every_key(self) -> set[tuple[str, str]]:
        return set(self.by_key) | set(self.cache)

    def owning(
        self, old: Mapping[str, BackendSlots], new: Mapping[str, BackendSlots]
    ) -> set[tuple[str, str]]:
        """Services owning a backend whose slots differ between two previous
        assignments (by identity): the only plans a new previous can change."""
        names = {name for name, slots in new.items() if old.get(name) is not slots}
        names.update(old.keys() - new.keys())
        return {self.owners[name] for name in names if name in self.owners}

    def replan(
        self,
        dirty: set[tuple[str, str]],
        state: ClusterState,
        resolver: Resolver,
        previous: Mapping[str, BackendSlots],
        now: float,
        assign_new: bool,
        table: RouteTable,
        claims: Claims | None = None,
    ) -> None:
        """Plan again each `dirty` Service whose cached plan cannot be reused; in key
        order when new backends claim spares (`compute/spares.py`: in that order)."""
        self.planned = 0
        self.checked = len(dirty)
        for key in sorted(dirty) if claims is not None else dirty:
            service = self.by_key.get(key)
            if service is None:
                self._replace(key, None)
                continue
            mine = slices_of(self.index.slices_by_key.get(key, NO_SLICES))
            routed = table.demand.get(key, NOWHERE)
            tcp_names = table.l4.tcp_names.get(key, NOWHERE)
            policies = resolver.policies.of(*key)
            h2_names = table.h2_names.get(key, NOWHERE)
            persistence = table.persistence.get(key, NO_PERSISTENCE)
            cached = self.cache.get(key)
            if cached is None or not cached.reusable(
                service, mine, state.settings, previous, assign_new, now, routed, tcp_names,
                policies, h2_names, persistence,
            ):  # fmt: skip
                self.planned += 1
                planned = plan_service(
                    service,
                    mine,
                    resolver,
                    previous,
                    now,
                    assign_new,
                    routed,
                    tcp_names,
                    h2_names,
                    persistence,
                    claims,
                )
                self._replace(
                    key,
                    CachedPlan(
                        service,
                        mine,
                        state.settings,
                        planned,
                        assign_new,
                        routed,
                        tcp_names,
                        policies,
                        h2_names,
                        persistence,
                    ),
                )

    def _replace(self, key: tuple[str, str], cached: CachedPlan | None) -> None:
        """Swap the cached plan of one Service and keep the derived indexes in step."""
        old = self.cache.pop(key, None)
        if old is not None and old.planned.plan is not None:
            for part in old.planned.plan.backends:
                self.slots.pop(part.name, None)
                self.owners.pop(part.name, None)
                self.touched.add(part.name)
                self.leaving[part.name] = part.slots
        if self.plans.pop(key, None) is not (cached.planned.plan if cached else None):
            self.changed.add(key)
        self.rejecting.discard(key)
        self.configmap_rejecting.discard(key)
        self.waiting_keys.discard(key)
        if cached is None:
            return
        self.cache[key] = cached
        if cached.planned.plan is not None:
            self._queue(key, cached.planned.plan.lapses_at)
        if cached.planned.rejections:
            self.rejecting.add(key)
        plan = cached.planned.plan
        if plan is not None:
            self.plans[key] = plan
            for part in plan.backends:
                self.slots[part.name] = part.slots
                self.owners[part.name] = key
                self.touched.add(part.name)
            if plan.configmap_rejections:
                self.configmap_rejecting.add(key)
            if plan.waiting:
                self.waiting_keys.add(key)

    def rejections(self) -> list[RejectedInput]:
        """Every cached plan's rejections."""
        return [r for k in self.rejecting for r in self.cache[k].planned.rejections]

    def configmap_rejections(self) -> list[RejectedInput]:
        """The settings ConfigMap's rejections, as the plans found them."""
        return [r for k in self.configmap_rejecting for r in self.plans[k].configmap_rejections]

    def waiting_plans(self) -> list[ServicePlan]:
        return [self.plans[k] for k in self.waiting_keys]
