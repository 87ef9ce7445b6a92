"""TLS inputs to model types (controlplane/source/convert_gateway.py,
convert_routes.py, convert_ingress.py, convert_secret.py): a Gateway listener's
`tls` block, Ingress `spec.tls`, TLSRoute, TCPRoute and Secrets. A Secret's certificate
and key are taken as bytes or left empty for compute to report; they never reach an
error, whatever shape the Secret has."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.model import (
    GATEWAY_GROUP,
    HTTPBackendRef,
    IngressTLS,
    L4Rule,
    ParentRef,
    SecretRef,
)
from controlplane.source.convert import ManifestError
from controlplane.source.convert_gateway import gateway_from
from controlplane.source.convert_ingress import ingress_from
from controlplane.source.convert_routes import tcp_route_from, tls_route_from
from controlplane.source.convert_secret import tls_secret_from
from tests.helpers.tls_certs import make_ca, tls_secret

LISTENERS: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "Gateway",
    "metadata": {"name": "web", "namespace": "infra"},
    "spec": {
        "gatewayClassName": "peerplane",
        "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP"},
            {
                "name": "https",
                "port": 443,
                "protocol": "HTTPS",
                "tls": {
                    "certificateRefs": [
                        {"name": "web-tls"},
                        {"group": "", "kind": "Secret", "name": "shop-tls", "namespace": "shop"},
                    ]
                },
            },
            {"name": "tls", "port": 8443, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
        ],
    },
}

TLS_ROUTE: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1alpha2",
    "kind": "TLSRoute",
    "metadata": {"name": "db", "namespace": "data", "generation": 4},
    "spec": {
        "parentRefs": [{"name": "web", "namespace": "infra", "sectionName": "tls"}],
        "hostnames": ["db.example.com", "*.db.example.com"],
        "rules": [
            {
                "name": "main",
                "backendRefs": [
                    {"name": "db", "port": 5432, "weight": 3},
                    {"name": "db-2", "port": 5432, "filters": [{"type": "Ignored"}]},
                ],
            }
        ],
    },
}

TCP_ROUTE: dict[str, Any] = {
    "apiVersion": "gateway.networking.k8s.io/v1alpha2",
    "kind": "TCPRoute",
    "metadata": {"name": "pg", "namespace": "data"},
    "spec": {
        "parentRefs": [{"name": "web", "namespace": "infra", "port": 5432}],
        "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}],
    },
}


def test_listener_tls_block_mode_defaults_to_terminate_and_refs_keep_their_namespace() -> None:
    plain, https, passthrough = gateway_from(LISTENERS).listeners
    assert (plain.tls_mode, plain.certificate_refs) == ("", ())
    assert https.tls_mode == "Terminate"
    assert https.certificate_refs == (
        SecretRef("web-tls", "", "", "Secret"),
        SecretRef("shop-tls", "shop", "", "Secret"),
    )
    assert (passthrough.tls_mode, passthrough.certificate_refs) == ("Passthrough", ())


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ({"mode": "Reencrypt"}, "spec.listeners[1].tls.mode 'Reencrypt' is not one of"),
        ({"certificateRefs": [{"kind": "Secret"}]}, "tls.certificateRefs[0].name is missing"),
        ({"certificateRefs": "web-tls"}, "tls.certificateRefs is not a list"),
        ("Terminate", "spec.listeners[1].tls is not a map"),
    ],
)
def test_a_bad_tls_block_is_a_manifest_error_naming_the_field(tls: Any, reason: str) -> None:
    document = copy.deepcopy(LISTENERS)
    document["spec"]["listeners"][1]["tls"] = tls
    with pytest.raises(ManifestError) as caught:
        gateway_from(document)
    assert reason in str(caught.value)


def test_ingress_tls_hosts_and_secret_name() -> None:
    ingress = ingress_from(
        {
            "metadata": {"name": "shop", "namespace": "shop"},
            "spec": {
                "tls": [
                    {"hosts": ["shop.example.com", "www.example.com"], "secretName": "shop-tls"},
                    {"secretName": "any-tls"},
                    {"hosts": ["nosecret.example.com"]},
                ],
                "defaultBackend": {"service": {"name": "shop", "port": {"number": 80}}},
            },
        }
    )
    assert ingress.tls == (
        IngressTLS(("shop.example.com", "www.example.com"), "shop-tls"),
        IngressTLS((), "any-tls"),
        IngressTLS(("nosecret.example.com",), ""),
    )
    assert ingress_from({"metadata": {"name": "plain"}, "spec": {}}).tls == ()
    with pytest.raises(ManifestError, match=r"spec\.tls\[0\]\.hosts\[0\] is not a string"):
        ingress_from({"metadata": {"name": "x"}, "spec": {"tls": [{"hosts": [443]}]}})


def test_tls_route_parents_hostnames_and_backends_without_filters() -> None:
    route = tls_route_from(TLS_ROUTE)
    assert (route.namespace, route.name, route.generation) == ("data", "db", 4)
    assert route.parent_refs == (ParentRef("web", GATEWAY_GROUP, "Gateway", "infra", "tls", 0),)
    assert route.hostnames == ("db.example.com", "*.db.example.com")
    assert route.rules == (
        L4Rule(
            (HTTPBackendRef("db", port=5432, weight=3), HTTPBackendRef("db-2", port=5432)),
            name="main",
        ),
    )


def test_tcp_route_parents_and_backends() -> None:
    route = tcp_route_from(TCP_ROUTE)
    assert route.parent_refs == (ParentRef("web", GATEWAY_GROUP, "Gateway", "infra", "", 5432),)
    assert route.rules == (L4Rule((HTTPBackendRef("db", port=5432),)),)


@pytest.mark.parametrize("convert", [tls_route_from, tcp_route_from])
@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"rules": []}, "spec.rules is empty"),
        ({"rules": [{}]}, "spec.rules[0].backendRefs is empty"),
        ({"rules": [{"backendRefs": [{"port": 1}]}]}, "backendRefs[0].name is missing"),
        (
            {"rules": [{"backendRefs": [{"name": "db", "port": 70000}]}]},
            "backendRefs[0].port 70000 is not in 1-65535",
        ),
        (
            {"rules": [{"backendRefs": [{"name": "db", "port": 1, "weight": -5}]}]},
            "backendRefs[0].weight -5 is not in 0-1000000",
        ),
        ({"parentRefs": [{}], "rules": []}, "spec.parentRefs[0].name is missing"),
        ({"rules": "all"}, "spec.rules is not a list"),
    ],
)
def test_bad_l4_routes_are_manifest_errors(convert: Any, spec: Any, reason: str) -> None:
    with pytest.raises(ManifestError) as caught:
        convert({"metadata": {"name": "r", "namespace": "data"}, "spec": spec})
    assert reason in str(caught.value)


CA = make_ca()
LEAF = CA.issue("shop.example.com")


def test_tls_secret_bytes_are_decoded_and_kept_out_of_repr() -> None:
    secret = tls_secret_from(
        tls_secret("shop-tls", LEAF, "shop")
        | {"metadata": {"name": "shop-tls", "namespace": "shop", "resourceVersion": "77"}}
    )
    assert (secret.namespace, secret.name, secret.type) == ("shop", "shop-tls", "kubernetes.io/tls")
    assert (secret.cert_pem, secret.key_pem) == (LEAF.cert_pem, LEAF.key_pem)
    assert secret.resource_version == "77"
    assert b"PRIVATE" not in repr(secret).encode() and "BEGIN" not in repr(secret)


def test_string_data_wins_and_line_broken_base64_decodes_as_the_api_server_reads_it() -> None:
    wrapped = base64.encodebytes(LEAF.cert_pem).decode()  # 76-column lines
    secret = tls_secret_from(
        {
            "metadata": {"name": "s"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": wrapped, "tls.key": base64.b64encode(b"old").decode()},
            "stringData": {"tls.key": LEAF.key_pem.decode()},
        }
    )
    assert (secret.namespace, secret.cert_pem, secret.key_pem) == (
        "default",
        LEAF.cert_pem,
        LEAF.key_pem,
    )


@pytest.mark.parametrize(
    ("data", "cert", "key"),
    [
        ({}, b"", b""),
        ({"tls.crt": "!!not base64!!", "tls.key": base64.b64encode(b"k").decode()}, b"", b"k"),
        ({"tls.crt": 12, "tls.key": {"nested": "map"}}, b"", b""),
        ({"tls.crt": "YWJj"}, b"abc", b""),
        ("not a map", b"", b""),
    ],
)
def test_bad_secret_data_leaves_empty_bytes_for_compute_to_report(
    data: Any, cert: bytes, key: bytes
) -> None:
    secret = tls_secret_from(
        {"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/tls", "data": data}
    )
    assert (secret.cert_pem, secret.key_pem) == (cert, key)


def test_other_secret_types_are_kept_by_name_and_type_without_data() -> None:
    opaque = tls_secret("shop-tls", LEAF, "shop", type_="Opaque")
    secret = tls_secret_from(opaque)
    assert (secret.type, secret.cert_pem, secret.key_pem) == ("Opaque", b"", b"")
    untyped = {k: v for k, v in opaque.items() if k != "type"}
    assert tls_secret_from(untyped).type == "Opaque"  # the API server's default


def test_only_a_secret_that_cannot_be_named_raises() -> None:
    with pytest.raises(ManifestError, match=r"metadata\.name is missing"):
        tls_secret_from({"metadata": {}, "type": "kubernetes.io/tls"})
    with pytest.raises(ManifestError, match=r"metadata\.namespace is not a string"):
        tls_secret_from({"metadata": {"name": "s", "namespace": 5}})


SECRET_TEXT = LEAF.key_pem.decode()
HOSTILE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=HOSTILE,
    type_=st.just("kubernetes.io/tls") | HOSTILE,
    string_data=HOSTILE,
    where=st.sampled_from(["crt", "key"]),
)
def test_no_shape_of_secret_puts_its_key_in_an_error(
    data: Any, type_: Any, string_data: Any, where: str
) -> None:
    """The key text sits in data (and in stringData) of a Secret of every shape: whatever
    the converter answers, an error never carries it."""
    document: dict[str, Any] = {
        "metadata": {"name": "s", "namespace": "n"},
        "type": type_,
        "data": {f"tls.{where}": SECRET_TEXT, "other": data},
        "stringData": string_data
        if not isinstance(string_data, dict)
        else string_data | {f"tls.{where}": [SECRET_TEXT]},
    }
    try:
        secret = tls_secret_from(document)
    except ManifestError as error:  # pragma: no cover - a named Secret never raises
        assert SECRET_TEXT[30:60] not in str(error)
        raise
    assert SECRET_TEXT[30:60] not in repr(secret)
