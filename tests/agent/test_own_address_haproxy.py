"""Gateways with addresses of their own on a real HAProxy (each installed version): on one
port, a listener bound to every address (`bind 0.0.0.0:P`) and listeners bound to one
address each (`bind A:P`, `bind B:P`) coexist, each address serves its own routes, and a
route change on one of them goes through the runtime API (its own map files).

nodeagent/config/listeners.py; controlplane/routes/addresses.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.config.changes import ApplyPath
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_routes_haproxy import Site, echo_servers, rule
from tests.helpers.haproxy_env import free_port, loopback_net, running_instance
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = pytest.mark.haproxy


@pytest.fixture
def wildcard_site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[tuple[Site, str]]:
    """A HAProxy whose agent binds every address (the DaemonSet's 0.0.0.0), on a loopback
    /24 of its own (`net`: .1 the pod, .21 and .22 two Gateways' addresses)."""
    net = loopback_net()
    with (
        echo_servers(net) as ends,
        running_instance(
            tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path, bind_address="0.0.0.0"
        ) as inst,
    ):
        port = free_port("0.0.0.0")
        yield Site(inst, ends, free_port(inst.ip), (port, port)), net


def listeners(port: int, net: str, on_first: str = "a") -> list[pb.HttpListener]:
    """Three listeners of one port: every address (what no Gateway's address matches) and
    two Gateways' own addresses, each with its own `PathPrefix /` (HTTPRouteMultipleGateways)."""
    return [
        pb.HttpListener(port=port, rules=[rule([], "c", "/")]),
        pb.HttpListener(port=port, address=f"{net}.21", rules=[rule([], on_first, "/")]),
        pb.HttpListener(port=port, address=f"{net}.22", rules=[rule([], "b", "/")]),
    ]


def served_at(site: Site, address: str) -> str:
    import http.client
    import json

    conn = http.client.HTTPConnection(address, site.ports[0], timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": "any.example.com"})
        reply = conn.getresponse()
        body = reply.read()
        return json.loads(body)["name"] if reply.status == 200 else str(reply.status)
    finally:
        conn.close()


def test_each_address_of_a_port_serves_its_own_routes(wildcard_site: tuple[Site, str]) -> None:
    site, net = wildcard_site
    port = site.ports[0]
    result = site.inst.applier.apply(site.snapshot(listeners(port, net), 1))
    assert result.ok, result.error
    config = Path(site.inst.config_path).read_text()
    assert f"  bind 0.0.0.0:{port}\n" in config
    assert f"  bind {net}.21:{port}\n" in config and f"  bind {net}.22:{port}\n" in config
    assert served_at(site, f"{net}.21") == "a"
    assert served_at(site, f"{net}.22") == "b"
    assert served_at(site, f"{net}.1") == "c"  # no Gateway's address: the shared frontend
    # A route change on one address: its own map, through the runtime API, no reload.
    before = site.inst.haproxy.show_proc()
    result = site.inst.applier.apply(site.snapshot(listeners(port, net, on_first="c"), 2))
    assert result.ok and result.kind is ApplyPath.RUNTIME, result
    assert served_at(site, f"{net}.21") == "c"
    assert served_at(site, f"{net}.22") == "b"
    assert site.inst.haproxy.show_proc().reloads == before.reloads
