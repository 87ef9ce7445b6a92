"""TLS termination in the renderer and the change classifier (nodeagent/config/certs.py,
certcheck.py): the HTTPS bind line, crt-lists in binding order, names and SNI filters
checked before anything is written, the agent's own check of each certificate and key,
and which certificate changes go through the runtime API and which reload."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from nodeagent.config import certcheck, certs
from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import RenderError, RenderOptions, render_held
from nodeagent.haproxy import sslcerts
from nodeagent.held import Held, diff
from peerplane.limits import MAX_CERTIFICATE_PEM
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.tls_agent import certificate, https_listener
from tests.helpers.tls_certs import Leaf, ec_key, make_ca, rsa_key

pytestmark = pytest.mark.unit  # pure

DIR = "/var/lib/agent/certs"
OPTS = RenderOptions("haproxy-a", maps_dir="/var/lib/agent/maps", certs_dir=DIR)
CA = make_ca()
LEAVES = {
    "a": CA.issue("a.example.com"),
    "b": CA.issue("b.example.com"),
    "w": CA.issue("*.w.example.com"),
}


def _held(
    bindings: list[tuple[str, list[str]]],
    leaves: dict[str, Leaf] | None = None,
    port: int = 8443,
    extra: list[pb.HttpListener] | None = None,
    strict_sni: bool = False,
) -> Held:
    snap = snapshot([], [backend("ns_a_80", [("10.0.0.1", 80)])])
    for name, leaf in sorted((leaves or LEAVES).items()):
        snap.certificates.append(certificate(f"ns_{name}", leaf))
    listener = https_listener(port, [(f"ns_{n}", hosts) for n, hosts in bindings])
    listener.default_backend = "ns_a_80"
    listener.tls.strict_sni = strict_sni
    snap.http_listeners.extend([listener, *(extra or [])])
    return Held.from_snapshot(snap)


def test_an_https_listener_binds_its_crt_list_in_binding_order() -> None:
    held = _held([("a", ["a.example.com"]), ("w", ["*.w.example.com"]), ("b", [])])
    rendered = render_held(held, OPTS)
    assert f"  bind 0.0.0.0:8443 ssl crt-list {DIR}/fe_8443.crtlist alpn h2,http/1.1" in (
        rendered.text().splitlines()
    )
    lines = rendered.crt_lists["8443"]
    assert certs.crtlist_file(DIR, lines).decode().splitlines() == [
        f"{DIR}/ns_a.pem a.example.com",  # the first: the default certificate
        f"{DIR}/ns_w.pem *.w.example.com",
        f"{DIR}/ns_b.pem",  # no filter: the certificate's own names
    ]


def test_https_listeners_of_one_port_on_their_own_addresses_have_their_own_crt_lists() -> None:
    """Two Gateways' HTTPS listeners on port 8443, each on an address of its own: two
    frontends, each binding its address with its own crt-list (and its own maps)."""
    other = https_listener(8443, [("ns_b", ["b.example.com"])])
    other.address, other.default_backend = "192.0.2.11", "ns_a_80"
    held = _held([("a", ["a.example.com"])], extra=[other])
    rendered = render_held(held, OPTS)
    text = rendered.text().splitlines()
    assert f"  bind 0.0.0.0:8443 ssl crt-list {DIR}/fe_8443.crtlist alpn h2,http/1.1" in text
    own = f"{DIR}/fe_192.0.2.11_8443.crtlist"
    assert f"  bind 192.0.2.11:8443 ssl crt-list {own} alpn h2,http/1.1" in text
    assert "frontend fe_http_192.0.2.11_8443" in text
    assert rendered.crt_lists == {
        "8443": (certs.CrtLine("ns_a", ("a.example.com",)),),
        "192.0.2.11_8443": (certs.CrtLine("ns_b", ("b.example.com",)),),
    }
    again = https_listener(8443, [("ns_a", [])])
    again.address = "192.0.2.11"
    with pytest.raises(RenderError, match=r"two listeners on port 8443 address 192\.0\.2\.11"):
        render_held(_held([("a", [])], extra=[other, again]), OPTS)


def test_a_listener_without_default_certificate_binds_strict_sni_and_turning_it_reloads() -> None:
    """`strict_sni`: no default certificate, a handshake no line matches fails; the bind
    line says so, and a change of it is a change of the frontends' text (a reload)."""
    bindings = [("a", ["a.example.com"]), ("b", ["b.example.com"])]
    default, strict = _held(bindings), _held(bindings, strict_sni=True)
    line = f"  bind 0.0.0.0:8443 ssl crt-list {DIR}/fe_8443.crtlist alpn h2,http/1.1"
    assert f"{line} strict-sni" in render_held(strict, OPTS).text().splitlines()
    assert line in render_held(default, OPTS).text().splitlines()
    kind, _, reason = _decide(default, strict)
    assert kind is ApplyPath.RELOAD and "8443" in reason, reason


