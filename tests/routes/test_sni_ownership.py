"""Tenants sharing an HTTPS port (controlplane/routes/sni.py, crtlist.py): one namespace per
SNI name, the oldest binder keeping it, and the port's default certificate an operator's
choice (the settings' `default-certificate`), never the certificate of the namespace that
sorts first. Hostile round three, R2 and R3."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from controlplane.compute import Computer, WorkloadSnapshot, compute
from controlplane.model import ClusterState, ConfigMap, TLSSecret
from controlplane.routes import sni
from controlplane.routes.status import route_statuses
from controlplane.snapshot import CertificateBinding, RejectedInput
from controlplane.source.convert_gateway import gateway_from
from controlplane.source.convert_ingress import ingress_from
from tests.helpers.builders import WORKLOAD
from tests.helpers.route_builders import state
from tests.helpers.tls_certs import Leaf, make_ca

NOW = time.time()
CA = make_ca()
VICTIM = CA.issue("*.demo.example.com")
EVIL = CA.issue("secure.demo.example.com", "shop.tenant-b.example.org")
OPERATOR = CA.issue("edge.example.net")
OLD, NEW = "2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z"
SETTINGS_CM = ("haproxy-system", "haproxy-settings")


def secret(namespace: str, name: str, leaf: Leaf) -> TLSSecret:
    return TLSSecret(namespace=namespace, name=name, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)


def https_gateway(
    namespace: str,
    secret_name: str,
    hostname: str = "",
    created: str = OLD,
    name: str = "web",
    port: int = 443,
) -> Any:
    listener: dict[str, Any] = {
        "name": "https",
        "port": port,
        "protocol": "HTTPS",
        "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret_name}]},
    }
    if hostname:
        listener["hostname"] = hostname
    return gateway_from(
        {
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"gatewayClassName": "peerplane", "listeners": [listener]},
        }
    )


def tls_ingress(
    namespace: str, name: str, tls: list[dict[str, Any]], host: str, created: str = NEW
) -> Any:
    rule = {
        "host": host,
        "http": {
            "paths": [
                {
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": "shop", "port": {"number": 80}}},
                }
            ]
        },
    }
    return ingress_from(
        {
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"rules": [rule], "tls": tls},
        }
    )


def cluster(*objects: Any, secrets: tuple[TLSSecret, ...], **more: Any) -> ClusterState:
    return dataclasses.replace(state(*objects, **more), secrets=secrets)


def https_of(cluster_state: ClusterState, port: int = 443) -> Any:
    got = compute(cluster_state, {}, now=NOW).workloads[WORKLOAD]
    (https,) = [lst for lst in got.http_listeners if lst.port == port]
    return https


def lines(cluster_state: ClusterState, port: int = 443) -> dict[str, tuple[str, ...]]:
    """Each certificate's SNI names on the port (one line each here)."""
    return {b.certificate: b.hostnames for b in https_of(cluster_state, port).tls}


def served_for(cluster_state: ClusterState, name: str, port: int = 443) -> list[str]:
    """The certificates whose line holds `name` or its one-label wildcard, first line
    first: HAProxy serves the exact holder, else the wildcard one."""
    tls = https_of(cluster_state, port).tls
    exact = [b.certificate for b in tls if name in b.hostnames]
    wild = [b.certificate for b in tls if sni.covering_wildcard(name) in b.hostnames]
    return exact + wild


VICTIM_GATEWAY = https_gateway("tenant-a", "wild-tls", "*.demo.example.com")
EVIL_INGRESS = tls_ingress(
    "tenant-b",
    "evil",
    [
        {
            "hosts": ["secure.demo.example.com", "shop.tenant-b.example.org"],
            "secretName": "evil-tls",
        }
    ],
    host="shop.tenant-b.example.org",  # its rules are for another host
)
SECRETS = (secret("tenant-a", "wild-tls", VICTIM), secret("tenant-b", "evil-tls", EVIL))


# ---------------------------------------------------------------- R2: one owner per name


