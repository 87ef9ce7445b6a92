"""Every example under deploy/examples, applied to a real API server as a user applies it.

`kubectl apply --server-side` of deploy/examples/demo and demo-https, of the persistence
kustomization (`kubectl kustomize`) and of the tls kustomization, each checked object by
object: what the server accepts exists afterwards, what it refuses is refused for the one
known reason. The demo is made to run in folder mode on one machine (`make demo`): its
EndpointSlices name loopback addresses (127.0.x.y), which a real API server refuses
("may not be in the loopback range"), and the sessionPersistence of its sessions route
is an experimental-channel field the standard channel refuses; every other object of it
is accepted. The tls
example needs cert-manager's CRDs: they are applied first, from the cert-manager release
tests/cluster/certmanager pins, as its users install cert-manager before it.

On the session's second cluster (`own_cluster`, which test_informer's API server restart
also uses): the demo's haproxy.yaml and the persistence example's base carry the very names
of the installation the session's cluster runs (DaemonSet haproxy-system/haproxy, the
settings ConfigMap), so applying and deleting them there would take it away from the other
tests.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.helpers.cluster import ROOT, RealCluster, cert_manager_crds
from tests.helpers.waiting import wait_until

EXAMPLES = ROOT / "deploy" / "examples"
Obj = dict[str, Any]
LOOPBACK = "may not be in the loopback range (127.0.0.0/8, ::1/128)"


def kubectl(cluster: RealCluster, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """`kubectl ARGS` as the admin: exit code, stdout and stderr (both wanted here)."""
    done = cluster.run_kubectl(*args, stdin=stdin)
    return done.returncode, done.stdout, done.stderr


def apply(cluster: RealCluster, *sources: str, stdin: str | None = None) -> tuple[int, str, str]:
    files = [arg for source in sources for arg in ("-f", source)]
    return kubectl(
        cluster, "apply", "--server-side", "--field-manager=peerplane-tests", *files, stdin=stdin
    )


def documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def ref(obj: Obj) -> str:
    """kubectl's name for it: `kind.group/name` (`kind/name` in the core group)."""
    group = obj["apiVersion"].rpartition("/")[0]
    kind = obj["kind"].lower() + (f".{group}" if group else "")
    return f"{kind}/{obj['metadata']['name']}"


def applied(stdout: str) -> set[str]:
    return {line.split()[0] for line in stdout.splitlines() if line.endswith("serverside-applied")}


def exists(cluster: RealCluster, obj: Obj) -> bool:
    namespace = obj["metadata"].get("namespace")
    where = ["-n", namespace] if namespace else []
    code, _, _ = kubectl(cluster, "get", ref(obj), *where, "-o", "name")
    return code == 0


def loopback(obj: Obj) -> list[str]:
    return [
        address
        for endpoint in obj.get("endpoints") or []
        for address in endpoint.get("addresses") or []
        if address.startswith("127.")
    ]


