"""Every example under deploy/examples, applied to a real API server as a user applies it.

`kubectl apply --server-side` of deploy/examples/demo and demo-https, of the persistence
kustomization (`kubectl kustomize`) and of the tls kustomization, each checked object by
object: what the server accepts exists afterwards, what it refuses is refused for the one
known reason. The demo is made to run in folder mode on one machine (`make demo`): its
EndpointSlices name loopback addresses (127.0.x.y), which a real API server refuses
("may not be in the loopback range"); every other object of it is accepted. The tls
example needs cert-manager's CRDs, which this cluster does not install: kubectl refuses
its Issuers and Certificates with "no matches for kind", and nothing else.

On a cluster of the module's own (`own_cluster`): the demo's haproxy.yaml and the
persistence example's base carry the very names of the installation the session's
cluster runs (DaemonSet haproxy-system/haproxy, the settings ConfigMap), so applying and
deleting them there would take it away from the other tests.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.helpers.cluster import ROOT, RealCluster
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
    try:
        code, out, err = apply(cluster, *sources)
        assert code != 0
        accepted = {ref(o) for o in objects} - set(refused)
        assert applied(out) == accepted, (out, err)
        assert all(exists(cluster, o) for o in objects if ref(o) in accepted)
        errors = [line for line in err.splitlines() if line.strip()]
        assert len(errors) == len(refused), err
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


def test_the_tls_example_needs_cert_manager(own_cluster: RealCluster) -> None:
    """cert-manager's CRDs are not installed here: kubectl finds no kind Issuer or
    Certificate (cert-manager.io/v1) for each of the example's four objects, and that is
    the only refusal."""
    cluster = own_cluster
    objects = documents(cluster.kubectl("kustomize", str(EXAMPLES / "tls")))
    assert sorted(o["kind"] for o in objects) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    code, out, err = kubectl(
        cluster,
        "apply",
        "--server-side",
        "--field-manager=peerplane-tests",
        "-k",
        str(EXAMPLES / "tls"),
    )
    assert code != 0 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    missing = re.compile(
        r'resource mapping not found for name: "([^"]+)" namespace: "haproxy-system" from '
        r'"[^"]+": no matches for kind "(Issuer|Certificate)" in version "cert-manager.io/v1"$'
    )
    named = sorted(m.groups() for m in map(missing.match, lines) if m)
    assert named == sorted((o["metadata"]["name"], o["kind"]) for o in objects), err
    assert all(missing.match(line) or line == "ensure CRDs are installed first" for line in lines)
