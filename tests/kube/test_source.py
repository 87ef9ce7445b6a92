"""KubernetesSource against the fake API server, through the real `kubernetes` client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from kubernetes import client

from controlplane.compute import Computer, compute
from controlplane.kube.client import load_api_client
from controlplane.kube.informer import Informer
from controlplane.kube.source import KubernetesSource
from controlplane.kube.watch_stream import WatchOptions
from controlplane.model import ClusterState, ObjectRef
from controlplane.source.convert import service_from
from controlplane.source.kinds import INPUT_KINDS
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    config_map,
    endpoint_slice,
    pod,
    replica_set,
    service,
    write_kubeconfig,
)

FAST = WatchOptions(
    page_size=2,
    watch_timeout=5.0,
    connect_timeout=1.0,
    read_timeout=1.0,
    backoff_initial=0.05,
    backoff_max=0.3,
    backoff_jitter=0.05,
)
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
# Services, EndpointSlices, pods, ReplicaSets, the settings ConfigMap, the route
# model's seven kinds (tests/kube/test_source_routes.py), GRPCRoutes, TLSRoutes,
# TCPRoutes and TLS Secrets, SourceIPPersistencePolicies: one watch per row of the table.
WATCHED = len(INPUT_KINDS)


class Changes:
    """Counts on_change calls (from informer threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI(bookmark_interval=0.2).start()
    for obj in (
        service("shop"),
        service("internal", expose=False),
        service("blog"),
        endpoint_slice("shop", {"10.0.1.1": True, "10.0.1.2": True}),
        pod("haproxy-a", "127.0.0.11"),
        pod("haproxy-b", "127.0.0.12"),
        replica_set(),
        replica_set("unrelated", ns="default"),
        config_map("haproxy-settings", load_balance="leastconn"),
        config_map("other-settings", load_balance="first"),
    ):
        server.apply(obj)
    unlabelled = pod("web-1", "127.0.0.99", owner="web-1234", ns="default")
    unlabelled["metadata"]["labels"] = {"app": "web"}
    server.apply(unlabelled)
    yield server
    server.stop()


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
def source(api: FakeKubeAPI, changes: Changes) -> Iterator[KubernetesSource]:
    src = KubernetesSource(api_client(api.url), settings=SETTINGS, options=FAST, sync_timeout=5)
    src.start(changes)
    wait_until(lambda: api.open_watches() == WATCHED)  # every informer is watching
    yield src
    src.stop()


def pod_names(state: ClusterState) -> list[str]:
    return [p.name for p in state.haproxy_pods]


def backends(state: ClusterState) -> set[str]:
    result = compute(state, {})
    return {b.name for snap in result.workloads.values() for b in snap.backends}


def test_initial_sync_builds_the_cluster_state(api: FakeKubeAPI, source: KubernetesSource) -> None:
    state = source.state()
    assert [s.name for s in state.services] == ["blog", "internal", "shop"]
    assert pod_names(state) == ["haproxy-a", "haproxy-b"]  # the selector left web-1 out
    owners = [(r.namespace, r.name) for r in state.replica_sets]
    assert owners == [("haproxy-system", "haproxy-7d9f")]
    assert state.settings is not None and state.settings.name == "haproxy-settings"
    assert state.settings.data["load-balance"] == "leastconn"
    (slice_,) = state.endpoint_slices
    assert [e.addresses for e in slice_.endpoints] == [("10.0.1.1",), ("10.0.1.2",)]
    assert backends(state) == {"default_shop_http", "default_blog_http"}
    assert source.errors() == []
    lists = [p for m, p in api.requests if m == "GET" and "/services" in p]
    assert any("continue=" in p for p in lists), "3 services with limit=2 take two pages"
    watches = [unquote(p) for m, p in api.requests if m == "WATCH"]
    assert len(watches) == WATCHED
    assert all("allowwatchbookmarks=true" in p.lower() and "timeoutSeconds=" in p for p in watches)
    assert any("labelSelector=app.kubernetes.io" in p for p in watches)
    assert any("fieldSelector=metadata.name=haproxy-settings" in p for p in watches)


def test_pod_scale_up_and_down_changes_peers(api: FakeKubeAPI, source: KubernetesSource) -> None:
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: pod_names(source.state()) == ["haproxy-a", "haproxy-b", "haproxy-c"])
    api.delete("Pod", "haproxy-system", "haproxy-a")
    wait_until(lambda: pod_names(source.state()) == ["haproxy-b", "haproxy-c"])
    relabelled = pod("haproxy-b", "127.0.0.12")
    relabelled["metadata"]["labels"] = {"app.kubernetes.io/component": "other"}
    api.apply(relabelled)  # leaves the selector: the watch reports a deletion
    wait_until(lambda: pod_names(source.state()) == ["haproxy-c"])
    snapshots = compute(source.state(), {}).workloads.values()
    peers = [p.name for s in snapshots for p in s.peers.peers]
    assert peers == ["haproxy-c"]