def test_an_ingress_cannot_bind_its_certificate_to_a_name_under_another_tenants_wildcard() -> None:
    """The finding: tenant B's spec.tls names secure.demo.example.com, which tenant A's
    older `*.demo.example.com` listener serves. HAProxy prefers an exact name, so B's line
    would take A's clients: it is refused for that name alone, and reported on B."""
    cluster_state = cluster(VICTIM_GATEWAY, EVIL_INGRESS, secrets=SECRETS)
    assert served_for(cluster_state, "secure.demo.example.com") == ["tenant-a_wild-tls"]
    assert lines(cluster_state)["tenant-b_evil-tls"] == ("shop.tenant-b.example.org",)
    result = compute(cluster_state, {}, now=NOW)
    (warning,) = [w for w in result.rejections if w.key.startswith("spec.tls")]
    assert warning == RejectedInput(
        "Ingress",
        "tenant-b",
        "evil",
        "spec.tls[0].hosts",
        "secure.demo.example.com",
        "port 443: secure.demo.example.com is served (under its *.demo.example.com) by the "
        "older Gateway tenant-a/web listener https of another namespace; this certificate "
        "is not presented for it",
    )
    assert warning in result.workloads[WORKLOAD].warnings  # the snapshot's too


def test_a_younger_gateway_listener_cannot_take_an_older_ingress_name() -> None:
    """The same name exactly, the other way round: an older Ingress holds it; the
    younger listener of another namespace is refused, with an Event and its listener
    status Conflicted (HostnameConflict), still programmed for what else it serves."""
    owner = tls_ingress(
        "tenant-a",
        "shop",
        [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}],
        host="shop.example.com",
        created=OLD,
    )
    thief = https_gateway("tenant-b", "evil-tls", "shop.example.com", created=NEW)
    shop = CA.issue("shop.example.com")
    cluster_state = cluster(
        owner,
        thief,
        secrets=(secret("tenant-a", "shop-tls", shop), secret("tenant-b", "evil-tls", shop)),
    )
    assert served_for(cluster_state, "shop.example.com") == ["tenant-a_shop-tls"]
    result = compute(cluster_state, {}, now=NOW)
    # Two refusals of one claim, each where it applies: the hostname's routing (the
    # listener is not served for it, routes/ownership.py) and its certificate (here).
    routing, (warning,) = (
        [w for w in result.rejections if w.kind == "Gateway" and w.key.endswith(f"[{i}].hostname")]
        for i in ("0", "https")
    )
    assert "held by the older Ingress tenant-a/shop" in routing[0].reason
    assert (warning.object, warning.key, warning.value) == (
        "Gateway tenant-b/web",
        "spec.listeners[https].hostname",
        "shop.example.com",
    )
    assert "by the older Ingress tenant-a/shop spec.tls[0].hosts" in warning.reason
    statuses = route_statuses(cluster_state, now=NOW)
    (body,) = [b for k, b in statuses.items() if k.kind == "Gateway"]
    found = {c["type"]: c for c in body["listeners"][0]["conditions"]}
    assert (found["Conflicted"]["status"], found["Conflicted"]["reason"]) == (
        "True",
        "HostnameConflict",
    )
    assert found["Conflicted"]["message"] == warning.reason
    assert found["Programmed"]["status"] == "True"


@pytest.mark.parametrize("attacker", ["aaa", "zzz"])
def test_age_decides_not_the_namespace_that_sorts_first(attacker: str) -> None:
    victim = https_gateway("tenant-a", "wild-tls", "*.demo.example.com", created=OLD)
    thief = https_gateway(attacker, "evil-tls", "secure.demo.example.com", created=NEW)
    secrets = (secret("tenant-a", "wild-tls", VICTIM), secret(attacker, "evil-tls", EVIL))
    cluster_state = cluster(victim, thief, secrets=secrets)
    assert served_for(cluster_state, "secure.demo.example.com") == ["tenant-a_wild-tls"]
    # The same objects, the attacker's the older: now it is the owner of its exact name,
    # and the victim's younger wildcard does not take it (exact names come first).
    older = dataclasses.replace(thief, creation_timestamp="2025-01-01T00:00:00Z")
    swapped = cluster(victim, older, secrets=secrets)
    assert served_for(swapped, "secure.demo.example.com")[0] == f"{attacker}_evil-tls"


