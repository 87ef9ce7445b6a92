"""KubernetesSource reads the route model's inputs: Gateway API kinds through the custom
objects client, Ingress and IngressClass, Namespaces; a cluster without the Gateway API
CRDs is served without them (said once), and one bad route object blocks no other."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from controlplane.kube.source import KubernetesSource
from controlplane.kube.watch_stream import WatchOptions
from controlplane.model import ClusterState, GRPCMethodMatch
from controlplane.source.kinds import GATEWAY_API, GRPC_ROUTES
from tests.helpers.waiting import wait_until
from tests.kube.test_source import FAST, WATCHED, Changes
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    gateway,
    gateway_class,
    grpc_route,
    http_route,
    ingress,
    ingress_class,
    namespace,
    pod,
    reference_grant,
    replica_set,
    service,
)
from tests.kubeapi.server import GATEWAY_GROUP


def fast(absent_recheck: float = 60.0) -> WatchOptions:
    return WatchOptions(
        page_size=FAST.page_size,
        watch_timeout=FAST.watch_timeout,
        connect_timeout=FAST.connect_timeout,
        read_timeout=FAST.read_timeout,
        backoff_initial=FAST.backoff_initial,
        backoff_max=FAST.backoff_max,
        backoff_jitter=FAST.backoff_jitter,
        absent_recheck=absent_recheck,
    )


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI(bookmark_interval=0.2).start()
    for obj in (
        service("shop"),
        pod("haproxy-a", "127.0.0.11"),
        replica_set(),
        namespace("default"),
        namespace("team-a", team="a"),
        gateway_class(),
        gateway(),
        http_route(),
        reference_grant("allow-a", "default", "team-a"),
        ingress_class(default=True),
        ingress(),
    ):
        server.apply(obj)
    yield server
    server.stop()


def started(api: FakeKubeAPI, options: WatchOptions, changes: Changes) -> KubernetesSource:
    src = KubernetesSource(api_client(api.url), settings=None, options=options, sync_timeout=5)
    src.start(changes)
    return src


@pytest.fixture
def source(api: FakeKubeAPI) -> Iterator[KubernetesSource]:
    src = started(api, fast(), Changes())
    wait_until(lambda: api.open_watches() == WATCHED - 1)  # no settings ConfigMap
    yield src
    src.stop()


def route_names(state: ClusterState) -> dict[str, list[str]]:
    return {
        "gateway_classes": sorted(o.name for o in state.gateway_classes),
        "gateways": sorted(o.name for o in state.gateways),
        "http_routes": sorted(o.name for o in state.http_routes),
        "reference_grants": sorted(o.name for o in state.reference_grants),
        "ingresses": sorted(o.name for o in state.ingresses),
        "ingress_classes": sorted(o.name for o in state.ingress_classes),
        "namespaces": sorted(o.name for o in state.namespaces),
    }


def test_initial_sync_reads_every_route_kind(source: KubernetesSource) -> None:
    state = source.state()
    assert route_names(state) == {
        "gateway_classes": ["peerplane"],
        "gateways": ["web"],
        "http_routes": ["shop"],
        "reference_grants": ["allow-a"],
        "ingresses": ["shop"],
        "ingress_classes": ["peerplane"],
        "namespaces": ["default", "team-a"],
    }
    (route,) = state.http_routes
    assert route.hostnames == ("shop.example.com",) and route.generation == 1
    assert [r.name for r in route.parent_refs] == ["web"]
    labels = {n.name: dict(n.labels) for n in state.namespaces}["team-a"]
    assert labels == {"team": "a", "kubernetes.io/metadata.name": "team-a"}  # the server's too
    assert source.errors() == []


def test_route_changes_arrive_by_watch(api: FakeKubeAPI, source: KubernetesSource) -> None:
    api.apply(http_route(hostnames=("new.example.com",)))
    wait_until(lambda: [r.hostnames for r in source.state().http_routes] == [("new.example.com",)])
    assert source.state().http_routes[0].generation == 2
    api.delete("Ingress", "default", "shop")
    api.apply(ingress("blog", host="blog.example.com"))
    wait_until(lambda: [i.name for i in source.state().ingresses] == ["blog"])


def test_a_status_write_does_not_notify(api: FakeKubeAPI, source: KubernetesSource) -> None:
    """The controller's own status writes change nothing the model reads: no recompute."""
    changes = Changes()
    src = started(api, fast(), changes)
    try:
        stored = api.get("HTTPRoute", "default", "shop")
        assert stored is not None
        api.apply({**stored, "status": {"parents": []}})
        api.apply(ingress("marker"))
        wait_until(lambda: "marker" in [i.name for i in src.state().ingresses])
        assert changes.count == 1  # the marker only
    finally:
        src.stop()


