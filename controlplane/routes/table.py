"""Every workload's route table: its HTTP listeners, rejections and routed Services.

Each port's hostnames are held by one namespace (`ownership.py`): the candidates whose
hostname another namespace holds are dropped and reported, and the listeners carry the
hostnames whose lookup ends at their own layer (`closed_hosts`). A Gateway with an address
of its own is a lane of its workload (`placement.lane`): its listeners, hostnames and
crt-lists are computed apart and bound to its address, then joined into the workload's
table.

`compute_routes` is the pure function of the cluster state; `build_table` runs the
table's stages in order (`table_stages.STAGES`). `RouteComputer` (`route_computer.py`)
keeps its last table and computes again only when a route input changed (docs/design.md,
"The route model"; tests/bench/route_table.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controlplane.model import ClusterState, Service
from controlplane.routes.backends import ServiceKey
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.crtlist import Edge
from controlplane.routes.l4 import Memo as L4Memo
from controlplane.routes.placement import Placement, place
from controlplane.routes.table_stages import STAGES, Build, Trace, by_namespace
from controlplane.routes.table_types import EMPTY as EMPTY
from controlplane.routes.table_types import Memo as Memo
from controlplane.routes.table_types import RouteTable as RouteTable
from controlplane.routes.table_types import WorkloadRoutes as WorkloadRoutes
from controlplane.routes.termination import SecretLookup


def build_table(
    state: ClusterState,
    workloads: Collection[str],
    http_port: int,
    peer_port: int,
    services: Mapping[ServiceKey, Service],
    memo: Memo | None = None,
    reuse: Memo | None = None,
    l4_memo: L4Memo | None = None,
    l4_reuse: L4Memo | None = None,
    edge: Edge | None = None,
    placement: Placement | None = None,
    trace: Trace | None = None,
) -> RouteTable:
    """The table: each stage of `STAGES` in order over one `Build`. `memo` is filled with
    this table's HTTPRoute outcomes, `reuse` is the last one's (None: compute every one);
    `l4_memo` and `l4_reuse` the same for TLSRoutes and TCPRoutes; `trace` (when given) with
    what each workload's listeners were decided from (`table_update.py`)."""
    edge = edge or Edge.of(state)
    if placement is None:
        placement = place_routes(state, workloads, http_port, peer_port, edge)
    build = Build(
        state,
        workloads,
        http_port,
        services,
        edge,
        placement,
        memo,
        reuse,
        l4_memo,
        l4_reuse,
        grants=by_namespace(state.reference_grants),
        trace=trace,
    )
    for _, stage in STAGES:
        stage(build)
    return build.table()


def place_routes(
    state: ClusterState, workloads: Collection[str], http_port: int, peer_port: int, edge: Edge
) -> Placement:
    plain = {http_port: "the settings' http-port"}
    return place(state, workloads, {peer_port: "peers"}, edge.secrets, plain)


def compute_routes(
    state: ClusterState,
    workloads: Collection[str],
    http_port: int,
    peer_port: int,
    *,
    https_port: int = 443,
    accept_proxy: bool = False,
    now: float = 0.0,
) -> RouteTable:
    """The route table of every workload ("namespace/name" refs) from `state`; `now`:
    compute's clock (certificates are served between their dates)."""
    services = {(s.namespace, s.name): s for s in state.services}
    secrets = SecretLookup(state.secrets, CertificateCache(), now)
    edge = Edge(secrets, https_port, accept_proxy, state.settings)
    return build_table(state, workloads, http_port, peer_port, services, edge=edge)