def test_an_object_without_creation_timestamp_is_the_youngest() -> None:
    thief = https_gateway("aaa", "evil-tls", "secure.demo.example.com", created="")
    secrets = (secret("tenant-a", "wild-tls", VICTIM), secret("aaa", "evil-tls", EVIL))
    cluster_state = cluster(VICTIM_GATEWAY, thief, secrets=secrets)
    assert served_for(cluster_state, "secure.demo.example.com") == ["tenant-a_wild-tls"]


def test_a_catch_all_certificate_presents_only_its_names_no_other_namespace_holds() -> None:
    """A listener without hostname presents its certificate's own names: one of them
    under another tenant's older wildcard is left out of its line, the others stay."""
    thief = https_gateway("tenant-b", "evil-tls", created=NEW)
    cluster_state = cluster(VICTIM_GATEWAY, thief, secrets=SECRETS)
    assert lines(cluster_state)["tenant-b_evil-tls"] == ("shop.tenant-b.example.org",)
    assert served_for(cluster_state, "secure.demo.example.com") == ["tenant-a_wild-tls"]
    warnings = compute(cluster_state, {}, now=NOW).rejections
    (warning,) = [w for w in warnings if w.kind == "Gateway"]
    assert (warning.key, warning.value) == (
        "spec.listeners[https].tls.certificateRefs",
        "secure.demo.example.com",
    )


def test_a_name_wholly_refused_leaves_the_sources_other_lines() -> None:
    """A source whose every name is held elsewhere has no line; the port keeps the
    owner's, and nothing of the refused source's certificate travels."""
    thief = tls_ingress(
        "tenant-b",
        "evil",
        [{"hosts": ["secure.demo.example.com"], "secretName": "evil-tls"}],
        host="other.example.org",
    )
    got = compute(cluster(VICTIM_GATEWAY, thief, secrets=SECRETS), {}, now=NOW)
    snapshot = got.workloads[WORKLOAD]
    (https,) = [lst for lst in snapshot.http_listeners if lst.port == 443]
    assert [b.certificate for b in https.tls] == ["tenant-a_wild-tls"]
    assert [c.name for c in snapshot.certificates] == ["tenant-a_wild-tls"]


def test_a_younger_wildcard_over_an_older_exact_name_steals_nothing_and_is_served() -> None:
    exact = https_gateway("tenant-a", "evil-tls", "secure.demo.example.com", created=OLD)
    wild = https_gateway("tenant-b", "wild-tls", "*.demo.example.com", created=NEW)
    secrets = (secret("tenant-a", "evil-tls", EVIL), secret("tenant-b", "wild-tls", VICTIM))
    cluster_state = cluster(exact, wild, secrets=secrets)
    assert served_for(cluster_state, "secure.demo.example.com")[0] == "tenant-a_evil-tls"
    assert served_for(cluster_state, "x.demo.example.com") == ["tenant-b_wild-tls"]
    assert not [w for w in compute(cluster_state, {}, now=NOW).rejections if w.kind == "Gateway"]


