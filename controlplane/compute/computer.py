"""The computation entry points: `compute` (pure function) and `Computer` (incremental).

`Computer` remembers each Service's plan with the inputs it came from (`plan_cache.py`); a
Service whose object, EndpointSlices, settings ConfigMap, policies' settings and previous
slots are unchanged reuses its plan (and its `BackendSpec` objects, whose bytes the
encoder keeps), so one endpoint change costs one Service's work plus the assembly of the
snapshots it appears in.
Its steps: the change index (`change_index.py`: the Services whose objects changed, from
the source's change keys), the route table, the plan cache, each workload's assembly and
final assembly (`final_assembly.py`), slot retirement (`retirement.py`). The result is
identical to a fresh computation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controlplane.compute.assemble_incremental import PlanKey, WorkloadAssembly
from controlplane.compute.final_assembly import FinalAssembly
from controlplane.compute.plan import ServicePlan
from controlplane.compute.plan_cache import PlanCache
from controlplane.compute.retirement import RetiredSlots
from controlplane.compute.spares import SparePool
from controlplane.model import ClusterState, ConfigMap, SourceIPPersistencePolicy
from controlplane.routes.route_computer import RouteComputer
from controlplane.routes.table import RouteTable
from controlplane.settings.policies import EMPTY_TABLE, PolicyTable, resolve_policies
from controlplane.settings.resolver import GlobalSettings, Resolver
from controlplane.settings.workloads import DEFAULT_SCOPE, Workloads, WorkloadScope, discover
from controlplane.snapshot import (
    BackendSlots,
    BackendSpec,
    ComputeResult,
    RejectedInput,
    WorkloadSnapshot,
)


def _waiting(
    snapshots: Mapping[str, WorkloadSnapshot], plans: Iterable[ServicePlan]
) -> dict[str, int]:
    """Workload key -> endpoints its backends leave out for want of a slot."""
    by_backend = {name: n for plan in plans for name, n in plan.waiting.items()}
    if not by_backend:
        return {}
    found = {
        key: sum(by_backend.get(spec.name, 0) for spec in snapshot.backends)
        for key, snapshot in snapshots.items()
    }
    return {key: n for key, n in found.items() if n}


def _dedupe(rejections: Iterable[RejectedInput]) -> tuple[RejectedInput, ...]:
    return tuple(sorted(set(rejections), key=lambda r: (r.object, r.key, r.value, r.reason)))


class Computer:
    """Incremental computation: same results as `compute`, less work between calls.

    Only the Services whose objects changed are planned again. When the previous
    assignment is not the one this Computer returned last, or the settings changed, every
    Service is checked (and still reused when its inputs are equal).
    """

    def __init__(self, scope: WorkloadScope = DEFAULT_SCOPE) -> None:
        self._scope = scope
        self._plans = PlanCache()
        self._settings: ConfigMap | None = None
        self._assignment: Mapping[str, BackendSlots] | None = None
        self._assign_new = True
        # The previous assignment handed in last (see `PlanCache.owning`).
        self._last_previous: Mapping[str, BackendSlots] | None = None
        self._retired = RetiredSlots()
        self._assemblies: dict[str, WorkloadAssembly] = {}
        # The route model: the last route table and which Services it routes to.
        self._routes = RouteComputer()
        self._table: RouteTable | None = None
        self._final = FinalAssembly()
        # The SourceIPPersistencePolicies' table, the policies it came from and the
        # Services they target (a change to one of those may change the table).
        self._policy_table: PolicyTable = EMPTY_TABLE
        self._policies: tuple[SourceIPPersistencePolicy, ...] = ()
        self._targeted: set[tuple[str, str]] = set()
        self._spares = SparePool()

    @property
    def planned(self) -> int:
        """Services planned (not reused) by the last call."""
        return self._plans.planned

    @property
    def checked(self) -> int:
        """Services looked at (planned, or checked for reuse) by the last call."""
        return self._plans.checked

    def _dirty(
        self,
        state: ClusterState,
        previous: Mapping[str, BackendSlots],
        now: float,
        assign_new: bool,
    ) -> tuple[set[tuple[str, str]], set[tuple[str, str]], bool]:
        """The Services to check (changed objects, lapsed history, backends whose previous
        slots moved: every one when not continuing), those whose objects changed, and
        whether this call continues from the assignment returned last."""
        dirty = self._plans.index.update(state)
        changed_services = set(dirty)
        settings_same = self._settings is state.settings or self._settings == state.settings
        continuing = (
            previous is self._assignment and assign_new == self._assign_new and settings_same
        )
        dirty |= self._plans.lapsed(now)
        last, self._last_previous = self._last_previous, previous
        if not continuing:
            if settings_same and assign_new == self._assign_new and last is not None:
                dirty |= self._plans.owning(last, previous)
            else:
                dirty = self._plans.every_key()
        self._settings = state.settings
        self._assign_new = assign_new
        return dirty, changed_services, continuing

    def _policies_of(
        self, state: ClusterState, changed_services: set[tuple[str, str]]
    ) -> tuple[PolicyTable, set[tuple[str, str]]]:
        """The policies' table (the last one while no policy and no Service they target
        changed) and the Services whose policies' settings it moved."""
        policies = state.source_ip_persistence_policies
        last = self._policy_table
        same = self._policies is policies or self._policies == policies
        if same and not (changed_services & self._targeted):
            return last, set()
        table = resolve_policies(policies, self._plans.by_key)
        self._policy_table, self._policies = table, policies
        self._targeted = {
            (policy.namespace, target.name) for policy in policies for target in policy.target_refs
        }
        moved = {
            key
            for key in last.ports.keys() | table.ports.keys()
            if last.ports.get(key) != table.ports.get(key)
        }
        return table, moved

    @property
    def route_table(self) -> RouteTable | None:
        """The route table of the last computation: what `routes.status.route_statuses`
        takes so the status writer does not compute it again."""
        return self._table

    def _route_table(
        self,
        state: ClusterState,
        workloads: Workloads,
        resolver: Resolver,
        changed_services: set[tuple[str, str]],
        now: float,
    ) -> RouteTable:
        """The route table (the last one while no route input changed)."""
        ports = resolver.global_settings([])  # reported by the call after planning
        refs = [workload.short_ref for workload in workloads.peers]
        return self._routes.compute(
            state,
            refs,
            ports.http_port,
            ports.peer_port,
            self._plans.by_key,
            changed_services,
            https_port=ports.https_port,
            accept_proxy=ports.accept_proxy,
            now=now,
        )

    def _demand_moved(self, table: RouteTable) -> set[tuple[str, str]]:
        """Services whose routed workloads, tcp backends or session persistence differ from
        the last table's."""
        last, self._table = self._table, table
        if last is table:
            return set()
        told = self._routes.demand_moved  # the table updated for changed routes alone
        if told is not None and told[0] is last and told[1] is table:
            return set(told[2])  # its TCP, HTTP/2 and persistence maps are the last ones
        before = last.demand if last is not None else {}
        after = table.demand
        moved = {key for key in before.keys() ^ after.keys()}
        moved.update(key for key in after.keys() & before.keys() if after[key] != before[key])
        for before_names, after_names in (
            (last.l4.tcp_names if last is not None else {}, table.l4.tcp_names),
            (last.h2_names if last is not None else {}, table.h2_names),
            (last.persistence if last is not None else {}, table.persistence),
        ):
            moved.update(
                key
                for key in before_names.keys() | after_names.keys()
                if before_names.get(key) != after_names.get(key)
            )
        return moved

    def _assemble(
        self,
        workloads: Workloads,
        table: RouteTable,
        global_settings: GlobalSettings,
        global_warnings: tuple[RejectedInput, ...],
        pool: tuple[BackendSpec, ...] = (),
    ) -> tuple[dict[str, WorkloadSnapshot], list[RejectedInput]]:
        """Each workload's snapshot (its assembly, then final assembly) and the
        rejections found on the way."""
        plans = self._plans
        snapshots: dict[str, WorkloadSnapshot] = {}
        rejections: list[RejectedInput] = []
        assemblies: dict[str, WorkloadAssembly] = {}
        for workload, peers in sorted(workloads.peers.items(), key=lambda item: item[0].key):
            assembly = self._assemblies.get(workload.key)
            changed: set[PlanKey] | None = plans.changed
            if assembly is None or assembly.workload != workload:
                assembly, changed = WorkloadAssembly(workload), None
            routes = table.of(workload.short_ref)
            l4_routes = table.l4.of(workload.short_ref)
            ports = routes.ports
            if l4_routes.ports:
                ports = tuple(sorted({*ports, *l4_routes.ports}))
            snapshot, lost = assembly.assemble(
                peers, plans.plans, changed, global_settings, global_warnings, ports, pool
            )
            assemblies[workload.key] = assembly
            snapshots[workload.key], found = self._final.complete(
                workload.key, snapshot, routes, l4_routes, assembly, global_settings.accept_proxy
            )
            rejections.extend(lost)
            rejections.extend(found)
        self._final.keep(assemblies)
        self._assemblies = assemblies
        plans.changed = set()
        return snapshots, rejections

    def prepare(self) -> None:
        """Work the next computation would otherwise start with, done in idle time after
        a publication: the route table's index after a table computed from scratch."""
        self._routes.prepare()

    def prepare_pending(self) -> bool:
        """Whether `prepare` has work (the loop hops to the executor only then)."""
        return self._routes.unprepared()

    def compute(
        self,
        state: ClusterState,
        previous: Mapping[str, BackendSlots],
        *,
        now: float = 0.0,
        assign_new: bool = True,
    ) -> ComputeResult:
        """Snapshots of every workload and the new slot assignment.

        `now` is the caller's wall clock in seconds (compute reads no clock): slots vacated
        now are freed at `now`, and a freed slot is reused only once its quarantine has
        passed by `now`. The default 0 suits callers without persisted history (tests);
        with real freed times it never reuses a freed slot, which is safe but grows slots.
        `assign_new=False` computes as a follower: `previous` is the leader's ledger, and
        endpoints it has no slot for are left out and counted in `waiting`.
        """
        # The change index: the Services whose objects changed, and those to check.
        dirty, changed_services, continuing = self._dirty(state, previous, now, assign_new)
        policies, moved = self._policies_of(state, changed_services)
        dirty |= moved
        # The workloads and the route table (the last one while no route input changed).
        resolver = Resolver(state.settings, policies)
        pod_rejections: list[RejectedInput] = []
        workloads = discover(state.haproxy_pods, state.replica_sets, pod_rejections, self._scope)
        table = self._route_table(state, workloads, resolver, changed_services, now)
        dirty |= self._demand_moved(table)
        # The spare pool: new backends claim spares (the leader only: compute/spares.py).
        # A follower's registry is the ledger's (`previous`): it keeps no retired backends
        # of its own, and the leader's ledger holds their spares.
        spare = self._spares.start(previous, continuing and assign_new, resolver)
        pool_size = resolver.spare_backends()
        claims = self._spares.claims(spare, pool_size) if assign_new and pool_size else None
        # The plan cache: each Service to check planned again unless its inputs are equal.
        plans = self._plans
        plans.replan(dirty, state, resolver, previous, now, assign_new, table, claims)
        configmap_rejections = plans.configmap_rejections()
        global_settings = resolver.global_settings(configmap_rejections)
        global_warnings = _dedupe(configmap_rejections)
        # Slot retirement, then the new assignment and the spares it leaves free.
        self._retired.update(plans, previous, now, resolver, assign_new, continuing)
        assignment, touched = self._new_assignment(continuing)
        if assign_new:
            self._spares.update(assignment, set(touched) if touched is not None else None)
        pool = self._spares.pool(pool_size)
        # Each workload's assembly and final assembly.
        snapshots, assembled = self._assemble(
            workloads, table, global_settings, global_warnings, pool
        )
        rejections = [
            *plans.rejections(),
            *pod_rejections,
            *table.rejections,
            *assembled,
            *policies.rejections(),
        ]
        return ComputeResult(
            workloads=snapshots,
            assignment=assignment,
            rejections=_dedupe([*rejections, *global_warnings]),
            pod_workloads=workloads.pod_workloads,
            waiting=_waiting(snapshots, plans.waiting_plans()),
            touched=touched,
            recompute_at=self._routes.changes_at,
            spares_claimed=claims.claimed if claims is not None else {},
            spares_refused=claims.refused if claims is not None else {},
        )

    def _new_assignment(
        self, continuing: bool
    ) -> tuple[Mapping[str, BackendSlots], frozenset[str] | None]:
        """The plans' and the retired backends' slots: the same mapping when no backend's
        slots changed, and the names that may have when `previous` was the last one
        returned (callers tell "nothing to persist" by identity, or by comparing those
        backends only)."""
        plans = self._plans
        touched = frozenset(plans.touched) if continuing else None
        assignment = self._assignment
        if assignment is not None and plans.touched and continuing:
            assignment = _patched(assignment, plans.touched, plans.slots, self._retired.slots)
        elif assignment is None or plans.touched:
            assignment = {**plans.slots, **self._retired.slots}
        plans.touched = set()
        self._assignment = assignment
        return assignment, touched


def _patched(
    last: Mapping[str, BackendSlots],
    names: Iterable[str],
    planned: Mapping[str, BackendSlots],
    retired: Mapping[str, BackendSlots],
) -> dict[str, BackendSlots]:
    """`{**planned, **retired}` as `last` (that merge, one computation ago) plus the
    backends `names` names: a copy of `last` (a table copy in C, no rehashing) with those
    set or removed. Merging again rehashed all 8,000 names per endpoint change."""
    assignment = last.copy() if type(last) is dict else dict(last)
    for name in names:
        slots = retired.get(name)
        if slots is None:
            slots = planned.get(name)
        if slots is None:
            assignment.pop(name, None)
        else:
            assignment[name] = slots
    return assignment


def compute(
    state: ClusterState,
    previous: Mapping[str, BackendSlots],
    scope: WorkloadScope = DEFAULT_SCOPE,
    *,
    now: float = 0.0,
    assign_new: bool = True,
) -> ComputeResult:
    """Snapshots of every workload in `scope` (typed, unversioned) and the new slot assignment;
    `now` and `assign_new` as for `Computer.compute`."""
    return Computer(scope).compute(state, previous, now=now, assign_new=assign_new)