def test_the_demo_is_accepted_but_its_loopback_endpoint_slices(own_cluster: RealCluster) -> None:
    cluster = own_cluster
    # The demo names haproxy-system (where deploy/ installs the fleet) and default.
    kubectl(cluster, "create", "namespace", "haproxy-system")
    wait_until(
        lambda: exists(
            cluster,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": "haproxy-system"},
            },
        ),
        30,
    )
    sources = (str(EXAMPLES / "demo"), str(EXAMPLES / "demo-https"))
    objects = [
        obj
        for source in sources
        for path in sorted((ROOT / source).glob("*.yaml"))
        for obj in documents(path.read_text())
    ]
    refused = {ref(o): loopback(o) for o in objects if o["kind"] == "EndpointSlice"}
    assert len(refused) == 3 and all(refused.values())  # shop, catalog, db
    # sessions.yaml's sessionPersistence is an experimental-channel field; the cluster
    # has the standard channel (as `make demo KUBE=real`, which leaves that file out).
    experimental = "httproute.gateway.networking.k8s.io/sessions"
    assert experimental in {ref(o) for o in objects}
    try:
        code, out, err = apply(cluster, *sources)
        assert code != 0
        accepted = {ref(o) for o in objects} - set(refused) - {experimental}
        assert applied(out) == accepted, (out, err)
        assert all(exists(cluster, o) for o in objects if ref(o) in accepted)
        errors = [line for line in err.splitlines() if line.strip()]
        assert len(errors) == len(refused) + 1, err
        (schema,) = [e for e in errors if "default/sessions" in e]
        assert schema == (
            "Error from server: failed to create typed patch object (default/sessions; "
            "gateway.networking.k8s.io/v1, Kind=HTTPRoute): "
            ".spec.rules[0].sessionPersistence: field not declared in schema"
        ), schema
        for name, addresses in refused.items():
            slice_name = name.split("/")[1]
            (line,) = [e for e in errors if f'"{slice_name}" is invalid' in e]
            assert line.startswith(
                f'Error from server (Invalid): EndpointSlice.discovery.k8s.io "{slice_name}"'
            ), line
            # Every loopback address named, each with the server's reason.
            found = re.findall(
                r'addresses\[0\]: Invalid value: "([^"]+)": ' + re.escape(LOOPBACK), line
            )
            assert found == addresses and line.count("Invalid value") == len(addresses), line
            assert not exists(
                cluster,
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {"name": slice_name, "namespace": "default"},
                },
            )
    finally:
        kubectl(
            cluster,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "--grace-period=0",
            "--force",
            "-f",
            sources[0],
            "-f",
            sources[1],
        )
    wait_until(lambda: not any(exists(cluster, o) for o in objects), 30)


def test_the_persistence_example_is_accepted(own_cluster: RealCluster) -> None:
    cluster = own_cluster
    rendered = cluster.kubectl("kustomize", str(EXAMPLES / "persistence"))
    objects = documents(rendered)
    assert {"Namespace", "Deployment", "DaemonSet", "Service"} <= {o["kind"] for o in objects}
    ours = [o for o in objects if o["kind"] != "Namespace"]
    try:
        code, out, err = apply(cluster, "-", stdin=rendered)
        assert (code, err) == (0, ""), err
        assert applied(out) == {ref(o) for o in objects}
        assert all(exists(cluster, o) for o in objects)
    finally:
        # The Namespaces stay (empty): the demo's test names haproxy-system too.
        for obj in ours:
            namespace = obj["metadata"].get("namespace")
            where = ["-n", namespace] if namespace else []
            kubectl(cluster, "delete", ref(obj), *where, "--ignore-not-found", "--wait=false")
    wait_until(lambda: not any(exists(cluster, o) for o in ours), 30)


def test_the_tls_example_is_accepted_once_cert_manager_is_installed(
    own_cluster: RealCluster,
) -> None:
    """As its users do: cert-manager's CRDs first (the pinned release's own files), then
    the example's Issuers and Certificates, every one accepted by their schemas."""
    cluster = own_cluster
    rendered = cluster.kubectl("kustomize", str(EXAMPLES / "tls"))
    objects = documents(rendered)
    assert sorted(o["kind"] for o in objects) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    crds = cert_manager_crds()
    assert {p.name for p in crds} >= {
        "cert-manager.io_certificates.yaml",
        "cert-manager.io_issuers.yaml",
    }
    code, _, err = apply(cluster, *map(str, crds))
    assert (code, err) == (0, ""), err
    established = (
        "wait",
        "--for=condition=Established",
        "--timeout=5s",
        "crd/issuers.cert-manager.io",
        "crd/certificates.cert-manager.io",
    )
    # A CRD just created has no status yet, which `kubectl wait` takes for an error.
    wait_until(lambda: cluster.run_kubectl(*established).returncode == 0, 60)
    kubectl(cluster, "create", "namespace", "haproxy-system")  # the demo's test may have
    code, out, err = kubectl(
        cluster,
        "apply",
        "--server-side",
        "--field-manager=peerplane-tests",
        "-k",
        str(EXAMPLES / "tls"),
    )
    try:
        assert (code, err) == (0, ""), err
        assert applied(out) == {ref(o) for o in objects}
        assert all(exists(cluster, o) for o in objects)
    finally:
        kubectl(
            cluster, "delete", "--ignore-not-found", "--wait=false", "-k", str(EXAMPLES / "tls")
        )
