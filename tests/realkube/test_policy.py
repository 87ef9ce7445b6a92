"""SourceIPPersistencePolicy on a real API server: its CRD applied from deploy/ (the
`installed` fixture), a policy created by the admin is read by `serve` running as the
shipped ServiceAccount, which serves the Service's backend with the persistence the
policy sets (the annotation's backend) and writes `status.ancestors` Accepted through the
real `/status` subresource; a policy the CRD's schema refuses is never stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.helpers.cluster import KubectlError, RealCluster
from tests.helpers.cluster_serve import (
    backend_name,
    exposed_service,
    forbidden,
    free_lease,
    own_namespace,
    serve_args,
)
from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.waiting import wait_until
from tests.realkube.conftest import WORKLOAD

GROUP, VERSION, PLURAL = "peerplane.dev", "v1alpha1", "sourceippersistencepolicies"


def policy(namespace: str, name: str, target: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SourceIPPersistencePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targetRefs": [target], **spec},
    }


def service_ref(name: str, **more: str) -> dict[str, str]:
    return {"group": "", "kind": "Service", "name": name, **more}


def backends(address: str) -> dict[str, Any]:
    reply = json.loads(
        grpcurl(
            address, "peerplane.v1.PeerPlane/GetSnapshot", data=json.dumps({"workload": WORKLOAD})
        )
    )
    return {b["name"]: b for b in reply.get("backends", [])}


def ancestors(cluster: RealCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(cluster.api_client())
    found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return list((found.get("status") or {}).get("ancestors") or [])


def accepted(entry: dict[str, Any]) -> tuple[str, str]:
    (condition,) = entry["conditions"]
    return condition["status"], condition["reason"]


def test_a_policy_is_served_and_accepted_under_the_shipped_rbac(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    free_lease(installed)
    with own_namespace(installed, "rk-policy") as ns:
        installed.apply(exposed_service(ns, "sticky", ("10.0.4.1", "10.0.4.2")))
        annotated = exposed_service(
            ns,
            "annotated",
            ("10.0.4.1", "10.0.4.2"),
            source_ip_persistence="true",
            source_ip_persistence_size="64k",
            source_ip_persistence_expire="10m",
        )
        installed.apply(annotated)
        installed.apply(
            [
                policy(
                    ns,
                    "sticky",
                    service_ref("sticky", sectionName="http"),
                    tableSize="64k",
                    expire="10m",
                ),
                policy(ns, "lost", service_ref("nosuch")),
            ]
        )
        with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:
            wait_until(lambda: health(serve.address) == "SERVING", 60, message=lambda: serve.lines)

            def served() -> bool:
                found = backends(serve.address)
                return "persistence" in found.get(backend_name(ns, "sticky"), {})

            wait_until(served, 30, message=lambda: serve.lines[-20:])
            found = backends(serve.address)
            by_policy = found[backend_name(ns, "sticky")]
            assert by_policy["persistence"] == {"table_size": "65536", "expire_ms": "600000"}
            assert by_policy["persistence"] == found[backend_name(ns, "annotated")]["persistence"]

            def written() -> bool:
                return bool(ancestors(installed, ns, "sticky")) and bool(
                    ancestors(installed, ns, "lost")
                )

            wait_until(written, 30, message=lambda: serve.lines[-20:])
            (entry,) = ancestors(installed, ns, "sticky")
            assert entry["ancestorRef"] == {
                "group": "",
                "kind": "Service",
                "namespace": ns,
                "name": "sticky",
                "sectionName": "http",
            }
            assert entry["controllerName"] == "peerplane.dev/gateway-controller"
            assert accepted(entry) == ("True", "Accepted")
            (lost,) = ancestors(installed, ns, "lost")
            assert accepted(lost) == ("False", "TargetNotFound")
            assert serve.terminate() == 0
    assert not forbidden(serve.lines)


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({"targetRefs": [service_ref("shop")], "expire": "2y"}, "spec.expire"),
        ({"targetRefs": [service_ref("shop")], "tableSize": "lots"}, "spec.tableSize"),
        (
            {"targetRefs": [{"group": "apps", "kind": "Deployment", "name": "shop"}]},
            "only core Services",
        ),
        ({"targetRefs": []}, "spec.targetRefs"),
        ({"targetRefs": [service_ref("shop"), service_ref("shop")]}, "unique"),
    ],
    ids=["expire", "table-size", "kind", "no-target", "repeated"],
)
def test_the_crd_schema_refuses_an_invalid_policy(
    installed: RealCluster, spec: dict[str, Any], refusal: str
) -> None:
    with own_namespace(installed, "rk-policy-bad") as ns:
        manifest = policy(ns, "bad", service_ref("shop"))
        manifest["spec"] = spec
        with pytest.raises(KubectlError) as refused:
            installed.apply([manifest])
        assert refusal in str(refused.value)
        custom = client.CustomObjectsApi(installed.api_client())
        stored = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
        assert stored["items"] == []
