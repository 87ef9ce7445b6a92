"""Version-dependent keywords on real HAProxy: `srvkey addr` (2.4+) keeps a replicated
stick entry on the client's pod although two instances' slots disagree; `hash-key
addr-port` (3.0+) makes consistent hashing agree whatever slot a pod holds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.config.render import RenderOptions, render
from nodeagent.haproxy import version
from nodeagent.haproxy.driver import validate
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import http_get, table_entries
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    identity_server,
    loopback_net,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

HOST = "shop.example.com"
BACKEND = "default_shop_http"
PODS = ("pod-11", "pod-12", "pod-13")
# The two instances' slot orders disagree on every slot (as two instances that computed
# slots on their own after different histories would).
ORDER = {"a": ("pod-11", "pod-12", "pod-13"), "b": ("pod-13", "pod-11", "pod-12")}


@contextlib.contextmanager
def pods(net: str) -> Iterator[dict[str, tuple[str, int]]]:
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
        identity_server(f"{net}.13", "pod-13") as p13,
    ):
        yield {
            "pod-11": (f"{net}.11", p11),
            "pod-12": (f"{net}.12", p12),
            "pod-13": (f"{net}.13", p13),
        }


@contextlib.contextmanager
def two_instances(
    tmp: Path, net: str, haproxy_bin: HAProxyBinary, serving: version.Version | None
) -> Iterator[dict[str, Instance]]:
    with (
        running_instance(tmp / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as a,
        running_instance(tmp / "b", f"{net}.2", "pod-b", binary=haproxy_bin.path) as b,
    ):
        for inst in (a, b):
            inst.applier.options = replace(inst.applier.options, haproxy_version=serving)
        yield {"a": a, "b": b}


def instance_snapshot(
    where: str,
    net: str,
    endpoints: dict[str, tuple[str, int]],
    ports: tuple[int, int],
    **kw: object,
) -> pb.Snapshot:
    peers = [("pod-a", f"{net}.1", ports[0]), ("pod-b", f"{net}.2", ports[0])]
    ordered = [endpoints[name] for name in ORDER[where]]
    b = backend(BACKEND, ordered, **kw)  # type: ignore[arg-type]
    return snapshot(peers, [b], http_port=ports[1], routes=[(HOST, BACKEND)])


@pytest.mark.parametrize("srvkey", [True, False], ids=["srvkey-addr", "server-id"])
def test_srvkey_addr_entry_leads_to_the_same_pod_on_another_instance(
    tmp_path: Path, haproxy_bin: HAProxyBinary, srvkey: bool
) -> None:
    net = loopback_net()
    ports = (free_port(f"{net}.1"), free_port(f"{net}.1"))
    serving = haproxy_bin.version_tuple[:2] if srvkey else None
    clients = [f"{net}.{100 + i}" for i in range(30)]
    with pods(net) as endpoints, two_instances(tmp_path, net, haproxy_bin, serving) as inst:
        for where, i in inst.items():
            result = i.applier.apply(
                instance_snapshot(where, net, endpoints, ports, balance="roundrobin")
            )
            assert result.ok, result.error
        cfg = Path(inst["a"].config_path).read_text()
        assert (" srvkey addr " in cfg) is srvkey
        # Clients land on instance a, which writes their entries; peers replicate them.
        on_a = {c: http_get(f"{net}.1", HOST, source=c, port=ports[1]) for c in clients}
        assert set(on_a.values()) == set(PODS)

        def replicated() -> bool:
            rows = table_entries(inst["b"].haproxy.runtime(f"show table {BACKEND}"))
            return set(clients) <= set(rows)

        wait_until(replicated, 10, "entries replicated to instance b")
        # Instance a dies: the clients' next requests land on instance b.
        on_b = {c: http_get(f"{net}.2", HOST, source=c, port=ports[1]) for c in clients}
    same = sum(on_a[c] == on_b[c] for c in clients)
    print(
        f"\nHAProxy {haproxy_bin.version}, {'srvkey addr' if srvkey else 'server id'}: "
        f"{same}/{len(clients)} clients on the same pod through the other instance"
    )
    if srvkey:
        assert same == len(clients)
    else:
        assert same == 0  # the orders disagree on every slot: the id names another pod


def test_hash_key_addr_port_by_version(tmp_path: Path, haproxy_bin: HAProxyBinary) -> None:
    """3.0+: with `hash-key addr-port`, consistent hashing sends a client to the same pod
    on two instances whose slots disagree. Older versions refuse the keyword, so the
    renderer leaves it out for them."""
    serving = haproxy_bin.version_tuple[:2]
    kw: dict[str, object] = {"balance": "source", "hash_type": "consistent", "persistence": False}
    net = loopback_net()
    ports = (free_port(f"{net}.1"), free_port(f"{net}.1"))
    with pods(net) as endpoints:
        snap = instance_snapshot("a", net, endpoints, ports, **kw)
        forced = render(snap, RenderOptions("pod-a", haproxy_version=(3, 0)))
        if not version.hash_key_addr_port(serving):
            cfg = render(snap, RenderOptions("pod-a", haproxy_version=serving))
            assert "hash-key" not in cfg
            error = validate(forced, haproxy_bin.path)
            assert error is not None and "hash-key" in error
            return
        assert validate(forced, haproxy_bin.path) is None
        clients = [f"{net}.{100 + i}" for i in range(30)]
        with two_instances(tmp_path, net, haproxy_bin, serving) as inst:
            for where, i in inst.items():
                result = i.applier.apply(instance_snapshot(where, net, endpoints, ports, **kw))
                assert result.ok, result.error
            assert " hash-key addr-port" in Path(inst["b"].config_path).read_text()
            got = {
                where: {c: http_get(i.ip, HOST, source=c, port=ports[1]) for c in clients}
                for where, i in inst.items()
            }
    same = sum(got["a"][c] == got["b"][c] for c in clients)
    print(f"\nHAProxy {haproxy_bin.version}, hash-key addr-port: {same}/{len(clients)} agree")
    assert len(set(got["a"].values())) > 1
    assert same == len(clients)


def test_rendered_config_is_accepted_by_each_version(haproxy_bin: HAProxyBinary) -> None:
    """Everything version-dependent and every check form, through `haproxy -c`."""
    serving = haproxy_bin.version_tuple[:2]
    http = backend(BACKEND, [("10.244.0.32", 8888)], hash_type="consistent sdbm")
    http.check.CopyFrom(pb.HealthCheck(interval_ms=500, rise=2, fall=3, http_path="/healthz?x=1"))
    tcp = backend("default_db_5432", [("fd00::12", 5432)], mode="tcp", balance="roundrobin")
    tcp.check.CopyFrom(pb.HealthCheck(interval_ms=2000, rise=1, fall=100))
    snap = snapshot(
        [("pod-a", "10.244.0.5", 10000)],
        [http, tcp],
        http_port=8080,
        routes=[(HOST, BACKEND)],
        tcp=[(5432, "default_db_5432")],
    )
    cfg = render(snap, RenderOptions("pod-a", bind_address="127.0.10.1", haproxy_version=serving))
    assert "srvkey addr" in cfg
    assert ("hash-key addr-port" in cfg) is (serving >= (3, 0))
    assert "  option httpchk GET /healthz?x=1\n  http-check expect status 200-399\n" in cfg
    assert validate(cfg, haproxy_bin.path) is None
    assert version.probe(haproxy_bin.path) == serving
