"""The route examples users copy from README.md, docs/annotations.md and
docs/operations.md: read beside the demo's Services and classes, each is served whole (no
rejection, every rule in the listener), and the status the operations guide shows is the
one computed."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
import yaml

from controlplane.compute import compute
from controlplane.model import GATEWAY_GROUP, ClusterState, ObjectRef
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.snapshot import CertificateBinding, WeightedBackend
from controlplane.source.files import load_manifests
from tests.helpers.tls_certs import make_ca, tls_secret

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "deploy" / "examples" / "demo"
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
STORE = StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", "store")


def yaml_blocks(doc: str, start: str, end: str) -> list[str]:
    """The ```yaml blocks of `doc` from `start` to `end` (or the end of the file)."""
    text = (REPO / doc).read_text()
    first = text.index(start)
    last = text.find(end, first)
    section = text[first : last if last >= 0 else len(text)]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def demo_classes(*kinds: str) -> list[str]:
    """The demo's GatewayClass or IngressClass (routes.yaml), which the docs leave out."""
    parts = (DEMO / "routes.yaml").read_text().split("\n---\n")
    return [p for p in parts if any(f"\nkind: {kind}\n" in f"\n{p}" for kind in kinds)]


def load(folder: Path, routes: str) -> ClusterState:
    """The demo's manifests copied to `folder`, with `routes` as their routes.yaml (and
    without its other route file, sessions.yaml: the docs' routes stand in for both)."""
    shutil.copytree(DEMO, folder)
    (folder / "routes.yaml").write_text(routes)
    (folder / "sessions.yaml").unlink()
    loaded = load_manifests(folder, SETTINGS)
    assert loaded.errors == []
    return loaded.state


def served(tmp_path: Path, routes: str) -> tuple[ClusterState, dict[int, int]]:
    """The demo with `routes`: its state and the rule count per listener port; fails on
    any rejection."""
    state = load(tmp_path / "manifests", routes)
    result = compute(state, {})
    assert [f"{r.object} {r.key}: {r.reason}" for r in result.rejections] == []
    listeners = result.workloads[WORKLOAD].http_listeners
    return state, {listener.port: len(listener.rules) for listener in listeners}


@pytest.mark.parametrize(
    ("doc", "start", "end", "classes", "rules"),
    [
        # README: an HTTPRoute of five rules and an Ingress of two paths, one port.
        ("README.md", "## Routes", "## Image", ("GatewayClass", "IngressClass"), {18080: 6}),
        # The reference: the demo's routes.yaml with the workload named, classes included,
        # and the session persistence example (demo/sessions.yaml).
        ("docs/annotations.md", "**Examples**", "\n## ", (), {18080: 7}),
        # The operations guide: its Ingress on the settings' port, its Gateway's port 80.
        ("docs/operations.md", "## Routes:", "To see what", ("GatewayClass",), {18080: 2, 80: 1}),
    ],
)
def test_doc_route_examples_are_served_whole(
    tmp_path: Path,
    doc: str,
    start: str,
    end: str,
    classes: tuple[str, ...],
    rules: dict[int, int],
) -> None:
    blocks = yaml_blocks(doc, start, end)
    assert len(blocks) >= 2, f"{doc}: no route examples between {start!r} and {end!r}"
    text = "\n---\n".join([*demo_classes(*classes), *blocks])
    _, found = served(tmp_path, text)
    assert found == rules


def test_operations_guide_status_examples_are_the_computed_ones(tmp_path: Path) -> None:
    guide = " ".join((REPO / "docs" / "operations.md").read_text().split())
    blocks = yaml_blocks("docs/operations.md", "## Routes:", "To see what")
    routes = "\n---\n".join([*demo_classes("GatewayClass"), *blocks])
    state, _ = served(tmp_path, routes)
    parent = route_statuses(state)[STORE]["parents"][0]
    assert f"controllerName: {parent['controllerName']}" in guide
    for condition in parent["conditions"]:
        shown = (
            f'{{type: {condition["type"]}, status: "{condition["status"]}", '
            f"reason: {condition['reason']}, message: {condition['message']}}}"
        )
        assert shown in guide
    # A misspelled backend: the condition and the Event message the guide quotes.
    broken = load(
        tmp_path / "broken", routes.replace("name: shop, port: 80}]", "name: shopp, port: 80}]")
    )
    (rejection,) = compute(broken, {}).rejections
    assert f"`{rejection.key}={rejection.value!r} rejected: {rejection.reason}`" in guide
    resolved = route_statuses(broken)[STORE]["parents"][0]["conditions"][1]
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert f"reason `BackendNotFound`, message `{resolved['message']}`" in guide


def _service(name: str, port: int) -> dict[str, object]:
    meta = {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"ports": [{"port": port}]},
    }


def test_doc_tls_examples_are_served_whole(tmp_path: Path) -> None:
    """The reference's TLS examples (HTTPS Gateway with a granted Secret and a redirect,
    Ingress spec.tls, TLSRoute, TCPRoute) beside the demo, with the Secrets they name and
    the two Services the demo lacks: no rejection, each certificate bound where the text
    says, the passthrough and TCP routes on their ports."""
    blocks = yaml_blocks("docs/annotations.md", "## TLS:", "\n## ")
    assert len(blocks) == 3
    ca = make_ca()
    secrets = [
        tls_secret("wildcard-example-com", ca.issue("*.example.com")),
        tls_secret("shop-tls", ca.issue("shop.example.com"), namespace="certs"),
        tls_secret("ingress-example-com", ca.issue("ingress.example.com")),
    ]
    extra = [*secrets, _service("vault", 8200), _service("postgres", 5432)]
    routes = "\n---\n".join(
        [*demo_classes("GatewayClass", "IngressClass"), *blocks, *map(yaml.safe_dump, extra)]
    )
    state = load(tmp_path / "manifests", routes)
    result = compute(state, {}, now=time.time())
    assert [f"{r.object} {r.key}: {r.reason}" for r in result.rejections] == []
    snapshot = result.workloads[WORKLOAD]
    assert [c.name for c in snapshot.certificates] == [
        "certs_shop-tls",
        "default_ingress-example-com",
        "default_wildcard-example-com",
    ]
    tls = {listener.port: listener.tls for listener in snapshot.http_listeners}
    # The wildcard listener's certificate is the default (first line), shop's by its name.
    assert tls[443][:2] == (
        CertificateBinding("default_wildcard-example-com", ("*.example.com",)),
        CertificateBinding("certs_shop-tls", ("shop.example.com",)),
    )
    assert state.settings is not None
    https_port = int(state.settings.data.get("https-port", "443"))
    ingress = CertificateBinding("default_ingress-example-com", ("ingress.example.com",))
    assert ingress in tls[https_port]
    assert tls[80] == ()  # the redirect's plain HTTP listener
    (passthrough,) = snapshot.tls_listeners
    assert passthrough.port == 8443
    assert [(r.hostnames, r.backends) for r in passthrough.routes] == [
        (("vault.example.com",), (WeightedBackend("default_vault_8200", 1),))
    ]
    routed = [(f.port, f.backend) for f in snapshot.tcp_frontends if f.source]
    assert routed == [(5432, "default_postgres_5432")]
