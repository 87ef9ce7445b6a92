"""Two tenants of the shared fleet on a real API server, each with namespace-scoped RBAC.

Each tenant is a ServiceAccount bound, in its own namespace only, to a Role for what an
application team creates (Services, EndpointSlices, TLS Secrets, Ingresses, Gateways,
HTTPRoutes); the real RBAC authorizer refuses it everything elsewhere. Tenant A (older)
serves `*.SUFFIX` over HTTPS through a Gateway and `store.SUFFIX/cart`; tenant B (younger,
in a namespace that sorts first) tries, from its own namespace only, to take A's traffic:
an Ingress whose `spec.tls` binds its certificate to `secure.SUFFIX` (R2), and a Gateway
without hostname with an HTTPRoute for `store.SUFFIX` and a more specific match (R1). The
control plane (the shipped RBAC) must keep A's certificate and routes for A's names and
report B's refusals on B's objects.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.helpers.cluster import KubectlError, RealCluster
from tests.helpers.cluster_serve import exposed_service
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.tls_certs import make_ca, tls_secret
from tests.helpers.waiting import wait_until
from tests.realkube.conftest import WORKLOAD
from tests.realkube.test_serve import conditions, route_status

HTTPS_PORT = 18443
HTTP_PORT = 18080
TENANT_ROLE_RULES = [
    {
        "apiGroups": [""],
        "resources": ["services", "secrets", "events"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["gateway.networking.k8s.io"],
        "resources": ["gateways", "httproutes"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]
Obj = dict[str, Any]


@pytest.fixture
def tenants(classes: RealCluster) -> Iterator[list[str]]:
    """The namespaces a test makes for its tenants, deleted on the way out: a claim left
    behind would be older than the next test's."""
    made: list[str] = []
    yield made
    for ns in made:
        classes.delete_namespace(ns)


def tenant(cluster: RealCluster, prefix: str, tmp: Path, made: list[str]) -> tuple[str, Path]:
    """A namespace and a kubeconfig of a ServiceAccount that may act in it alone."""
    ns = cluster.namespace(prefix)
    made.append(ns)
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "team", "namespace": ns},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "team", "namespace": ns},
                "rules": TENANT_ROLE_RULES,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "team", "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "team",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "team", "namespace": ns}],
            },
        ]
    )
    return ns, cluster.service_account_kubeconfig(ns, "team", tmp / f"{ns}.kubeconfig")


def snapshot(address: str) -> Obj:
    reply: Obj = json.loads(
        grpcurl(
            address, "peerplane.v1.PeerPlane/GetSnapshot", data=json.dumps({"workload": WORKLOAD})
        )
    )
    return reply


def listener(found: Obj, port: int) -> Obj:
    return next((x for x in found.get("http_listeners", []) if x.get("port") == port), {})


def bindings(found: Obj) -> dict[str, list[str]]:
    tls = listener(found, HTTPS_PORT).get("tls") or {}
    return {b["certificate"]: b.get("hostnames", []) for b in tls.get("certificates", [])}


def rules_for(found: Obj, port: int, host: str) -> list[Obj]:
    """The rules of `host` on the every-address listener of `port`: its route group's
    (contract 2: a listener's rules travel in route groups)."""
    return [
        rule
        for group in found.get("route_groups", [])
        if group.get("listener") == str(port) and group.get("host", "") == host
        for rule in group.get("rules", [])
    ]


def events_of(cluster: RealCluster, ns: str, kind: str, name: str) -> list[str]:
    core = client.CoreV1Api(cluster.api_client())
    found = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
    return [e.message for e in found.items if e.involved_object.kind == kind]


