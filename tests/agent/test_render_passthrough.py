"""The layer-4 renderer (nodeagent/config/passthrough.py): TLS passthrough frontends and
their SNI maps, TCP frontends, `accept-proxy` on every kind of bind, what is refused, and
which changes go through the runtime API and which reload (and why)."""

from __future__ import annotations

import pytest

from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import Rendered, RenderError, RenderOptions, render_held
from nodeagent.haproxy.commands import MapUpdate
from nodeagent.held import Held, diff
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.map_entries import entries

pytestmark = pytest.mark.unit  # pure

OPTS = RenderOptions("haproxy-a", maps_dir="/var/lib/maps")
SNI_MAP = "/var/lib/maps/fe_8443.sni.map"


def _route(hosts: list[str], *to: tuple[str, int]) -> pb.SniRoute:
    r = pb.SniRoute(source="TLSRoute ns/r rule 0", hostnames=hosts)
    for name, weight in to:
        r.backends.add(backend=name, weight=weight)
    return r


def _snap(
    *routes_: pb.SniRoute,
    port: int = 8443,
    accept_proxy: bool = False,
    tcp_proxy: bool = False,
    tcp_source: str = "",
    http_port: int | None = None,
    extra_tls: int | None = None,
) -> pb.Snapshot:
    backends = [
        backend(n, [("10.0.0.1", 443)], mode="tcp") for n in ("ns_a_443", "ns_b_443", "ns_c_443")
    ]
    snap = snapshot(
        [], [*backends, backend("ns_h_80", [("10.0.0.2", 80)])], tcp=[(5432, "ns_c_443")]
    )
    snap.tcp_frontends[0].accept_proxy = tcp_proxy
    snap.tcp_frontends[0].source = tcp_source
    snap.tls_listeners.add(port=port, routes=routes_, accept_proxy=accept_proxy)
    if extra_tls is not None:
        snap.tls_listeners.add(port=extra_tls, routes=[_route(["x.org"], ("ns_a_443", 1))])
    if http_port is not None:
        rule = pb.RouteRule(source="HTTPRoute ns/h rule 0")
        rule.backends.add(backend="ns_h_80", weight=1)
        snap.http_listeners.add(port=http_port, rules=[rule], accept_proxy=accept_proxy)
    return snap


def _render(snap: pb.Snapshot) -> tuple[Held, Rendered]:
    held = Held.from_snapshot(snap)
    return held, render_held(held, OPTS)


A = _route(["a.example.com"], ("ns_a_443", 1))
WILD = _route(["*.w.example.com"], ("ns_b_443", 1))
ANY = _route([], ("ns_c_443", 1))


def test_a_passthrough_frontend_routes_by_sni_through_its_map() -> None:
    weighted = _route(["*.example.com"], ("ns_a_443", 1), ("ns_b_443", 3), ("", 1))
    unresolved = _route(["u.example.com"], ("", 1))
    shadowed = _route(["a.example.com"], ("ns_b_443", 1))  # the first route of a name serves
    _, out = _render(_snap(A, WILD, weighted, unresolved, shadowed, ANY))
    assert dict(out.maps[SNI_MAP]) == {
        "*": "ns_c_443",
        "*.example.com": "_w0",
        "*.w.example.com": "ns_b_443",
        "a.example.com": "ns_a_443",
        "u.example.com": "_closed",
    }
    text = out.frontends
    frontend = text[text.index("frontend fe_tls_8443") : text.index("frontend fe_tcp_5432")]
    for line in [
        "  mode tcp",
        "  tcp-request inspect-delay 5s",
        "  tcp-request content reject if !{ req.ssl_hello_type 1 }",
        "  tcp-request content set-var(txn.h) req.ssl_sni,lower if { req.ssl_sni -m found }",
        "  tcp-request content set-var(txn.rnd) rand(5) if { var(txn.be) -m str _w0 }",
        "  tcp-request content set-var(txn.be) str(_closed) if { var(txn.be) -m str _w0 }"
        " { var(txn.rnd) -m int lt 5 }",
        "  tcp-request content reject if !{ var(txn.be) -m found }",
        "  tcp-request content reject if { var(txn.be) -m beg _ }",
        "  tcp-request content accept if { req.ssl_hello_type 1 }",
        "  use_backend %[var(txn.be)]",
    ]:
        assert line in frontend.splitlines(), line
    # The wildcard depths 1 to 3 are looked up before any rule needs them.
    assert [d for d in (1, 2, 3, 4) if f"field(-1,.,{d})" in frontend] == [1, 2, 3]


@pytest.mark.parametrize(
    ("route", "error"),
    [
        (_route(["A.example.com"], ("ns_a_443", 1)), "invalid hostname"),
        (_route(["a.*.example.com"], ("ns_a_443", 1)), "invalid hostname"),
        (_route(["*"], ("ns_a_443", 1)), "invalid hostname"),
        (_route(["a.example.com\nfrontend x"], ("ns_a_443", 1)), "invalid hostname"),
        (_route(["a.example.com"], ("ns_a_443 if TRUE", 1)), "invalid backend name"),
        (_route(["a.example.com"], ("ns_a_443", patterns.MAX_WEIGHT + 1)), "invalid weight"),
        (_route(["a.example.com"], ("ns_x_443", 1)), "unknown backend 'ns_x_443'"),
    ],
)
def test_a_bad_sni_route_is_refused(route: pb.SniRoute, error: str) -> None:
    with pytest.raises(RenderError, match=error):
        _render(_snap(route))