def test_without_the_gateway_api_the_source_serves_the_rest_and_says_so_once(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.remove_group(GATEWAY_GROUP)
    caplog.set_level(logging.INFO, logger="controlplane.kube.informer")
    src = started(api, fast(absent_recheck=0.1), Changes())
    try:
        state = src.state()
        assert route_names(state)["ingresses"] == ["shop"]
        assert [s.name for s in state.services] == ["shop"]
        assert state.gateways == () and state.http_routes == ()
        assert src.optional_groups[GATEWAY_API].missing and src.errors() == []
        relists = src.informers["HTTPRoute"].relists
        wait_until(lambda: api.watch_requests("Ingress") >= 1)
        # several rechecks later: still one warning
        wait_until(
            lambda: sum(1 for m, p in api.requests if "/httproutes" in p and m == "GET") >= 3
        )
        absent = [r for r in caplog.records if "is not served" in r.getMessage()]
        warned = [r for r in absent if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and GATEWAY_GROUP in warned[0].getMessage()
        # TLSRoute and TCPRoute, absent with the rest, are said once too, at INFO.
        assert [r.levelno for r in absent if "TLSRoute" in r.getMessage()] == [logging.INFO]
        assert src.informers["HTTPRoute"].relists == relists
        # The CRDs installed later: their objects are read at the next check.
        api.install_group(GATEWAY_GROUP)
        api.apply(gateway_class())
        api.apply(http_route())
        wait_until(lambda: [r.name for r in src.state().http_routes] == ["shop"])
        wait_until(
            lambda: not src.optional_groups[GATEWAY_API].missing
        )  # each kind at its own check
        assert any("is served now" in r.getMessage() for r in caplog.records)
    finally:
        src.stop()


def test_the_crds_removed_later_empty_the_route_kinds(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    api.remove_group(GATEWAY_GROUP)
    wait_until(lambda: source.state().http_routes == () and source.state().gateways == ())
    wait_until(lambda: source.optional_groups[GATEWAY_API].missing)
    assert [i.name for i in source.state().ingresses] == ["shop"]


def test_a_bad_route_object_is_reported_and_blocks_no_other(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    bad = http_route("broken")
    bad["spec"]["rules"][0]["backendRefs"][0]["port"] = "eighty"
    api.apply(bad)
    api.apply(http_route("blog", hostnames=("blog.example.com",), backend="blog"))
    bad_ingress = ingress("bad")
    bad_ingress["spec"]["rules"] = "not a list"
    api.apply(bad_ingress)
    api.apply(ingress("news", host="news.example.com"))
    wait_until(lambda: route_names(source.state())["http_routes"] == ["blog", "shop"])
    wait_until(lambda: route_names(source.state())["ingresses"] == ["news", "shop"])
    errors = source.errors()
    assert any(e.startswith("httproutes default/broken:") for e in errors), errors
    assert any(e.startswith("ingresses default/bad:") for e in errors), errors


def test_a_deleted_route_object_is_told_to_the_status_writer(
    api: FakeKubeAPI,
) -> None:
    told: list[tuple[str, str, str]] = []
    src = KubernetesSource(api_client(api.url), settings=None, options=fast(), sync_timeout=5)
    src.on_route_deleted(lambda kind, ns, name: told.append((kind, ns, name)))
    src.start(Changes())
    try:
        api.delete("HTTPRoute", "default", "shop")
        api.delete("Ingress", "default", "shop")
        api.delete("Gateway", "default", "web")
        api.delete("GatewayClass", "", "peerplane")
        api.delete("ReferenceGrant", "default", "allow-a")  # no status: not told
        api.delete("Namespace", "", "team-a")
        wait_until(lambda: len(told) == 4)
        assert sorted(told) == [
            ("Gateway", "default", "web"),
            ("GatewayClass", "", "peerplane"),
            ("HTTPRoute", "default", "shop"),
            ("Ingress", "default", "shop"),
        ]
    finally:
        src.stop()


def test_grpcroutes_are_read_and_a_cluster_without_their_crd_serves_the_rest(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """GRPCRoutes arrive by list and watch; a cluster whose standard channel predates
    GRPCRoute (v1.1) serves every other kind, says so once at INFO, and reads them once
    the CRD is installed."""
    api.apply(grpc_route())
    caplog.set_level(logging.INFO, logger="controlplane.kube.informer")
    src = started(api, fast(absent_recheck=0.1), Changes())
    try:
        state = src.state()
        assert [(r.name, r.rules[0].matches[0].method) for r in state.grpc_routes] == [
            ("rpc", GRPCMethodMatch("Exact", "grpc.health.v1.Health", ""))
        ]
        api.apply(grpc_route("other", hostnames=("other.example.com",)))
        wait_until(lambda: len(src.state().grpc_routes) == 2)
    finally:
        src.stop()
    api.remove_kind("GRPCRoute")
    src = started(api, fast(absent_recheck=0.1), Changes())
    try:
        assert src.state().grpc_routes == () and [r.name for r in src.state().http_routes]
        assert src.optional_groups[GRPC_ROUTES].missing
        assert not src.optional_groups[GATEWAY_API].missing and src.errors() == []
        absent = [r for r in caplog.records if "GRPCRoute" in r.getMessage()]
        assert [r.levelno for r in absent] == [logging.INFO]
        api.install_kind("GRPCRoute")
        api.apply(grpc_route())
        wait_until(lambda: len(src.state().grpc_routes) == 1)
    finally:
        src.stop()
