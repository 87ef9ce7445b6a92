"""Every manifest we ship, valid for the Kubernetes versions we support: the kustomize output
of each kustomization under deploy/ and every YAML file there (the examples included),
checked in strict mode (no unknown fields, every required one present) against the
schemas `kubernetes-validate` carries. `kubectl apply` would refuse what fails here, or
drop a misspelled field without a word."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")  # the dev extra

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "chart"
KUBECTL = shutil.which("kubectl")
# The Kubernetes minor versions we support: EndpointSlice v1, projected tokens, the
# gRPC/HTTP probes the manifests use are all there; 1.35 is the `kubernetes` client's.
VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35")
# Custom resources: their schemas come with their operators' CRDs, not with Kubernetes,
# so kubernetes-validate has none. Each is skipped by kind, and only under its own API
# group (a core kind spelled like one is still checked).
CUSTOM_KINDS = {
    "Certificate": ("cert-manager.io", "cert-manager's CRD (deploy/examples/tls)"),
    "Issuer": ("cert-manager.io", "cert-manager's CRD (deploy/examples/tls)"),
    "ClusterIssuer": ("cert-manager.io", "cert-manager's CRD"),
    "PodMonitor": ("monitoring.coreos.com", "the Prometheus operator's CRD"),
    "ServiceMonitor": ("monitoring.coreos.com", "the Prometheus operator's CRD"),
    "PrometheusRule": ("monitoring.coreos.com", "the Prometheus operator's CRD"),
    "GatewayClass": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "Gateway": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "HTTPRoute": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "GRPCRoute": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "TCPRoute": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "TLSRoute": ("gateway.networking.k8s.io", "Gateway API's CRD"),
    "ReferenceGrant": ("gateway.networking.k8s.io", "Gateway API's CRD"),
}
KUSTOMIZATION = "kustomization.yaml"

Obj = dict[str, Any]


def group_of(obj: Obj) -> str:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def is_custom(obj: Obj) -> bool:
    entry = CUSTOM_KINDS.get(str(obj.get("kind")))
    return entry is not None and group_of(obj) == entry[0]


def yaml_files() -> list[Path]:
    """Every manifest file under deploy/ (kustomizations themselves are not objects; the
    Helm chart's templates are not manifests until Helm renders them: tests/chart checks
    every object it renders)."""
    return sorted(
        p for p in DEPLOY.rglob("*.yaml") if p.name != KUSTOMIZATION and CHART not in p.parents
    )


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob(KUSTOMIZATION))


def label(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return (
        f"{obj.get('apiVersion')} {obj.get('kind')} {meta.get('namespace', '-')}/{meta.get('name')}"
    )


def problems(objs: list[Obj]) -> list[str]:
    """One line per object and version that fails strict validation (or has no schema and
    is not a known custom resource)."""
    found = []
    for obj in objs:
        if is_custom(obj):
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                found.append(f"{label(obj)}: no schema in Kubernetes {version} (custom?)")
            except kubernetes_validate.ValidationError as error:
                where = "/".join(str(p) for p in error.path) or "(top)"
                found.append(f"{label(obj)} on {version} at {where}: {error.message}")
    return found


def load(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_file_is_valid_on_every_supported_version(path: Path) -> None:
    objs = load(path.read_text())
    assert objs, f"{path} holds no object"
    assert all("kind" in obj and "apiVersion" in obj for obj in objs), path
    assert problems(objs) == []


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (for kustomize) is not installed")
@pytest.mark.parametrize("folder", kustomizations(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_kustomization_renders_valid_objects(folder: Path) -> None:
    """What `kubectl apply -k` sends: namespaces, labels and images set by kustomize."""
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    objs = load(out.stdout)
    assert objs
    assert problems(objs) == []


def test_custom_kinds_are_skipped_and_everything_else_is_checked() -> None:
    """The skip list lets through only the custom kinds under their own group: a Service or
    a misspelled core kind still fails, and so does an unknown field (strict mode)."""
    certificate = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {}}
    assert problems([certificate]) == []
    core_lookalike = {"apiVersion": "v1", "kind": "Certificate", "metadata": {"name": "x"}}
    assert [re.sub(r" in Kubernetes .*", "", p) for p in problems([core_lookalike])] == [
        "v1 Certificate -/x: no schema"
    ] * len(VERSIONS)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPrt": 8080}]},
    }
    found = problems([service])
    assert len(found) == len(VERSIONS)
    assert all("targetPrt" in p and "spec/ports/0" in p for p in found), found
    assert problems([{**service, "spec": {"ports": [{"port": 80, "targetPort": 8080}]}}]) == []
