"""The kustomize base and the persistence example, rendered by `kubectl kustomize`."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.compute import compute
from controlplane.model import ClusterState, ObjectRef
from controlplane.publish import encode
from controlplane.source.convert import (
    DEFAULT_HAPROXY_SELECTOR,
    config_map_from,
    endpoint_slice_from,
    parse_selector,
    pod_from,
    selector_matches,
    service_from,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (for kustomize) is not installed")

Obj = dict[str, Any]
READ = {"get", "list", "watch"}
# (apiGroup, resource) -> verbs, and for writes the resourceNames they may be limited to.
ALLOWED_READ = {
    ("", "services"),
    ("", "pods"),
    ("", "configmaps"),
    ("discovery.k8s.io", "endpointslices"),
    ("apps", "replicasets"),
    # The route model's inputs.
    ("", "namespaces"),
    ("networking.k8s.io", "ingresses"),
    ("networking.k8s.io", "ingressclasses"),
    ("gateway.networking.k8s.io", "gatewayclasses"),
    ("gateway.networking.k8s.io", "gateways"),
    ("gateway.networking.k8s.io", "httproutes"),
    ("gateway.networking.k8s.io", "grpcroutes"),
    ("gateway.networking.k8s.io", "referencegrants"),
    ("gateway.networking.k8s.io", "tlsroutes"),
    ("gateway.networking.k8s.io", "tcproutes"),
    # TLS certificates (the source lists and watches type=kubernetes.io/tls only).
    ("", "secrets"),
    # peerplane's own policies.
    ("peerplane.dev", "sourceippersistencepolicies"),
}
AGENT_FLAGS = {
    "--control-plane",
    "--pod-namespace",
    "--pod-name",
    "--config",
    "--state-dir",
    "--master-socket",
    "--runtime-socket",
    "--bind-address",
    "--ca",
    "--token-file",
    "--metrics-port",
    "--metrics-address",
    "--readiness-port",
    "--log-format",
}


def render(path: Path) -> list[Obj]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return render(DEPLOY)


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    for obj in objs:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind} {name} not rendered")


def flags(args: list[str]) -> dict[str, str]:
    out = {}
    for arg in args:
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            out[name] = value
    return out


def containers(objs: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for obj in objs:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                yield f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}", container


def test_every_container_has_probes_limits_and_a_locked_down_context(base: list[Obj]) -> None:
    seen = 0
    for where, container in containers(base):
        seen += 1
        assert "livenessProbe" in container, where
        assert "readinessProbe" in container, where
        limits = container.get("resources", {}).get("limits", {})
        assert {"cpu", "memory"} <= set(limits), where
        context = container.get("securityContext", {})
        assert context.get("readOnlyRootFilesystem") is True, where
        assert context.get("allowPrivilegeEscalation") is False, where
        assert context.get("capabilities", {}).get("drop") == ["ALL"], where
    assert seen == 3
    for obj in base:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            assert obj["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_rbac_grants_nothing_beyond_what_the_control_plane_uses(base: list[Obj]) -> None:
    deployment = find(base, "Deployment", "peerplane-controlplane")
    args = flags(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    lease = args["--lease-name"]
    slots = ObjectRef.parse(args["--slots-configmap"])
    settings = ObjectRef.parse(args["--configmap"])
    allowed_writes = {
        # The ledger's shards (named after backends) and its earlier single object.
        ("", "configmaps", "create", ()),
        ("", "configmaps", "update", ()),
        ("", "configmaps", "delete", ()),
        ("", "configmaps", "patch", (slots.name,)),
        ("coordination.k8s.io", "leases", "get", (lease,)),
        ("coordination.k8s.io", "leases", "update", (lease,)),
        ("coordination.k8s.io", "leases", "create", ()),
        ("", "events", "create", ()),
        ("", "events", "patch", ()),
        ("authentication.k8s.io", "tokenreviews", "create", ()),
        # Route status (controlplane/kube/route_status.py replaces, never patches).
        ("networking.k8s.io", "ingresses/status", "update", ()),
        ("gateway.networking.k8s.io", "gatewayclasses/status", "update", ()),
        ("gateway.networking.k8s.io", "gateways/status", "update", ()),
        ("gateway.networking.k8s.io", "httproutes/status", "update", ()),
        ("gateway.networking.k8s.io", "grpcroutes/status", "update", ()),
        ("gateway.networking.k8s.io", "tlsroutes/status", "update", ()),
        ("gateway.networking.k8s.io", "tcproutes/status", "update", ()),
        ("peerplane.dev", "sourceippersistencepolicies/status", "update", ()),
    }
    granted: set[tuple[str, str, str, tuple[str, ...], str]] = set()
    for obj in base:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in obj["rules"]:
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        names = tuple(rule.get("resourceNames", ()))
                        granted.add((group, resource, verb, names, obj["kind"]))
    assert granted, "no RBAC rendered"
    for group, resource, verb, names, kind in granted:
        assert "*" not in (group, resource, verb)
        if verb in READ and (group, resource) in ALLOWED_READ and not names:
            if resource == "configmaps":  # settings only: namespaced, never cluster-wide
                assert kind == "Role"
            continue
        assert (group, resource, verb, names) in allowed_writes, (group, resource, verb, names)
    role = find(base, "Role", "peerplane-controlplane")
    assert role["metadata"]["namespace"] == settings.namespace == slots.namespace
    assert args["--lease-namespace"] == role["metadata"]["namespace"]
    binding = find(base, "ClusterRoleBinding", "peerplane-controlplane")
    subject = binding["subjects"][0]
    assert subject["name"] == deployment["spec"]["template"]["spec"]["serviceAccountName"]


def test_control_plane_runs_two_leader_elected_replicas_behind_its_service(
    base: list[Obj],
) -> None:
    deployment = find(base, "Deployment", "peerplane-controlplane")
    assert deployment["spec"]["replicas"] == 2
    # Every replica serves and is Ready once synced: roll one at a time, and a PDB keeps
    # one serving through drains.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1
    pdb = find(base, "PodDisruptionBudget", "peerplane-controlplane")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = flags(container["args"])
    assert container["command"] == ["controlplane"] and container["args"][0] == "serve"
    assert args["--source"] == "kubernetes" and "--leader-elect" in args
    assert args["--listen"] == "0.0.0.0:18000"
    assert args["--configmap"] == "haproxy-system/haproxy-settings"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 18000, "metrics": int(args["--metrics-port"])}
    # Kubelet's gRPC probe cannot speak TLS: readiness is /readyz on the metrics port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = find(base, "Service", "peerplane-controlplane")
    assert service["spec"]["ports"][0]["targetPort"] == "grpc"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def test_daemonset_matches_the_agent_and_the_haproxy_selector(base: list[Obj]) -> None:
    daemonset = find(base, "DaemonSet", "haproxy")
    spec = daemonset["spec"]["template"]["spec"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert selector_matches(parse_selector(DEFAULT_HAPROXY_SELECTOR), labels)
    by_name = {c["name"]: c for c in spec["containers"]}
    haproxy, agent = by_name["haproxy"], by_name["agent"]
    ports = {p["name"]: p["containerPort"] for p in haproxy["ports"]}
    assert ports == {"http": 80, "https": 443, "peers": 10000}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in agent["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert env["NODE_NAME"] == "spec.nodeName"
    assert agent["command"] == ["nodeagent"] and agent["args"][0] == "run"
    args = flags(agent["args"])
    assert set(args) <= AGENT_FLAGS
    for env_ref in [v[2:-1] for v in args.values() if v.startswith("$(")]:
        assert env_ref in env, f"{env_ref} is not in the agent's environment"
    script = " ".join(haproxy["command"] + haproxy["args"])
    assert f"-S {args['--master-socket']}" in script and f"-f {args['--config']}" in script
    assert "haproxy -W" in script and "until [ -s" in script

    def volume_at(container: Obj, path: str) -> str:
        mounts = [
            m
            for m in container["volumeMounts"]
            if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")
        ]
        assert mounts, f"{path} is not on a volume of {container['name']}"
        return str(max(mounts, key=lambda m: len(m["mountPath"]))["name"])

    for path in (args["--config"], args["--master-socket"], args["--runtime-socket"]):
        assert volume_at(agent, path) == volume_at(haproxy, path)
    volumes = {v["name"]: v for v in spec["volumes"]}
    files = ("--config", "--state-dir", "--master-socket", "--runtime-socket")
    assert all("emptyDir" in volumes[volume_at(agent, args[f])] for f in files)
    assert "secret" in volumes[volume_at(agent, args["--ca"])]
    assert "projected" in volumes[volume_at(agent, args["--token-file"])]
    # Ready only once the stick tables are synced: the agent's /readyz on its readiness
    # port, the named port a load balancer's health check is pointed at.
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "readyz"}
    agent_ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert agent_ports["agent-metrics"] == int(args["--metrics-port"])
    assert agent_ports["readyz"] == int(args["--readiness-port"])
    assert args["--metrics-address"] == "$(POD_IP)"  # where the kubelet probes
    host, _, port = args["--control-plane"].rpartition(":")
    service = find(base, "Service", "peerplane-controlplane")
    assert host.split(".")[0] == service["metadata"]["name"]
    assert int(port) == service["spec"]["ports"][0]["port"]


def test_agent_command_line_parses_with_the_agent_itself(
    base: list[Obj], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeagent.cli.flags import build_parser as agent_parser

    daemonset = find(base, "DaemonSet", "haproxy")
    (agent,) = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"
    ]
    downward = {"metadata.name": "haproxy-x1", "metadata.namespace": "haproxy-system"}
    downward |= {"spec.nodeName": "node-1", "status.podIP": "10.0.1.1"}
    env = {e["name"]: downward[e["valueFrom"]["fieldRef"]["fieldPath"]] for e in agent["env"]}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in agent["args"]]
    parsed = agent_parser().parse_args(args)
    assert parsed.command == "run"
    assert (parsed.pod_namespace, parsed.pod_name) == ("haproxy-system", "haproxy-x1")
    assert parsed.node_name == "node-1" and parsed.bind_address == "10.0.1.1"
    assert not parsed.manage_haproxy  # HAProxy runs in its own container
    from nodeagent.stream.transport import DEFAULT_TOKEN_FILE, check

    assert check(parsed) is None and not parsed.insecure  # TLS, never plaintext
    assert parsed.token_file == DEFAULT_TOKEN_FILE
    assert parsed.haproxy_bin == "/usr/sbin/haproxy"  # Debian's, installed by the Dockerfile
    assert "apt-get install" in (DEPLOY / "Dockerfile").read_text()


def test_network_policies_open_the_peer_and_grpc_ports(base: list[Obj]) -> None:
    haproxy_labels = find(base, "DaemonSet", "haproxy")["spec"]["template"]["metadata"]["labels"]
    control_labels = find(base, "Deployment", "peerplane-controlplane")["spec"]["template"][
        "metadata"
    ]["labels"]

    def allowed(policy: Obj, port: int) -> list[dict[str, str]]:
        sources = []
        for rule in policy["spec"]["ingress"]:
            if any(p["port"] == port for p in rule.get("ports", [])):
                sources += [f["podSelector"]["matchLabels"] for f in rule.get("from", [])]
        return sources

    peers = find(base, "NetworkPolicy", "haproxy-ingress")
    assert peers["spec"]["podSelector"]["matchLabels"].items() <= haproxy_labels.items()
    assert [s.items() <= haproxy_labels.items() for s in allowed(peers, 10000)] == [True]
    grpc = find(base, "NetworkPolicy", "peerplane-controlplane-grpc")
    assert grpc["spec"]["podSelector"]["matchLabels"].items() <= control_labels.items()
    assert [s.items() <= haproxy_labels.items() for s in allowed(grpc, 18000)] == [True]
    # Prometheus can reach the agents' and the control plane's metrics ports.
    opened = {p["port"] for rule in peers["spec"]["ingress"] for p in rule.get("ports", [])}
    assert 9101 in opened
    opened = {p["port"] for rule in grpc["spec"]["ingress"] for p in rule.get("ports", [])}
    assert 9090 in opened


def test_metrics_ports_admit_only_the_documented_prometheus_selector(base: list[Obj]) -> None:
    """Incident: the metrics and /readyz ports admitted any source, and slow clients could
    hold them (with the agent's descriptors exhausted that way, an edit got no answer).
    Every rule opening 9101 (agent) or 9090 (control plane) names the Prometheus
    selector the operations guide documents, never an empty `from`; kubelet probes come
    from the node, which the policies' comments explain."""
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    for name, port in (("haproxy-ingress", 9101), ("peerplane-controlplane-grpc", 9090)):
        rules = [
            rule
            for rule in find(base, "NetworkPolicy", name)["spec"]["ingress"]
            if any(p["port"] == port for p in rule.get("ports", []))
        ]
        assert [rule.get("from") for rule in rules] == [[prometheus]], name
    text = (DEPLOY / "base" / "networkpolicy.yaml").read_text()
    assert "come from the node" in text
    guide = (DEPLOY.parent / "docs" / "operations.md").read_text()
    assert "app.kubernetes.io/name: prometheus" in guide and "kubernetes.io/metadata.name" in guide


def test_settings_configmap_documents_the_defaults(base: list[Obj]) -> None:
    data = find(base, "ConfigMap", "haproxy-settings")["data"]
    assert data == {
        "load-balance": "roundrobin",
        "source-ip-persistence": "false",
        "source-ip-persistence-size": "1m",
        "source-ip-persistence-expire": "30m",
        "server-slots": "42",
        "check": "true",
        "check-interval": "2s",
        "check-rise": "2",
        "check-fall": "3",
        "http-port": "80",
        "https-port": "443",
        "peer-port": "10000",
    }
    text = (DEPLOY / "base" / "settings.yaml").read_text()
    assert text.count("#") >= 8, "every key is documented"


def test_persistence_example_computes_a_sticky_backend(base: list[Obj]) -> None:
    objs = render(DEPLOY / "examples" / "persistence")
    svc = find(objs, "Service", "shop")
    slice_ = endpoint_slice_from(
        {
            "metadata": {
                "name": "shop-x",
                "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "shop"},
            },
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["10.0.0.5"]}],
        }
    )
    daemonset = find(base, "DaemonSet", "haproxy")
    pod = pod_from(
        {
            "metadata": {
                "name": "haproxy-abcde",
                "namespace": "haproxy-system",
                "labels": daemonset["spec"]["template"]["metadata"]["labels"],
                "ownerReferences": [{"kind": "DaemonSet", "name": "haproxy", "controller": True}],
            },
            "status": {"phase": "Running", "podIP": "10.0.1.1"},
        }
    )
    state = ClusterState(
        services=(service_from(svc),),
        endpoint_slices=(slice_,),
        haproxy_pods=(pod,),
        settings=config_map_from(find(objs, "ConfigMap", "haproxy-settings")),
    )
    (content,) = encode(compute(state, {}).workloads).values()
    snapshot = content.message()
    (backend,) = snapshot.backends
    assert backend.balance == "source"
    assert backend.persistence.table_size == 1 << 20
    assert backend.persistence.expire_ms == 30 * 60 * 1000
    assert list(backend.warnings) == []
    assert [s.address for s in backend.slots if s.enabled] == ["10.0.0.5"]


