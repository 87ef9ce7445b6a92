"""Builders of the Kubernetes objects the tests feed the fake API server, and helpers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from controlplane.routes.names import GATEWAY_CONTROLLER, INGRESS_CONTROLLER

Obj = dict[str, Any]


def api_client(url: str) -> client.ApiClient:
    """An official client pointed at the fake server over plain HTTP."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = False
    configuration.connection_pool_maxsize = 32  # as controlplane.kube.client's
    return client.ApiClient(configuration)


def write_kubeconfig(url: str, path: Path, token: str = "t") -> Path:
    """A kubeconfig pointing the real client at the fake API server at `url`."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]\n"
        f"users: [{{name: cp, user: {{token: {token}}}}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: cp}}]\n"
    )
    return path


def service(name: str, ns: str = "default", expose: bool = True, **annotations: str) -> Obj:
    notes = {"haproxy.org/expose": "true"} if expose else {}
    notes.update({f"haproxy.org/{k.replace('_', '-')}": v for k, v in annotations.items()})
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": ns, "annotations": notes},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }


def endpoint_slice(service_name: str, ready: dict[str, bool], ns: str = "default") -> Obj:
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": f"{service_name}-abc",
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": ok}} for ip, ok in sorted(ready.items())
        ],
    }


API_VERSIONS = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "Deployment": "apps/v1"}


def uid_of(kind: str, ns: str, name: str) -> str:
    """A stable uid for the builders' objects, so an owner and its dependents agree."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"peerplane-test:{kind}/{ns}/{name}"))


def owner_reference(kind: str, name: str, ns: str) -> Obj:
    """A controller ownerReference as a real API server requires it: apiVersion, kind,
    name and uid (422 Invalid without any of them)."""
    return {
        "apiVersion": API_VERSIONS[kind],
        "kind": kind,
        "name": name,
        "uid": uid_of(kind, ns, name),
        "controller": True,
    }


def pod(
    name: str,
    ip: str,
    owner: str = "haproxy-7d9f",
    ns: str = "haproxy-system",
    owner_kind: str = "ReplicaSet",
) -> Obj:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/component": "haproxy"},
            "ownerReferences": [owner_reference(owner_kind, owner, ns)],
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "podIP": ip},
    }


def replica_set(name: str = "haproxy-7d9f", ns: str = "haproxy-system") -> Obj:
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid_of("ReplicaSet", ns, name),
            "labels": {"app.kubernetes.io/component": "haproxy", "pod-template-hash": "7d9f"},
            "ownerReferences": [owner_reference("Deployment", "haproxy", ns)],
        },
    }


def config_map(name: str, ns: str = "haproxy-system", **data: str) -> Obj:
    return {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": ns},
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


GATEWAY_API = "gateway.networking.k8s.io/v1"


def namespace(name: str, **labels: str) -> Obj:
    return {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name, "labels": labels}}


def gateway_class(name: str = "peerplane", controller: str = GATEWAY_CONTROLLER) -> Obj:
    return {
        "kind": "GatewayClass",
        "apiVersion": GATEWAY_API,
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }


def gateway(
    name: str = "web", ns: str = "default", class_name: str = "peerplane", port: int = 80
) -> Obj:
    return {
        "kind": "Gateway",
        "apiVersion": GATEWAY_API,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "gatewayClassName": class_name,
            "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
        },
    }


def http_route(
    name: str = "shop",
    ns: str = "default",
    *,
    gateway_name: str = "web",
    hostnames: tuple[str, ...] = ("shop.example.com",),
    backend: str = "shop",
    port: int = 80,
    path: str = "/",
    annotations: dict[str, str] | None = None,
) -> Obj:
    return {
        "kind": "HTTPRoute",
        "apiVersion": GATEWAY_API,
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": {
            "parentRefs": [{"name": gateway_name}],
            "hostnames": list(hostnames),
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [{"name": backend, "port": port}],
                }
            ],
        },
    }


