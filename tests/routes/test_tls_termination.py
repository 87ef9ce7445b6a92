"""TLS termination in the route model (controlplane/routes/termination.py, crtlist.py):
HTTPS listeners and Ingress spec.tls to each workload's crt-lists and certificates, every
bad Secret reported on the listener's status or the Ingress while the rest is served, the
PROXY protocol opt-ins, and what a Secret change recomputes."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controlplane.compute import Computer, WorkloadSnapshot, compute
from controlplane.model import ClusterState, ConfigMap, TLSSecret
from controlplane.routes.status import route_statuses
from controlplane.snapshot import Certificate, CertificateBinding, RejectedInput
from controlplane.source.convert_gateway import gateway_from, reference_grant_from
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, endpoint_slice, service
from tests.helpers.route_builders import edge_pod, ingress, path, prefix_rule, route, state, to
from tests.helpers.tls_certs import Leaf, ec_key, make_ca, rsa_key

NOW = time.time()
CA = make_ca()
SHOP = CA.issue("shop.example.com")
WILD = CA.issue("*.example.com", "example.com", days=365)  # outlives SHOP
OTHER = CA.issue("other.example.com")
SETTINGS_CM = ("haproxy-system", "haproxy-settings")


def secret(name: str, leaf: Leaf | None = SHOP, namespace: str = "default", **more: Any) -> Any:
    fields: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "cert_pem": leaf.cert_pem if leaf else b"",
        "key_pem": leaf.key_pem if leaf else b"",
    }
    fields.update(more)
    return TLSSecret(**fields)


def ref(name: str, **more: str) -> dict[str, str]:
    return {"name": name, **more}


def listener(
    name: str, port: int = 8443, hostname: str = "", refs: tuple[dict[str, str], ...] = ()
) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "port": port, "protocol": "HTTPS"}
    if hostname:
        found["hostname"] = hostname
    found["tls"] = {"mode": "Terminate", "certificateRefs": list(refs)}
    return found


def gateway(
    *listeners: dict[str, Any],
    name: str = "web",
    annotations: dict[str, str] | None = None,
) -> Any:
    return gateway_from(
        {
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {"gatewayClassName": "peerplane", "listeners": list(listeners)},
        }
    )


def cluster(*objects: Any, secrets: tuple[TLSSecret, ...] = (), **more: Any) -> ClusterState:
    return dataclasses.replace(state(*objects, **more), secrets=secrets)


SERVED = route("r", [prefix_rule("/", [to("shop")])])


def snapshot_of(
    cluster_state: ClusterState, workload: str = WORKLOAD, now: float = NOW
) -> WorkloadSnapshot:
    return compute(cluster_state, {}, now=now).workloads[workload]


def listener_status(cluster_state: ClusterState, name: str, now: float = NOW) -> dict[str, Any]:
    statuses = route_statuses(cluster_state, now=now)
    (found,) = [
        lst
        for key, body in statuses.items()
        if key.kind == "Gateway"
        for lst in body["listeners"]
        if lst["name"] == name
    ]
    return found


def conditions(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in body["conditions"]}


def assert_no_secret_text(texts: list[str], *secrets: TLSSecret) -> None:
    """No PEM marker, PEM body line or base64 of a Secret's data in any of `texts`."""
    joined = "\n".join(texts)
    assert "-----BEGIN" not in joined and "PRIVATE KEY" not in joined
    for s in secrets:
        for pem in (s.cert_pem, s.key_pem):
            if not pem:
                continue
            assert base64.b64encode(pem).decode()[:16] not in joined
            for line in pem.splitlines():
                if not line.startswith(b"-----"):
                    assert line.decode()[:16] not in joined


def texts_of(snapshot: WorkloadSnapshot, status: dict[str, Any]) -> list[str]:
    return [
        *(f"{w.key} {w.value} {w.reason}" for w in snapshot.warnings),
        json.dumps(status),
    ]


# ---------------------------------------------------------------- a served HTTPS listener


