"""The status documents made again for a new route table in O(changed): `StatusRound`.

Its result equals `routes.status.route_statuses` for the same state and table (the
reference, made from scratch; tests/routes/test_status_round.py checks them equal over
random route changes), and says which documents changed since the last round, so the
writer (`kube.route_status`) compares those only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from controlplane.model import GATEWAY_GROUP, ClusterState
from controlplane.routes.addresses import Published
from controlplane.routes.httproute import ParentOutcome, RouteOutcome
from controlplane.routes.l4_outcome import L4Outcome
from controlplane.routes.status import (
    StatusKey,
    gateway_document,
    non_route_documents,
    route_parents_document,
    workload_addresses,
)
from controlplane.routes.table import RouteTable
from controlplane.settings.workloads import DEFAULT_SCOPE, WorkloadScope

_SERIALS = itertools.count(1)


class Documents(dict[StatusKey, dict[str, Any]]):
    """Status documents (as `route_statuses` gives them) and what changed since the
    documents numbered `since` of the same `StatusRound`: `changed` holds every key whose
    document differs from them, added or removed ones included. `since` None: no
    previous documents (compare them all)."""

    def __init__(
        self,
        documents: Mapping[StatusKey, dict[str, Any]],
        serial: int,
        since: int | None,
        changed: frozenset[StatusKey],
    ) -> None:
        super().__init__(documents)
        self.serial = serial
        self.since = since
        self.changed = changed


_GENERATION = attrgetter("generation")
_NAMESPACE = attrgetter("namespace")
_NAME = attrgetter("name")

_NonRouteInputs = tuple[object, ...]


def _non_route_inputs(state: ClusterState, table: RouteTable) -> _NonRouteInputs:
    """What the documents of GatewayClasses, Gateways (but their attachedRoutes), Ingresses
    and policies are made of: kept while each is the very same object."""
    return (
        table.placement,
        table.ingresses,
        table.tls_conflicts,
        state.gateway_classes,
        state.haproxy_pods,
        state.replica_sets,
        state.services,
        state.settings,
        state.source_ip_persistence_policies,
    )


def _same_inputs(new: _NonRouteInputs, last: _NonRouteInputs) -> bool:
    """The table's parts (placed again at each computation, made again by a table from
    scratch) compared by value, O(Gateways + Ingresses); the state's by identity."""
    table_parts = 3
    return all(
        a is b or a == b for a, b in zip(new[:table_parts], last[:table_parts], strict=True)
    ) and all(a is b for a, b in zip(new[table_parts:], last[table_parts:], strict=True))


def _moved(new: Mapping[Any, object], last: Mapping[Any, object]) -> list[Any]:
    """The keys whose outcome is not the very same object (or is there in one only)."""
    get = last.get
    found = [key for key, outcome in new.items() if get(key) is not outcome]
    kept = len(new) - len(found) + sum(1 for key in found if key in last)
    if kept != len(last):  # some of `last` gone
        found += [key for key in last if key not in new]
    return found


def _l4_generations(state: ClusterState) -> dict[tuple[str, str, str], int]:
    """Every TLSRoute's and TCPRoute's generation by (kind, namespace, name) (their
    outcomes do not carry it; an HTTPRoute's and a GRPCRoute's do)."""
    found: dict[tuple[str, str, str], int] = {}
    for kind, routes in (("TLSRoute", state.tls_routes), ("TCPRoute", state.tcp_routes)):
        keys = zip(itertools.repeat(kind), map(_NAMESPACE, routes), map(_NAME, routes))
        found.update(zip(keys, map(_GENERATION, routes), strict=True))
    return found


