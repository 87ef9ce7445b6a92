"""Hostile and malformed input: rejected, reported once, never rendered."""

from __future__ import annotations

import pytest

from controlplane.compute import compute
from controlplane.publish import encode_one
from controlplane.settings.table import SETTINGS
from controlplane.settings.values import MAX_HOSTS
from nodeagent.config.render import RenderOptions, render
from peerplane import limits
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service

HOSTILE = [
    "roundrobin\n  server evil 10.0.0.1:80",
    "source # comment",
    "leastconn extra",
    "url_param a b",
    "hdr(Host\nX)",
    "hdr(X\n)",
    "99999999999999999999999",
    "-5s",
    "1e9",
    "round\x00robin",
    "ro\u0301undrobin",
    "\udcff\udcfe",
    "",
    " ",
    "consistent sdbm avalanche avalanche",
    "1m\nbackend x",
    "tru",
    "9999999999999d",
]
# Every backend-wide setting (read from a Service, then the ConfigMap): the table's rows.
KEYS = [row.key for row in SETTINGS if row.scope == "both"]


def all_text(snapshot) -> str:  # type: ignore[no-untyped-def]
    """Every string of the snapshot except warnings (those quote the input on purpose)."""
    copy = type(snapshot)()
    copy.CopyFrom(snapshot)
    copy.ClearField("warnings")
    for b in copy.backends:
        b.ClearField("warnings")
    return str(copy)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_are_rejected_once_and_never_rendered(key: str, value: str) -> None:
    svc = service("s", annotations={f"haproxy.org/{key}": value})
    state = cluster(services=[svc], slices=[endpoint_slice("s", ["127.0.0.1"])], pods=DEFAULT_PODS)
    result = compute(state, {})
    snap = encode_one(result.workloads[WORKLOAD]).message()  # end to end: the bytes
    (b,) = snap.backends
    assert len(b.warnings) == 1, b.warnings
    warning = b.warnings[0]
    assert (warning.object, warning.key) == ("Service default/s", f"haproxy.org/{key}")
    assert warning.reason
    assert "\n" not in warning.value and len(warning.value) <= 130
    assert len(result.rejections) == 1
    text = all_text(snap)
    for fragment in ("evil", "comment", "backend x", "\\000"):
        assert fragment not in text


@pytest.mark.parametrize(
    "hosts",
    [
        "a.example.com\nbackend x",
        "a.example.com\n\n,b\n.com",
        "a b",
        "a.example.com#",
        "-bad.example.com",
        "x" * 300,
    ],
)
def test_hostile_hosts_are_rejected(hosts: str) -> None:
    svc = service("s", annotations={"haproxy.org/hosts": hosts})
    snap = compute(cluster(services=[svc], pods=DEFAULT_PODS), {}).workloads[WORKLOAD]
    assert snap.http_frontend is None
    assert [w.key for w in snap.backends[0].warnings] == ["haproxy.org/hosts"]


@pytest.mark.parametrize("port", ["0", "65536", "-1", "80 81", "http", "5432\n"])
def test_hostile_tcp_ports_are_rejected(port: str) -> None:
    svc = service("s", annotations={"haproxy.org/tcp-port": port})
    snap = compute(cluster(services=[svc], pods=DEFAULT_PODS), {}).workloads[WORKLOAD]
    if port == "5432\n":  # surrounding whitespace is tolerated, the value is a port
        assert [f.port for f in snap.tcp_frontends] == [5432]
        return
    assert list(snap.tcp_frontends) == []
    assert [w.key for w in snap.backends[0].warnings] == ["haproxy.org/tcp-port"]


