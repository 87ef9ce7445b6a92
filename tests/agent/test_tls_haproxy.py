"""TLS termination on a real HAProxy (each installed version), through the agent's apply
path: the certificate chosen by SNI (two hosts, a wildcard, the default for an unknown SNI
and for none), a renewed certificate served without a reload and without a failed request
while connections made before keep theirs, certificates bound and unbound through the
runtime API, and a bad certificate set aside while the others keep serving."""

from __future__ import annotations

import os
import random
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format

from nodeagent import cli
from nodeagent.apply import setaside, validation
from nodeagent.config import certcheck
from nodeagent.config import render as render_module
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions
from nodeagent.haproxy.driver import validate
from peerplane.certs import weak_chain
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    identity_server,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.tls_agent import (
    certificate,
    client_context,
    https_connection,
    https_listener,
    peer_serial,
    served_serial,
    weak_rsa_certificate,
)
from tests.helpers.tls_certs import Leaf, ec_key, make_ca, rsa_key, sha1_signed
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

CA = make_ca()
HOSTS = {"d": "default.example.com", "a": "a.example.com", "b": "b.example.com"}


@dataclass
class Site:
    """One agent-managed HAProxy with an HTTPS listener in front of one backend."""

    inst: Instance
    end: tuple[str, int]
    port: int
    peer_port: int
    leaves: dict[str, Leaf] = field(default_factory=dict)
    version: int = 0

    def snapshot(
        self,
        bindings: list[tuple[str, list[str]]],
        endpoints: list[tuple[str, int]] | None = None,
        **replaced: pb.Certificate,
    ) -> pb.Snapshot:
        self.version += 1
        ends = endpoints if endpoints is not None else [self.end]
        snap = snapshot(
            [("pod-a", self.inst.ip, self.peer_port)],
            [backend("ns_web_80", ends, balance="roundrobin", persistence=False)],
            version=self.version,
        )
        named = {f"ns_{k}": certificate(f"ns_{k}", leaf) for k, leaf in self.leaves.items()}
        named.update(replaced)
        snap.certificates.extend(c for _, c in sorted(named.items()))
        snap.http_listeners.append(https_listener(self.port, bindings))
        snap.http_listeners[0].default_backend = "ns_web_80"
        return snap

    def serial(self, sni: str | None) -> str:
        return served_serial(self.inst.ip, self.port, sni)

    def get(self, sni: str) -> int:
        conn = https_connection(self.inst.ip, self.port, sni)
        try:
            conn.request("GET", "/", headers={"Host": sni})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()