@pytest.mark.parametrize(
    ("name", "sni"),
    [
        ("ns_a\nbind :1", "a.example.com"),
        ("../etc/passwd", "a.example.com"),
        ("NS_A", "a.example.com"),
        ("nsa", "a.example.com"),
        ("ns_a", "a.example.com x"),
        ("ns_a", "a.example.com\n"),
        ("ns_a", "!!a.example.com"),
        ("ns_a", "!"),
        ("ns_a", "!a.example.com x"),
        ("ns_a", "*"),
    ],
)
def test_a_bad_certificate_name_or_sni_filter_is_refused(name: str, sni: str) -> None:
    snap = snapshot([], [backend("ns_a_80", [("10.0.0.1", 80)])])
    snap.certificates.append(certificate("ns_a", LEAVES["a"]))
    snap.certificates[0].name = name
    snap.http_listeners.append(https_listener(8443, [(name, [sni])]))
    with pytest.raises(RenderError):
        render_held(Held.from_snapshot(snap), OPTS)


def test_a_binding_of_a_certificate_not_in_the_snapshot_is_refused() -> None:
    held = _held([("a", []), ("zz", [])])
    with pytest.raises(RenderError, match="unknown certificate ns_zz"):
        render_held(held, OPTS)


def test_the_agent_checks_each_certificate_itself() -> None:
    good = LEAVES["a"]
    assert certcheck.problem(good.cert_pem + good.key_pem) is None
    chained = good.cert_pem + CA.pem + good.key_pem
    assert certcheck.problem(chained) is None
    foreign = good.with_foreign_key()
    assert certcheck.problem(foreign.cert_pem + foreign.key_pem) == (
        "the private key does not match the certificate"
    )
    expired = CA.issue("old.example.com", expired=True)
    assert "expired" in (certcheck.problem(expired.cert_pem + expired.key_pem) or "")
    assert certcheck.problem(good.cert_pem) == "no private key in the PEM"
    assert certcheck.problem(good.key_pem) == "no certificate in the PEM"
    assert certcheck.problem(b"not pem") == "no certificate in the PEM"
    broken = good.cert_pem.replace(b"MII", b"AAA", 1) + good.key_pem
    assert certcheck.problem(broken) == "a certificate of the chain does not parse"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)
    assert "expired" in (certcheck.problem(good.cert_pem + good.key_pem, later) or "")
    # A payload ends at the first empty line: none is sent.
    spaced = good.cert_pem + b"\n\n" + good.key_pem
    assert "\n\n" not in sslcerts.payload(spaced)


def test_the_agent_refuses_keys_haproxys_openssl_refuses_and_pem_over_the_shared_limit() -> None:
    """The rule compute applies (peerplane.certs), checked again: an RSA-1024 leaf, a P-192
    leaf and an RSA-1024 chain certificate; the size limit is the constant compute uses."""
    small_rsa = CA.issue("rsa.example.com", key=rsa_key(1024))
    assert certcheck.problem(small_rsa.cert_pem + small_rsa.key_pem) == (
        "the leaf certificate has an RSA key of 1024 bits (HAProxy needs 2048 or more)"
    )
    p192 = CA.issue("p192.example.com", key=ec_key(ec.SECP192R1()))
    assert (certcheck.problem(p192.cert_pem + p192.key_pem) or "").startswith(
        "the leaf certificate has an EC key on secp192r1"
    )
    weak_ca = make_ca("weak", key=rsa_key(1024))
    leaf = weak_ca.issue("chained.example.com")
    assert (certcheck.problem(leaf.cert_pem + weak_ca.pem + leaf.key_pem) or "").startswith(
        "chain certificate 2 has an RSA key of 1024 bits"
    )
    good = LEAVES["a"]
    padded = good.cert_pem + good.key_pem + b"\n" * (MAX_CERTIFICATE_PEM - len(good.key_pem))
    assert certcheck.problem(padded) == f"PEM larger than {MAX_CERTIFICATE_PEM} bytes"


def test_a_certificate_keeps_its_pem_out_of_reprs() -> None:
    held = _held([("a", []), ("b", ["b.example.com"])])
    old = render_held(held, OPTS)
    renewed = _held(
        [("a", []), ("b", ["b.example.com"])], {**LEAVES, "b": CA.issue("b.example.com")}
    )
    decision = classify(held, old, renewed, render_held(renewed, OPTS), diff(held, renewed))
    assert decision.certs and "PRIVATE" not in repr(decision)