def test_control_plane_serves_tls_and_authenticates_agents(base: list[Obj]) -> None:
    from controlplane.cli.flags import build_parser, check

    deployment = find(base, "Deployment", "peerplane-controlplane")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    parsed = build_parser().parse_args(container["args"])
    assert check(parsed) is None and not parsed.insecure
    assert parsed.authenticate_agents and parsed.authenticate_inspection
    assert parsed.metrics_address == "0.0.0.0" and parsed.log_format == "json"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path in (parsed.tls_cert, parsed.tls_key):
        volume = volumes[mounts[str(path.parent)]]
        assert volume["secret"]["secretName"] == "peerplane-tls"
        assert path.name in ("tls.crt", "tls.key")

    daemonset = find(base, "DaemonSet", "haproxy")
    ds_spec = daemonset["spec"]["template"]["spec"]
    assert ds_spec["automountServiceAccountToken"] is False
    (agent,) = [c for c in ds_spec["containers"] if c["name"] == "agent"]
    agent_mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert agent_mounts["peerplane-token"] == "/var/run/secrets/peerplane"
    ds_volumes = {v["name"]: v for v in ds_spec["volumes"]}
    (source,) = ds_volumes["peerplane-token"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == parsed.token_audience and token["path"] == "token"
    ca = ds_volumes["peerplane-ca"]["secret"]
    assert ca["secretName"] == "peerplane-tls" and ca["items"] == [
        {"key": "ca.crt", "path": "ca.crt"}
    ]  # the CA only, never the key


def test_dockerfile_build_argument_selects_a_consistent_base_and_haproxy() -> None:
    """HAProxy 3.0 on Debian 13 by default; DEBIAN_RELEASE=bookworm gives 2.6 on Debian 12.
    Both stages use the same base, and the build checks the installed series."""
    text = (DEPLOY / "Dockerfile").read_text()
    before_from = text.split("\nFROM ", 1)[0]
    assert re.search(r"^ARG DEBIAN_RELEASE=trixie$", before_from, re.MULTILINE)
    froms = re.findall(r"^FROM (.+)$", text, re.MULTILINE)
    assert froms == ["debian:${DEBIAN_RELEASE}-slim AS build", "debian:${DEBIAN_RELEASE}-slim"]
    final_stage = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^ARG DEBIAN_RELEASE$", final_stage, re.MULTILINE)  # visible in RUN
    series = dict(re.findall(r"^\s+(\w+)\) series=(\d+\.\d+) ;;", final_stage, re.MULTILINE))
    assert series == {"trixie": "3.0", "bookworm": "2.6"}
    assert 'haproxy -v | grep -q "version ${series}\\."' in final_stage
    # Debian's own HAProxy and Python of that release (the venv copied from the build stage
    # runs on the same /usr/bin/python3).
    assert "apt-get install -y --no-install-recommends haproxy python3" in final_stage
    # The documented build commands name the argument and its two values.
    assert "--build-arg DEBIAN_RELEASE=bookworm" in text
    for release, haproxy in series.items():
        assert re.search(rf"#\s+{release} .*HAProxy {re.escape(haproxy)}$", text, re.MULTILINE)


def test_control_plane_serves_the_shipped_haproxy_workload_and_refuses_strays(
    base: list[Obj],
) -> None:
    from controlplane.cli.flags import build_parser
    from controlplane.cli.wiring import workload_scope
    from controlplane.settings.workloads import Workload

    deployment = find(base, "Deployment", "peerplane-controlplane")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    scope = workload_scope(build_parser().parse_args(args))
    daemonset = find(base, "DaemonSet", "haproxy")
    namespace = daemonset["metadata"]["namespace"]
    assert scope.refusal(Workload(namespace, "DaemonSet", daemonset["metadata"]["name"])) is None
    assert scope.refusal(Workload(namespace, "Deployment", "haproxy-edge")) is None
    assert scope.refusal(Workload(namespace, "Pod", "stray")) is not None
    assert scope.refusal(Workload("default", "DaemonSet", "haproxy")) is not None
    assert 1 <= scope.max_workloads <= 32


def test_the_open_files_limit_the_daemonset_expects_holds_2000_services_with_checks() -> None:
    """The manifest's comment names the open-files limit it expects; HAProxy's count for
    the size the manifests are sized for (2,000 Services x 42 checked slots), with many
    pods and threads, fits in it (docs/operations.md, "Open files"; the count is checked
    against HAProxy's own in tests/agent/test_descriptors.py)."""
    from nodeagent.config import descriptors
    from nodeagent.config.render import RenderOptions, render
    from peerplane.v1 import peerplane_pb2 as pb

    text = (DEPLOY / "base" / "haproxy.yaml").read_text()
    found = re.search(r"These manifests expect >= ([\d,]+)", text)
    assert found is not None, "haproxy.yaml no longer documents the open-files limit"
    expected = int(found.group(1).replace(",", ""))
    check = pb.HealthCheck(interval_ms=2000, rise=2, fall=3)
    backends = [
        pb.Backend(
            name=f"default_svc-{i:05d}_http",
            mode="http",
            balance="roundrobin",
            check=check,
            slots=[pb.Slot(index=n, server_name=f"SRV_{n}") for n in range(1, 43)],
        )
        for i in range(2000)
    ]
    pods = [pb.Peer(name=f"haproxy-{n}", address=f"10.0.0.{n}", port=10000) for n in range(1, 33)]
    snap = pb.Snapshot(
        workload="haproxy-system/DaemonSet/haproxy",
        version=1,
        peers=pb.PeerSection(name="localinstance", port=10000, peers=pods),
        backends=backends,
        http_frontend=pb.HttpFrontend(port=80),
    )
    cfg = render(snap, RenderOptions("haproxy-1", "10.0.0.1")).encode()
    need = descriptors.needs(cfg, threads=64, version=(3, 0))  # 32 pods, 64 threads
    assert need.checks == 84_000
    assert need.total <= expected, (need.total, expected)