@pytest.fixture
def site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Site]:
    net = f"127.58.{random.randint(1, 250)}"
    with (
        identity_server(f"{net}.11", "web") as web_port,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        leaves = {k: CA.issue(h) for k, h in HOSTS.items()}
        leaves["w"] = CA.issue("*.w.example.com")
        ports = free_port(inst.ip), free_port(inst.ip)
        site = Site(inst, (f"{net}.11", web_port), *ports, leaves=leaves)
        yield site


BINDINGS = [
    ("ns_d", []),  # the default: no filter, its own name
    ("ns_a", [HOSTS["a"]]),
    ("ns_b", [HOSTS["b"]]),
    ("ns_w", ["*.w.example.com"]),
    ("ns_a", ["alias.example.com"]),  # a certificate on two lines
]


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_certificate_is_chosen_by_sni(site: Site) -> None:
    result = site.inst.applier.apply(site.snapshot(BINDINGS))
    assert result.ok, result.error
    serials = {k: leaf.serial_hex for k, leaf in site.leaves.items()}
    assert site.serial("a.example.com") == serials["a"]
    assert site.serial("b.example.com") == serials["b"]
    assert site.serial("x.w.example.com") == serials["w"]
    # An SNI wildcard filter stands for one label, as a wildcard certificate does.
    assert site.serial("y.x.w.example.com") == serials["d"]
    assert site.serial("alias.example.com") == serials["a"]
    assert site.serial("unknown.example.org") == serials["d"]
    assert site.serial(None) == serials["d"]
    assert site.get("a.example.com") == 200
    ctx = client_context()
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with ctx.wrap_socket(
        socket.create_connection((site.inst.ip, site.port), timeout=5),
        server_hostname="a.example.com",
    ) as tls:
        assert tls.selected_alpn_protocol() == "h2"
    certs_dir = site.inst.applier.options.certs_dir
    assert _mode(certs_dir) == 0o700
    files = sorted(os.listdir(certs_dir))
    assert files == [f"fe_{site.port}.crtlist", "ns_a.pem", "ns_b.pem", "ns_d.pem", "ns_w.pem"]
    assert {_mode(os.path.join(certs_dir, f)) for f in files} == {0o600}


def _redirect_rule(path: str, redirect: pb.Redirect) -> pb.RouteRule:
    rule = pb.RouteRule(source=f"HTTPRoute ns/r {path}", hostnames=[HOSTS["a"]])
    rule.path.CopyFrom(pb.PathMatch(value=path))
    rule.redirect.CopyFrom(redirect)
    return rule


def test_a_redirect_on_an_https_listener_keeps_the_requests_https_scheme_and_port(
    site: Site,
) -> None:
    """RequestRedirect without a scheme answers with the request's scheme (https: TLS was
    terminated here) and, without a port, the listener's; a scheme given takes its
    well-known port (Gateway API; conformance HTTPRouteRedirectPortAndScheme on an HTTPS
    listener)."""
    snap = site.snapshot(BINDINGS)
    snap.http_listeners[0].rules.extend(
        [
            _redirect_rule("/host", pb.Redirect(hostname="example.org")),
            _redirect_rule("/to-http", pb.Redirect(scheme="http", status_code=301)),
            _redirect_rule("/port", pb.Redirect(port=9443)),
        ]
    )
    result = site.inst.applier.apply(snap)
    assert result.ok, result.error

    def location(target: str) -> tuple[int, str | None]:
        conn = https_connection(site.inst.ip, site.port, HOSTS["a"])
        try:
            conn.request("GET", target, headers={"Host": HOSTS["a"]})
            response = conn.getresponse()
            response.read()
            return response.status, response.getheader("Location")
        finally:
            conn.close()

    assert location("/host/x?q=1") == (302, f"https://example.org:{site.port}/host/x?q=1")
    assert location("/to-http") == (301, "http://a.example.com/to-http")
    assert location("/port") == (302, "https://a.example.com:9443/port")
    assert site.get(HOSTS["b"]) == 200  # the other hosts still reach the backend


def test_a_default_certificate_excluding_a_name_leaves_it_to_its_own_line(site: Site) -> None:
    """HAProxy gives a name to the first crt-list line holding it, and the default
    certificate comes first: one that also names a.example.com excludes it ("!name"), so
    the listener bound to a.example.com serves its own certificate."""
    site.leaves["wide"] = CA.issue("default.example.com", HOSTS["a"])
    bindings = [("ns_wide", [f"!{HOSTS['a']}"]), ("ns_a", [HOSTS["a"]])]
    result = site.inst.applier.apply(site.snapshot(bindings))
    assert result.ok, result.error
    assert site.serial(HOSTS["a"]) == site.leaves["a"].serial_hex
    assert site.serial("default.example.com") == site.leaves["wide"].serial_hex
    assert site.serial("unknown.example.org") == site.leaves["wide"].serial_hex


def test_a_renewed_certificate_is_served_without_a_reload(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    before = inst.haproxy.show_proc()
    old_serial = site.leaves["b"].serial_hex
    kept = https_connection(inst.ip, site.port, "b.example.com")  # made before the rotation
    kept.request("GET", "/", headers={"Host": "b.example.com"})
    assert kept.getresponse().read() and peer_serial(kept) == old_serial
    failures: list[str] = []
    served = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal served
        while not stop.is_set():
            try:
                status = site.get("b.example.com")  # a new handshake each time
                if status != 200:
                    failures.append(str(status))
            except OSError as e:
                failures.append(repr(e))
            served += 1

    loop = threading.Thread(target=load)
    loop.start()
    try:
        wait_until(lambda: served >= 20, 10)
        site.leaves["b"] = CA.issue("b.example.com")
        result = inst.applier.apply(site.snapshot(BINDINGS))
        assert result.ok and result.kind is ApplyPath.RUNTIME, result
        assert site.serial("b.example.com") == site.leaves["b"].serial_hex
        mark = served
        wait_until(lambda: served >= mark + 20, 10)
    finally:
        stop.set()
        loop.join(10)
    kept.request("GET", "/", headers={"Host": "b.example.com"})  # the same connection
    assert kept.getresponse().status == 200 and peer_serial(kept) == old_serial
    kept.close()
    after = inst.haproxy.show_proc()
    assert (after.reloads, after.current_worker) == (before.reloads, before.current_worker)
    assert failures == [] and served >= 40
    path = os.path.join(inst.applier.options.certs_dir, "ns_b.pem")
    with open(path, "rb") as f:
        assert f.read() == site.leaves["b"].cert_pem + site.leaves["b"].key_pem
    assert _mode(path) == 0o600
    # The logs name the certificate and its fingerprint, never its bytes.
    assert "runtime set certificate ns_b sha256" in caplog.text
    assert "PRIVATE KEY" not in caplog.text and "BEGIN CERTIFICATE" not in caplog.text


def test_certificates_are_bound_and_unbound_through_the_runtime_api(site: Site) -> None:
    inst = site.inst
    three = BINDINGS[:3]
    assert inst.applier.apply(site.snapshot(three)).ok
    before = inst.haproxy.show_proc()
    serials = {k: leaf.serial_hex for k, leaf in site.leaves.items()}
    assert site.serial("x.w.example.com") == serials["d"]
    bound = inst.applier.apply(site.snapshot(BINDINGS[:4]))  # the wildcard newly bound
    assert bound.ok and bound.kind is ApplyPath.RUNTIME, bound
    assert site.serial("x.w.example.com") == serials["w"]
    del site.leaves["b"]
    unbound = inst.applier.apply(site.snapshot([BINDINGS[0], BINDINGS[1], BINDINGS[3]]))
    assert unbound.ok and unbound.kind is ApplyPath.RUNTIME, unbound
    assert site.serial("b.example.com") == serials["d"]
    assert site.serial("a.example.com") == serials["a"]
    after = inst.haproxy.show_proc()
    assert (after.reloads, after.current_worker) == (before.reloads, before.current_worker)
    certs_dir = inst.applier.options.certs_dir
    assert "ns_b.pem" not in os.listdir(certs_dir)  # no longer in the snapshot
    with open(os.path.join(certs_dir, f"fe_{site.port}.crtlist")) as f:
        assert [line.split()[0].rsplit("/", 1)[1] for line in f] == [
            "ns_d.pem",
            "ns_a.pem",
            "ns_w.pem",
        ]
    # A new default certificate: a reload, said why; the files are what it reads.
    swapped = inst.applier.apply(site.snapshot([BINDINGS[1], BINDINGS[0]]))
    assert swapped.ok and swapped.kind is ApplyPath.RELOAD, swapped
    assert site.serial(None) == serials["a"] and site.serial("nothing.org") == serials["a"]
    assert site.serial(HOSTS["d"]) == serials["d"]  # its own name, no filter


def _crtlist_names(site: Site) -> list[str]:
    certs_dir = site.inst.applier.options.certs_dir
    with open(os.path.join(certs_dir, f"fe_{site.port}.crtlist")) as f:
        return [line.split()[0].rsplit("/", 1)[1] for line in f]


def test_a_bad_certificate_is_set_aside_and_the_others_apply(site: Site) -> None:
    """A certificate the agent's own check refuses (a key that is not its own, an expired
    one) is set aside: its crt-list lines and file left out, the rest of the version
    applied (a good renewal beside it), and the ACK names it with the reason."""
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    certs_dir = inst.applier.options.certs_dir
    site.leaves["a"] = CA.issue("a.example.com")  # a good renewal beside a bad one
    foreign = site.leaves["b"].with_foreign_key()
    bad = certificate("ns_b", foreign)
    result = inst.applier.apply(site.snapshot(BINDINGS, ns_b=bad))
    assert result.ok, result
    assert [(p.kind, p.name, p.fingerprint) for p in result.set_aside] == [
        ("certificate", "ns_b", bad.fingerprint)
    ]
    assert result.set_aside[0].reason == "the private key does not match the certificate"
    assert site.serial("a.example.com") == site.leaves["a"].serial_hex  # the renewal serves
    assert site.serial("b.example.com") == site.leaves["d"].serial_hex  # the default now
    assert "ns_b.pem" not in os.listdir(certs_dir)
    assert _crtlist_names(site) == ["ns_d.pem", "ns_a.pem", "ns_w.pem", "ns_a.pem"]
    assert inst.applier.metrics.set_aside.labels("certificate")._value.get() == 1
    # An expired one, with a new HTTPS port (a reload): set aside as well, before haproxy -c.
    expired = certificate("ns_b", CA.issue("b.example.com", expired=True))
    snap = site.snapshot(BINDINGS, ns_b=expired)
    snap.http_listeners.append(https_listener(free_port(inst.ip), [("ns_a", [])]))
    reloaded = inst.applier.apply(snap)
    assert reloaded.ok and reloaded.kind is ApplyPath.RELOAD, reloaded
    assert [p.name for p in reloaded.set_aside] == ["ns_b"]
    assert "expired" in reloaded.set_aside[0].reason
    assert "ns_b.pem" not in os.listdir(certs_dir)
    # Mended: served again, and nothing is set aside.
    site.leaves["b"] = CA.issue("b.example.com")
    mended = inst.applier.apply(site.snapshot(BINDINGS))
    assert mended.ok and mended.set_aside == (), mended
    assert site.serial("b.example.com") == site.leaves["b"].serial_hex
    assert inst.applier.metrics.set_aside.labels("certificate")._value.get() == 0


def test_what_only_haproxy_refuses_is_set_aside_in_haproxys_words(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate the agent's check does not foresee HAProxy refusing (here: the
    agent's key-size check turned off) is named by `haproxy -c`: set aside in HAProxy's
    words naming the live file, and the rest applies. As a renewal (runtime: `commit ssl
    cert` refuses, the fallback reload's `haproxy -c` names it) and with a new HTTPS port
    (reload: `haproxy -c` on the staged files)."""
    monkeypatch.setattr(certcheck, "weak_chain", lambda chain: None)
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    certs_dir = inst.applier.options.certs_dir
    weak = weak_rsa_certificate("ns_b", HOSTS["b"])
    renewal = inst.applier.apply(site.snapshot(BINDINGS, ns_b=weak))
    snap = site.snapshot(BINDINGS, ns_b=weak)
    snap.http_listeners.append(https_listener(free_port(inst.ip), [("ns_a", [])]))
    new_port = inst.applier.apply(snap)
    for result in (renewal, new_port):
        assert result.ok, result
        assert [p.name for p in result.set_aside] == ["ns_b"]
        reason = result.set_aside[0].reason
        assert reason.startswith("haproxy -c: ")
        assert f"{certs_dir}/ns_b.pem" in reason and ".staging" not in reason
        assert "PRIVATE" not in reason
    assert "ns_b.pem" not in os.listdir(certs_dir)
    assert site.serial(HOSTS["b"]) == site.leaves["d"].serial_hex
    assert site.serial(HOSTS["a"]) == site.leaves["a"].serial_hex


def _enabled_servers(inst: Instance) -> set[str]:
    """The addresses of the servers HAProxy runs in ns_web_80 and that are not in
    maintenance (`show servers state`: srv_addr, srv_admin_state)."""
    out = inst.haproxy.runtime("show servers state ns_web_80")
    found = set()
    for line in out.splitlines():
        cols = line.split()
        named = len(cols) > 6 and not line.startswith("#") and cols[1] == "ns_web_80"
        if named and int(cols[6]) & 1 == 0:  # SRV_ADMF_FMAINT unset
            found.add(cols[4])
    return found


WEAK_KEYS = {"rsa-1024": lambda: rsa_key(1024), "p-192": lambda: ec_key(ec.SECP192R1())}


@pytest.mark.parametrize("found_by", ["agent", "haproxy"])
@pytest.mark.parametrize("weak", sorted(WEAK_KEYS))
def test_a_tenants_weak_certificate_does_not_freeze_another_tenants_endpoint_removal(
    site: Site, monkeypatch: pytest.MonkeyPatch, weak: str, found_by: str
) -> None:
    """T1: tenant B's Secret renewed with a key HAProxy refuses ("ee key too small" on
    3.0 and 3.2, "unable to load SSL certificate" on 2.6) used to NACK that version and
    every later one, so tenant A's endpoint removal stayed unapplied. Now B's certificate
    is set aside (by the agent's check, or, when the agent does not foresee it, by
    `haproxy -c`), A's removal applies, and every ACK names what is set aside."""
    if found_by == "haproxy":
        monkeypatch.setattr(certcheck, "weak_chain", lambda chain: None)
    inst = site.inst
    gone = (site.end[0].rsplit(".", 1)[0] + ".12", 9)
    both = [site.end, gone]
    assert inst.applier.apply(site.snapshot(BINDINGS, endpoints=both)).ok
    assert _enabled_servers(inst) == {site.end[0], gone[0]}
    bad = certificate("ns_b", CA.issue(HOSTS["b"], key=WEAK_KEYS[weak]()))
    renewed = inst.applier.apply(site.snapshot(BINDINGS, endpoints=both, ns_b=bad))
    assert renewed.ok, renewed
    assert [(p.name, p.fingerprint) for p in renewed.set_aside] == [("ns_b", bad.fingerprint)]
    reason = renewed.set_aside[0].reason
    if found_by == "agent":
        assert reason.startswith("the leaf certificate has ")
    else:
        assert reason.startswith("haproxy -c: ") and "ns_b.pem" in reason
    removal = inst.applier.apply(site.snapshot(BINDINGS, endpoints=[site.end], ns_b=bad))
    assert removal.ok, removal
    assert [p.name for p in removal.set_aside] == ["ns_b"]
    assert inst.applier.applied_version == site.version
    assert _enabled_servers(inst) == {site.end[0]}
    assert site.get(HOSTS["a"]) == 200
    assert site.serial(HOSTS["a"]) == site.leaves["a"].serial_hex


KEYS = {
    "rsa-1024": lambda: rsa_key(1024),
    "rsa-2048": lambda: rsa_key(2048),
    "p-192": lambda: ec_key(ec.SECP192R1()),
    "p-224": lambda: ec_key(ec.SECP224R1()),
    "p-256": lambda: ec_key(ec.SECP256R1()),
    "p-521": lambda: ec_key(ec.SECP521R1()),
    "secp256k1": lambda: ec_key(ec.SECP256K1()),
    "brainpoolP256r1": lambda: ec_key(ec.BrainpoolP256R1()),
}


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize("place", ["leaf", "chain"])
def test_the_key_size_rule_is_what_haproxy_c_takes(
    tmp_path: Path, haproxy_bin: HAProxyBinary, key: str, place: str
) -> None:
    """`peerplane.certs.weak_chain`, the rule compute refuses by and the agent checks
    again, says what `haproxy -c` of each installed version refuses: a leaf's key, or a
    chain certificate's (its CA's) key."""
    if place == "leaf":
        leaf = CA.issue("key.example.com", key=KEYS[key]())
        pem, chain = leaf.cert_pem + CA.pem + leaf.key_pem, [leaf.cert, CA.cert]
    else:
        ca = make_ca("key CA", key=KEYS[key]())
        leaf = ca.issue("key.example.com")
        pem, chain = leaf.cert_pem + ca.pem + leaf.key_pem, [leaf.cert, ca.cert]
    (tmp_path / "key.pem").write_bytes(pem)
    (tmp_path / "haproxy.cfg").write_text(
        "defaults\n  mode http\n  timeout client 1s\n  timeout server 1s\n"
        "  timeout connect 1s\nfrontend fe\n"
        f"  bind 127.0.0.1:{free_port('127.0.0.1')} ssl crt {tmp_path / 'key.pem'}\n"
    )
    check = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(tmp_path / "haproxy.cfg")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    refused = weak_chain(chain)
    assert (check.returncode != 0) == (refused is not None), (refused, check.stderr)
    if refused is not None:
        assert "key.pem" in check.stdout + check.stderr


@pytest.mark.parametrize("place", ["leaf", "intermediate"])
def test_a_sha1_signature_is_refused_by_2_6_and_by_the_rule_for_every_version(
    tmp_path: Path, haproxy_bin: HAProxyBinary, place: str
) -> None:
    """2.6 (OpenSSL 3.0) refuses a SHA-1 signature on a certificate that is not
    self-signed, 3.0 and 3.2 take it: compute does not know which version a workload
    runs, so `weak_chain` refuses it for all."""
    leaf = sha1_signed(CA, "sha1.example.com", intermediate=place == "intermediate")
    chain = [leaf.cert] if place == "leaf" else [leaf.cert, leaf.ca.cert]
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain) + leaf.key_pem
    (tmp_path / "sha1.pem").write_bytes(pem)
    (tmp_path / "haproxy.cfg").write_text(
        "defaults\n  mode http\n  timeout client 1s\n  timeout server 1s\n"
        "  timeout connect 1s\nfrontend fe\n"
        f"  bind 127.0.0.1:{free_port('127.0.0.1')} ssl crt {tmp_path / 'sha1.pem'}\n"
    )
    check = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(tmp_path / "haproxy.cfg")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (check.returncode != 0) == (haproxy_bin.series == "2.6"), check.stdout + check.stderr
    assert "a signature with sha1" in (weak_chain(chain) or "")


def test_a_listener_whose_every_certificate_is_set_aside_keeps_its_port(site: Site) -> None:
    """Its crt-list is empty and its bind line says `strict-sni` (HAProxy takes an empty
    crt-list only so): its handshakes fail, the other listener serves."""
    inst = site.inst
    other = free_port(inst.ip)
    snap = site.snapshot(BINDINGS, ns_b=certificate("ns_b", site.leaves["b"].with_foreign_key()))
    snap.http_listeners.append(https_listener(other, [("ns_b", [])]))
    result = inst.applier.apply(snap)
    assert result.ok, result
    assert [p.name for p in result.set_aside] == ["ns_b"]
    with open(inst.applier.config_path) as f:
        (bind,) = [line for line in f.read().splitlines() if f"fe_{other}.crtlist" in line]
    assert bind.endswith(" strict-sni"), bind
    assert site.serial(HOSTS["a"]) == site.leaves["a"].serial_hex
    with pytest.raises(OSError):
        served_serial(inst.ip, other, HOSTS["b"])


def test_an_error_that_names_no_certificate_still_nacks(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken global section is no tenant's part: after the refused certificate is set
    aside, `haproxy -c` still refuses, naming no certificate, and the version is NACKed
    in HAProxy's words; HAProxy keeps what it ran."""
    monkeypatch.setattr(certcheck, "weak_chain", lambda chain: None)
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    broken = render_module._global

    def global_section(opts: RenderOptions) -> list[str]:
        lines = broken(opts)
        return [lines[0], "  no-such-keyword-here", *lines[1:]]

    monkeypatch.setattr(render_module, "_global", global_section)
    monkeypatch.setattr(inst.applier, "_applied_cfg", None)  # no cached global section
    weak = weak_rsa_certificate("ns_b", HOSTS["b"])
    result = inst.applier.apply(site.snapshot(BINDINGS, ns_b=weak))
    assert not result.ok and "no-such-keyword-here" in result.error, result
    assert result.set_aside == ()
    assert site.serial(HOSTS["b"]) == site.leaves["b"].serial_hex  # the old one serves


def test_haproxy_c_runs_are_bounded_however_many_certificates_it_refuses(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six certificates only HAProxy refuses, on one crt-list: HAProxy names one per run,
    so three runs name three and the fourth runs with every other new certificate set
    aside unchecked; the next version checks those again (named within its own four)."""
    monkeypatch.setattr(certcheck, "weak_chain", lambda chain: None)
    runs: list[str] = []

    def counted(text: str, binary: str, timeout: float) -> str | None:
        runs.append(text)
        return validate(text, binary, timeout)

    monkeypatch.setattr(validation, "validate", counted)
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    hosts = {f"ns_x{i}": f"x{i}.example.com" for i in range(6)}
    weak = {name: weak_rsa_certificate(name, host) for name, host in hosts.items()}
    bindings = BINDINGS + [(name, [host]) for name, host in hosts.items()]
    runs.clear()
    first = inst.applier.apply(site.snapshot(bindings, **weak))
    assert first.ok, first
    assert len(runs) == setaside.MAX_CHECKS
    assert sorted(p.name for p in first.set_aside) == sorted(hosts)
    named = [p.name for p in first.set_aside if not p.unchecked]
    assert len(named) == setaside.MAX_CHECKS - 1
    assert site.serial(HOSTS["a"]) == site.leaves["a"].serial_hex
    runs.clear()
    second = inst.applier.apply(site.snapshot(bindings, **weak))
    assert second.ok, second
    assert len(runs) <= setaside.MAX_CHECKS
    assert sorted(p.name for p in second.set_aside) == sorted(hosts)
    assert not any(p.unchecked for p in second.set_aside)


def test_a_refused_certificate_command_falls_back_to_a_reload(site: Site) -> None:
    """HAProxy no longer holds a certificate the agent renews: the renewal is applied by a
    reload that reads the files, and the reason says why."""
    inst = site.inst
    assert inst.applier.apply(site.snapshot(BINDINGS)).ok
    path = os.path.join(inst.applier.options.certs_dir, "ns_w.pem")
    crtlist = os.path.join(inst.applier.options.certs_dir, f"fe_{site.port}.crtlist")
    assert "deleted" in inst.haproxy.runtime(f"del ssl crt-list {crtlist} {path}")
    assert "deleted" in inst.haproxy.runtime(f"del ssl cert {path}")
    site.leaves["w"] = CA.issue("*.w.example.com")
    result = inst.applier.apply(site.snapshot(BINDINGS))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    assert site.serial("x.w.example.com") == site.leaves["w"].serial_hex


def test_cli_render_writes_the_certificates_the_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], haproxy_bin: HAProxyBinary
) -> None:
    """`nodeagent render --certs-dir` writes the crt-lists and the certificates holding
    PEM, checked as the agent checks them, so `haproxy -c` reads the printed config alone."""
    leaves = {k: CA.issue(h) for k, h in HOSTS.items()}
    snap = snapshot([], [backend("ns_web_80", [("127.0.0.1", 8080)])])
    snap.certificates.extend(certificate(f"ns_{k}", leaf) for k, leaf in sorted(leaves.items()))
    snap.http_listeners.append(https_listener(8443, [(f"ns_{k}", []) for k in sorted(leaves)]))
    path = tmp_path / "snap.json"
    path.write_text(json_format.MessageToJson(snap))
    certs_dir = tmp_path / "certs"
    base = ["render", "--snapshot", str(path), "--pod-name", "haproxy-a"]
    dirs = ["--certs-dir", str(certs_dir), "--maps-dir", str(tmp_path / "maps")]
    assert cli.main([*base, "--haproxy-bin", haproxy_bin.path, *dirs]) == 0
    config = tmp_path / "haproxy.cfg"
    config.write_text(capsys.readouterr().out)
    assert sorted(os.listdir(certs_dir)) == ["fe_8443.crtlist", "ns_a.pem", "ns_b.pem", "ns_d.pem"]
    assert {_mode(str(certs_dir / name)) for name in os.listdir(certs_dir)} == {0o600}
    check = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    snap.certificates[0].pem = leaves["a"].cert_pem + leaves["b"].key_pem
    path.write_text(json_format.MessageToJson(snap))
    assert cli.main([*base, "--certs-dir", str(tmp_path / "other")]) == 1
    assert "certificate ns_a (sha256" in capsys.readouterr().err


def test_a_delta_carrying_a_renewed_certificate_rotates_it_at_runtime(site: Site) -> None:
    """As the stream delivers it: a SnapshotDelta with only the renewed certificate, applied
    to the held snapshot, then by the applier from its change set."""
    inst = site.inst
    v1 = hashed(site.snapshot(BINDINGS))
    assert inst.applier.apply(v1).ok
    site.leaves["a"] = CA.issue(HOSTS["a"])
    v2 = hashed(site.snapshot(BINDINGS))
    delta = delta_between(v1, v2)
    assert [c.name for c in delta.certificates] == ["ns_a"] and not delta.frontends_changed
    base = inst.applier.applied_held
    assert base is not None
    held, change = base.apply(delta)
    result = inst.applier.apply(held, change)
    assert result.ok and result.kind is ApplyPath.RUNTIME, result
    assert (
        site.serial(HOSTS["a"]) == site.serial("alias.example.com") == site.leaves["a"].serial_hex
    )
    assert inst.applier.store.load() == v2
