"""The folder source reads the TLS inputs (Secrets, TLSRoute, TCPRoute) into ClusterState
like the other route kinds: by API group and version, duplicates reported, one file's
edit re-reading only it (a rotated Secret is a new object, every other the same Python
object), and a Secret's certificate and key never in an error line."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest
import yaml

from controlplane.model import ObjectRef
from controlplane.source import yamlload
from controlplane.source.files import FilesSource, load_manifests
from tests.helpers.tls_certs import make_ca, tls_secret
from tests.helpers.waiting import wait_until

SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
CA = make_ca()
LEAF = CA.issue("shop.example.com")
RENEWED = CA.issue("shop.example.com", "www.example.com")

ROUTES = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: infra}
spec:
  gatewayClassName: peerplane
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: web-tls}]}}
  - {name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough}}
  - {name: pg, port: 5432, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: db, namespace: infra}
spec:
  parentRefs: [{name: web, sectionName: tls}]
  hostnames: [db.example.com]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha3
kind: TLSRoute
metadata: {name: cache, namespace: infra}
spec:
  parentRefs: [{name: web, sectionName: tls}]
  rules: [{backendRefs: [{name: cache, port: 6379}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: pg, namespace: infra}
spec:
  parentRefs: [{name: web, sectionName: pg}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
"""


def secret_yaml(name: str, cert: bytes, key: bytes, type_: str = "kubernetes.io/tls") -> str:
    leaf_free = tls_secret(name, None, "infra", cert_pem=cert, key_pem=key, type_=type_)
    return yaml.safe_dump(leaf_free, sort_keys=False)


def folder(tmp_path: Path) -> Path:
    (tmp_path / "routes.yaml").write_text(ROUTES)
    (tmp_path / "web-tls.yaml").write_text(secret_yaml("web-tls", LEAF.cert_pem, LEAF.key_pem))
    (tmp_path / "other.yaml").write_text(secret_yaml("notes", b"a", b"b", type_="Opaque"))
    return tmp_path


def test_folder_reads_secrets_tls_routes_and_tcp_routes(tmp_path: Path) -> None:
    loaded = load_manifests(folder(tmp_path), SETTINGS)
    assert loaded.errors == []
    state = loaded.state
    assert [(r.name, r.hostnames) for r in state.tls_routes] == [
        ("db", ("db.example.com",)),
        ("cache", ()),
    ]
    assert [(r.name, r.rules[0].backend_refs[0].port) for r in state.tcp_routes] == [("pg", 5432)]
    secrets = {s.name: s for s in state.secrets}
    assert (secrets["web-tls"].cert_pem, secrets["web-tls"].key_pem) == (
        LEAF.cert_pem,
        LEAF.key_pem,
    )
    assert (secrets["notes"].type, secrets["notes"].key_pem) == ("Opaque", b"")
    https = state.gateways[0].listeners[0]
    assert (https.tls_mode, [r.name for r in https.certificate_refs]) == ("Terminate", ["web-tls"])


def test_unread_versions_duplicates_and_bad_routes_are_reported_without_key_bytes(
    tmp_path: Path,
) -> None:
    folder(tmp_path)
    bad = tmp_path / "zz-bad.yaml"
    bad.write_text(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: TCPRoute\n"
        "metadata: {name: new, namespace: infra}\n"
        "spec: {rules: [{backendRefs: [{name: db, port: 1}]}]}\n"
        "---\n"
        "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\n"
        "metadata: {name: empty, namespace: infra}\nspec: {rules: []}\n"
        "---\n" + secret_yaml("web-tls", RENEWED.cert_pem, RENEWED.key_pem)
    )
    loaded = load_manifests(tmp_path, SETTINGS)
    assert loaded.errors[:2] == [
        f"{bad}: document 1: TCPRoute apiVersion 'gateway.networking.k8s.io/v1beta1' is not "
        "read (use gateway.networking.k8s.io/v1alpha2, gateway.networking.k8s.io/v1)",
        f"{bad}: document 2: spec.rules is empty (a TLSRoute needs at least one)",
    ]
    (duplicate,) = loaded.errors[2:]
    assert duplicate.startswith(f"duplicate Secret infra/web-tls: {bad} (document 3) skipped")
    (kept,) = [s for s in loaded.state.secrets if s.name == "web-tls"]
    assert kept.cert_pem == LEAF.cert_pem  # the file that sorts first
    text = "\n".join(loaded.errors)
    for pem in (LEAF.key_pem, RENEWED.key_pem, RENEWED.cert_pem):
        body = b"".join(pem.splitlines()[1:-1])
        assert body[:24].decode() not in text
        assert base64.b64encode(pem).decode()[:24] not in text