def test_endpoint_readiness_flip(api: FakeKubeAPI, source: KubernetesSource) -> None:
    def ready() -> list[bool]:
        return [e.ready for s in source.state().endpoint_slices for e in s.endpoints]

    api.apply(endpoint_slice("shop", {"10.0.1.1": True, "10.0.1.2": False}))
    wait_until(lambda: ready() == [True, False])
    api.apply(endpoint_slice("shop", {"10.0.1.1": True, "10.0.1.2": True}))
    wait_until(lambda: ready() == [True, True])


def test_service_losing_opt_in_disappears(api: FakeKubeAPI, source: KubernetesSource) -> None:
    api.apply(service("shop", expose=False))
    wait_until(lambda: backends(source.state()) == {"default_blog_http"})


def test_watch_dropped_mid_stream_recovers_without_relist(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    relists = source.informers["Pod"].relists
    api.drop_watches()
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: "haproxy-c" in pod_names(source.state()))
    assert source.informers["Pod"].relists == relists  # resumed from its resourceVersion
    wait_until(lambda: api.open_watches() == WATCHED)


def test_gone_during_a_gap_relists_and_derives_deletions(
    api: FakeKubeAPI, source: KubernetesSource, changes: Changes
) -> None:
    api.stall_watches()
    api.apply(service("blog", expose=False))
    api.delete("Pod", "haproxy-system", "haproxy-a")
    api.compact()  # the gap's events are gone: watching from the old version is 410
    api.drop_watches()
    wait_until(lambda: pod_names(source.state()) == ["haproxy-b"])
    wait_until(lambda: backends(source.state()) == {"default_shop_http"})
    assert source.informers["Pod"].relists >= 2 and source.informers["Service"].relists >= 2
    assert changes.count >= 2


