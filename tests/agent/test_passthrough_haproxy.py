"""TLS passthrough, TCP frontends and the PROXY protocol on a real HAProxy (each installed
version): connections routed by SNI to backends that terminate TLS themselves (the
client gets the backend's own certificate), wildcards with label-boundary semantics,
unknown names closed, SNI routes changed through the runtime API without a reload, and
the client address of a PROXY v2 header keying the stick tables.

nodeagent/config/passthrough.py."""

from __future__ import annotations

import random
import re
import socket
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent.config.changes import ApplyPath
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    identity_server,
    running_instance,
)
from tests.helpers.haproxy_env import snapshot as make_snapshot
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.tls_backends import client_context, proxy_v2, tls_hello, tls_servers
from tests.helpers.tls_certs import TestCA, make_ca

pytestmark = pytest.mark.haproxy

A, B, C = "a.example.com", "b.example.com", "c.w.example.com"
_TABLE_ENTRY = re.compile(r"key=(\S+) .*server_id=(\d+)")


@dataclass
class Edge:
    """One agent-managed HAProxy before TLS backends `ns_a_443` (two pods presenting A's
    certificate), `ns_b_443` (B) and `ns_c_443` (C), each its own loopback address."""

    net: str
    inst: Instance
    ca: TestCA
    ends: dict[str, tuple[str, int]]
    peer_port: int
    ports: tuple[int, int, int]  # passthrough, TCP, HTTP

    def snapshot(
        self,
        version: int,
        routes: list[tuple[list[str], str | list[tuple[str, int]]]],
        extra: list[pb.TlsPassthroughListener] = (),  # type: ignore[assignment]
        accept_proxy: bool = False,
        http: list[tuple[str, int]] | None = None,
    ) -> pb.Snapshot:
        pods = {"a": ["a", "a2"], "b": ["b"], "c": ["c"]}
        backends = [
            backend(f"ns_{n}_443", [self.ends[p] for p in pods[n]], mode="tcp") for n in pods
        ]
        if http is not None:
            backends.append(backend("ns_h_80", http))
        snap = make_snapshot(
            [("pod-a", self.inst.ip, self.peer_port)],
            backends,
            tcp=[(self.ports[1], "ns_a_443")],
            version=version,
        )
        snap.tcp_frontends[0].source = "TCPRoute ns/db rule 0"
        snap.tcp_frontends[0].accept_proxy = accept_proxy
        listener = snap.tls_listeners.add(port=self.ports[0], accept_proxy=accept_proxy)
        for hosts, to in routes:
            r = listener.routes.add(source=f"TLSRoute ns/{hosts} rule 0", hostnames=hosts)
            for name, weight in [(to, 1)] if isinstance(to, str) else to:
                r.backends.add(backend=f"ns_{name}_443" if name else "", weight=weight)
        snap.tls_listeners.extend(extra)
        if http is not None:
            rule = pb.RouteRule(source="HTTPRoute ns/h rule 0")
            rule.backends.add(backend="ns_h_80", weight=1)
            snap.http_listeners.add(port=self.ports[2], rules=[rule], accept_proxy=accept_proxy)
        return snap

    def hello(self, sni: str | None, port: int | None = None, **kw: object) -> str:
        """The CN of the certificate the client got and the pod that sent it, or closed."""
        got = tls_hello(
            client_context(self.ca),
            (self.inst.ip, port or self.ports[0]),
            sni,
            **kw,  # type: ignore[arg-type]
        )
        return "closed" if got is None else f"{got[0]} {got[1]}"

    def table(self, backend: str) -> dict[str, int]:
        """The stick table of `backend`: client address -> server id."""
        reply = self.inst.haproxy.runtime(f"show table {backend}")
        return {m.group(1): int(m.group(2)) for m in _TABLE_ENTRY.finditer(reply)}