def test_a_younger_tenant_can_take_neither_the_certificate_nor_the_routes_of_an_older_one(
    classes: RealCluster, serving: ServeProcess, tmp_path: Path, tenants: list[str]
) -> None:
    cluster = classes
    suffix = f"t{uuid.uuid4().hex[:6]}.example.com"
    victim, victim_config = tenant(cluster, "tenant-a", tmp_path, tenants)
    ca = make_ca("tenants CA")
    cluster.apply(
        [
            *exposed_service(victim, "shop", ("10.7.0.1",)),
            tls_secret("a-tls", ca.issue(f"*.{suffix}"), victim),
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": {"name": "web", "namespace": victim},
                "spec": {
                    "gatewayClassName": "peerplane",
                    "listeners": [
                        {
                            "name": "https",
                            "port": HTTPS_PORT,
                            "protocol": "HTTPS",
                            "hostname": f"*.{suffix}",
                            "tls": {
                                "mode": "Terminate",
                                "certificateRefs": [{"kind": "Secret", "name": "a-tls"}],
                            },
                        },
                        {
                            "name": "http",
                            "port": HTTP_PORT,
                            "protocol": "HTTP",
                            "hostname": f"*.{suffix}",
                        },
                    ],
                },
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "store", "namespace": victim},
                "spec": {
                    "parentRefs": [{"name": "web"}],
                    "hostnames": [f"store.{suffix}"],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": "/cart"}}],
                            "backendRefs": [{"name": "shop", "port": 80}],
                        }
                    ],
                },
            },
        ],
        kubeconfig=victim_config,
    )
    victim_cert = f"{victim}_a-tls"
    wait_until(lambda: victim_cert in bindings(snapshot(serving.address)), 30)
    wait_until(lambda: rules_for(snapshot(serving.address), HTTP_PORT, f"store.{suffix}"), 30)
    time.sleep(1.1)  # creationTimestamp has seconds: B is strictly younger

    attacker, attacker_config = tenant(cluster, "aaa-tenant-b", tmp_path, tenants)  # sorts first
    # The real authorizer: B cannot write into A's namespace at all.
    with pytest.raises(KubectlError, match="forbidden"):
        cluster.apply(
            [
                {
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "HTTPRoute",
                    "metadata": {"name": "steal", "namespace": victim},
                    "spec": {"parentRefs": [{"name": "web"}]},
                }
            ],
            kubeconfig=attacker_config,
        )
    # From its own namespace: R2, its certificate bound to A's name.
    cluster.apply(
        [
            *exposed_service(attacker, "bsvc", ("10.7.0.2",)),
            tls_secret("evil-tls", ca.issue(f"secure.{suffix}"), attacker),
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": "evil", "namespace": attacker},
                "spec": {
                    "ingressClassName": "peerplane",
                    "tls": [{"hosts": [f"secure.{suffix}"], "secretName": "evil-tls"}],
                    "rules": [
                        {
                            "host": f"b-own.{suffix}.net",
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": "Prefix",
                                        "backend": {
                                            "service": {"name": "bsvc", "port": {"number": 80}}
                                        },
                                    }
                                ]
                            },
                        }
                    ],
                },
            },
        ],
        kubeconfig=attacker_config,
    )
    evil_cert = f"{attacker}_evil-tls"

    def evil_bound() -> bool:
        return evil_cert in bindings(snapshot(serving.address))

    def refused_reported() -> bool:
        return any(f"secure.{suffix}" in m for m in events_of(cluster, attacker, "Ingress", "evil"))

    wait_until(refused_reported, 30, message=lambda: serving.lines[-20:])
    found = bindings(snapshot(serving.address))
    assert f"secure.{suffix}" not in found.get(evil_cert, []), found
    assert found[victim_cert] and f"*.{suffix}" in found[victim_cert], found
    assert (
        not evil_bound() or f"secure.{suffix}" not in bindings(snapshot(serving.address))[evil_cert]
    )

    # R1: a Gateway of B's own without hostname, and an HTTPRoute for A's host with a more
    # specific match than A's PathPrefix /cart.
    cluster.apply(
        [
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": {"name": "bgw", "namespace": attacker},
                "spec": {
                    "gatewayClassName": "peerplane",
                    "listeners": [{"name": "http", "port": HTTP_PORT, "protocol": "HTTP"}],
                },
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "steal", "namespace": attacker},
                "spec": {
                    "parentRefs": [{"name": "bgw"}],
                    "hostnames": [f"store.{suffix}"],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "Exact", "value": "/cart"}}],
                            "backendRefs": [{"name": "bsvc", "port": 80}],
                        }
                    ],
                },
            },
        ],
        kubeconfig=attacker_config,
    )

    def refused_route() -> bool:
        status = route_status(cluster, "httproutes", attacker, "steal")
        parents = status.get("parents") or []
        return bool(parents) and conditions(parents[0]).get("Accepted") == "False"

    wait_until(refused_route, 30, message=lambda: serving.lines[-20:])
    parent = route_status(cluster, "httproutes", attacker, "steal")["parents"][0]
    (accepted,) = [c for c in parent["conditions"] if c["type"] == "Accepted"]
    assert accepted["reason"] == "HostnameConflict", accepted
    store = rules_for(snapshot(serving.address), HTTP_PORT, f"store.{suffix}")
    targets = {b["backend"] for rule in store for b in rule.get("backends", [])}
    assert targets == {f"{victim}_shop_http"}, store