def test_ports_are_not_shared_between_kinds() -> None:
    with pytest.raises(RenderError, match="TLS passthrough listener on TCP frontend port 5432"):
        _render(_snap(A, port=5432))
    with pytest.raises(RenderError, match="HTTP listener on TLS passthrough listener port 8443"):
        _render(_snap(A, http_port=8443))
    with pytest.raises(RenderError, match="two TLS passthrough listeners on port 8443"):
        _render(_snap(A, extra_tls=8443))
    with pytest.raises(RenderError, match="maps directory"):
        render_held(Held.from_snapshot(_snap(A)), RenderOptions("haproxy-a", maps_dir="/m aps"))


def test_accept_proxy_on_every_kind_of_bind_and_the_route_source_not_rendered() -> None:
    def binds(out: Rendered) -> list[str]:
        return [ln for ln in out.frontends.splitlines() if ln.startswith("  bind ")]

    _, plain = _render(_snap(A, http_port=8080))
    assert binds(plain) == ["  bind 0.0.0.0:8080", "  bind 0.0.0.0:8443", "  bind 0.0.0.0:5432"]
    _, proxied = _render(_snap(A, http_port=8080, accept_proxy=True, tcp_proxy=True))
    assert binds(proxied) == [f"{b} accept-proxy" for b in binds(plain)]
    _, sourced = _render(_snap(A, http_port=8080, tcp_source="TCPRoute ns/db rule 0"))
    assert sourced.text() == plain.text()


def _decide(
    before: pb.Snapshot, after: pb.Snapshot
) -> tuple[ApplyPath, str, tuple[MapUpdate, ...]]:
    old, old_cfg = _render(before)
    new, new_cfg = _render(after)
    decision = classify(old, old_cfg, new, new_cfg, diff(old, new))
    return decision.kind, decision.reason, decision.maps


def test_sni_routes_change_through_the_runtime_api() -> None:
    repointed = _route(["a.example.com"], ("ns_b_443", 1))
    assert _decide(_snap(A, WILD), _snap(repointed, WILD)) == (
        ApplyPath.RUNTIME,
        "1 route map entry changed",
        (MapUpdate(SNI_MAP, "set", "a.example.com", "ns_b_443"),),
    )
    kind, _, maps = _decide(_snap(A), _snap(A, WILD, ANY))
    assert kind is ApplyPath.RUNTIME and {(m.op, m.key) for m in maps} == {
        ("add", "*.w.example.com"),
        ("add", "*"),
    }
    kind, _, maps = _decide(_snap(A, WILD), _snap(WILD))
    assert (kind, maps) == (ApplyPath.RUNTIME, (MapUpdate(SNI_MAP, "del", "a.example.com"),))
    kind, reason, _ = _decide(_snap(A), _snap(A, tcp_source="TCPRoute ns/db rule 0"))
    assert (kind, reason) == (ApplyPath.NOTHING, "rendered config identical")


@pytest.mark.parametrize(
    ("after", "reason"),
    [
        (
            _snap(A, extra_tls=9443),
            "TLS passthrough listener port 9443 added (a new port needs a reload)",
        ),
        (
            _snap(A, accept_proxy=True),
            "TLS passthrough listener 8443: PROXY protocol (accept-proxy) turned on, a bind option",
        ),
        (
            _snap(A, tcp_proxy=True),
            "TCP frontend 5432: PROXY protocol (accept-proxy) turned on, a bind option",
        ),
        (
            _snap(A, _route(["b.example.com"], ("ns_a_443", 1), ("ns_b_443", 1))),
            "TLS passthrough listener 8443: routes rendered into the config changed"
            " (weights, a new wildcard depth)",
        ),
        (
            _snap(A, _route(["*.a.b.c.example.com"], ("ns_a_443", 1))),
            "TLS passthrough listener 8443: routes rendered into the config changed"
            " (weights, a new wildcard depth)",
        ),
    ],
)
def test_what_reloads_says_why(after: pb.Snapshot, reason: str) -> None:
    assert _decide(_snap(A), after)[:2] == (ApplyPath.RELOAD, reason)


def test_a_changed_passthrough_listener_is_rendered_again_from_the_cache() -> None:
    """The frontends section is reused only when the passthrough listeners' part is
    unchanged too."""
    held, first = _render(_snap(A))
    after, _ = _render(_snap(A, WILD))
    again = render_held(after, OPTS, first, diff(held, after))
    fresh = render_held(after, OPTS)
    assert again.frontends == fresh.frontends
    assert entries(again.maps) == entries(fresh.maps) != entries(first.maps)
    assert "*.w.example.com" in again.maps[SNI_MAP]


def test_an_https_listener_takes_accept_proxy_after_its_tls_options() -> None:
    snap = _snap(A, http_port=8443 + 1, accept_proxy=True)
    snap.http_listeners[0].tls.certificates.add(certificate="ns_web-tls")
    snap.certificates.add(name="ns_web-tls", secret="ns/web-tls")
    _, out = _render(snap)
    (bind,) = [ln for ln in out.frontends.splitlines() if ln.startswith("  bind 0.0.0.0:8444")]
    assert bind.startswith("  bind 0.0.0.0:8444 ssl crt-list ") and bind.endswith(" accept-proxy")