def test_a_relist_reports_the_keys_it_found_changed_deletions_included(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    """Each state carries the keys changed since the state before (its ChangeSet); after
    a 410 the relist's derived deletions are among them, and unchanged objects are not
    (they stay the very objects: the Computer's change index reads only these keys)."""
    first = source.state()
    seen: dict[tuple[str, str, str], object] = {}

    def gone() -> bool:
        state = source.state()
        assert state.changes is not None
        seen.update(state.changes.objects)
        return ("Pod", "haproxy-system", "haproxy-a") in seen and pod_names(state) == ["haproxy-b"]

    api.stall_watches()
    api.delete("Pod", "haproxy-system", "haproxy-a")
    api.apply(service("blog", load_balance="first"))
    api.compact()
    api.drop_watches()
    wait_until(gone)
    wait_until(lambda: gone() and ("Service", "default", "blog") in seen)
    assert seen[("Pod", "haproxy-system", "haproxy-a")] is None
    assert ("Service", "default", "shop") not in seen
    assert source.informers["Pod"].relists >= 2
    shop = [s for s in first.services if s.name == "shop"]
    assert shop and shop[0] in source.state().services
    assert any(s is shop[0] for s in source.state().services)


def test_the_computer_reads_the_informers_keys_instead_of_diffing(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    """An endpoint change arrives as its key in the next state's ChangeSet, which the
    Computer's change index places: no identity diff after the first state."""
    computer = Computer()
    first = computer.compute(source.state(), {})
    api.apply(endpoint_slice("shop", {"10.0.1.1": True, "10.0.1.3": True}))
    informer = source.informers["EndpointSlice"]

    def moved() -> bool:  # the cache, not state(): a state no one computes is unseen
        return any(
            e.addresses == ("10.0.1.3",) for s in informer.items().values() for e in s.endpoints
        )

    wait_until(moved)
    state = source.state()
    assert state.changes is not None
    assert ("EndpointSlice", "default", "shop-abc") in state.changes.objects
    result = computer.compute(state, first.assignment)
    assert computer._plans.index.diffed == 1
    assert computer.planned == 1
    assert result.workloads == compute(state, first.assignment).workloads


def test_a_kind_nothing_changed_in_is_handed_out_as_the_same_tuple(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    """The route computation compares its inputs by identity: a state whose Services did
    not change must hand out the Services tuple of the last state, or every route change
    in Kubernetes mode recomputes the route table from scratch (found in the route
    propagation benchmark at 10,000 routes). The kind that changed is a new tuple."""
    first = source.state()
    api.apply(endpoint_slice("shop", {"10.0.1.1": True, "10.0.1.4": True}))
    informer = source.informers["EndpointSlice"]
    wait_until(
        lambda: any(
            e.addresses == ("10.0.1.4",) for s in informer.items().values() for e in s.endpoints
        )
    )
    second = source.state()
    assert second.services is first.services
    assert second.haproxy_pods is first.haproxy_pods
    assert second.endpoint_slices is not first.endpoint_slices
    (slice_,) = second.endpoint_slices
    assert ("10.0.1.4",) in [e.addresses for e in slice_.endpoints]
    assert source.state().endpoint_slices is second.endpoint_slices


def test_a_relist_that_finds_nothing_different_hands_out_the_same_tuple(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    """A watch that expired (410) lists again; when the list finds the objects it had, the
    kind is unchanged for the computations that compare their inputs by identity."""
    first = source.state()
    relists = source.informers["Pod"].relists
    api.fail_next("Pod", 410)
    api.drop_watches()
    wait_until(lambda: source.informers["Pod"].relists == relists + 1)
    assert source.state().haproxy_pods is first.haproxy_pods


def test_gone_as_http_410_on_the_watch_request(api: FakeKubeAPI, source: KubernetesSource) -> None:
    relists = source.informers["Pod"].relists
    api.fail_next("Pod", 410)
    api.drop_watches()
    wait_until(lambda: source.informers["Pod"].relists == relists + 1)
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: "haproxy-c" in pod_names(source.state()))


def test_expired_continue_token_restarts_the_list(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    relists = source.informers["Service"].relists
    api.fail_next("Service", 410, match="continue=")  # page 2 of the next relist
    api.expire_watches()
    api.apply(service("news"))
    wait_until(lambda: "news" in [s.name for s in source.state().services])
    assert source.informers["Service"].relists == relists + 1
    pages = [p for m, p in api.requests if m == "GET" and p.startswith("/api/v1/services")]
    assert sum("continue=" not in p for p in pages) == 3  # initial, relist, restarted relist


def test_resource_version_follows_bookmarks(api: FakeKubeAPI, source: KubernetesSource) -> None:
    before = int(source.informers["Pod"].resource_version or 0)
    newer = int(api.apply(service("news"))["metadata"]["resourceVersion"])
    assert newer > before
    # No pod changed, yet the pod watch's resourceVersion moves on through BOOKMARKs, so a
    # reconnect after a compaction does not need a relist.
    wait_until(lambda: int(source.informers["Pod"].resource_version or 0) >= newer)
    relists = source.informers["Pod"].relists
    api.compact()
    api.drop_watches()
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: "haproxy-c" in pod_names(source.state()))
    assert source.informers["Pod"].relists == relists


def test_server_errors_are_retried_with_backoff(api: FakeKubeAPI, source: KubernetesSource) -> None:
    api.fail_next("Service", 500, count=3)
    api.drop_watches()
    api.apply(service("news"))
    wait_until(lambda: "news" in [s.name for s in source.state().services])
    wait_until(lambda: source.errors() == [])


def test_stalled_connection_recovers_within_the_socket_timeout(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    watches = api.watch_requests("Pod")
    api.stall_watches()
    started = time.monotonic()
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: "haproxy-c" in pod_names(source.state()), timeout=4.0)
    assert time.monotonic() - started < FAST.read_timeout + 1.5
    assert api.watch_requests("Pod") > watches


def test_relist_with_nothing_changed_does_not_notify(
    api: FakeKubeAPI, source: KubernetesSource, changes: Changes
) -> None:
    relists = source.informers["Service"].relists
    before = changes.count
    api.expire_watches()  # ERROR 410 on every open watch
    wait_until(
        lambda: (
            source.informers["Service"].relists > relists and source.informers["Pod"].relists > 1
        )
    )
    time.sleep(0.3)  # absence over a period: the other informers' relists notify nothing
    assert changes.count == before


def test_changes_the_model_ignores_do_not_notify(
    api: FakeKubeAPI, source: KubernetesSource, changes: Changes
) -> None:
    busy = pod("haproxy-a", "127.0.0.11")
    busy["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    api.apply(busy)
    api.apply(config_map("other-settings", load_balance="source"))
    api.apply(pod("haproxy-c", "127.0.0.13"))  # a change that matters, after the others
    wait_until(lambda: changes.count >= 1)
    time.sleep(0.2)  # absence over a period: no informer notifies the ignored changes late
    assert changes.count == 1


def test_unconvertible_object_is_reported_not_fatal(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    broken = service("broken")
    broken["spec"]["ports"] = [{"name": "http", "port": "eighty"}]
    api.apply(broken)
    wait_until(lambda: any("broken" in e for e in source.errors()))
    assert "broken" not in [s.name for s in source.state().services]
    api.delete("Service", "default", "broken")
    wait_until(lambda: source.errors() == [])


def test_stop_ends_the_threads_promptly(api: FakeKubeAPI) -> None:
    src = KubernetesSource(api_client(api.url), settings=SETTINGS, options=FAST, sync_timeout=5)
    src.start(Changes())
    before = {t.name for t in threading.enumerate() if t.name.startswith("informer-")}
    assert len(before) == WATCHED
    started = time.monotonic()
    src.stop()
    assert time.monotonic() - started < 1.0
    assert not [t for t in threading.enumerate() if t.name.startswith("informer-")]


def test_start_fails_when_the_api_never_answers(api: FakeKubeAPI) -> None:
    api.fail_next("Service", 503, count=1000)
    src = KubernetesSource(api_client(api.url), settings=None, options=FAST, sync_timeout=0.5)
    with pytest.raises(TimeoutError, match="services"):
        src.start(Changes())


def test_kubeconfig_file(api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(api.url, tmp_path / "kubeconfig")
    src = KubernetesSource(load_api_client(str(kubeconfig)), settings=SETTINGS, options=FAST)
    src.start(Changes())
    try:
        assert pod_names(src.state()) == ["haproxy-a", "haproxy-b"]
    finally:
        src.stop()


def test_bad_selector_is_refused(api: FakeKubeAPI) -> None:
    with pytest.raises(ValueError, match="selector"):
        KubernetesSource(api_client(api.url), settings=SETTINGS, haproxy_selector="tier in (a,b)")


def malformed_objects() -> list[dict[str, object]]:
    """Objects the API would never store, as a buggy or hostile API might serve them."""
    spec_list = service("spec-list")
    spec_list["spec"] = [1]
    ports_int = service("ports-int")
    ports_int["spec"]["ports"] = 5
    numeric_port = service("numeric-port")
    numeric_port["spec"]["ports"] = [{"name": "8080", "port": 8080}]
    status_int = pod("haproxy-status", "127.0.0.20")
    status_int["status"] = 5
    conditions_int = endpoint_slice("blog", {"10.0.1.9": True})
    conditions_int["endpoints"][0]["conditions"] = 5
    deep: object = "x"
    for _ in range(100):  # the API server's own decoder refuses far deeper JSON
        deep = [deep]
    deep_annotation = service("deep")
    deep_annotation["metadata"]["annotations"]["haproxy.org/hosts"] = deep
    return [spec_list, ports_int, numeric_port, status_int, conditions_int, deep_annotation]


MALFORMED_NAMES = ("spec-list", "ports-int", "numeric-port", "haproxy-status", "blog-abc", "deep")


def test_malformed_objects_in_the_watch_are_reported_and_the_watch_goes_on(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    for obj in malformed_objects():
        api.apply(obj)
    api.apply(service("news"))  # after the malformed ones, in the same watch streams
    api.apply(pod("haproxy-c", "127.0.0.13"))
    wait_until(lambda: "news" in [s.name for s in source.state().services])
    wait_until(lambda: "haproxy-c" in pod_names(source.state()))
    wait_until(lambda: all(any(n in e for e in source.errors()) for n in MALFORMED_NAMES))
    names = {s.name for s in source.state().services} | set(pod_names(source.state()))
    assert not names & set(MALFORMED_NAMES)
    assert [s.name for s in source.state().endpoint_slices] == ["shop-abc"]


def test_malformed_objects_in_the_initial_list_are_reported_and_skipped(
    api: FakeKubeAPI,
) -> None:
    for obj in malformed_objects():
        api.apply(obj)
    src = KubernetesSource(api_client(api.url), settings=SETTINGS, options=FAST, sync_timeout=5)
    src.start(Changes())
    try:
        assert [s.name for s in src.state().services] == ["blog", "internal", "shop"]
        assert pod_names(src.state()) == ["haproxy-a", "haproxy-b"]
        errors = src.errors()
        assert all(any(n in e for e in errors) for n in MALFORMED_NAMES), errors
        api.apply(service("news"))
        wait_until(lambda: "news" in [s.name for s in src.state().services])
    finally:
        src.stop()


def test_a_change_the_model_does_not_see_keeps_the_very_object(api: FakeKubeAPI) -> None:
    """A status write or a label the model does not read changes nothing: the informer
    keeps the object it had (compute keeps route outcomes by identity: with thousands of
    routes, the route status writer's own writes must not make them all new), and does
    not call on_change."""
    core = client.CoreV1Api(api_client(api.url))
    informer = Informer("services", core.list_service_for_all_namespaces, service_from, FAST)
    api.apply(service("shop"))
    changes: list[int] = []
    informer.start(lambda: changes.append(1))
    try:
        assert informer.wait_synced(5)
        held = informer.items()[("default", "shop")]
        count = len(informer.items())
        unread = service("shop")
        unread["metadata"]["labels"] = {"team": "web"}  # not in the model
        api.apply(unread)
        api.apply(service("news"))  # delivered after the label change
        wait_until(lambda: len(informer.items()) == count + 1)
        assert informer.items()[("default", "shop")] is held
        calls = len(changes)
        api.apply(service("shop", timeout_server="9s"))  # read by the model
        wait_until(lambda: informer.items()[("default", "shop")] is not held)
        wait_until(lambda: len(changes) > calls)
    finally:
        informer.stop()


def test_a_converter_failure_is_reported_and_never_stops_the_watch(api: FakeKubeAPI) -> None:
    def convert(raw: Mapping[str, Any]) -> str:
        name = str(raw["metadata"]["name"])
        if name.startswith("bug"):
            raise TypeError("a bug in a converter")
        return name

    core = client.CoreV1Api(api_client(api.url))
    informer: Informer[str] = Informer(
        "services", core.list_service_for_all_namespaces, convert, FAST
    )
    api.apply(service("bug-listed"))
    informer.start(lambda: None)
    try:
        assert informer.wait_synced(5)
        assert sorted(informer.items().values()) == ["blog", "internal", "shop"]
        api.apply(service("bug-watched"))
        api.apply(service("news"))
        wait_until(lambda: "news" in informer.items().values())
        assert informer.errors() == [
            "services default/bug-listed: unexpected TypeError converting the object",
            "services default/bug-watched: unexpected TypeError converting the object",
        ]
    finally:
        informer.stop()