def test_a_name_two_labels_below_a_wildcard_is_held_by_the_wildcards_namespace() -> None:
    """HAProxy's `*.demo.example.com` answers one label only, so the certificate alone
    would take nothing from the victim; but a Gateway API wildcard matches every label
    below it, so a.b.demo.example.com is the victim's hostname (routes/ownership.py): the
    younger listener of another namespace is not served for it, and binds no certificate."""
    thief = https_gateway("tenant-b", "evil-tls", "a.b.demo.example.com", created=NEW)
    deep = CA.issue("a.b.demo.example.com")
    secrets = (secret("tenant-a", "wild-tls", VICTIM), secret("tenant-b", "evil-tls", deep))
    cluster_state = cluster(VICTIM_GATEWAY, thief, secrets=secrets)
    assert "tenant-b_evil-tls" not in lines(cluster_state)
    statuses = route_statuses(cluster_state, now=NOW)
    (body,) = [b for k, b in statuses.items() if k.kind == "Gateway" and k.namespace == "tenant-b"]
    found = {c["type"]: c for c in body["listeners"][0]["conditions"]}
    assert (found["Conflicted"]["status"], found["Conflicted"]["reason"]) == (
        "True",
        "HostnameConflict",
    )
    assert "held by the older Gateway tenant-a/web" in found["Conflicted"]["message"]
    assert found["Programmed"]["status"] == "False"


def test_within_one_namespace_bindings_keep_todays_order() -> None:
    """One tenant, two listeners for one name: nothing is refused (one owner), the
    crt-list order decides as before (the first line holding a name serves it)."""
    first = https_gateway("tenant-a", "wild-tls", "secure.demo.example.com", name="a")
    second = https_gateway("tenant-a", "evil-tls", "secure.demo.example.com", name="b")
    secrets = (secret("tenant-a", "wild-tls", VICTIM), secret("tenant-a", "evil-tls", EVIL))
    cluster_state = cluster(first, second, secrets=secrets)
    assert served_for(cluster_state, "secure.demo.example.com") == [
        "tenant-a_wild-tls",
        "tenant-a_evil-tls",
    ]
    assert not compute(cluster_state, {}, now=NOW).rejections


def test_refusals_are_decided_oldest_first_and_refused_names_hold_nothing() -> None:
    a = sni.Source("Gateway", "a", "g", "w", created=OLD)
    b = sni.Source("Ingress", "b", "i", "w", created=NEW)
    c = sni.Source("Ingress", "c", "i", "w", created="2026-06-01T00:00:00Z")
    refused = sni.refusals(
        [
            (c, ("x.example.com",)),
            (b, ("x.example.com", "y.example.com")),
            (a, ("*.example.com",)),
        ]
    )
    assert {(r.source.namespace, r.name, r.owner.namespace, r.held) for r in refused.values()} == {
        ("b", "x.example.com", "a", "*.example.com"),
        ("b", "y.example.com", "a", "*.example.com"),
        ("c", "x.example.com", "a", "*.example.com"),
    }
    assert not sni.refusals([(b, ("x.example.com",)), (c, ("*.example.com",))])


# ---------------------------------------------------------------- R3: the default certificate


def settings(**data: str) -> ConfigMap:
    return ConfigMap(*SETTINGS_CM, data=data)


OPERATOR_SECRET = secret("haproxy-system", "default-tls", OPERATOR)


def test_without_a_default_certificate_setting_the_port_has_no_default() -> None:
    """Tenant `aaa` sorts first and binds a listener without hostname: today its
    certificate became the port's default, for every client without SNI. Now no
    certificate is the default (strict-sni) until the operator names one."""
    first = https_gateway("aaa", "aaa-tls", created=OLD)
    secrets = (*SECRETS, secret("aaa", "aaa-tls", CA.issue("aaa.example.com")))
    https = https_of(cluster(first, VICTIM_GATEWAY, EVIL_INGRESS, secrets=secrets))
    assert https.strict_sni
    assert all(not h.startswith("!") for b in https.tls for h in b.hostnames)


