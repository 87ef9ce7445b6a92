"""One workload's snapshot kept up to date plan by plan (the incremental `assemble`).

`assemble` places every Service plan of a workload from scratch: Python work per Service
on every call, which at 8,000 Services costs more than the one Service that changed. A
`WorkloadAssembly` remembers the last assembly and, when only some plans changed and the
workload's peers, global settings and warnings did not, updates it in O(changed plans):
backends are kept in a name-sorted list (bisect; the tuple is a C-speed copy), and the
frontends, with the lost-claim rejections they decide, are decided again only when a
changed plan's claim (hosts, TCP port, age, first backend) changed. When that moves a lost
claim, or anything else the whole workload depends on changed, it assembles from scratch
with `assemble` itself, so both paths give the same snapshot (checked against fresh
computations in tests/compute/test_incremental_assembly.py). Unchanged frontends and
peers keep their objects, so the encoder reuses their bytes by identity.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence

from controlplane.compute.assemble_whole import assemble_with_claims, frontends
from controlplane.compute.plan import ServicePlan
from controlplane.settings.resolver import GlobalSettings
from controlplane.settings.workloads import PeerEntry, Workload
from controlplane.snapshot import (
    BackendSpec,
    EditedBackends,
    HttpFrontend,
    RejectedInput,
    TcpFrontend,
    WorkloadSnapshot,
)

PlanKey = tuple[str, str]  # (namespace, name) of the Service
Claim = tuple[tuple[str, str, str], tuple[str, ...], int | None, str]


def claim(plan: ServicePlan | None) -> Claim | None:
    """What of a plan the frontends depend on; None when it claims nothing."""
    if plan is None or not plan.backends or not (plan.hosts or plan.tcp_port is not None):
        return None
    return (plan.age_key, plan.hosts, plan.tcp_port, plan.backends[0].name)


class WorkloadAssembly:
    """The last snapshot of one workload and what it was assembled from."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._inputs: tuple[object, ...] | None = None
        self._members: dict[PlanKey, ServicePlan] = {}
        self._claiming: dict[PlanKey, ServicePlan] = {}
        self._names: list[str] = []  # sorted backend names
        self._specs: list[BackendSpec] = []  # the placed specs, in `_names` order
        self._http: HttpFrontend | None = None
        self._tcp: tuple[TcpFrontend, ...] = ()
        self._lost: dict[str, list[RejectedInput]] = {}
        self._lost_flat: list[RejectedInput] = []
        self._snapshot: WorkloadSnapshot | None = None
        # The unclaimed spares placed (`compute/spares.py`), and the placed backends that
        # run in a claimed spare: backend name -> section (the routes name the section).
        self._pool: tuple[BackendSpec, ...] = ()
        self.sections: dict[str, str] = {}
        self.rebuilt = False  # the last call assembled from scratch (tests, benchmarks)

    def _places(self, plan: ServicePlan) -> bool:
        return plan.places(self.workload.short_ref)

    def _claim(self, plan: ServicePlan | None) -> Claim | None:
        """The plan's claim in this workload (a routed-only placement claims nothing)."""
        if plan is None or not plan.claims_in(self.workload.short_ref):
            return None
        return claim(plan)

    def mode_of(self, name: str) -> str | None:
        """The mode of the placed backend `name`; None when it is not placed."""
        index = bisect_left(self._names, name)
        if index < len(self._names) and self._names[index] == name:
            return self._specs[index].mode
        return None

    def assemble(
        self,
        peers: Sequence[PeerEntry],
        plans: Mapping[PlanKey, ServicePlan],
        changed: Collection[PlanKey] | None,
        settings: GlobalSettings,
        global_warnings: tuple[RejectedInput, ...],
        listener_ports: tuple[int, ...] = (),
        pool: tuple[BackendSpec, ...] = (),
    ) -> tuple[WorkloadSnapshot, list[RejectedInput]]:
        """The workload's snapshot and lost-claim rejections, as `assemble` gives them for
        the plans in `plans` that this workload serves, with the unclaimed spares `pool`
        among its backends. `changed` names the keys whose plan changed (added, replaced
        or removed) since the last call; None: unknown. `listener_ports`: the route
        model's listeners, which no TCP claim may take."""
        snapshot, lost = self._assemble(
            peers, plans, changed, settings, global_warnings, listener_ports
        )
        if pool is self._pool or pool == self._pool:
            return snapshot, lost
        for spec in self._pool:
            self._remove(spec.name)
        for spec in pool:
            self._put(spec)
        self._pool = pool
        self._snapshot = dataclasses.replace(snapshot, backends=tuple(self._specs))
        return self._snapshot, lost

    def _assemble(
        self,
        peers: Sequence[PeerEntry],
        plans: Mapping[PlanKey, ServicePlan],
        changed: Collection[PlanKey] | None,
        settings: GlobalSettings,
        global_warnings: tuple[RejectedInput, ...],
        listener_ports: tuple[int, ...],
    ) -> tuple[WorkloadSnapshot, list[RejectedInput]]:
        inputs = (tuple(peers), settings, global_warnings, listener_ports)
        snapshot = self._snapshot
        if snapshot is None or changed is None or inputs != self._inputs:
            return self._rebuild(peers, plans, settings, global_warnings, inputs, listener_ports)
        moves: list[tuple[PlanKey, ServicePlan | None, ServicePlan | None]] = []
        claims_moved = False
        for key in changed:
            new = plans.get(key)
            if new is not None and not self._places(new):
                new = None
            old = self._members.get(key)
            if old is new:
                continue
            moves.append((key, old, new))
            claims_moved = claims_moved or self._claim(old) != self._claim(new)
        self.rebuilt = False
        if not moves:
            return snapshot, self._lost_flat
        for key, _, new in moves:
            if new is None:
                self._members.pop(key, None)
                self._claiming.pop(key, None)
                continue
            self._members[key] = new
            if self._claim(new) is None:
                self._claiming.pop(key, None)
            else:
                self._claiming[key] = new
        http, tcp = self._http, self._tcp
        if claims_moved:
            http, tcp, lost = frontends(list(self._claiming.values()), settings, listener_ports)
            if lost != self._lost:  # another backend's warnings change: start over
                return self._rebuild(
                    peers, plans, settings, global_warnings, inputs, listener_ports
                )
            http = self._http if http == self._http else http
            tcp = self._tcp if tcp == self._tcp else tcp
            self._http, self._tcp = http, tcp
        removed: set[str] = set()
        replaced: set[str] = set()
        for _, old, new in moves:
            if old is not None:
                for spec in old.backends:
                    self._remove(spec.name)
                    removed.add(spec.name)
            if new is not None:
                for spec in self._placed(new):
                    self._put(spec)
                    replaced.add(spec.name)
        backends: tuple[BackendSpec, ...]
        if removed == replaced and len(self._specs) == len(snapshot.backends):
            # The same names in the same order: say which were replaced (the encoder).
            names = tuple(sorted(replaced))
            backends = EditedBackends.of(self._specs, snapshot.backends, names)
        else:
            backends = tuple(self._specs)
        self._snapshot = dataclasses.replace(
            snapshot, backends=backends, http_frontend=http, tcp_frontends=tcp
        )
        return self._snapshot, self._lost_flat

    def _placed(self, plan: ServicePlan) -> tuple[BackendSpec, ...]:
        """The plan's specs as `assemble` places them: the first backend carries the
        Service-wide warnings and its lost claims after its own."""
        if not plan.backends:
            return ()
        first = plan.backends[0]
        added = (*plan.service_warnings, *self._lost.get(first.name, ()))
        if not added:
            return plan.backends
        placed = dataclasses.replace(first, warnings=(*first.warnings, *added))
        return (placed, *plan.backends[1:])

    def _remove(self, name: str) -> None:
        index = bisect_left(self._names, name)
        if index < len(self._names) and self._names[index] == name:
            del self._names[index]
            del self._specs[index]
            self.sections.pop(name, None)

    def _put(self, spec: BackendSpec) -> None:
        if spec.slots.spare:
            self.sections[spec.name] = spec.slots.spare
        else:
            self.sections.pop(spec.name, None)
        index = bisect_left(self._names, spec.name)
        if index < len(self._names) and self._names[index] == spec.name:
            self._specs[index] = spec
        else:
            self._names.insert(index, spec.name)
            self._specs.insert(index, spec)

    def _rebuild(
        self,
        peers: Sequence[PeerEntry],
        plans: Mapping[PlanKey, ServicePlan],
        settings: GlobalSettings,
        global_warnings: tuple[RejectedInput, ...],
        inputs: tuple[object, ...],
        listener_ports: tuple[int, ...],
    ) -> tuple[WorkloadSnapshot, list[RejectedInput]]:
        self._members = {key: plan for key, plan in plans.items() if self._places(plan)}
        self._claiming = {k: p for k, p in self._members.items() if self._claim(p) is not None}
        snapshot, lost = assemble_with_claims(
            self.workload,
            peers,
            list(self._members.values()),
            settings,
            global_warnings,
            listener_ports,
        )
        self._lost = lost
        self._http, self._tcp = snapshot.http_frontend, snapshot.tcp_frontends
        self._names = [spec.name for spec in snapshot.backends]
        self._specs = list(snapshot.backends)
        self._pool = ()  # placed again by the caller
        self.sections = {s.name: s.slots.spare for s in snapshot.backends if s.slots.spare}
        self._lost_flat = [r for rs in lost.values() for r in rs]
        self._snapshot = snapshot
        self._inputs = inputs
        self.rebuilt = True
        return snapshot, self._lost_flat
