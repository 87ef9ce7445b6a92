"""deploy/chart/peerplane under real Helm (tests/helm/build's binary).

One source of truth: the kustomize base stays what `kubectl apply -k deploy/` installs, and
the chart's defaults must render the very same objects (Helm's release labels aside; the
Namespace only with `namespace.create`, since Helm needs the namespace before it installs).
Its monitoring and cert-manager objects equal deploy/monitoring's and deploy/examples/tls's.
Each values file of values/ renders golden/<case>.yaml byte for byte
(PEERPLANE_UPDATE_GOLDEN=1 rewrites them), and every object passes the Kubernetes schemas
strictly, as the kustomize output does (tests/system/test_manifest_schemas.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.settings.table import SETTINGS
from tests.helpers import chart_values
from tests.helpers.helm import (
    CHART,
    ROOT,
    Helm,
    documents,
    identity,
    kustomize,
    normalised,
)
from tests.system.test_manifest_schemas import problems

HERE = Path(__file__).resolve().parent
VALUES = HERE / "values"
GOLDEN = HERE / "golden"
CASES = ("default", "deployment", "hostnetwork", "tls", "monitoring")
PORT_SETTINGS = ("http-port", "https-port", "peer-port")
CRD = "sourceippersistencepolicies.peerplane.dev"  # in the chart's crds/, not its templates
Obj = dict[str, Any]


def render(helm: Helm, case: str, *sets: str) -> str:
    return helm.template(VALUES / f"{case}.yaml", sets=sets)


def by_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objs if obj["kind"] == kind]


def project_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return str(project["project"]["version"])


# --- lint and golden renders -----------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_lint_strict_passes(helm: Helm, case: str) -> None:
    done = helm.run("lint", "--strict", str(CHART), "--values", str(VALUES / f"{case}.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("case", CASES)
def test_template_equals_its_golden_output(helm: Helm, case: str) -> None:
    rendered = render(helm, case)
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("PEERPLANE_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"no {golden}: run with PEERPLANE_UPDATE_GOLDEN=1"
    assert rendered == golden.read_text(), (
        f"helm template differs from {golden.name} (PEERPLANE_UPDATE_GOLDEN=1 rewrites it)"
    )


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_passes_the_kubernetes_schemas(helm: Helm, case: str) -> None:
    objs = documents(render(helm, case, "namespace.create=true"))
    assert objs
    assert problems(objs) == []


# --- one source of truth -----------------------------------------------------------------


def test_defaults_render_the_kustomize_base(helm: Helm) -> None:
    """`helm template` with the defaults is `kubectl kustomize deploy/` (every field of
    every object), Helm's release labels aside; with namespace.create the Namespace too;
    the chart's crds/ (peerplane's policy CRDs) included as `helm install` applies them."""
    base = normalised(kustomize(ROOT / "deploy"))
    rendered = helm.template(
        VALUES / "default.yaml", sets=("namespace.create=true",), include_crds=True
    )
    with_namespace = normalised(documents(rendered))
    assert sorted(with_namespace) == sorted(base)
    for key, obj in base.items():
        assert with_namespace[key] == obj, key
    defaults = normalised(documents(render(helm, "default")))
    assert sorted(set(base) - set(defaults)) == [
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", CRD),
        ("v1", "Namespace", "", "haproxy-system"),
    ]
    assert all(defaults[key] == base[key] for key in defaults)


def test_release_labels_are_the_only_difference_normalised_away(helm: Helm) -> None:
    """The normalisation removes Helm's four release labels from metadata and nothing
    else: every rendered object carries them, and a changed field would still differ."""
    objs = documents(render(helm, "default"))
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", identity(obj)
        assert labels["app.kubernetes.io/instance"] == "peerplane", identity(obj)
        assert labels["app.kubernetes.io/part-of"] == "peerplane", identity(obj)
    base = normalised(kustomize(ROOT / "deploy"))
    changed = normalised(documents(render(helm, "default", "controlplane.replicas=3")))
    key = ("apps/v1", "Deployment", "haproxy-system", "peerplane-controlplane")
    assert changed[key] != base[key]


def test_monitoring_renders_deploy_monitoring(helm: Helm) -> None:
    """The PodMonitor, the PrometheusRule (files/prometheus-rules.yaml) and the dashboard's
    ConfigMap (files/grafana-dashboard.json) are deploy/monitoring's objects."""
    shipped = normalised(kustomize(ROOT / "deploy" / "monitoring"))
    rendered = normalised(documents(render(helm, "monitoring")))
    assert len(shipped) == 3
    for key, obj in shipped.items():
        assert rendered.get(key) == obj, key


