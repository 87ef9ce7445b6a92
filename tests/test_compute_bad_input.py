"""Hostile and malformed input: rejected, reported once, never rendered."""

from __future__ import annotations

import pytest

from controlplane.compute import compute
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
KEYS = [
    "load-balance",
    "hash-type",
    "source-ip-persistence",
    "source-ip-persistence-size",
    "source-ip-persistence-expire",
    "server-slots",
]


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
    snap = result.snapshots[WORKLOAD].message()
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
    snap = compute(cluster(services=[svc], pods=DEFAULT_PODS), {}).snapshots[WORKLOAD].message()
    assert not snap.HasField("http_frontend")
    assert [w.key for w in snap.backends[0].warnings] == ["haproxy.org/hosts"]


@pytest.mark.parametrize("port", ["0", "65536", "-1", "80 81", "http", "5432\n"])
def test_hostile_tcp_ports_are_rejected(port: str) -> None:
    svc = service("s", annotations={"haproxy.org/tcp-port": port})
    snap = compute(cluster(services=[svc], pods=DEFAULT_PODS), {}).snapshots[WORKLOAD].message()
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
    snap = result.snapshots[WORKLOAD].message()
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
    (b,) = compute(state, {}).snapshots[WORKLOAD].message().backends
    assert [s.address for s in b.slots if s.enabled] == ["127.0.0.1"]
