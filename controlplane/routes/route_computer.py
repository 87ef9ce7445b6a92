"""`RouteComputer`: the route table again only when a route input changed.

It keeps its last table and computes again only when a route input changed: the route
kinds (compared by identity first: sources keep unchanged objects), the workloads, the
HTTP and peer ports, the ports of a Service a route looked up, a Secret a listener or an
Ingress looked up (each parsed once per object), or the clock passing a used
certificate's start or end. An endpoint or annotation change costs one comparison per
changed Service; an HTTPRoute change costs that route's outcome (the other routes keep
theirs while nothing they read changed), and the table is updated for the changed routes
alone (`table_update.TableIndex`) when the change is one the update covers; else the
grouping and the ordering of the workload's rules are done again (docs/design.md, "The
route model"; tests/bench/route_table.py). The index of a table computed from scratch is
made by `prepare`, which the loop calls after publishing that table (65 ms at 10,000
routes that the next route change would otherwise wait for). A Gateway's
`status.addresses` (the Lease holder's own write, read back) is read only through the
address of its own that a `gateway-address-pool` gives it (`placement.own_lanes`): its
first write after start, listing what the Gateway was given, is no reason to compute
10,000 routes again (1-2 s the next route change waited for, docs/findings.md); only a
write that moves an address is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import cast

from controlplane.model import (
    ClusterState,
    GRPCRoute,
    HTTPRoute,
    Service,
    ServicePort,
    TLSSecret,
)
from controlplane.routes.backends import ServiceKey
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.crtlist import Edge
from controlplane.routes.l4 import Memo as L4Memo
from controlplane.routes.placement import Placement, own_lanes
from controlplane.routes.route_changes import RouteKeys
from controlplane.routes.table import build_table, place_routes
from controlplane.routes.table_stages import Trace
from controlplane.routes.table_types import Memo, RouteTable
from controlplane.routes.table_update import TableIndex
from controlplane.routes.termination import SecretKey, SecretLookup


class _Recording(Mapping[ServiceKey, Service]):
    """The Services by key, remembering every key looked up (found or not): the only
    Services whose ports the table depends on."""

    def __init__(self, services: Mapping[ServiceKey, Service]) -> None:
        self._services = services
        self.looked: dict[ServiceKey, tuple[ServicePort, ...] | None] = {}

    def __getitem__(self, key: ServiceKey) -> Service:
        found = self._services.get(key)
        self.looked[key] = None if found is None else found.ports
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[ServiceKey]:
        return iter(self._services)

    def __len__(self) -> int:
        return len(self._services)


def _served_https(placement: Placement) -> tuple[tuple[str, str, str, bool], ...]:
    """Whether each HTTPS listener is served: what HTTPRoute outcomes read of the
    certificates (a route attaches to a served listener only)."""
    return tuple(
        (*key, lp.listener.name, lp.usable)
        for key, gateway_place in placement.gateways.items()
        for lp in gateway_place.listeners
        if lp.listener.protocol == "HTTPS"
    )


class RouteComputer:
    """`compute_routes` that answers its last table while no route input changed.

    `computed` counts the tables computed (not reused), for tests and benchmarks."""

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._looked: dict[ServiceKey, tuple[ServicePort, ...] | None] = {}
        self._table: RouteTable | None = None
        self._memo: Memo = {}
        self._l4_memo: L4Memo = {}
        # The Secrets: parsed once per object; those the last table looked up (the only
        # ones it depends on), and when the clock next changes one's answer.
        self._certificates = CertificateCache()
        self._secrets: tuple[TLSSecret, ...] = ()
        self._secrets_looked: dict[SecretKey, TLSSecret | None] = {}
        self._changes_at = math.inf
        self.computed = 0
        self.updated = 0  # of `computed`, the tables updated for changed routes alone
        self.indexed_late = 0  # indexes made by a route change (not ready by `prepare`)
        # What the last table's listeners were decided from: the index made of it by
        # `prepare`, or when a route change comes first (`table_update.py`).
        self._trace: Trace | None = None
        self._index: TableIndex | None = None
        # The routes of the last table by change key (made with its index), and the
        # source version (`ChangeSet`) of the last state whose route tuples are the very
        # ones the table was made from: a route change is then found from the state's
        # changes (`route_changes.RouteKeys`), not by scanning every route.
        self._keys: RouteKeys | None = None
        self._seen: tuple[int, int] | None = None
        # (last table, new table, Services whose demand moved) of the last update.
        self.demand_moved: tuple[RouteTable, RouteTable, set[ServiceKey]] | None = None
        # (what they are made of) -> the Gateways as routes read them (`_gateways_read`).
        self._read_gateways: tuple[tuple[object, ...], frozenset[str], object] | None = None

    def compute(
        self,
        state: ClusterState,
        workloads: Collection[str],
        http_port: int,
        peer_port: int,
        services: Mapping[ServiceKey, Service],
        changed_services: Collection[ServiceKey] | None,
        *,
        https_port: int = 443,
        accept_proxy: bool = False,
        now: float = 0.0,
    ) -> RouteTable:
        """The table; `services` by key as of `state`, `changed_services` the keys whose
        Service may differ since the last call (None: unknown, look at all looked up);
        `now`: compute's clock."""
        serving = frozenset(workloads)
        context = (
            state.gateway_classes,
            self._gateways_read(state, serving),
            state.reference_grants,
            state.ingress_classes,
            state.namespaces,
            serving,
            http_port,
            peer_port,
            https_port,
            accept_proxy,
            state.settings,
        )
        inputs = (
            context,
            state.http_routes,
            state.grpc_routes,
            state.ingresses,
            state.tls_routes,
            state.tcp_routes,
        )
        self.demand_moved = None  # set again when this table is an update
        table = self._table
        moved = table is not None and self._ports_moved(services, changed_services)
        secrets_moved = self._secrets_moved(state.secrets, now)
        if table is not None and inputs == self._inputs and not moved and not secrets_moved:
            self._secrets = state.secrets  # what the table read of them is unchanged
            assert self._inputs is not None
            same = state.http_routes is self._inputs[1] and state.grpc_routes is self._inputs[2]
            self._seen = _version(state) if same else None
            return table
        # Each unchanged HTTPRoute keeps its outcome while what it reads is unchanged: a
        # route change costs that route, the grouping and the ordering. Of the Secrets,
        # outcomes read only whether each HTTPS listener is served.
        if state.secrets is not self._secrets:
            self._certificates.keep_only(state.secrets)
        secrets = SecretLookup(state.secrets, self._certificates, now)
        placement = place_routes(state, workloads, http_port, peer_port, Edge(secrets))
        last = self._inputs
        reuse = (
            self._memo
            if last is not None
            and last[0] == context
            and not moved
            and (
                table is None
                or not secrets_moved
                or _served_https(table.placement) == _served_https(placement)
            )
            else None
        )
        recording = _Recording(services)
        if reuse is not None:
            recording.looked.update(self._looked)
        memo: Memo = {}
        if reuse is not None and table is not None and last is not None and not secrets_moved:
            updated = self._update(state, inputs, last, table, placement, recording, reuse)
            if updated is not None:
                self._looked, self._memo, self._secrets = recording.looked, reuse, state.secrets
                return updated
        l4_memo: L4Memo = {}
        l4_reuse = self._l4_memo if reuse is not None else None
        edge = Edge(secrets, https_port, accept_proxy, state.settings)
        trace = Trace()
        table = build_table(
            state,
            workloads,
            http_port,
            peer_port,
            recording,
            memo,
            reuse,
            l4_memo,
            l4_reuse,
            edge=edge,
            placement=placement,
            trace=trace,
        )
        self._trace, self._index, self._keys = trace, None, None
        self._seen = _version(state)
        self._inputs, self._looked, self._table, self._memo = inputs, recording.looked, table, memo
        self._secrets, self._secrets_looked = state.secrets, secrets.looked
        self._changes_at = secrets.changes_at
        self._l4_memo = l4_memo
        self.computed += 1
        return table

    def _gateways_read(self, state: ClusterState, workloads: frozenset[str]) -> object:
        """`state.gateways` as the table reads them: their `status.addresses` left out,
        which placement reads only to keep a Gateway's `gateway-address-pool` address
        (`placement.own_lanes`); with a pool, the addresses of their own that placement
        gives beside them. So the Lease holder's own status write, read back, is no route
        input when it lists what the Gateway was given (its first one after start, with
        or without a pool), and is one when it moves an address. Made again only when
        one of what it is made of is another object than last time."""
        made_of = (
            state.gateways,
            state.settings,
            state.gateway_classes,
            state.namespaces,
            state.haproxy_pods,
        )
        last = self._read_gateways
        if (
            last is not None
            and last[1] == workloads
            and all(a is b for a, b in zip(last[0], made_of, strict=True))
        ):
            return last[2]
        gateways = tuple(
            dataclasses.replace(g, status_addresses=()) if g.status_addresses else g
            for g in state.gateways
        )
        read = (gateways, own_lanes(state, workloads))
        self._read_gateways = (made_of, workloads, read)
        return read

    def _update(
        self,
        state: ClusterState,
        inputs: tuple[object, ...],
        last: tuple[object, ...],
        table: RouteTable,
        placement: Placement,
        services: Mapping[ServiceKey, Service],
        reuse: Memo,
    ) -> RouteTable | None:
        """The last table updated for its changed HTTPRoutes and GRPCRoutes alone
        (`TableIndex.update`, `reuse` updated in place); None when anything else changed
        or the update does not cover the change (`reuse` untouched)."""
        if any(a is not b for a, b in zip(inputs[3:], last[3:], strict=True)):
            return None  # Ingresses, TLSRoutes or TCPRoutes changed
        ready = self._index is not None and self._index.table is table
        index = self._indexed(table)
        if index is None:
            return None
        self.indexed_late += not ready
        # the HTTPRoutes and GRPCRoutes `reuse` was made from (`state`'s kinds as they were)
        routes = cast(tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]], (last[1], last[2]))
        keys = self._keys
        if keys is not None:
            keys.seen = self._seen
        found = index.update(state, placement, services, reuse, reuse, routes, keys)
        if found is None:
            return None
        if keys is not None:
            keys.moved(state.changes)
        self._seen = _version(state)
        updated, moved = found
        self._inputs, self._table = inputs, updated
        self.demand_moved = (table, updated, moved)
        self.computed += 1
        self.updated += 1
        return updated

    def prepare(self) -> None:
        """Make the last table's index now (idle time after its publication) when it was
        computed from scratch, so the next route change is an update at once."""
        if self._table is not None:
            self._indexed(self._table)

    def unprepared(self) -> bool:
        """Whether `prepare` has work: the last table was computed from scratch and its
        index is not made yet (an endpoint change reuses the table: none)."""
        table = self._table
        if table is None or self._trace is None:
            return False
        return self._index is None or self._index.table is not table

    def _indexed(self, table: RouteTable) -> TableIndex | None:
        """`table`'s index, made from the trace of its build if not made yet; None when
        there is no trace to make it from. The trace is dropped once the index is made:
        the index holds what it needs of it, and kept, the build's candidates stayed
        alive beside their successors, a route's first change at a time."""
        if self._index is not None and self._index.table is table:
            return self._index
        if self._trace is None:
            return None
        self._index, self._trace = TableIndex(table, self._trace), None
        assert self._inputs is not None
        routes = cast(tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]], self._inputs[1:3])
        self._keys = RouteKeys(*routes, self._seen)
        return self._index

    @property
    def changed_hosts(self) -> dict[tuple[str, int], frozenset[str]] | None:
        """When the last table was an update (`demand_moved` set): (workload, port) ->
        the hostnames whose rules may differ from the table before it (a lane's key, with
        its address, for a Gateway of its own address); every other
        hostname's rules are the same objects in the same relative order. None: the last
        table was computed from scratch or reused."""
        if self.demand_moved is None or self._index is None:
            return None
        return self._index.changed

    @property
    def changes_at(self) -> float:
        """When the clock next changes the last table's answer (a used certificate's start
        or end, wall-clock seconds); inf when never."""
        return self._changes_at

    def _secrets_moved(self, secrets: tuple[TLSSecret, ...], now: float) -> bool:
        """Whether a Secret the last table looked up is another object (or gone, or
        new), or the clock passed a looked-up certificate's start or end."""
        if now >= self._changes_at:
            return True
        if secrets is self._secrets or not self._secrets_looked:
            return False
        index = {(s.namespace, s.name): s for s in secrets}
        return any(index.get(key) is not found for key, found in self._secrets_looked.items())

    def _ports_moved(
        self, services: Mapping[ServiceKey, Service], changed: Collection[ServiceKey] | None
    ) -> bool:
        keys = self._looked.keys() if changed is None else [k for k in changed if k in self._looked]
        for key in keys:
            found = services.get(key)
            if (None if found is None else found.ports) != self._looked[key]:
                return True
        return False


def _version(state: ClusterState) -> tuple[int, int] | None:
    """The source version of `state` (`ChangeSet`: origin and version); None: not known."""
    changes = state.changes
    return None if changes is None else (changes.origin, changes.version)