def test_cert_manager_renders_deploy_examples_tls(helm: Helm) -> None:
    """tls.certManager.enabled with no issuerRef: deploy/examples/tls's issuers and
    certificates, which issue the Secret the control plane and the agents mount."""
    shipped = normalised(kustomize(ROOT / "deploy" / "examples" / "tls"))
    objs = documents(render(helm, "tls"))
    rendered = normalised([obj for obj in objs if obj["apiVersion"].startswith("cert-manager.io/")])
    assert sorted(rendered) == sorted(shipped)
    for key, obj in shipped.items():
        # The example's kustomization adds no part-of label; the chart labels everything.
        labels = rendered[key]["metadata"].pop("labels")
        assert labels == {"app.kubernetes.io/part-of": "peerplane"}, key
        assert rendered[key] == obj, key


def test_cert_manager_with_an_issuer_of_the_users(helm: Helm) -> None:
    objs = documents(
        helm.template(
            VALUES / "tls.yaml",
            sets=(
                "tls.certManager.issuerRef.name=corp-ca",
                "tls.certManager.issuerRef.kind=ClusterIssuer",
            ),
        )
    )
    (certificate,) = [o for o in objs if o["apiVersion"].startswith("cert-manager.io/")]
    assert certificate["kind"] == "Certificate"
    assert certificate["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


# --- what the values change ---------------------------------------------------------------


def test_every_haproxy_port_the_settings_name_is_the_container_s(helm: Helm) -> None:
    """http-port, https-port and peer-port come from haproxy.ports: the settings ConfigMap,
    the container ports and the NetworkPolicy cannot disagree."""
    objs = documents(render(helm, "hostnetwork"))
    (settings,) = by_kind(objs, "ConfigMap")
    assert {k: settings["data"][k] for k in PORT_SETTINGS} == {
        "http-port": "8080",
        "https-port": "8443",
        "peer-port": "10000",
    }
    (daemonset,) = by_kind(objs, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert "sysctls" not in pod["securityContext"]
    (haproxy,) = [c for c in pod["containers"] if c["name"] == "haproxy"]
    assert [p["containerPort"] for p in haproxy["ports"]] == [8080, 8443, 10000]


def client_ports_admitted(objs: list[Obj]) -> set[int]:
    """The ports the HAProxy pods' NetworkPolicy admits from anywhere (a rule without
    `from`)."""
    (policy,) = [
        o for o in by_kind(objs, "NetworkPolicy")
        if o["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/component": "haproxy"}
    ]  # fmt: skip
    return {
        p["port"] for rule in policy["spec"]["ingress"] if "from" not in rule for p in rule["ports"]
    }


@pytest.mark.parametrize("case", ["kustomize", *CASES])
def test_the_network_policy_admits_every_client_port_haproxy_serves(helm: Helm, case: str) -> None:
    """Clients reach both ports the settings give HAProxy: http-port, and https-port, where
    an Ingress with spec.tls is served (deploy/base admitted port 80 alone, so a CNI that
    enforces policies dropped HTTPS to Ingresses); with `networkPolicy.extraPorts` those
    too (Gateway listeners, TCP frontends)."""
    objs = kustomize(ROOT / "deploy") if case == "kustomize" else documents(render(helm, case))
    (settings,) = [
        o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "haproxy-settings"
    ]
    wanted = {int(settings["data"]["http-port"]), int(settings["data"]["https-port"])}
    assert client_ports_admitted(objs) == wanted
    if case == "default":
        more = documents(render(helm, case, "networkPolicy.extraPorts={8443,5432}"))
        assert client_ports_admitted(more) == wanted | {8443, 5432}


def test_deployment_mode(helm: Helm) -> None:
    objs = documents(render(helm, "deployment"))
    assert not by_kind(objs, "DaemonSet")
    haproxy = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] == "haproxy"]
    (deployment,) = haproxy
    assert deployment["spec"]["replicas"] == 3
    pdbs = {o["metadata"]["name"] for o in by_kind(objs, "PodDisruptionBudget")}
    assert pdbs == {"haproxy", "peerplane-controlplane"}
    (controlplane,) = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] != "haproxy"]
    args = controlplane["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--lease-duration=30" in args and args[-1] == "--log-level=debug"
    (ingress_class,) = by_kind(objs, "IngressClass")
    annotations = ingress_class["metadata"]["annotations"]
    assert annotations == {"ingressclass.kubernetes.io/is-default-class": "true"}


def test_leader_election_off_drops_the_lease_flags(helm: Helm) -> None:
    objs = documents(
        render(
            helm, "default", "controlplane.leaderElection.enabled=false", "controlplane.replicas=1"
        )
    )
    (controlplane,) = by_kind(objs, "Deployment")
    args = controlplane["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--lease") or a == "--leader-elect"]
    assert "--slots-configmap=haproxy-system/peerplane-slots" in args