def _decide(before: Held, after: Held) -> tuple[ApplyPath, list[tuple[str, str]], str]:
    decision = classify(
        before, render_held(before, OPTS), after, render_held(after, OPTS), diff(before, after)
    )
    return decision.kind, [(u.op, u.name) for u in decision.certs], decision.reason


def test_which_certificate_changes_go_through_the_runtime_api() -> None:
    two = [("a", ["a.example.com"]), ("b", ["b.example.com"])]
    base = _held(two)
    renewed = {**LEAVES, "b": CA.issue("b.example.com")}
    assert _decide(base, _held(two, renewed))[:2] == (ApplyPath.RUNTIME, [("set", "ns_b")])
    # A certificate newly bound: loaded, then its crt-list line added.
    three = [*two, ("w", ["*.w.example.com"])]
    kind, steps, reason = _decide(base, _held(three))
    assert (kind, steps) == (ApplyPath.RUNTIME, [("load", "ns_w"), ("add", "ns_w")])
    assert reason == "certificates (bound ns_w) changed"
    # Unbound: its line removed, then the certificate.
    assert _decide(_held(three), base)[:2] == (
        ApplyPath.RUNTIME,
        [("del", "ns_w"), ("unload", "ns_w")],
    )
    # Filters changed: the line replaced, the certificate kept.
    other = [("a", ["a.example.com"]), ("b", ["b.example.com", "c.example.com"])]
    assert _decide(base, _held(other))[:2] == (
        ApplyPath.RUNTIME,
        [("del", "ns_b"), ("add", "ns_b")],
    )
    # A certificate no crt-list names: only its file changes.
    one = [("a", ["a.example.com"])]
    assert _decide(_held(one), _held(one, renewed)) == (
        ApplyPath.RUNTIME,
        [],
        "certificate files changed",
    )
    # The default certificate replaced, a new HTTPS port: reloads, said why.
    kind, _, reason = _decide(base, _held([("b", ["b.example.com"]), ("a", ["a.example.com"])]))
    assert (kind, reason) == (
        ApplyPath.RELOAD,
        "HTTPS listener 8443: default certificate changed (first crt-list line)",
    )
    # A certificate on two lines (the default, and for another host too): its renewal
    # is runtime, a change of its lines reloads.
    twice = [("a", []), ("b", ["b.example.com"]), ("a", ["alias.example.com"])]
    renewed_a = {**LEAVES, "a": CA.issue("a.example.com")}
    assert _decide(_held(twice), _held(twice, renewed_a))[:2] == (
        ApplyPath.RUNTIME,
        [("set", "ns_a")],
    )
    kind, _, reason = _decide(_held(twice), _held(twice[:2]))
    assert (kind, reason) == (
        ApplyPath.RELOAD,
        "HTTPS listener 8443: certificate ns_a bound on two lines changed",
    )
    more = _held(two, extra=[https_listener(9443, [("ns_a", [])])])
    kind, _, reason = _decide(base, more)
    assert kind is ApplyPath.RELOAD and "9443 added" in reason


def test_a_delta_renewing_one_certificate_is_one_runtime_step() -> None:
    """What the stream delivers: a SnapshotDelta carrying only the renewed certificate."""
    bindings = [("a", ["a.example.com"]), ("b", ["b.example.com"])]
    base = _held(bindings)
    renewed = _held(bindings, {**LEAVES, "b": CA.issue("b.example.com")})
    delta = pb.SnapshotDelta(
        workload=base.workload,
        version=2,
        from_content_hash=base.content_hash,
        to_content_hash=renewed.computed_hash(),
        certificates=[renewed.certificates["ns_b"]],
    )
    after, change = base.apply(delta)
    assert (change.certificates, change.frontends) == (frozenset({"ns_b"}), False)
    old_cfg = render_held(base, OPTS)
    new_cfg = render_held(after, OPTS, old_cfg, change)
    decision = classify(base, old_cfg, after, new_cfg, change)
    assert decision.kind is ApplyPath.RUNTIME
    assert [(u.op, u.name, u.path) for u in decision.certs] == [("set", "ns_b", f"{DIR}/ns_b.pem")]
    assert decision.certs[0].pem == renewed.certificates["ns_b"].pem
    assert decision.reason == "certificates (renewed ns_b) changed"


@pytest.mark.parametrize(
    ("address", "key"),
    [("", "8443"), ("192.0.2.11", "192.0.2.11_8443"), ("2001:DB8::1", "2001-db8--1_8443")],
)
def test_a_listener_key_is_its_port_or_its_canonical_address_and_port(
    address: str, key: str
) -> None:
    from nodeagent.config.listeners import listener_key

    assert listener_key(pb.HttpListener(port=8443, address=address)) == key