def test_https_listener_serves_its_routes_with_its_certificate() -> None:
    got = snapshot_of(
        cluster(
            gateway(listener("https", refs=(ref("shop-tls"),))),
            SERVED,
            secrets=(secret("shop-tls"),),
        )
    )
    (https,) = got.http_listeners
    assert https.port == 8443
    assert [r.source for r in https.rules] == ["HTTPRoute default/r rule 0 match 0"]
    assert https.tls == (CertificateBinding("default_shop-tls", ("shop.example.com",)),)
    assert https.strict_sni  # no default-certificate in the settings: no default
    assert not https.accept_proxy
    (certificate,) = got.certificates
    assert (certificate.name, certificate.secret, certificate.dns_names) == (
        "default_shop-tls",
        "default/shop-tls",
        ("shop.example.com",),
    )
    assert certificate.serial == SHOP.serial_hex
    assert got.warnings == ()


def test_tls_options_and_frontend_validation_are_reported_and_the_listener_served() -> None:
    """Fields of the listener's tls block peerplane does not serve are said, not dropped
    in silence; the listener is served with its certificate all the same."""
    https = listener("https", refs=(ref("shop-tls"),))
    https["tls"]["options"] = {"example.com/cipher-suites": "TLS_AES_256_GCM_SHA384"}
    https["tls"]["frontendValidation"] = {"caCertificateRefs": [{"name": "ca"}]}
    got = snapshot_of(cluster(gateway(https), SERVED, secrets=(secret("shop-tls"),)))
    assert got.http_listeners[0].tls == (
        CertificateBinding("default_shop-tls", ("shop.example.com",)),
    )
    keys = sorted(w.key for w in got.warnings if w.object == "Gateway default/web")
    assert keys == [
        "spec.listeners[https].tls.frontendValidation",
        "spec.listeners[https].tls.options",
    ]
    assert all("not served" in w.reason for w in got.warnings)


def test_listener_hostname_binds_its_certificates_to_that_name() -> None:
    got = snapshot_of(
        cluster(
            gateway(listener("https", hostname="shop.example.com", refs=(ref("shop-tls"),))),
            SERVED,
            secrets=(secret("shop-tls"),),
        )
    )
    assert got.http_listeners[0].tls == (
        CertificateBinding("default_shop-tls", ("shop.example.com",)),
    )
    assert got.http_listeners[0].rules[0].hostnames == ("shop.example.com",)


def test_status_of_a_served_https_listener() -> None:
    found = listener_status(
        cluster(
            gateway(listener("https", refs=(ref("shop-tls"),))),
            SERVED,
            secrets=(secret("shop-tls"),),
        ),
        "https",
    )
    assert conditions(found) == {
        "Accepted": ("True", "Accepted"),
        "Programmed": ("True", "Programmed"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Conflicted": ("False", "NoConflicts"),
    }
    assert found["attachedRoutes"] == 1


# ---------------------------------------------------------------- bad Secrets


def _dated_leaf(days_from: int, days_to: int) -> Leaf:
    leaf = CA.issue("later.example.com")
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "later.example.com")]))
        .issuer_name(CA.cert.subject)
        .public_key(leaf.key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + dt.timedelta(days=days_from))
        .not_valid_after(now + dt.timedelta(days=days_to))
        .sign(CA.key, hashes.SHA256())
    )
    return Leaf(key=leaf.key, cert=cert, ca=CA)


