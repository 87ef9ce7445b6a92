"""Unit tests: every rule of the computation (docs/design.md), one at a time, asserted on
the typed snapshots compute returns."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from controlplane.compute import (
    BackendSlots,
    BackendSpec,
    Computer,
    ComputeResult,
    WorkloadSnapshot,
    compute,
)
from controlplane.model import ClusterState, Pod
from controlplane.publish import content_hash, encode_one
from controlplane.settings.workloads import WorkloadScope
from nodeagent.config.render import RenderOptions, render
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    haproxy_pod,
    replica_set,
    service,
    settings,
)


def only_snapshot(state, previous=None) -> WorkloadSnapshot:  # type: ignore[no-untyped-def]
    result = compute(state, previous or {})
    assert list(result.workloads) == [WORKLOAD]
    return result.workloads[WORKLOAD]


def backend(snapshot: WorkloadSnapshot, name: str) -> BackendSpec:
    matches = [b for b in snapshot.backends if b.name == name]
    assert matches, f"no backend {name}"
    return matches[0]


def enabled(b: BackendSpec) -> list[tuple[int, str, int]]:
    return [(s.index, s.address, s.port) for s in b.slot_list() if s.enabled]


# ---------------------------------------------------------------- workloads and peers


def test_peers_are_every_live_pod_of_the_workload_sorted_by_name() -> None:
    pods = [
        haproxy_pod("haproxy-c", "127.0.1.3"),
        haproxy_pod("haproxy-a", "127.0.1.1"),
        haproxy_pod("haproxy-b", "127.0.1.2"),
        haproxy_pod("haproxy-pending", ""),
        haproxy_pod("haproxy-done", "127.0.1.9", phase="Succeeded"),
        haproxy_pod("haproxy-failed", "127.0.1.8", phase="Failed"),
    ]
    snap = only_snapshot(cluster(pods=pods))
    assert snap.peers.name == "localinstance"
    assert snap.peers.port == 10000
    assert [(p.name, p.address, p.port) for p in snap.peers.peers] == [
        ("haproxy-a", "127.0.1.1", 10000),
        ("haproxy-b", "127.0.1.2", 10000),
        ("haproxy-c", "127.0.1.3", 10000),
    ]


def test_a_terminating_pod_stays_in_its_peers_list_until_it_is_gone() -> None:
    """Regression: a pod being deleted was dropped from its own peers
    list while it still ran, so its HAProxy lost the peers section while draining."""
    pods = [
        haproxy_pod("haproxy-a", "127.0.1.1"),
        haproxy_pod("haproxy-leaving", "127.0.1.7", deleting=True),
        haproxy_pod("haproxy-leaving-no-ip", "", deleting=True),
    ]
    snap = only_snapshot(cluster(pods=pods))
    assert [(p.name, p.address) for p in snap.peers.peers] == [
        ("haproxy-a", "127.0.1.1"),
        ("haproxy-leaving", "127.0.1.7"),
    ]
    finished = [
        pods[0],
        haproxy_pod("haproxy-leaving", "127.0.1.7", phase="Succeeded", deleting=True),
    ]
    assert [p.name for p in only_snapshot(cluster(pods=finished)).peers.peers] == ["haproxy-a"]


def test_all_replicasets_of_a_deployment_are_one_workload() -> None:
    pods = [
        haproxy_pod("lb-old-1", "127.0.1.1", owner=("ReplicaSet", "lb-old")),
        haproxy_pod("lb-new-1", "127.0.1.2", owner=("ReplicaSet", "lb-new")),
        haproxy_pod("ds-1", "127.0.1.3", owner=("DaemonSet", "edge")),
        haproxy_pod("sts-0", "127.0.1.4", owner=("StatefulSet", "edge2")),
        haproxy_pod("bare-rs-1", "127.0.1.5", owner=("ReplicaSet", "bare")),
    ]
    rss = [replica_set("lb-old", "lb"), replica_set("lb-new", "lb")]
    result = compute(cluster(pods=pods, replica_sets=rss), {})
    assert sorted(result.workloads) == [
        "haproxy-system/DaemonSet/edge",
        "haproxy-system/Deployment/lb",
        "haproxy-system/ReplicaSet/bare",
        "haproxy-system/StatefulSet/edge2",
    ]
    lb = result.workloads["haproxy-system/Deployment/lb"]
    assert [p.name for p in lb.peers.peers] == ["lb-new-1", "lb-old-1"]
    assert result.pod_workloads["haproxy-system/lb-old-1"] == "haproxy-system/Deployment/lb"


def test_peer_port_comes_from_the_configmap() -> None:
    snap = only_snapshot(cluster(pods=DEFAULT_PODS, config=settings(**{"peer-port": "11000"})))
    assert snap.peers.port == 11000
    assert {p.port for p in snap.peers.peers} == {11000}


# ---------------------------------------------------------------- opt-in and annotations


def test_only_opted_in_services_are_served() -> None:
    services = [
        service("shop"),
        service("hidden", expose=False),
        service("off", expose=False, annotations={"haproxy.org/expose": "false"}),
        service("bare", expose=False, annotations={"expose": "true"}),
    ]
    snap = only_snapshot(cluster(services=services, pods=DEFAULT_PODS))
    assert [b.name for b in snap.backends] == ["default_bare_http", "default_shop_http"]


def test_prefixed_annotation_wins_over_bare() -> None:
    svc = service(
        "shop", annotations={"haproxy.org/load-balance": "leastconn", "load-balance": "first"}
    )
    snap = only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS))
    assert backend(snap, "default_shop_http").balance == "leastconn"


def test_service_then_configmap_then_default() -> None:
    config = settings(**{"load-balance": "static-rr", "source-ip-persistence": "true"})
    services = [
        service("a", annotations={"haproxy.org/load-balance": "first"}),
        service("b"),
    ]
    snap = only_snapshot(cluster(services=services, pods=DEFAULT_PODS, config=config))
    assert backend(snap, "default_a_http").balance == "first"
    assert backend(snap, "default_b_http").balance == "static-rr"
    assert backend(snap, "default_b_http").persistence is not None
    plain = only_snapshot(cluster(services=services, pods=DEFAULT_PODS))
    assert backend(plain, "default_b_http").balance == "roundrobin"
    assert backend(plain, "default_b_http").persistence is None


def test_workloads_annotation_limits_a_service() -> None:
    pods = [
        haproxy_pod("edge-1", "127.0.1.1", owner=("DaemonSet", "edge")),
        haproxy_pod("int-1", "127.0.1.2", owner=("DaemonSet", "internal")),
    ]
    services = [
        service("public"),
        service("private", annotations={"haproxy.org/workloads": "haproxy-system/internal"}),
    ]
    result = compute(cluster(services=services, pods=pods), {})
    edge = result.workloads["haproxy-system/DaemonSet/edge"]
    internal = result.workloads["haproxy-system/DaemonSet/internal"]
    assert [b.name for b in edge.backends] == ["default_public_http"]
    assert [b.name for b in internal.backends] == ["default_private_http", "default_public_http"]


def test_unreadable_workloads_limit_serves_the_service_nowhere() -> None:
    svc = service("private", annotations={"haproxy.org/workloads": "not a ref!"})
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS), {})
    assert list(result.workloads[WORKLOAD].backends) == []
    assert [r.key for r in result.rejections] == ["haproxy.org/workloads"]


# ---------------------------------------------------------------- settings values


@pytest.mark.parametrize(
    ("value", "algorithm", "argument"),
    [
        ("roundrobin", "roundrobin", ""),
        ("static-rr", "static-rr", ""),
        ("leastconn", "leastconn", ""),
        ("first", "first", ""),
        ("source", "source", ""),
        ("random", "random", ""),
        ("uri", "uri", ""),
        ("url_param userid", "url_param", "userid"),
        ("hdr(X-Tenant)", "hdr", "X-Tenant"),
    ],
)
def test_every_balance_algorithm(value: str, algorithm: str, argument: str) -> None:
    svc = service("s", annotations={"haproxy.org/load-balance": value})
    b = backend(only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS)), "default_s_http")
    assert (b.balance, b.balance_argument) == (algorithm, argument)
    assert not b.warnings


def test_http_only_algorithm_is_rejected_on_a_tcp_backend() -> None:
    svc = service(
        "db",
        ports=[("pg", 5432)],
        annotations={"haproxy.org/tcp-port": "5432", "haproxy.org/load-balance": "uri"},
    )
    b = backend(only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS)), "default_db_pg")
    assert b.mode == "tcp"
    assert b.balance == "roundrobin"
    assert [w.key for w in b.warnings] == ["haproxy.org/load-balance"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("map-based", "map-based"),
        ("consistent", "consistent"),
        ("consistent sdbm", "consistent sdbm"),
        ("consistent  djb2   avalanche", "consistent djb2 avalanche"),
        ("map-based avalanche", "map-based avalanche"),
    ],
)
def test_hash_type(value: str, expected: str) -> None:
    svc = service("s", annotations={"haproxy.org/hash-type": value})
    b = backend(only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS)), "default_s_http")
    assert b.hash_type == expected


@pytest.mark.parametrize(
    ("size", "entries"), [("1", 1), ("100k", 102400), ("1m", 1048576), ("1g", 1 << 30)]
)
@pytest.mark.parametrize(
    ("expire", "ms"),
    [
        ("500", 500),
        ("500ms", 500),
        ("30s", 30000),
        ("30m", 1800000),
        ("2h", 7200000),
        ("1d", 86400000),
    ],
)
def test_persistence_size_and_expire(size: str, entries: int, expire: str, ms: int) -> None:
    svc = service(
        "s",
        annotations={
            "haproxy.org/source-ip-persistence": "true",
            "haproxy.org/source-ip-persistence-size": size,
            "haproxy.org/source-ip-persistence-expire": expire,
        },
    )
    b = backend(only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS)), "default_s_http")
    assert (b.persistence.table_size, b.persistence.expire_ms) == (entries, ms)


def test_persistence_defaults_are_1m_entries_and_30_minutes() -> None:
    svc = service("s", annotations={"haproxy.org/source-ip-persistence": "true"})
    b = backend(only_snapshot(cluster(services=[svc], pods=DEFAULT_PODS)), "default_s_http")
    assert (b.persistence.table_size, b.persistence.expire_ms) == (1048576, 1800000)


# ---------------------------------------------------------------- endpoints and slots


def test_ready_endpoints_of_the_service_port_in_canonical_order() -> None:
    svc = service("s", ports=[("http", 80), ("admin", 9000)])
    slices = [
        endpoint_slice("s", ["127.0.0.10", "127.0.0.9", "127.0.0.100"], not_ready=["127.0.0.9"]),
        endpoint_slice("s", ["127.0.0.2"], port=9001, port_name="admin", name="s-admin"),
        endpoint_slice("other", ["127.0.0.50"]),
        endpoint_slice("s", ["::1"], name="s-v6", address_type="IPv6"),
    ]
    snap = only_snapshot(cluster(services=[svc], slices=slices, pods=DEFAULT_PODS))
    assert enabled(backend(snap, "default_s_http")) == [
        (1, "127.0.0.10", 8888),
        (2, "127.0.0.100", 8888),
        (3, "::1", 8888),
    ]
    assert enabled(backend(snap, "default_s_admin")) == [(1, "127.0.0.2", 9001)]


def test_free_slots_are_disabled_and_count_grows_in_steps() -> None:
    svc = service("s", annotations={"haproxy.org/server-slots": "4"})
    addresses = [f"127.0.0.{i}" for i in range(1, 6)]
    state = cluster(services=[svc], slices=[endpoint_slice("s", addresses)], pods=DEFAULT_PODS)
    b = backend(only_snapshot(state), "default_s_http")
    assert b.slots.count == 8
    assert [s.server_name for s in b.slot_list()] == [f"SRV_{i}" for i in range(1, 9)]
    assert [s.enabled for s in b.slot_list()] == [True] * 5 + [False] * 3
    assert all(s.address == "" and s.port == 0 for s in b.slot_list() if not s.enabled)


def test_default_slot_count_is_42() -> None:
    state = cluster(
        services=[service("s")], slices=[endpoint_slice("s", ["127.0.0.1"])], pods=DEFAULT_PODS
    )
    assert backend(only_snapshot(state), "default_s_http").slots.count == 42


def test_surviving_endpoints_keep_slots_and_new_ones_take_never_used_first() -> None:
    svc = service("s", annotations={"haproxy.org/server-slots": "4"})

    def state(addresses: list[str]):  # type: ignore[no-untyped-def]
        return cluster(services=[svc], slices=[endpoint_slice("s", addresses)], pods=DEFAULT_PODS)

    first = compute(state(["127.0.0.1", "127.0.0.2", "127.0.0.3"]), {})
    # .2 dies, .0 and .9 arrive: .0 sorts first and takes the never-used slot 4, .9 the
    # freed slot 2 (no persistence here, so a freed slot is eligible at once).
    second = compute(state(["127.0.0.0", "127.0.0.1", "127.0.0.3", "127.0.0.9"]), first.assignment)
    assert enabled(backend(second.workloads[WORKLOAD], "default_s_http")) == [
        (1, "127.0.0.1", 8888),
        (2, "127.0.0.9", 8888),
        (3, "127.0.0.3", 8888),
        (4, "127.0.0.0", 8888),
    ]
    # Scale down to one endpoint: the count never shrinks.
    third = compute(state(["127.0.0.3"]), second.assignment)
    b = backend(third.workloads[WORKLOAD], "default_s_http")
    assert enabled(b) == [(3, "127.0.0.3", 8888)]
    assert b.slots.count == 4
    # The Service disappears: its slots are remembered, all freed, for the fleet's
    # stick-table expire (30 minutes by default), then forgotten.
    gone = compute(cluster(pods=DEFAULT_PODS), third.assignment, now=100.0)
    kept = gone.assignment["default_s_http"]
    assert dict(kept.slots) == {} and kept.count == 4
    assert kept.freed_by[3] == ("127.0.0.3", 8888) and kept.freed[3] == 100.0
    later = compute(cluster(pods=DEFAULT_PODS), gone.assignment, now=100.0 + 30 * 60)
    assert "default_s_http" not in later.assignment


def test_a_service_recreated_within_the_expire_continues_its_slots() -> None:
    """Deleted and created again (a redeploy by a tool that deletes first): entries in
    the stick tables still name its slots, so its endpoints come back to their own and a
    new one avoids the slots that may still be named."""
    notes = {"haproxy.org/source-ip-persistence": "true"}

    def state(addresses: list[str] | None) -> ClusterState:
        if addresses is None:
            return cluster(pods=DEFAULT_PODS)
        svc = service("s", annotations=notes)
        return cluster(services=[svc], slices=[endpoint_slice("s", addresses)], pods=DEFAULT_PODS)

    computer = Computer()
    first = computer.compute(state(["127.0.0.3", "127.0.0.1", "127.0.0.2"]), {}, now=0.0)
    moved = computer.compute(
        state(["127.0.0.1", "127.0.0.3", "127.0.0.9"]), first.assignment, now=1.0
    )
    slots = dict(moved.assignment["default_s_http"].slots)
    assert slots == {("127.0.0.1", 8888): 1, ("127.0.0.3", 8888): 3, ("127.0.0.9", 8888): 4}
    gone = computer.compute(state(None), moved.assignment, now=2.0)
    back = computer.compute(
        state(["127.0.0.3", "127.0.0.1", "127.0.0.7"]), gone.assignment, now=3.0
    )
    fresh = compute(state(["127.0.0.3", "127.0.0.1", "127.0.0.7"]), gone.assignment, now=3.0)
    assert back.assignment == fresh.assignment
    again = dict(back.assignment["default_s_http"].slots)
    # .1 and .3 take their own slots; .7 takes no slot freed within the expire (2 and 4).
    assert again == {("127.0.0.1", 8888): 1, ("127.0.0.3", 8888): 3, ("127.0.0.7", 8888): 5}


def test_slot_count_never_shrinks_even_when_the_step_does() -> None:
    previous = {
        "default_s_http": BackendSlots(count=84, slots=MappingProxyType({("127.0.0.1", 8888): 70}))
    }
    state = cluster(
        services=[service("s")], slices=[endpoint_slice("s", ["127.0.0.1"])], pods=DEFAULT_PODS
    )
    b = backend(only_snapshot(state, previous), "default_s_http")
    assert b.slots.count == 84
    assert enabled(b) == [(70, "127.0.0.1", 8888)]


# ---------------------------------------------------------------- frontends


def test_hosts_route_from_one_http_frontend_and_tcp_ports_get_their_own() -> None:
    services = [
        service("shop", annotations={"haproxy.org/hosts": "Shop.Example.com, b.example.com"}),
        service("db", ports=[("pg", 5432)], annotations={"tcp-port": "15432"}),
    ]
    snap = only_snapshot(
        cluster(services=services, pods=DEFAULT_PODS, config=settings(**{"http-port": "8080"}))
    )
    assert snap.http_frontend.port == 8080
    assert [(r.host, r.backend) for r in snap.http_frontend.routes] == [
        ("b.example.com", "default_shop_http"),
        ("shop.example.com", "default_shop_http"),
    ]
    assert [(f.port, f.backend) for f in snap.tcp_frontends] == [(15432, "default_db_pg")]
    assert backend(snap, "default_db_pg").mode == "tcp"
    assert backend(snap, "default_shop_http").mode == "http"


def test_no_http_frontend_without_hosts() -> None:
    snap = only_snapshot(cluster(services=[service("s")], pods=DEFAULT_PODS))
    assert snap.http_frontend is None


def test_the_older_service_keeps_a_contested_host_and_port() -> None:
    services = [
        service(
            "young",
            created="2026-05-01T00:00:00Z",
            annotations={"haproxy.org/hosts": "a.example.com"},
        ),
        service(
            "old",
            created="2026-01-01T00:00:00Z",
            annotations={"haproxy.org/hosts": "a.example.com"},
        ),
        service(
            "db2",
            created="2026-05-01T00:00:00Z",
            ports=[("pg", 1)],
            annotations={"haproxy.org/tcp-port": "5432"},
        ),
        service(
            "db1",
            created="2026-01-01T00:00:00Z",
            ports=[("pg", 1)],
            annotations={"haproxy.org/tcp-port": "5432"},
        ),
    ]
    result = compute(cluster(services=services, pods=DEFAULT_PODS), {})
    snap = result.workloads[WORKLOAD]
    assert [(r.host, r.backend) for r in snap.http_frontend.routes] == [
        ("a.example.com", "default_old_http")
    ]
    assert [(f.port, f.backend) for f in snap.tcp_frontends] == [(5432, "default_db1_pg")]
    young = backend(snap, "default_young_http")
    assert [(w.key, w.value) for w in young.warnings] == [("haproxy.org/hosts", "a.example.com")]
    assert "default_old_http" in young.warnings[0].reason
    assert [w.key for w in backend(snap, "default_db2_pg").warnings] == ["haproxy.org/tcp-port"]
    assert {r.name for r in result.rejections} == {"young", "db2"}


def test_tcp_port_may_not_take_the_http_or_peer_port() -> None:
    services = [
        service("a", ports=[("t", 1)], annotations={"haproxy.org/tcp-port": "80"}),
        service("b", ports=[("t", 1)], annotations={"haproxy.org/tcp-port": "10000"}),
    ]
    snap = only_snapshot(cluster(services=services, pods=DEFAULT_PODS))
    assert list(snap.tcp_frontends) == []
    assert len(backend(snap, "default_a_t").warnings) == 1
    assert len(backend(snap, "default_b_t").warnings) == 1


# ---------------------------------------------------------------- versions and hashes


def test_content_hash_is_sha256_of_content_without_version() -> None:
    state = cluster(
        services=[service("s")], slices=[endpoint_slice("s", ["127.0.0.1"])], pods=DEFAULT_PODS
    )
    snap = encode_one(only_snapshot(state)).message()
    assert len(snap.content_hash) == 64
    assert content_hash(snap) == snap.content_hash
    bumped = pb.Snapshot()
    bumped.CopyFrom(snap)
    bumped.version = 99
    assert content_hash(bumped) == snap.content_hash
    changed = encode_one(
        only_snapshot(
            cluster(
                services=[service("s")],
                slices=[endpoint_slice("s", ["127.0.0.2"])],
                pods=DEFAULT_PODS,
            )
        )
    )
    assert changed.content_hash != snap.content_hash


# ---------------------------------------------------------------- which pods are workloads


def bare_pod(name: str, ip: str, namespace: str = "default") -> Pod:
    """A labelled pod with no controller: anyone allowed to create a pod can make one."""
    return Pod(namespace=namespace, name=name, ip=ip, phase="Running", owner=None)


def refused_pods(result: ComputeResult) -> dict[str, str]:
    """namespace/pod -> reason of every refused HAProxy pod."""
    return {
        f"{r.namespace}/{r.name}": r.reason
        for r in result.rejections
        if r.kind == "Pod" and r.key == "metadata.ownerReferences"
    }


def test_only_allowed_namespaces_and_owner_kinds_are_workloads() -> None:
    pods = [
        *DEFAULT_PODS,
        haproxy_pod("lb-1", "127.0.1.3", owner=("ReplicaSet", "lb-7d9f")),
        haproxy_pod("sts-0", "127.0.1.4", owner=("StatefulSet", "edge")),
        haproxy_pod("tenant-1", "127.0.1.5", namespace="tenant"),
        bare_pod("stray", "127.0.1.6", namespace="haproxy-system"),
    ]
    scope = WorkloadScope(frozenset({"haproxy-system"}), frozenset({"DaemonSet", "Deployment"}))
    state = cluster(services=[service("s")], pods=pods, replica_sets=[replica_set("lb-7d9f", "lb")])
    result = compute(state, {}, scope)
    assert sorted(result.workloads) == [WORKLOAD, "haproxy-system/Deployment/lb"]
    refused = refused_pods(result)
    assert sorted(refused) == ["haproxy-system/stray", "haproxy-system/sts-0", "tenant/tenant-1"]
    assert "namespace" in refused["tenant/tenant-1"]
    assert "kind StatefulSet" in refused["haproxy-system/sts-0"]
    assert "kind Pod" in refused["haproxy-system/stray"]
    assert sorted(result.pod_workloads) == [
        "haproxy-system/haproxy-a",
        "haproxy-system/haproxy-b",
        "haproxy-system/lb-1",
    ]


def test_bare_labelled_pods_are_not_workloads_by_default() -> None:
    """Regression: 400 bare labelled pods made 400 extra snapshots of every Service."""
    pods = [*DEFAULT_PODS, *(bare_pod(f"stray-{i}", f"127.0.3.{i % 250}") for i in range(400))]
    state = cluster(services=[service("s")], slices=[endpoint_slice("s", ["127.0.0.1"])], pods=pods)
    result = compute(state, {})
    assert list(result.workloads) == [WORKLOAD]
    assert len(refused_pods(result)) == 400
    assert not any(r.kind == "Pod" for w in result.workloads.values() for r in w.warnings)


def test_workloads_past_the_limit_are_refused_the_same_way_whatever_the_order() -> None:
    pods = [
        haproxy_pod(f"{name}-1", f"127.0.1.{i}", owner=("DaemonSet", name))
        for i, name in enumerate(["c", "a", "d", "b"], start=1)
    ]
    scope = WorkloadScope(max_workloads=2)
    first = compute(cluster(pods=pods), {}, scope)
    again = compute(cluster(pods=list(reversed(pods))), {}, scope)
    kept = ["haproxy-system/DaemonSet/a", "haproxy-system/DaemonSet/b"]
    assert sorted(first.workloads) == sorted(again.workloads) == kept
    assert first.rejections == again.rejections
    refused = refused_pods(first)
    assert sorted(refused) == ["haproxy-system/c-1", "haproxy-system/d-1"]
    assert all("more than 2 HAProxy workloads" in reason for reason in refused.values())


@pytest.mark.parametrize(
    ("owner", "namespace"),
    [
        (("DaemonSet", "bad name"), "haproxy-system"),
        (("DaemonSet", "bad\nname"), "haproxy-system"),
        (("Daemon Set", "haproxy2"), "haproxy-system"),
        (("DaemonSet", "d" * 253), "n" * 63),  # valid Kubernetes names, key of 328 characters
    ],
)
def test_a_workload_name_the_agent_refuses_is_skipped_and_reported(
    owner: tuple[str, str], namespace: str
) -> None:
    """Regression: such a workload got a snapshot every agent of it refused."""
    odd = haproxy_pod("odd-1", "127.0.1.9", owner=owner, namespace=namespace)
    state = cluster(services=[service("s")], pods=[*DEFAULT_PODS, odd])
    result = compute(state, {})
    assert list(result.workloads) == [WORKLOAD]
    refused = refused_pods(result)
    assert list(refused) == [f"{namespace}/odd-1"]
    assert "workload name" in refused[f"{namespace}/odd-1"]
    (rejection,) = [r for r in result.rejections if r.kind == "Pod"]
    assert "\n" not in rejection.value and len(rejection.value) <= 123
    render(encode_one(result.workloads[WORKLOAD]).message(), RenderOptions(pod_name="haproxy-a"))
