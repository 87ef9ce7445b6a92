"""The route table's types: each workload's HTTP routes and the whole table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.model import GRPCRoute, HTTPRoute
from controlplane.routes.backends import ServiceKey
from controlplane.routes.httproute import RouteOutcome
from controlplane.routes.ingress import IngressOutcome
from controlplane.routes.l4 import EMPTY_TABLE as EMPTY_L4
from controlplane.routes.l4 import L4Table
from controlplane.routes.persistence import Persisted
from controlplane.routes.placement import Placement
from controlplane.snapshot import Certificate, HttpListener, RejectedInput


@dataclass(frozen=True, slots=True)
class WorkloadRoutes:
    listeners: tuple[HttpListener, ...] = ()
    rejections: tuple[RejectedInput, ...] = ()
    certificates: tuple[Certificate, ...] = ()  # those the listeners bind, sorted by name
    # The backend names the listeners reference, sorted (`finalize.referenced`), when the
    # table knows them without a pass over every rule (`table_update.py`); None: unknown.
    names: tuple[str, ...] | None = field(default=None, compare=False)

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted({listener.port for listener in self.listeners}))


EMPTY = WorkloadRoutes()


@dataclass(frozen=True, slots=True)
class RouteTable:
    placement: Placement
    # HTTPRoutes and GRPCRoutes naming one of our Gateways, by (kind, namespace, name).
    routes: Mapping[tuple[str, str, str], RouteOutcome]
    ingresses: Mapping[tuple[str, str], IngressOutcome]  # Ingresses of our classes
    workloads: Mapping[str, WorkloadRoutes]  # by workload "namespace/name"
    demand: Mapping[ServiceKey, frozenset[str]]  # routed Service -> workloads serving it
    rejections: tuple[RejectedInput, ...]  # all, workload or not
    # Gateway listener (namespace, name, listener) -> why SNI names of its certificates
    # are refused (another namespace's older binding serves them): its Conflicted status.
    tls_conflicts: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    # TLSRoutes and TCPRoutes: their outcomes, each workload's passthrough listeners and
    # TCP frontends, and the backends to plan in mode tcp (`l4.tcp_names`).
    l4: L4Table = EMPTY_L4
    # The backends GRPCRoutes reach, by Service: planned with protocol h2
    # (`compute/protocol.py`).
    h2_names: Mapping[ServiceKey, frozenset[str]] = field(default_factory=dict)
    # Each routed Service's backends' session persistence (`routes/persistence.py`).
    persistence: Persisted = field(default_factory=dict)

    def of(self, workload: str) -> WorkloadRoutes:
        return self.workloads.get(workload, EMPTY)


Memo = dict[int, tuple[HTTPRoute | GRPCRoute, RouteOutcome | None]]
"""id(route) -> the route and its outcome: reused while nothing else the outcome reads
(classes, Gateways, grants, namespaces, workloads, ports, looked-up Services) changed."""