def test_the_operators_default_certificate_comes_first_and_serves_no_name_by_sni() -> None:
    first = https_gateway("aaa", "aaa-tls", created=OLD)
    aaa = CA.issue("aaa.example.com")
    operator = CA.issue("edge.example.net", "aaa.example.com")  # shares a tenant's name
    secrets = (
        secret("aaa", "aaa-tls", aaa),
        secret("haproxy-system", "default-tls", operator),
    )
    cluster_state = cluster(
        first,
        secrets=secrets,
        config=settings(**{"default-certificate": "haproxy-system/default-tls"}),
    )
    https = https_of(cluster_state)
    assert not https.strict_sni
    assert https.tls == (
        CertificateBinding("haproxy-system_default-tls", ("!edge.example.net", "!aaa.example.com")),
        CertificateBinding("aaa_aaa-tls", ("aaa.example.com",)),
    )
    got = compute(cluster_state, {}, now=NOW).workloads[WORKLOAD]
    assert [c.name for c in got.certificates] == ["aaa_aaa-tls", "haproxy-system_default-tls"]
    assert got.warnings == ()


def test_the_default_certificate_is_on_every_https_port() -> None:
    config = settings(**{"default-certificate": "haproxy-system/default-tls"})
    gateways = (
        https_gateway("tenant-a", "wild-tls", "*.demo.example.com", port=443),
        https_gateway("tenant-c", "c-tls", "c.example.org", port=8443, name="c"),
    )
    secrets = (*SECRETS, OPERATOR_SECRET, secret("tenant-c", "c-tls", CA.issue("c.example.org")))
    cluster_state = cluster(*gateways, secrets=secrets, config=config)
    for port in (443, 8443):
        assert https_of(cluster_state, port).tls[0].certificate == "haproxy-system_default-tls"


@pytest.mark.parametrize(
    ("named", "reason"),
    [("haproxy-system/missing", "Secret not found"), ("haproxy-system/expired", "expired")],
)
def test_an_unusable_default_certificate_is_reported_and_the_port_has_no_default(
    named: str, reason: str
) -> None:
    expired = secret("haproxy-system", "expired", CA.issue("edge.example.net", expired=True))
    config = settings(**{"default-certificate": named})
    cluster_state = cluster(VICTIM_GATEWAY, secrets=(*SECRETS, expired), config=config)
    assert https_of(cluster_state).strict_sni
    result = compute(cluster_state, {}, now=NOW)
    (warning,) = [w for w in result.rejections if w.key == "default-certificate"]
    assert (warning.object, warning.value) == ("ConfigMap haproxy-system/haproxy-settings", named)
    assert reason in warning.reason and "fails the handshake" in warning.reason


def test_a_malformed_default_certificate_is_reported_with_the_settings() -> None:
    config = settings(**{"default-certificate": "no-namespace"})
    result = compute(cluster(VICTIM_GATEWAY, secrets=SECRETS, config=config), {}, now=NOW)
    (warning,) = [w for w in result.rejections if w.key == "default-certificate"]
    assert "is not namespace/name of a Secret" in warning.reason
    assert https_of(cluster(VICTIM_GATEWAY, secrets=SECRETS, config=config)).strict_sni


def _with_default(leaf: Leaf) -> ClusterState:
    config = settings(**{"default-certificate": "haproxy-system/default-tls"})
    secrets = (*SECRETS, secret("haproxy-system", "default-tls", leaf))
    return cluster(VICTIM_GATEWAY, EVIL_INGRESS, secrets=secrets, config=config)


def _by_name(snapshot: WorkloadSnapshot) -> dict[str, str]:
    return {c.name: c.serial for c in snapshot.certificates}


def test_a_renewed_default_certificate_is_computed_again_and_equals_a_fresh_computation() -> None:
    computer = Computer()
    first = _with_default(OPERATOR)
    got = computer.compute(first, {}, now=NOW).workloads[WORKLOAD]
    assert _by_name(got)["haproxy-system_default-tls"] == OPERATOR.serial_hex
    renewed = CA.issue("edge.example.net")
    second = _with_default(renewed)
    again = computer.compute(second, {}, now=NOW)
    assert _by_name(again.workloads[WORKLOAD])["haproxy-system_default-tls"] == renewed.serial_hex
    fresh = compute(second, {}, now=NOW)
    assert again.workloads == fresh.workloads and again.rejections == fresh.rejections