def test_hostile_names_never_become_backends_or_peers() -> None:
    from tests.helpers.builders import haproxy_pod

    services = [
        service("bad name"),
        service("trailing\n"),
        service("ok", ports=[("bad port\n", 80), ("http\n", 82), ("http", 81)]),
    ]
    pods = [*DEFAULT_PODS, haproxy_pod("evil\npeer", "127.0.1.9")]
    result = compute(cluster(services=services, pods=pods), {})
    snap = result.workloads[WORKLOAD]
    assert [b.name for b in snap.backends] == ["default_ok_http"]
    assert [p.name for p in snap.peers.peers] == ["haproxy-a", "haproxy-b"]
    assert {(r.kind, r.key) for r in result.rejections} == {
        ("Service", "metadata.name"),
        ("Service", "spec.ports"),
        ("Pod", "metadata.name"),
    }


def test_endpoint_addresses_that_are_not_ips_are_ignored() -> None:
    state = cluster(
        services=[service("s")],
        slices=[endpoint_slice("s", ["127.0.0.1", "evil\nhost", "999.1.1.1"])],
        pods=DEFAULT_PODS,
    )
    (b,) = compute(state, {}).workloads[WORKLOAD].backends
    assert [s.address for s in b.slot_list() if s.enabled] == ["127.0.0.1"]


def test_hosts_past_the_limit_lose_the_tail_not_every_host() -> None:
    """Regression: 101 hosts used to reject the annotation and route no host at all."""
    listed = [f"h{i:03d}.example.com" for i in range(150, 0, -1)]  # written in reverse order
    svc = service("s", annotations={"haproxy.org/hosts": ",".join([*listed, listed[0]])})
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS), {})
    snap = result.workloads[WORKLOAD]
    assert [r.host for r in snap.http_frontend.routes] == sorted(listed[:MAX_HOSTS])
    (warning,) = snap.backends[0].warnings
    assert warning.key == "haproxy.org/hosts"
    assert warning.reason == (
        f"more than {MAX_HOSTS} hosts: the first {MAX_HOSTS} listed are served, these 50 are not"
    )
    assert warning.value.startswith(f"{listed[MAX_HOSTS]},{listed[MAX_HOSTS + 1]},")
    assert [(r.kind, r.key) for r in result.rejections] == [("Service", "haproxy.org/hosts")]


def test_exactly_the_limit_of_hosts_is_served_without_warning() -> None:
    hosts = ",".join(f"h{i}.example.com" for i in range(MAX_HOSTS))
    svc = service("s", annotations={"haproxy.org/hosts": hosts})
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS), {})
    snap = result.workloads[WORKLOAD]
    assert len(snap.http_frontend.routes) == MAX_HOSTS
    assert not result.rejections


def test_longest_kubernetes_names_make_a_backend_the_agent_renders() -> None:
    """Regression: 63 + 63 + a 15-character port name give a 143-character backend
    name; the agent refused it, and with it the whole workload's snapshot."""
    namespace, name, port = "n" * 63, "s" * 63, "p" * 15
    svc = service(name, namespace=namespace, ports=[(port, 80)])
    slices = [endpoint_slice(name, ["127.0.0.1"], port_name=port, namespace=namespace)]
    result = compute(cluster(services=[svc], slices=slices, pods=DEFAULT_PODS), {})
    assert not result.rejections
    snap = encode_one(result.workloads[WORKLOAD]).message()
    (b,) = snap.backends
    assert len(b.name) == 143 and limits.is_proxy_name(b.name)
    assert f"backend {b.name}\n" in render(snap, RenderOptions(pod_name="haproxy-a"))


@pytest.mark.parametrize("port", [("http", 80), ("", 65535), ("p" * 15, 1)])
def test_every_backend_name_compute_builds_fits_the_agent(port: tuple[str, int]) -> None:
    """Names valid for Kubernetes can never exceed the shared limit, so compute's guard
    (`plan._backend_names_fit`) refuses nothing Kubernetes accepts."""
    svc = service("s" * 63, namespace="n" * 63, ports=[port])
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS), {})
    (b,) = result.workloads[WORKLOAD].backends
    assert len(b.name) <= limits.MAX_PROXY_NAME and limits.is_proxy_name(b.name)