def reference_grant(name: str, ns: str, from_ns: str) -> Obj:
    return {
        "kind": "ReferenceGrant",
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "from": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": from_ns}
            ],
            "to": [{"group": "", "kind": "Service"}],
        },
    }


def ingress_class(name: str = "peerplane", default: bool = False) -> Obj:
    notes = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "kind": "IngressClass",
        "apiVersion": "networking.k8s.io/v1",
        "metadata": {"name": name, "annotations": notes},
        "spec": {"controller": INGRESS_CONTROLLER},
    }


def ingress(
    name: str = "shop",
    ns: str = "default",
    *,
    class_name: str | None = "peerplane",
    host: str = "shop.example.com",
    backend: str = "shop",
    port: int = 80,
    annotations: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": backend, "port": {"number": port}}},
                        }
                    ]
                },
            }
        ]
    }
    if class_name is not None:
        spec["ingressClassName"] = class_name
    return {
        "kind": "Ingress",
        "apiVersion": "networking.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": spec,
    }


L4_ROUTE_API = "gateway.networking.k8s.io/v1"  # TLSRoute, TCPRoute: standard since v1.5


def grpc_route(
    name: str = "rpc",
    ns: str = "default",
    *,
    gateway_name: str = "web",
    hostnames: tuple[str, ...] = ("rpc.example.com",),
    backend: str = "rpc",
    port: int = 9000,
    service: str = "grpc.health.v1.Health",
) -> Obj:
    return {
        "kind": "GRPCRoute",
        "apiVersion": GATEWAY_API,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [{"name": gateway_name}],
            "hostnames": list(hostnames),
            "rules": [
                {
                    "matches": [{"method": {"service": service}}],
                    "backendRefs": [{"name": backend, "port": port}],
                }
            ],
        },
    }


def tls_route(
    name: str = "db",
    ns: str = "default",
    *,
    gateway_name: str = "web",
    section: str = "",
    hostnames: tuple[str, ...] = ("db.example.com",),
    backend: str = "db",
    port: int = 5432,
) -> Obj:
    route = _l4_route("TLSRoute", name, ns, gateway_name, section, backend, port)
    route["spec"]["hostnames"] = list(hostnames)
    return route


def tcp_route(
    name: str = "pg",
    ns: str = "default",
    *,
    gateway_name: str = "web",
    section: str = "",
    backend: str = "db",
    port: int = 5432,
) -> Obj:
    return _l4_route("TCPRoute", name, ns, gateway_name, section, backend, port)


def _l4_route(
    kind: str, name: str, ns: str, gateway_name: str, section: str, backend: str, port: int
) -> Obj:
    parent: Obj = {"name": gateway_name}
    if section:
        parent["sectionName"] = section
    return {
        "kind": kind,
        "apiVersion": L4_ROUTE_API,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [parent],
            "rules": [{"backendRefs": [{"name": backend, "port": port}]}],
        },
    }


# What a real API server answers `misplaced_event()` created in namespace default.
MISPLACED = (
    'Event "misplaced" is invalid: involvedObject.namespace: Invalid value: "kube-system": '
    "does not match event.namespace"
)


def misplaced_event() -> Obj:
    """A Warning Event for namespace default about a Service of kube-system (refused)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "misplaced", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Service",
            "namespace": "kube-system",
            "name": "shop",
        },
        "reason": "InvalidAnnotation",
        "message": "m",
        "type": "Warning",
    }


def source_ip_persistence_policy(
    name: str = "sticky",
    ns: str = "default",
    service_name: str = "shop",
    section: str = "",
    **spec: str,
) -> Obj:
    """A peerplane.dev/v1alpha1 SourceIPPersistencePolicy on one Service (or its port)."""
    target: Obj = {"group": "", "kind": "Service", "name": service_name}
    if section:
        target["sectionName"] = section
    return {
        "kind": "SourceIPPersistencePolicy",
        "apiVersion": "peerplane.dev/v1alpha1",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRefs": [target], **spec},
    }