ENCRYPTED_KEY = SHOP.key.private_bytes(
    serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8,
    serialization.BestAvailableEncryption(b"secret"),
)
GRANT = reference_grant_from(
    {
        "metadata": {"name": "certs", "namespace": "certs"},
        "spec": {
            "from": [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "default"}
            ],
            "to": [{"group": "", "kind": "Secret", "name": "bad"}],
        },
    }
)
BAD_CASES: dict[str, tuple[tuple[TLSSecret, ...], dict[str, str], tuple[Any, ...], str, str]] = {
    # case: (Secrets, the bad ref, more objects, reason, message part)
    "missing": ((), ref("bad"), (), "InvalidCertificateRef", "Secret not found"),
    "wrong type": (
        (secret("bad", type="Opaque"),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "Secret type is 'Opaque', not kubernetes.io/tls",
    ),
    "not PEM": (
        (secret("bad", cert_pem=b"garbage"),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "tls.crt is not PEM certificates",
    ),
    "key mismatch": (
        (secret("bad", SHOP.with_foreign_key()),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "tls.key is not the key of the first certificate of tls.crt",
    ),
    # HAProxy 2.6, 3.0 and 3.2 refuse these keys ("ee key too small"): refused here, one
    # Secret, instead of NACKing every tenant's snapshot at the agents.
    "RSA-1024 key": (
        (secret("bad", CA.issue("weak.example.com", key=rsa_key(1024))),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "tls.crt: the leaf certificate has an RSA key of 1024 bits",
    ),
    "P-192 key": (
        (secret("bad", CA.issue("weak.example.com", key=ec_key(ec.SECP192R1()))),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "tls.crt: the leaf certificate has an EC key on secp192r1",
    ),
    "expired": (
        (secret("bad", CA.issue("old.example.com", expired=True)),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "certificate expired at",
    ),
    "not yet valid": (
        (secret("bad", _dated_leaf(2, 30)),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "certificate not valid before",
    ),
    "encrypted key": (
        (secret("bad", key_pem=ENCRYPTED_KEY),),
        ref("bad"),
        (),
        "InvalidCertificateRef",
        "tls.key is encrypted",
    ),
    "not a Secret": (
        (),
        ref("bad", kind="ConfigMap"),
        (),
        "InvalidCertificateRef",
        "ConfigMap of group core is not a core Secret",
    ),
    "other namespace, no grant": (
        (secret("bad", namespace="certs"),),
        ref("bad", namespace="certs"),
        (),
        "RefNotPermitted",
        "no ReferenceGrant in namespace certs",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_a_bad_certificate_ref_is_reported_and_the_listener_served_with_the_others(
    case: str,
) -> None:
    bad_secrets, bad_ref, more, reason, message = BAD_CASES[case]
    good = secret("shop-tls")
    cluster_state = cluster(
        gateway(listener("https", refs=(bad_ref, ref("shop-tls")))),
        SERVED,
        *more,
        secrets=(*bad_secrets, good),
    )
    got = snapshot_of(cluster_state)
    (https,) = got.http_listeners
    assert https.tls == (CertificateBinding("default_shop-tls", ("shop.example.com",)),)
    assert [c.name for c in got.certificates] == ["default_shop-tls"]
    assert [r.source for r in https.rules] == ["HTTPRoute default/r rule 0 match 0"]
    (warning,) = got.warnings
    assert (warning.object, warning.key) == (
        "Gateway default/web",
        "spec.listeners[https].tls.certificateRefs",
    )
    assert warning.reason.startswith(f"{reason}: certificateRefs[0] ")
    assert message in warning.reason
    assert warning in compute(cluster_state, {}, now=NOW).rejections  # becomes an Event
    status = listener_status(cluster_state, "https")
    found = conditions(status)
    assert found["ResolvedRefs"] == ("False", reason)
    assert found["Programmed"] == ("True", "Programmed")  # still served
    assert status["attachedRoutes"] == 1
    assert_no_secret_text(texts_of(got, status), *bad_secrets, good)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_a_listener_whose_every_ref_is_bad_is_not_served(case: str) -> None:
    bad_secrets, bad_ref, more, reason, _ = BAD_CASES[case]
    cluster_state = cluster(
        gateway(listener("https", refs=(bad_ref,))), SERVED, *more, secrets=bad_secrets
    )
    got = snapshot_of(cluster_state)
    assert got.http_listeners == () and got.certificates == ()
    status = listener_status(cluster_state, "https")
    found = conditions(status)
    assert found["ResolvedRefs"] == ("False", reason)
    assert found["Programmed"] == ("False", "Invalid")
    assert "listener not served" in status["conditions"][2]["message"]
    assert_no_secret_text(texts_of(got, status), *bad_secrets)


def test_a_route_attached_to_a_listener_with_unresolved_refs_is_counted_not_served() -> None:
    """Gateway API: attachedRoutes counts the routes attached whatever the listener's
    ResolvedRefs (conformance GatewayWithAttachedRoutes, "unresolved refs"): the route is
    Accepted, the listener not served until its certificate resolves."""
    attached = route(
        "r",
        [prefix_rule("/", [to("nowhere")])],
        parent={"name": "web", "namespace": "default", "sectionName": "https"},
    )
    web = gateway(listener("https", refs=(ref("shop-tls"),)))
    cluster_state = cluster(web, attached)
    status = listener_status(cluster_state, "https")
    assert status["attachedRoutes"] == 1
    assert conditions(status)["Programmed"][0] == "False"
    assert conditions(status)["ResolvedRefs"] == ("False", "InvalidCertificateRef")
    statuses = route_statuses(cluster_state, now=NOW)
    (route_body,) = [body for key, body in statuses.items() if key.kind == "HTTPRoute"]
    (parent,) = route_body["parents"]
    assert conditions(parent) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("False", "BackendNotFound"),
    }
    assert snapshot_of(cluster_state).http_listeners == ()
    resolved = cluster(web, attached, secrets=(secret("shop-tls"),))
    (https,) = snapshot_of(resolved).http_listeners
    assert [r.source for r in https.rules] == ["HTTPRoute default/r rule 0 match 0"]
    assert listener_status(resolved, "https")["attachedRoutes"] == 1


def test_a_cross_namespace_secret_with_a_reference_grant_is_served() -> None:
    got = snapshot_of(
        cluster(
            gateway(listener("https", refs=(ref("bad", namespace="certs"),))),
            SERVED,
            GRANT,
            secrets=(secret("bad", namespace="certs"),),
        )
    )
    assert got.http_listeners[0].tls == (CertificateBinding("certs_bad", ("shop.example.com",)),)
    assert [c.secret for c in got.certificates] == ["certs/bad"]
    assert got.warnings == ()


def test_a_grant_for_another_secret_name_does_not_permit() -> None:
    got = snapshot_of(
        cluster(
            gateway(listener("https", refs=(ref("other", namespace="certs"),))),
            SERVED,
            GRANT,
            secrets=(secret("other", namespace="certs"),),
        )
    )
    assert got.http_listeners == ()
    assert got.warnings[0].reason.startswith("RefNotPermitted: ")


def test_an_https_listener_without_certificate_refs_is_not_served() -> None:
    cluster_state = cluster(gateway(listener("https")), SERVED)
    assert snapshot_of(cluster_state).http_listeners == ()
    found = conditions(listener_status(cluster_state, "https"))
    assert found["ResolvedRefs"] == ("False", "InvalidCertificateRef")


# ---------------------------------------------------------------- crt-lists


def test_bindings_named_hosts_before_catch_all_each_line_naming_its_names() -> None:
    """A catch-all line names its certificate's own names: with no SNI filter HAProxy
    would take the subject's CN too, which no ownership check has seen."""
    got = snapshot_of(
        cluster(
            gateway(
                listener("a", hostname="shop.example.com", refs=(ref("shop"),)),
                listener("any", refs=(ref("wild"), ref("other"))),
                listener("b", hostname="*.b.example.com", refs=(ref("other"),)),
            ),
            route("r", [prefix_rule("/", [to("shop")])]),
            secrets=(secret("shop"), secret("wild", WILD), secret("other", OTHER)),
        )
    )
    (https,) = got.http_listeners
    assert https.tls == (
        CertificateBinding("default_shop", ("shop.example.com",)),
        CertificateBinding("default_other", ("*.b.example.com",)),
        CertificateBinding("default_wild", ("*.example.com", "example.com")),
        CertificateBinding("default_other", ("other.example.com",)),
    )
    assert https.strict_sni
    assert [c.name for c in got.certificates] == ["default_other", "default_shop", "default_wild"]


def test_a_catch_all_certificate_leaves_names_bound_by_a_listener_to_that_listener() -> None:
    """HAProxy gives a name to the first crt-list line holding it: a catch-all
    certificate's line leaves out its own names that a hostname listener of its namespace
    binds (a line with "!name" filters alone would serve no name at all)."""
    wide = CA.issue("www.example.com", "shop.example.com")
    got = snapshot_of(
        cluster(
            gateway(
                listener("a", hostname="shop.example.com", refs=(ref("shop"),)),
                listener("any", refs=(ref("wide"),)),
            ),
            route("r", [prefix_rule("/", [to("shop")])]),
            secrets=(secret("shop"), secret("wide", wide)),
        )
    )
    assert got.http_listeners[0].tls == (
        CertificateBinding("default_shop", ("shop.example.com",)),
        CertificateBinding("default_wide", ("www.example.com",)),
    )


def test_without_a_default_certificate_setting_no_listener_gives_the_default() -> None:
    """Neither the first listener nor a catch-all one: no SNI match, no certificate."""
    got = snapshot_of(
        cluster(
            gateway(
                listener("b", hostname="other.example.com", refs=(ref("other"),)),
                listener("a", hostname="shop.example.com", refs=(ref("shop"),)),
            ),
            route("r", [prefix_rule("/", [to("shop")])]),
            secrets=(secret("shop"), secret("other", OTHER)),
        )
    )
    assert got.http_listeners[0].tls == (
        CertificateBinding("default_other", ("other.example.com",)),
        CertificateBinding("default_shop", ("shop.example.com",)),
    )
    assert got.http_listeners[0].strict_sni


def test_two_gateways_on_one_port_share_one_crt_list() -> None:
    got = snapshot_of(
        cluster(
            gateway(listener("https", hostname="shop.example.com", refs=(ref("shop"),))),
            gateway(listener("https", refs=(ref("wild"),)), name="other"),
            route("r", [prefix_rule("/", [to("shop")])], parent={"name": "web"}),
            secrets=(secret("shop"), secret("wild", WILD)),
        )
    )
    assert got.http_listeners[0].tls == (
        CertificateBinding("default_shop", ("shop.example.com",)),
        CertificateBinding("default_wild", ("*.example.com", "example.com")),
    )


def test_http_and_https_listeners_on_one_port_are_conflicted() -> None:
    plain = {"name": "http", "port": 8443, "protocol": "HTTP"}
    cluster_state = cluster(
        gateway(listener("https", refs=(ref("shop"),)), name="web"),
        gateway(plain, name="other"),
        SERVED,
        secrets=(secret("shop"),),
    )
    got = snapshot_of(cluster_state)
    assert got.http_listeners == () and got.certificates == ()
    statuses = route_statuses(cluster_state, now=NOW)
    for key, body in statuses.items():
        if key.kind == "Gateway":
            found = conditions(body["listeners"][0])
            assert found["Conflicted"] == ("True", "ProtocolConflict"), key
            assert found["Programmed"][0] == "False"


def test_an_https_listener_on_the_settings_http_port_is_refused() -> None:
    cluster_state = cluster(
        gateway(listener("https", port=80, refs=(ref("shop"),))), SERVED, secrets=(secret("shop"),)
    )
    assert snapshot_of(cluster_state).http_listeners == ()
    found = conditions(listener_status(cluster_state, "https"))
    assert found["Accepted"] == ("False", "PortUnavailable")


# ---------------------------------------------------------------- Ingress spec.tls


def tls_ingress(
    name: str, tls: list[dict[str, Any]], host: str = "shop.example.com", **spec: Any
) -> Any:
    return ingress(
        name, [{"host": host, "http": {"paths": [path("/", "Prefix")]}}], tls=tls, **spec
    )


def test_ingress_tls_serves_its_rules_on_http_and_https_ports_with_its_certificate() -> None:
    got = snapshot_of(
        cluster(
            tls_ingress("shop", [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}]),
            secrets=(secret("shop-tls"),),
        )
    )
    http, https = got.http_listeners
    assert (http.port, https.port) == (80, 443)
    assert http.rules == https.rules and http.tls == ()
    assert https.tls == (CertificateBinding("default_shop-tls", ("shop.example.com",)),)
    assert [c.name for c in got.certificates] == ["default_shop-tls"]
    assert got.warnings == ()


def test_ingress_without_tls_is_served_on_http_only() -> None:
    got = snapshot_of(cluster(tls_ingress("shop", [])))
    assert [lst.port for lst in got.http_listeners] == [80]


def test_a_bad_ingress_secret_is_reported_and_the_others_are_served() -> None:
    bad = secret("bad", SHOP.with_foreign_key())
    cluster_state = cluster(
        tls_ingress("shop", [{"hosts": ["shop.example.com"], "secretName": "bad"}]),
        tls_ingress(
            "wild",
            [{"secretName": "wild-tls"}],
            host="www.example.com",
            created="2026-02-01T00:00:00Z",
        ),
        secrets=(bad, secret("wild-tls", WILD)),
    )
    result = compute(cluster_state, {}, now=NOW)
    got = result.workloads[WORKLOAD]
    https = got.http_listeners[1]
    assert https.port == 443
    assert https.tls == (CertificateBinding("default_wild-tls", ("*.example.com", "example.com")),)
    assert {r.hostnames for r in https.rules} == {("shop.example.com",), ("www.example.com",)}
    (warning,) = got.warnings
    assert warning == RejectedInput(
        "Ingress",
        "default",
        "shop",
        "spec.tls[0].secretName",
        "bad",
        "tls.key is not the key of the first certificate of tls.crt: these hosts get the "
        "settings' default-certificate, or fail the handshake without one",
    )
    assert warning in result.rejections
    assert_no_secret_text(texts_of(got, {}), bad)


def test_an_ingress_whose_https_port_has_no_certificate_is_not_served_in_https() -> None:
    got = snapshot_of(
        cluster(tls_ingress("shop", [{"hosts": ["shop.example.com"], "secretName": "gone"}]))
    )
    assert [lst.port for lst in got.http_listeners] == [80]
    assert [w.reason for w in got.warnings] == [
        "Secret not found: these hosts get the settings' default-certificate, or fail the "
        "handshake without one",
        "no certificate for the https-port 443: not served in HTTPS",
    ]


def test_the_https_port_and_accept_proxy_come_from_the_settings() -> None:
    config = ConfigMap(*SETTINGS_CM, data={"https-port": "8443", "accept-proxy-protocol": "true"})
    got = snapshot_of(
        cluster(
            tls_ingress("shop", [{"secretName": "shop-tls"}]),
            secrets=(secret("shop-tls"),),
            config=config,
        )
    )
    assert [(lst.port, lst.accept_proxy) for lst in got.http_listeners] == [
        (80, True),
        (8443, True),
    ]


# ---------------------------------------------------------------- PROXY protocol


def test_gateway_annotation_takes_the_proxy_protocol_on_its_listeners() -> None:
    proxied = {"peerplane.dev/accept-proxy-protocol": "true"}
    got = snapshot_of(
        cluster(
            gateway(listener("https", refs=(ref("shop"),)), annotations=proxied),
            SERVED,
            secrets=(secret("shop"),),
        )
    )
    assert got.http_listeners[0].accept_proxy


def test_a_port_asked_with_and_without_the_proxy_protocol_takes_none() -> None:
    proxied = {"peerplane.dev/accept-proxy-protocol": "true"}
    got = snapshot_of(
        cluster(
            gateway(
                listener("https", hostname="shop.example.com", refs=(ref("shop"),)),
                annotations=proxied,
            ),
            gateway(listener("https", refs=(ref("wild"),)), name="other"),
            route("r", [prefix_rule("/", [to("shop")])], parent={"name": "web"}),
            secrets=(secret("shop"), secret("wild", WILD)),
        )
    )
    assert not got.http_listeners[0].accept_proxy
    (warning,) = got.warnings
    assert (warning.object, warning.key) == (
        "Gateway default/web",
        "peerplane.dev/accept-proxy-protocol",
    )
    assert "Gateway default/other, without the PROXY protocol" in warning.reason


def test_the_settings_proxy_protocol_reaches_tcp_port_services_and_the_hosts_routes() -> None:
    config = ConfigMap(*SETTINGS_CM, data={"accept-proxy-protocol": "true"})
    services = (
        service("db", annotations={"haproxy.org/tcp-port": "5432"}, ports=(("pg", 5432),)),
        service("shop", annotations={"haproxy.org/hosts": "shop.example.com"}),
    )
    computer = Computer()
    cluster_state = cluster(services=services, config=config)
    got = computer.compute(cluster_state, {}, now=NOW).workloads[WORKLOAD]
    assert [(f.port, f.accept_proxy) for f in got.tcp_frontends] == [(5432, True)]
    assert got.http_frontend is not None and got.http_frontend.port == 80
    (own,) = got.http_listeners  # takes the hosts routes as its last layer
    assert (own.port, own.rules, own.accept_proxy) == (80, (), True)
    again = computer.compute(cluster_state, {}, now=NOW + 1).workloads[WORKLOAD]
    assert again.http_listeners is got.http_listeners  # kept for the encoder
    off = compute(cluster(services=services), {}, now=NOW).workloads[WORKLOAD]
    assert off.http_listeners == () and not off.tcp_frontends[0].accept_proxy


# ---------------------------------------------------------------- workloads and changes


def test_a_workload_never_holds_another_workloads_certificates() -> None:
    edge = {"peerplane.dev/workload": "haproxy-system/edge"}
    main = {"peerplane.dev/workload": "haproxy-system/haproxy"}
    result = compute(
        cluster(
            gateway(listener("https", refs=(ref("shop"),)), annotations=main),
            gateway(listener("https", refs=(ref("wild"),)), name="edge", annotations=edge),
            route("r", [prefix_rule("/", [to("shop")])], parent={"name": "web"}),
            route("e", [prefix_rule("/", [to("shop")])], parent={"name": "edge"}),
            secrets=(secret("shop"), secret("wild", WILD)),
            pods=(*DEFAULT_PODS, edge_pod()),
        ),
        {},
        now=NOW,
    )
    mine = result.workloads[WORKLOAD]
    theirs = result.workloads["haproxy-system/DaemonSet/edge"]
    assert [c.name for c in mine.certificates] == ["default_shop"]
    assert [c.name for c in theirs.certificates] == ["default_wild"]


def _two_certificates(shop: TLSSecret) -> ClusterState:
    return cluster(
        gateway(
            listener("a", hostname="shop.example.com", refs=(ref("shop"),)),
            listener("any", refs=(ref("wild"),)),
        ),
        route("r", [prefix_rule("/", [to("shop")])]),
        secrets=(shop, secret("wild", WILD), secret("unused", OTHER)),
    )


def _by_name(snapshot: WorkloadSnapshot) -> dict[str, Certificate]:
    return {c.name: c for c in snapshot.certificates}


def test_rotation_changes_that_certificate_alone_and_parses_that_secret_alone() -> None:
    computer = Computer()
    first = _two_certificates(secret("shop"))
    before = _by_name(computer.compute(first, {}, now=NOW).workloads[WORKLOAD])
    parsed = computer._routes._certificates.parsed
    renewed = CA.issue("shop.example.com")
    rotated = dataclasses.replace(first, secrets=(secret("shop", renewed), *first.secrets[1:]))
    after = _by_name(computer.compute(rotated, {}, now=NOW).workloads[WORKLOAD])
    assert computer._routes._certificates.parsed == parsed + 1  # the new Secret alone
    assert after["default_wild"] is before["default_wild"]
    assert after["default_shop"].fingerprint != before["default_shop"].fingerprint
    assert after["default_shop"].serial == renewed.serial_hex
    assert after.keys() == before.keys()


def test_unrelated_changes_do_not_recompute_the_route_table() -> None:
    computer = Computer()
    first = _two_certificates(secret("shop"))
    computer.compute(first, {}, now=NOW)
    computed = computer._routes.computed
    # An endpoint change, an unused Secret rotated, a new unused Secret, the clock moving.
    moved = dataclasses.replace(first, endpoint_slices=(endpoint_slice("shop", ["10.0.0.9"]),))
    computer.compute(moved, {}, now=NOW + 1)
    unused = dataclasses.replace(
        moved,
        secrets=(
            *moved.secrets[:2],
            secret("unused", CA.issue("other.example.com")),
            secret("new", OTHER),
        ),
    )
    computer.compute(unused, {}, now=NOW + 2)
    assert computer._routes.computed == computed
    # A used Secret's change is one.
    computer.compute(
        dataclasses.replace(
            unused, secrets=(secret("shop", CA.issue("shop.example.com")), *unused.secrets[1:])
        ),
        {},
        now=NOW + 3,
    )
    assert computer._routes.computed == computed + 1


def test_the_table_is_made_again_when_a_certificate_expires() -> None:
    computer = Computer()
    cluster_state = _two_certificates(secret("shop"))
    result = computer.compute(cluster_state, {}, now=NOW)
    got = result.workloads[WORKLOAD]
    assert [c.name for c in got.certificates] == ["default_shop", "default_wild"]
    end = SHOP.cert.not_valid_after_utc.timestamp()
    assert result.recompute_at == end  # SHOP ends first: the loop wakes up then
    later = computer.compute(cluster_state, {}, now=end).workloads[WORKLOAD]
    assert [c.name for c in later.certificates] == ["default_wild"]
    assert later.http_listeners[0].tls == (
        CertificateBinding("default_wild", ("*.example.com", "example.com")),
    )
    assert "certificate expired at" in later.warnings[0].reason


def test_incremental_equals_fresh_computation() -> None:
    computer = Computer()
    states = [
        _two_certificates(secret("shop")),
        _two_certificates(secret("shop", SHOP.with_foreign_key())),
        _two_certificates(secret("shop", CA.issue("shop.example.com"))),
    ]
    for cluster_state in states:
        incremental = computer.compute(cluster_state, {}, now=NOW)
        fresh = compute(cluster_state, {}, now=NOW)
        assert incremental.workloads == fresh.workloads
        assert incremental.rejections == fresh.rejections