def test_another_release_in_another_namespace_shares_no_name(helm: Helm) -> None:
    """Two releases in two namespaces: their cluster-scoped objects differ by name, and
    every reference (RBAC subjects, the agent's control-plane address, the settings and
    slot ConfigMaps, the Lease) follows the release and its namespace."""
    objs = documents(helm.template(VALUES / "default.yaml", release="edge", namespace="edge-ns"))
    cluster_scoped = {o["metadata"]["name"] for o in objs if "namespace" not in o["metadata"]}
    assert cluster_scoped == {"edge-peerplane-controlplane"}
    assert all(o["metadata"].get("namespace", "edge-ns") == "edge-ns" for o in objs)
    text = json.dumps(objs)
    assert "haproxy-system" not in text
    (daemonset,) = by_kind(objs, "DaemonSet")
    agent = daemonset["spec"]["template"]["spec"]["containers"][1]
    assert "--control-plane=edge-peerplane-controlplane.edge-ns.svc:18000" in agent["args"]


# --- the values schema ----------------------------------------------------------------------

REFUSED = {
    "unknown-key": ("controlplane.replica=3", "additional properties 'replica' not allowed"),
    "kind": ("haproxy.kind=StatefulSet", "haproxy/kind"),
    "host-network-low-port": ("haproxy.hostNetwork=true", "haproxy/ports/http"),
    "replicas-without-lease": (
        "controlplane.leaderElection.enabled=false",
        "controlplane/replicas",
    ),
    "settings-port": ("settings.http-port=8080", "'/settings': additional properties 'http-port'"),
    "settings-unknown": (
        "settings.load-balancing=leastconn",
        "'/settings': additional properties 'load-balancing'",
    ),
    "pull-policy": ("image.pullPolicy=Sometimes", "image/pullPolicy"),
    "two-monitors": (
        "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true",
        "monitoring",
    ),
    "port-range": ("controlplane.port=70000", "controlplane/port"),
    "log-format": ("agent.logFormat=yaml", "agent/logFormat"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_schema_refuses_what_cannot_work(helm: Helm, case: str) -> None:
    pair, where = REFUSED[case]
    done = helm.run("template", "peerplane", str(CHART), "--set", pair)
    assert done.returncode != 0, done.stdout[:500]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert where in done.stderr, done.stderr


def test_the_schema_s_settings_keys_are_the_configmap_s() -> None:
    """The settings keys the schema accepts: every key the settings ConfigMap may hold
    (controlplane/settings/table.py's table), but the ports haproxy.ports sets."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    settings = schema["properties"]["settings"]
    assert settings["additionalProperties"] is False
    accepted = list(settings["properties"])
    table = [s.key for s in SETTINGS if s.in_configmap and s.key not in PORT_SETTINGS]
    assert sorted(accepted) == sorted(table)


# --- version, packaging, docs -----------------------------------------------------------


def test_chart_version_is_the_project_s() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == project_version()


def test_make_chart_packages_the_project_version(helm: Helm, tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "chart", f"CHART_OUT={tmp_path}", f"HELM={helm.binary}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    version = project_version()
    package = tmp_path / f"peerplane-{version}.tgz"
    assert package.exists(), list(tmp_path.iterdir())
    shown = helm.check("show", "chart", str(package))
    chart = yaml.safe_load(shown)
    assert chart["version"] == version and chart["appVersion"] == version
    # The package renders what the chart folder renders.
    assert helm.template(VALUES / "default.yaml") == helm.check(
        "template", "peerplane", str(package), "--namespace", "haproxy-system",
        "--values", str(VALUES / "default.yaml"),
    )  # fmt: skip


def test_the_values_table_in_the_docs_is_values_yaml_s() -> None:
    text = chart_values.VALUES.read_text()
    docs = chart_values.DOCS.read_text()
    assert chart_values.with_table(docs, text) == docs, "stale: run `make chart-docs`"


def test_every_value_is_documented() -> None:
    assert chart_values.undocumented(chart_values.VALUES.read_text()) == []


def test_the_values_table_reads_helm_docs_comments() -> None:
    text = (
        "# -- top\n"
        "a: 1\n"
        "b:\n"
        "  # -- first line\n"
        "  # second line\n"
        "  c: [x]\n"
        "  d: {e: true}\n"
        "# a plain comment\n"
        "f: 'x|y'\n"
    )
    rows = chart_values.rows(text)
    assert [(r.key, r.kind, r.default, r.doc) for r in rows] == [
        ("a", "int", 1, "top"),
        ("b.c", "list", ["x"], "first line second line"),
    ]
    assert chart_values.undocumented(text) == ["b.d.e", "f"]
    assert re.search(
        r"\| `b\.c` \| list \| `\[\"x\"\]` \| first line second line \|", chart_values.table(text)
    )