def test_a_malformed_secret_file_is_reported_without_its_text(tmp_path: Path) -> None:
    key_line = base64.b64encode(LEAF.key_pem).decode()
    (tmp_path / "broken.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: infra}\n"
        f"type: kubernetes.io/tls\ndata:\n  tls.key: {key_line}: [\n"
    )
    (error,) = load_manifests(tmp_path, SETTINGS).errors
    assert "line 6" in error and key_line[:16] not in error and key_line[-24:] not in error
    # PyYAML's own parser quotes the line under its mark; the loader's message never does.
    with pytest.raises(yaml.YAMLError) as raw:
        yaml.load((tmp_path / "broken.yaml").read_text(), Loader=yaml.SafeLoader)
    tail = key_line[-24:]  # the snippet shows the end of the line, up to the mark
    assert tail in str(raw.value)
    assert tail not in str(yamlload._without_snippets(raw.value))


def test_rotating_a_secret_rereads_its_file_alone_and_keeps_every_other_object(
    tmp_path: Path,
) -> None:
    folder(tmp_path)
    source = FilesSource(tmp_path, SETTINGS)
    source.refresh()
    before = source.state()
    parsed = source.parsed_files
    rotated = tmp_path / "web-tls.yaml"
    rotated.write_text(secret_yaml("web-tls", RENEWED.cert_pem, RENEWED.key_pem))
    assert source.refresh({rotated.resolve()})
    after = source.state()
    assert source.parsed_files == parsed + 1
    old, new = ({s.name: s for s in state.secrets} for state in (before, after))
    assert new["web-tls"].cert_pem == RENEWED.cert_pem and new["web-tls"] is not old["web-tls"]
    assert new["notes"] is old["notes"]
    assert all(a is b for a, b in zip(before.tls_routes, after.tls_routes, strict=True))
    assert all(a is b for a, b in zip(before.tcp_routes, after.tcp_routes, strict=True))
    assert after.gateways[0] is before.gateways[0]
    # An edit to one route of the file keeps its other routes the same objects.
    (tmp_path / "routes.yaml").write_text(ROUTES.replace("port: 6379", "port: 6380"))
    assert source.refresh({(tmp_path / "routes.yaml").resolve()})
    edited = source.state()
    assert edited.tls_routes[0] is after.tls_routes[0]
    assert edited.tls_routes[1].rules[0].backend_refs[0].port == 6380
    assert edited.tcp_routes[0] is after.tcp_routes[0]
    # A removed Secret file removes the Secret.
    rotated.unlink()
    assert source.refresh({rotated.resolve()})
    assert [s.name for s in source.state().secrets] == ["notes"]


def test_a_watched_folder_sees_a_secret_created_rotated_and_deleted(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text(ROUTES)
    source = FilesSource(tmp_path, SETTINGS, poll_interval=0.05)
    changed = threading.Event()
    source.start(changed.set)
    try:

        def secret_cert() -> bytes | None:
            found = [s.cert_pem for s in source.state().secrets if s.name == "web-tls"]
            return found[0] if found else None

        path = tmp_path / "web-tls.yaml"
        path.write_text(secret_yaml("web-tls", LEAF.cert_pem, LEAF.key_pem))
        wait_until(lambda: secret_cert() == LEAF.cert_pem)
        path.write_text(secret_yaml("web-tls", RENEWED.cert_pem, RENEWED.key_pem))
        wait_until(lambda: secret_cert() == RENEWED.cert_pem)
        path.unlink()
        wait_until(lambda: secret_cert() is None)
        assert source.errors() == []
    finally:
        source.stop()