class StatusRound:
    """`route_statuses` made again for a new route table in O(changed) (one per writer,
    used in its thread; not thread-safe). The result equals `route_statuses(state, scope,
    table)` (tests/routes/test_status_round.py, random route changes).

    - A route's document depends only on its outcome and generation; the route table
      keeps an unchanged route's outcome object (an outcome is reused only for the very
      same route object; an HTTPRoute's carries its generation), so the routes made again
      are those whose outcome is not the last table's very object (one identity check
      per route, no document built or compared).
    - Each Gateway's attachedRoutes counts are kept and moved by the changed routes'
      parents; only the Gateways whose counts moved are made again.
    - GatewayClasses, Gateways, Ingresses and policies are made again, all of them, when
      any of their inputs is not the very same object as last time (`_non_route_inputs`:
      the placement, Ingress outcomes and TLS certificate conflicts compared by value,
      as they are placed again at every computation; classes, HAProxy pods, ReplicaSets,
      Services, settings and policies by identity): a full round for those kinds
      (O(Gateways + Ingresses + policies), never O(routes)). The first call is a full
      round.
    """

    def __init__(self, scope: WorkloadScope = DEFAULT_SCOPE) -> None:
        self._scope = scope
        self.full = 0  # calls whose non-route documents were all made again (tests)
        self._reset()

    def _reset(self) -> None:
        """Forget every document: the next call makes them all (as the first does)."""
        self._docs: dict[StatusKey, dict[str, Any]] = {}
        self._serial: int | None = None
        # The last table's outcomes (held: no outcome's id is reused while compared).
        self._routes: Mapping[tuple[str, str, str], RouteOutcome] = {}
        self._l4: Mapping[tuple[str, str, str], L4Outcome] = {}
        self._attached: dict[tuple[str, str], dict[str, int]] = {}
        self._inputs: _NonRouteInputs | None = None
        self._addresses: dict[str, Published] = {}
        self.made_routes = 0  # route documents made by the last call (tests)

    def __call__(self, state: ClusterState, table: RouteTable) -> Documents:
        try:
            return self._made(state, table)
        except BaseException:
            self._reset()  # half moved: all made again next time
            raise

    def _made(self, state: ClusterState, table: RouteTable) -> Documents:
        docs = self._docs
        changed: set[StatusKey] = set()
        touched: set[tuple[str, str]] = set()
        self.made_routes = 0
        moved = _moved(table.routes, self._routes)
        for key in moved:
            outcome = table.routes.get(key)
            generation = outcome.generation if outcome is not None else 0
            self._route_document(key, self._routes.get(key), outcome, generation, docs, touched)
        moved_l4 = _moved(table.l4.routes, self._l4)
        generations = _l4_generations(state) if moved_l4 else {}
        for key in moved_l4:
            outcome_l4 = table.l4.routes.get(key)
            generation = generations[key] if outcome_l4 is not None else 0
            self._route_document(key, self._l4.get(key), outcome_l4, generation, docs, touched)
        changed.update(StatusKey(GATEWAY_GROUP, *key) for key in (*moved, *moved_l4))
        self._routes, self._l4 = table.routes, table.l4.routes
        inputs = _non_route_inputs(state, table)
        if self._inputs is None or not _same_inputs(inputs, self._inputs):
            self.full += 1
            self._inputs = inputs
            self._addresses = workload_addresses(state, self._scope)
            made = non_route_documents(state, table, self._attached, self._addresses)
            for key in [k for k in docs if k.kind not in _ROUTE_KINDS and k not in made]:
                del docs[key]
                changed.add(key)
        else:
            made = {
                StatusKey(GATEWAY_GROUP, "Gateway", *gateway): gateway_document(
                    table.placement.gateways[gateway],
                    self._attached.get(gateway, {}),
                    self._addresses,
                    table.tls_conflicts,
                )
                for gateway in touched
                if gateway in table.placement.gateways
            }
        for key, document in made.items():
            if docs.get(key) != document:
                docs[key] = document
                changed.add(key)
        serial, since = next(_SERIALS), self._serial
        self._serial = serial
        return Documents(docs, serial, since, frozenset(changed))

    def _route_document(
        self,
        key: tuple[str, str, str],
        old: RouteOutcome | L4Outcome | None,
        new: RouteOutcome | L4Outcome | None,
        generation: int,
        docs: dict[StatusKey, dict[str, Any]],
        touched: set[tuple[str, str]],
    ) -> None:
        """A moved route's document made again (or gone) and its parents' counts moved."""
        status_key = StatusKey(GATEWAY_GROUP, *key)
        if old is not None:
            touched.update(self._count(old.parents, -1))
        if new is None:
            docs.pop(status_key, None)
            return
        touched.update(self._count(new.parents, 1))
        docs[status_key] = route_parents_document(new.parents, generation)
        self.made_routes += 1

    def _count(self, parents: Sequence[ParentOutcome], sign: int) -> list[tuple[str, str]]:
        """Move the attachedRoutes counts of `parents`' listeners; the Gateways moved."""
        for parent in parents:
            counts = self._attached.setdefault(parent.gateway, {})
            for listener in parent.listeners:
                counts[listener] = counts.get(listener, 0) + sign
        return [parent.gateway for parent in parents]


_ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"})