@pytest.fixture
def edge(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Edge]:
    net = f"127.63.{random.randint(1, 250)}"
    ca = make_ca()
    leaves = {"a": ca.issue(A), "b": ca.issue(B), "c": ca.issue(C, "*.w.example.com")}
    pods = {"a": "a", "a2": "a", "b": "b", "c": "c"}
    servers = {p: (f"{net}.{11 + i}", leaves[leaf]) for i, (p, leaf) in enumerate(pods.items())}
    with (
        tls_servers(servers) as ends,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        ports = (free_port(inst.ip), free_port(inst.ip), free_port(inst.ip))
        yield Edge(net, inst, ca, ends, free_port(inst.ip), ports)


ROUTES = [([A], "a"), ([B], "b"), (["*.w.example.com"], "c")]


def test_passthrough_by_sni_and_routes_changed_at_runtime(edge: Edge) -> None:
    inst = edge.inst
    result = inst.applier.apply(edge.snapshot(1, ROUTES))
    assert result.ok, result.error
    table = [
        (A, A),
        (B, B),
        ("A.Example.COM", A),  # SNI case ignored
        ("x.w.example.com", C),  # wildcard, one label
        ("y.x.w.example.com", C),  # two labels
        ("w.example.com", "closed"),  # never the bare suffix
        ("other.org", "closed"),
        (None, "closed"),  # no SNI, no route for any name
    ]
    got = [(sni, edge.hello(sni).split(" ")[0]) for sni, _ in table]
    assert got == table
    # Not TLS at all: closed without a byte.
    with socket.create_connection((inst.ip, edge.ports[0]), 5) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert plain.recv(100) == b""
    # The TCPRoute-style frontend: any TLS (or none) goes to ns_a_443 untouched.
    assert edge.hello("whatever.org", port=edge.ports[1]).startswith(A)
    before = inst.haproxy.show_proc()
    steps = [
        ([([A], "b"), ([B], "b"), (["*.w.example.com"], "c")], {A: B}),  # re-pointed
        ([([A], "b"), (["*.w.example.com"], "c"), (["d.example.com"], "c")], {B: "closed"}),
        ([([A], "b"), (["*.example.com"], "c")], {"d.example.com": C, "x.w.example.com": C}),
        ([([A], "a"), ([], "b")], {"any.org": B, None: B, A: A}),  # a route for any name
    ]
    for version, (routes, want) in enumerate(steps, start=2):
        result = inst.applier.apply(edge.snapshot(version, routes))
        assert result.ok and result.kind is ApplyPath.RUNTIME, result
        assert {sni: edge.hello(sni).split(" ")[0] for sni in want} == want
    after = inst.haproxy.show_proc()
    assert (after.reloads, after.current_worker) == (before.reloads, before.current_worker)
    # Weights (a rule split by rand, as HTTP weights; an unresolved share is closed): a
    # config change, so a reload.
    split = [("a", 1), ("b", 2), ("", 1)]
    result = inst.applier.apply(edge.snapshot(9, [(["*.example.com"], split)]))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    shares = Counter(edge.hello("s.example.com").split(" ")[0] for _ in range(400))
    assert set(shares) == {A, B, "closed"}, shares
    assert abs(shares[B] / 400 - 0.5) < 0.1 and abs(shares[A] / 400 - 0.25) < 0.1, shares
    # A second passthrough port is a bind: a reload, and the first port keeps its routes.
    port = free_port(inst.ip)
    second = pb.TlsPassthroughListener(port=port, routes=[pb.SniRoute(hostnames=[B])])
    second.routes[0].backends.add(backend="ns_b_443", weight=1)
    result = inst.applier.apply(edge.snapshot(10, [([A], "a")], extra=[second]))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    assert edge.hello(B, port=port).startswith(B) and edge.hello(A).startswith(A)


def test_a_proxy_v2_source_keys_persistence(edge: Edge) -> None:
    """Clients behind a load balancer that sends PROXY v2: HAProxy takes the client
    address from the header, so the stick tables (HTTP, passthrough, TCP) hold the claimed
    addresses, never the balancer's, and a claimed client keeps its pod whichever
    balancer address it comes through."""
    inst = edge.inst
    with (
        identity_server(f"{edge.net}.21", "h1") as h1,
        identity_server(f"{edge.net}.22", "h2") as h2,
    ):
        http = [(f"{edge.net}.21", h1), (f"{edge.net}.22", h2)]
        snap = edge.snapshot(1, [([A], "a")], accept_proxy=True, http=http)
        result = inst.applier.apply(snap)
        assert result.ok, result.error
        claimed = [f"{edge.net}.{n}" for n in range(101, 109)]
        balancers = [f"{edge.net}.5", f"{edge.net}.6"]
        http_pods: dict[str, set[str]] = {}
        tls_pods: dict[str, set[str]] = {}
        for client in claimed:
            for n, balancer in enumerate(balancers):
                header = proxy_v2((client, 40000 + n), (inst.ip, edge.ports[2]))
                http_pods.setdefault(client, set()).add(
                    _http_via(balancer, (inst.ip, edge.ports[2]), header)
                )
                header = proxy_v2((client, 40000 + n), (inst.ip, edge.ports[0]))
                got = edge.hello(A, source=balancer, header=header)
                tls_pods.setdefault(client, set()).add(got)
                header = proxy_v2((client, 40000 + n), (inst.ip, edge.ports[1]))
                got = edge.hello(None, port=edge.ports[1], source=balancer, header=header)
                tls_pods[client].add(got)  # the TCP frontend: the same backend and table
        # Without the header a proxied port closes the connection.
        assert edge.hello(A) == "closed"
        assert edge.hello(A, port=edge.ports[1]) == "closed"
    assert all(len(pods) == 1 for pods in http_pods.values()), http_pods
    assert all(len(pods) == 1 for pods in tls_pods.values()), tls_pods
    assert {next(iter(p)) for p in tls_pods.values()} <= {f"{A} a", f"{A} a2"}
    http_table, tls_table = edge.table("ns_h_80"), edge.table("ns_a_443")
    assert sorted(http_table) == claimed and sorted(tls_table) == claimed
    # Each entry names the server that answered its client.
    http_ids = {"h1": 1, "h2": 2}
    assert {c: http_ids[next(iter(p))] for c, p in http_pods.items()} == http_table
    tls_ids = {f"{A} a": 1, f"{A} a2": 2}
    assert {c: tls_ids[next(iter(p))] for c, p in tls_pods.items()} == tls_table


def _http_via(source: str, address: tuple[str, int], header: bytes) -> str:
    """One request from `source`, behind a PROXY v2 header: the pod that answered."""
    with socket.create_connection(address, 5, (source, 0)) as sock:
        sock.sendall(header + b"GET / HTTP/1.1\r\nHost: h.org\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"200", head
    return body.decode().strip()
