"""The computation entry points: `compute` (pure function) and `Computer` (incremental).

`Computer` remembers each Service's plan with the inputs it came from; a Service whose
object, EndpointSlices, settings ConfigMap and previous slots are unchanged reuses its plan
(and its `BackendSpec` objects, whose bytes the encoder keeps), so one endpoint change
costs one Service's work plus the assembly of the snapshots it appears in. The result is
identical to a fresh computation.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.compute.assemble_incremental import PlanKey, WorkloadAssembly
from controlplane.compute.plan import Planned, ServicePlan, plan_service
from controlplane.compute.slots import retire, retired_until
from controlplane.model import ClusterState, ConfigMap, EndpointSlice, Service
from controlplane.routes.finalize import finalize, referenced
from controlplane.routes.l4 import WorkloadL4
from controlplane.routes.l4 import finalize as finalize_l4
from controlplane.routes.table import RouteComputer, RouteTable, WorkloadRoutes
from controlplane.settings.table import Resolver
from controlplane.settings.workloads import DEFAULT_SCOPE, Workloads, WorkloadScope, discover
from controlplane.snapshot import (
    BackendSlots,
    ComputeResult,
    HttpFrontend,
    HttpListener,
    RejectedInput,
    TcpFrontend,
    TlsPassthroughListener,
    WorkloadSnapshot,
)


@dataclass(frozen=True, slots=True)
class _Cached:
    service: Service
    slices: tuple[EndpointSlice, ...]
    settings: ConfigMap | None
    planned: Planned
    assign_new: bool
    routed_to: frozenset[str] = frozenset()
    tcp_names: frozenset[str] = frozenset()

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
    ) -> bool:
        if self.planned.plan is not None and now >= self.planned.plan.lapses_at:
            return False  # planning now forgets history past its quarantine
        if not (
            self.assign_new == assign_new
            and self.routed_to == routed_to
            and self.tcp_names == tcp_names
            and (self.service is service or self.service == service)
            and self.slices == slices
            and (self.settings is settings or self.settings == settings)
        ):
            return False
        plan = self.planned.plan
        # Unchanged endpoints and the slots this plan produced give the same slots again.
        return plan is None or all(
            (previous.get(part.name) is part.slots or previous.get(part.name) == part.slots)
            for part in plan.backends
        )


NOWHERE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Final:
    """One workload's listeners as last finalized, with what they were made from."""

    routes: WorkloadRoutes
    http: HttpFrontend | None
    names: tuple[str, ...]  # backends the listeners reference
    modes: tuple[str | None, ...]  # their modes in the snapshot
    listeners: tuple[HttpListener, ...]
    rejections: tuple[RejectedInput, ...]  # the table's and finalize's


@dataclass(frozen=True, slots=True)
class _L4Final:
    """One workload's TLS passthrough listeners and route TCP frontends as last
    finalized, with what they were made from."""

    routes: WorkloadL4
    modes: tuple[str | None, ...]  # of `routes.names` in the snapshot
    tls: tuple[TlsPassthroughListener, ...]
    tcp: tuple[TcpFrontend, ...]
    rejections: tuple[RejectedInput, ...]


def _port(frontend: TcpFrontend) -> int:
    return frontend.port


@dataclass(frozen=True, slots=True)
class _Proxied:
    """One workload's frontends as last given the settings' PROXY protocol, with what
    they were made from."""

    tcp: tuple[TcpFrontend, ...]
    listeners: tuple[HttpListener, ...]
    http: HttpFrontend | None
    tcp_out: tuple[TcpFrontend, ...]
    listeners_out: tuple[HttpListener, ...]


def _listener_port(listener: HttpListener) -> int:
    return listener.port


