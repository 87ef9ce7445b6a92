"""Which certificates are set aside (nodeagent/apply/setaside.py), and how the crt-lists
leave them out (nodeagent/config/certs.py): pure. The alert lines are HAProxy's own, as
2.6, 3.0 and 3.2 print them for a crt-list line whose certificate they refuse."""

from __future__ import annotations

import pytest

from nodeagent.apply import setaside
from nodeagent.apply.outcome import SetAside
from nodeagent.config import certs
from peerplane.v1 import peerplane_pb2 as pb

pytestmark = pytest.mark.unit

DIR = "/etc/haproxy/certs"
CERTS = {
    name: pb.Certificate(name=name, fingerprint=f"{name}-fp")
    for name in ("tenant-a_web-tls", "tenant-b_web-tls", "tenant-c_web-tls")
}
LINE = (
    "[ALERT]    (14386) : config : parsing [haproxy.cfg:28] : 'bind 127.0.0.1:8443' in "
    "section 'frontend' : 'crt-list' : error processing line 2 in file "
    f"'{DIR}/fe_8443.crtlist' : unable to load SSL certificate into SSL Context "
    f"'{DIR}/tenant-b_web-tls.pem'{{tail}}"
)
SAID = {  # how each version ends the line
    "2.6": ".",
    "3.0": ": ee key too small.",
    "3.2": ": ee key too small.",
}


@pytest.mark.parametrize("series", sorted(SAID))
def test_haproxy_naming_a_certificate_file_sets_that_certificate_aside(series: str) -> None:
    error = "\n".join(
        [
            LINE.format(tail=SAID[series]),
            "[ALERT]    (14386) : config : Error(s) found in configuration file : haproxy.cfg",
            "[ALERT]    (14386) : config : Fatal errors found in configuration.",
        ]
    )
    found = setaside.refused_by_haproxy(error, DIR, CERTS)
    assert list(found) == ["tenant-b_web-tls"]
    part = found["tenant-b_web-tls"]
    assert (part.kind, part.fingerprint, part.unchecked) == (
        "certificate",
        "tenant-b_web-tls-fp",
        False,
    )
    assert part.reason == (
        "haproxy -c: unable to load SSL certificate into SSL Context "
        f"'{DIR}/tenant-b_web-tls.pem'{SAID[series]}"
    )


@pytest.mark.parametrize(
    "error",
    [
        "[ALERT] (1) : config : parsing [haproxy.cfg:3] : unknown keyword 'maxconnn' in 'global'",
        "[ALERT] (1) : config : cannot open '/elsewhere/tenant-b_web-tls.pem'",  # not its dir
        f"[ALERT] (1) : config : cannot load '{DIR}/tenant-z_gone.pem'",  # not in the snapshot
        f"[ALERT] (1) : config : cannot load '{DIR}/fe_8443.crtlist'",
    ],
    ids=["global-section", "other-directory", "unknown-certificate", "a-crt-list"],
)
def test_an_error_naming_no_certificate_of_the_snapshot_sets_nothing_aside(error: str) -> None:
    """Not a part's fault: the applier NACKs the version."""
    assert setaside.refused_by_haproxy(error, DIR, CERTS) == {}


def test_a_certificate_already_set_aside_is_not_named_again() -> None:
    error = LINE.format(tail=".")
    others = {n: c for n, c in CERTS.items() if n != "tenant-b_web-tls"}
    assert setaside.refused_by_haproxy(error, DIR, others) == {}


def test_what_stays_aside_without_a_check() -> None:
    named = SetAside("certificate", "tenant-a_web-tls", "tenant-a_web-tls-fp", "ee key too small")
    renewed = SetAside("certificate", "tenant-b_web-tls", "old-fp", "ee key too small")
    unchecked = setaside.unchecked(["tenant-c_web-tls"], CERTS)["tenant-c_web-tls"]
    previous = {p.name: p for p in (named, renewed, unchecked)}
    # Unchanged and named by a refusal: kept; renewed (another fingerprint): checked again;
    # set aside unchecked: checked again; checked again on purpose: not kept.
    assert setaside.carried(previous, CERTS, frozenset()) == {"tenant-a_web-tls": named}
    assert setaside.carried(previous, CERTS, frozenset({"tenant-a_web-tls"})) == {}
    assert setaside.carried(previous, CERTS, None) == {}  # a full check: all again
    assert setaside.carried(previous, {}, frozenset()) == {}  # gone from the snapshot


def _listener(port: int, *names: str) -> pb.HttpListener:
    listener = pb.HttpListener(port=port)
    listener.tls.certificates.extend(pb.CertificateBinding(certificate=n) for n in names)
    return listener


def test_crt_lists_leave_out_what_is_set_aside_and_an_emptied_one_is_strict_sni() -> None:
    listeners = [
        _listener(8443, "tenant-a_web-tls", "tenant-b_web-tls"),
        _listener(9443, "tenant-b_web-tls"),
    ]
    lists = certs.crt_lists(listeners, frozenset({"tenant-b_web-tls"}))
    assert lists == {"8443": (certs.CrtLine("tenant-a_web-tls"),), "9443": ()}
    assert "strict-sni" not in certs.bind_tls(DIR, "8443", lists)
    assert certs.bind_tls(DIR, "9443", lists) == (
        f" ssl crt-list {DIR}/fe_9443.crtlist alpn {certs.ALPN} strict-sni"
    )
    before = certs.crt_lists(listeners)
    steps = certs.cert_updates(DIR, before, lists, CERTS, frozenset())
    assert steps == "HTTPS listener 9443: default certificate changed (first crt-list line)"
    steps = certs.cert_updates(DIR, lists, before, CERTS, frozenset())
    assert steps == "HTTPS listener 9443: default certificate changed (first crt-list line)"