def _slice_name(endpoint_slice: EndpointSlice) -> str:
    return endpoint_slice.name


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

    Sources keep unchanged objects identical from one ClusterState to the next, so the
    objects that changed are found by identity with set operations (C speed), and only
    their Services are planned again. When the previous assignment is not the one this
    Computer returned last, or the settings changed, every Service is checked (and still
    reused when its inputs are equal).
    """

    def __init__(self, scope: WorkloadScope = DEFAULT_SCOPE) -> None:
        self._scope = scope
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._services: dict[int, Service] = {}
        self._slices: dict[int, EndpointSlice] = {}
        self._by_key: dict[tuple[str, str], Service] = {}
        self._slices_by_key: dict[tuple[str, str], dict[int, EndpointSlice]] = {}
        self._settings: ConfigMap | None = None
        self._assignment: Mapping[str, BackendSlots] | None = None
        self._assign_new = True
        # Derived from _cache, maintained per re-planned Service so a small change
        # costs little: plans by key, keys with rejections, the slot assignment.
        self._plans: dict[PlanKey, ServicePlan] = {}
        self._rejecting: set[PlanKey] = set()
        self._configmap_rejecting: set[PlanKey] = set()  # plans with configmap_rejections
        self._waiting_keys: set[PlanKey] = set()  # plans leaving endpoints out
        self._slots: dict[str, BackendSlots] = {}
        self._touched: set[str] = set()  # backends whose slots changed since the last return
        # Backends no Service claims any more, remembered for a quarantine (`retire`),
        # with the heap of when each changes next; `_leaving` holds the last slots of
        # backends whose plan went this step.
        # The previous assignment handed in last, and which Service owns each backend:
        # a follower is handed a new ledger mapping on every change, and only the
        # Services whose backends it changed are planned again (by identity: the ledger
        # watch keeps unchanged backends' objects).
        self._last_previous: Mapping[str, BackendSlots] | None = None
        self._owners: dict[str, tuple[str, str]] = {}
        self._retired: dict[str, BackendSlots] = {}
        self._retired_due: list[tuple[float, str]] = []
        self._leaving: dict[str, BackendSlots] = {}
        # Keys whose plan changed since the assemblies last saw them; one assembly per
        # workload key (docs/design.md, "The computation and the encoder").
        self._changed: set[PlanKey] = set()
        self._assemblies: dict[str, WorkloadAssembly] = {}
        # (lapses_at, key) of plans holding freed slots: due ones are planned again even
        # when nothing of theirs changed, so history is forgotten exactly as a fresh
        # computation forgets it, at the cost of the plans due (a heap, not a scan).
        self._lapses: list[tuple[float, tuple[str, str]]] = []
        # The route model: the last route table, which Services it routes to, and each
        # workload's listeners as last made consistent with its snapshot (`finalize`).
        self._routes = RouteComputer()
        self._table: RouteTable | None = None
        self._finals: dict[str, _Final] = {}
        self._l4_finals: dict[str, _L4Final] = {}
        self._proxied: dict[str, _Proxied] = {}
        self.planned = 0  # Services planned (not reused) by the last call
        self.checked = 0  # Services looked at (planned, or checked for reuse) by it

    def _index(self, state: ClusterState) -> set[tuple[str, str]]:
        """Update the indexes; return the keys of Services whose objects changed."""
        # dict(zip(map(id, ...))) runs in C: 16,000 objects cost ~1 ms less than a
        # comprehension, per change.
        services = dict(zip(map(id, state.services), state.services, strict=True))
        slices = dict(zip(map(id, state.endpoint_slices), state.endpoint_slices, strict=True))
        dirty: set[tuple[str, str]] = set()
        for gone in self._services.keys() - services.keys():
            service = self._services[gone]
            key = (service.namespace, service.name)
            if self._by_key.get(key) is service:
                del self._by_key[key]
            dirty.add(key)
        for new in services.keys() - self._services.keys():
            service = services[new]
            key = (service.namespace, service.name)
            self._by_key[key] = service
            dirty.add(key)
        for gone in self._slices.keys() - slices.keys():
            endpoint_slice = self._slices[gone]
            key = (endpoint_slice.namespace, endpoint_slice.service_name)
            self._slices_by_key[key].pop(gone, None)
            dirty.add(key)
        for new in slices.keys() - self._slices.keys():
            endpoint_slice = slices[new]
            key = (endpoint_slice.namespace, endpoint_slice.service_name)
            self._slices_by_key.setdefault(key, {})[new] = endpoint_slice
            dirty.add(key)
        self._services, self._slices = services, slices
        return dirty

    def _replace(self, key: tuple[str, str], cached: _Cached | None) -> None:
        """Swap the cached plan of one Service and keep the derived indexes in step."""
        old = self._cache.pop(key, None)
        if old is not None and old.planned.plan is not None:
            for part in old.planned.plan.backends:
                self._slots.pop(part.name, None)
                self._owners.pop(part.name, None)
                self._touched.add(part.name)
                self._leaving[part.name] = part.slots
        if self._plans.pop(key, None) is not (cached.planned.plan if cached else None):
            self._changed.add(key)
        self._rejecting.discard(key)
        self._configmap_rejecting.discard(key)
        self._waiting_keys.discard(key)
        if cached is None:
            return
        self._cache[key] = cached
        if cached.planned.plan is not None and cached.planned.plan.lapses_at < math.inf:
            heapq.heappush(self._lapses, (cached.planned.plan.lapses_at, key))
        if cached.planned.rejections:
            self._rejecting.add(key)
        plan = cached.planned.plan
        if plan is not None:
            self._plans[key] = plan
            for part in plan.backends:
                self._slots[part.name] = part.slots
                self._owners[part.name] = key
                self._touched.add(part.name)
            if plan.configmap_rejections:
                self._configmap_rejecting.add(key)
            if plan.waiting:
                self._waiting_keys.add(key)

    def _owning(
        self, old: Mapping[str, BackendSlots], new: Mapping[str, BackendSlots]
    ) -> set[tuple[str, str]]:
        """Services owning a backend whose slots differ between two previous
        assignments (by identity): the only plans a new previous can change."""
        names = {name for name, slots in new.items() if old.get(name) is not slots}
        names.update(old.keys() - new.keys())
        return {self._owners[name] for name in names if name in self._owners}

    def _update_retired(
        self,
        previous: Mapping[str, BackendSlots],
        now: float,
        resolver: Resolver,
        assign_new: bool,
        continuing: bool,
    ) -> None:
        """Keep backends no Service claims for a quarantine (`slots.retire`), in
        O(leaving + due) when continuing from the assignment returned last; from
        `previous` otherwise (a restart, a new ledger, new settings), as a fresh
        computation does."""
        leaving, self._leaving = self._leaving, {}
        if not assign_new:  # a follower saves nothing: the leader's ledger remembers
            self._retired, self._retired_due = {}, []
            return
        quarantine = resolver.retired_quarantine_s()
        if not continuing:
            self._retired, self._retired_due = {}, []
            leaving = {name: previous[name] for name in previous.keys() - self._slots.keys()}
        for name in self._touched & self._retired.keys():
            if name in self._slots:  # claimed again: its plan continued the record
                del self._retired[name]
        while self._retired_due and self._retired_due[0][0] <= now:
            _, name = heapq.heappop(self._retired_due)
            if name in self._retired and name not in leaving:
                leaving[name] = self._retired[name]
        for name, slots in leaving.items():
            if name in self._slots:
                continue  # planned again under the same name this step
            kept = retire(slots, now, quarantine)
            if kept is self._retired.get(name):
                continue
            self._touched.add(name)
            if kept is None:
                self._retired.pop(name, None)
                continue
            self._retired[name] = kept
            heapq.heappush(self._retired_due, (retired_until(kept, quarantine), name))

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
            self._by_key,
            changed_services,
            https_port=ports.https_port,
            accept_proxy=ports.accept_proxy,
            now=now,
        )

    def _demand_moved(self, table: RouteTable) -> set[tuple[str, str]]:
        """Services whose routed workloads differ from the last table's."""
        last, self._table = self._table, table
        if last is table:
            return set()
        before = last.demand if last is not None else {}
        after = table.demand
        moved = {key for key in before.keys() ^ after.keys()}
        moved.update(key for key in after.keys() & before.keys() if after[key] != before[key])
        tcp_before = last.l4.tcp_names if last is not None else {}
        tcp_after = table.l4.tcp_names
        moved.update(
            key
            for key in tcp_before.keys() | tcp_after.keys()
            if tcp_before.get(key) != tcp_after.get(key)
        )
        return moved

    def _with_routes(
        self,
        key: str,
        snapshot: WorkloadSnapshot,
        routes: WorkloadRoutes,
        assembly: WorkloadAssembly,
    ) -> WorkloadSnapshot:
        """The assembled snapshot with the workload's listeners and route warnings. The
        listeners are made consistent with the snapshot (`finalize`) again only when the
        table, the HTTP frontend or a referenced backend's mode changed."""
        last = self._finals.get(key)
        names = last.names if last is not None and last.routes is routes else referenced(routes)
        modes = tuple(map(assembly.mode_of, names))
        http = snapshot.http_frontend
        if (
            last is None
            or last.routes is not routes
            or last.http is not http
            or last.modes != modes
        ):
            listeners, added = finalize(routes, http, assembly.mode_of, names)
            last = _Final(routes, http, names, modes, listeners, (*routes.rejections, *added))
            self._finals[key] = last
        if not last.listeners and not last.rejections:
            return snapshot
        return dataclasses.replace(
            snapshot,
            http_listeners=last.listeners,
            certificates=routes.certificates,  # only those its own listeners bind
            warnings=(*snapshot.warnings, *last.rejections),
        )

    def _with_proxy(self, key: str, snapshot: WorkloadSnapshot, accept: bool) -> WorkloadSnapshot:
        """The settings' accept-proxy-protocol on the ports not from Gateways the route
        table leaves out: the Services' `haproxy.org/tcp-port` frontends, and the
        `haproxy.org/hosts` routes' port (a listener without rules of its own where the
        table has none, which takes them as its last layer). Kept by identity while its
        inputs are, so the encoder reuses their bytes."""
        if not accept:
            return snapshot
        tcp, listeners, http = (
            snapshot.tcp_frontends,
            snapshot.http_listeners,
            snapshot.http_frontend,
        )
        last = self._proxied.get(key)
        if last is None or not (
            last.tcp is tcp and last.listeners is listeners and last.http is http
        ):
            tcp_out = tuple(
                f if f.source or f.accept_proxy else dataclasses.replace(f, accept_proxy=True)
                for f in tcp
            )
            out = listeners
            if http is not None and all(lst.port != http.port for lst in listeners):
                own = HttpListener(http.port, (), "", accept_proxy=True)
                out = tuple(sorted((*listeners, own), key=_listener_port))
            last = _Proxied(tcp, listeners, http, tcp_out, out)
            self._proxied[key] = last
        if last.tcp_out == tcp and last.listeners_out is listeners:
            return snapshot
        return dataclasses.replace(
            snapshot, tcp_frontends=last.tcp_out, http_listeners=last.listeners_out
        )

    def _with_l4(
        self,
        key: str,
        snapshot: WorkloadSnapshot,
        routes: WorkloadL4,
        assembly: WorkloadAssembly,
    ) -> WorkloadSnapshot:
        """The snapshot with the workload's TLS passthrough listeners and route TCP
        frontends (made consistent with its backends' modes, `l4.finalize`)."""
        last = self._l4_finals.get(key)
        modes = tuple(map(assembly.mode_of, routes.names))
        if last is None or last.routes is not routes or last.modes != modes:
            tls, tcp, added = finalize_l4(routes, assembly.mode_of)
            last = _L4Final(routes, modes, tls, tcp, (*routes.rejections, *added))
            self._l4_finals[key] = last
        if not (last.tls or last.tcp or last.rejections):
            return snapshot
        frontends = snapshot.tcp_frontends
        if last.tcp:
            frontends = tuple(sorted((*frontends, *last.tcp), key=_port))
        return dataclasses.replace(
            snapshot,
            tls_listeners=last.tls,
            tcp_frontends=frontends,
            warnings=(*snapshot.warnings, *last.rejections),
        )

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
        dirty = self._index(state)
        changed_services = set(dirty)
        settings_same = self._settings is state.settings or self._settings == state.settings
        continuing = (
            previous is self._assignment and assign_new == self._assign_new and settings_same
        )
        while self._lapses and self._lapses[0][0] <= now:
            _, key = heapq.heappop(self._lapses)
            dirty.add(key)  # stale entries (re-planned since) cost one reuse check
        last, self._last_previous = self._last_previous, previous
        if not continuing:
            if settings_same and assign_new == self._assign_new and last is not None:
                dirty |= self._owning(last, previous)
            else:
                dirty = set(self._by_key) | set(self._cache)
        self._settings = state.settings
        self._assign_new = assign_new
        resolver = Resolver(state.settings)
        pod_rejections: list[RejectedInput] = []
        workloads = discover(state.haproxy_pods, state.replica_sets, pod_rejections, self._scope)
        table = self._route_table(state, workloads, resolver, changed_services, now)
        dirty |= self._demand_moved(table)
        self.planned = 0
        self.checked = len(dirty)
        for key in dirty:
            service = self._by_key.get(key)
            if service is None:
                self._replace(key, None)
                continue
            # Slices sorted by name: input order never matters.
            mine = tuple(sorted(self._slices_by_key.get(key, {}).values(), key=_slice_name))
            routed = table.demand.get(key, NOWHERE)
            tcp_names = table.l4.tcp_names.get(key, NOWHERE)
            cached = self._cache.get(key)
            if cached is None or not cached.reusable(
                service, mine, state.settings, previous, assign_new, now, routed, tcp_names
            ):
                self.planned += 1
                planned = plan_service(
                    service, mine, resolver, previous, now, assign_new, routed, tcp_names
                )
                self._replace(
                    key,
                    _Cached(service, mine, state.settings, planned, assign_new, routed, tcp_names),
                )

        rejections = [r for k in self._rejecting for r in self._cache[k].planned.rejections]
        rejections.extend(pod_rejections)
        rejections.extend(table.rejections)
        plans = self._plans
        configmap_rejections = [
            r for k in self._configmap_rejecting for r in plans[k].configmap_rejections
        ]
        global_settings = resolver.global_settings(configmap_rejections)
        global_warnings = _dedupe(configmap_rejections)
        snapshots: dict[str, WorkloadSnapshot] = {}
        assemblies: dict[str, WorkloadAssembly] = {}
        for workload, peers in sorted(workloads.peers.items(), key=lambda item: item[0].key):
            assembly = self._assemblies.get(workload.key)
            changed: set[PlanKey] | None = self._changed
            if assembly is None or assembly.workload != workload:
                assembly, changed = WorkloadAssembly(workload), None
            routes = table.of(workload.short_ref)
            l4_routes = table.l4.of(workload.short_ref)
            ports = routes.ports
            if l4_routes.ports:
                ports = tuple(sorted({*ports, *l4_routes.ports}))
            snapshot, lost = assembly.assemble(
                peers, plans, changed, global_settings, global_warnings, ports
            )
            assemblies[workload.key] = assembly
            snapshot = self._with_routes(workload.key, snapshot, routes, assembly)
            snapshot = self._with_l4(workload.key, snapshot, l4_routes, assembly)
            snapshots[workload.key] = self._with_proxy(
                workload.key, snapshot, global_settings.accept_proxy
            )
            rejections.extend(lost)
            rejections.extend(self._finals[workload.key].rejections)
            rejections.extend(self._l4_finals[workload.key].rejections)
        self._finals = {key: self._finals[key] for key in assemblies}
        self._l4_finals = {key: self._l4_finals[key] for key in assemblies}
        self._proxied = {key: self._proxied[key] for key in assemblies if key in self._proxied}
        self._assemblies = assemblies
        self._changed = set()
        self._update_retired(previous, now, resolver, assign_new, continuing)
        # The same mapping when no backend's slots changed, and the names that may have
        # when `previous` was the last one returned: callers tell "nothing to persist"
        # by identity, or by comparing those backends only.
        touched = frozenset(self._touched) if continuing else None
        assignment = self._assignment
        if assignment is None or self._touched:
            assignment = {**self._slots, **self._retired}
        self._touched = set()
        self._assignment = assignment
        return ComputeResult(
            workloads=snapshots,
            assignment=assignment,
            rejections=_dedupe([*rejections, *global_warnings]),
            pod_workloads=workloads.pod_workloads,
            waiting=_waiting(snapshots, [plans[k] for k in self._waiting_keys]),
            touched=touched,
            recompute_at=self._routes.changes_at,
        )


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
