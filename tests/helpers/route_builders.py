"""Route objects for tests: a Gateway API and Ingress cluster around the default HAProxy
workload (tests/helpers/builders.py), built through the converters as a folder or the API
would give them."""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.model import ClusterState
from controlplane.source.convert_gateway import gateway_class_from, gateway_from
from controlplane.source.convert_ingress import ingress_class_from, ingress_from
from controlplane.source.convert_routes import grpc_route_from, http_route_from
from tests.helpers.builders import DEFAULT_PODS, cluster, haproxy_pod, service

GATEWAY_CLASS = gateway_class_from(
    {
        "metadata": {"name": "peerplane"},
        "spec": {"controllerName": "peerplane.dev/gateway-controller"},
    }
)
INGRESS_CLASS = ingress_class_from(
    {
        "metadata": {
            "name": "peerplane",
            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"},
        },
        "spec": {"controller": "peerplane.dev/ingress-controller"},
    }
)


def gateway(
    name: str = "web",
    namespace: str = "default",
    port: int = 8080,
    hostname: str = "",
    allowed: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    protocol: str = "HTTP",
    created: str = "",
) -> Any:
    listener: dict[str, Any] = {"name": "http", "port": port, "protocol": protocol}
    if hostname:
        listener["hostname"] = hostname
    if allowed is not None:
        listener["allowedRoutes"] = {"namespaces": allowed}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": annotations or {},
    }
    if created:
        metadata["creationTimestamp"] = created
    return gateway_from(
        {
            "metadata": metadata,
            "spec": {"gatewayClassName": "peerplane", "listeners": [listener]},
        }
    )


def route(
    name: str,
    rules: list[dict[str, Any]],
    namespace: str = "default",
    hostnames: tuple[str, ...] = (),
    created: str = "2026-01-01T00:00:00Z",
    parent: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> Any:
    return http_route_from(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": created,
                "annotations": annotations or {},
            },
            "spec": {
                "parentRefs": [parent or {"name": "web", "namespace": "default"}],
                "hostnames": list(hostnames),
                "rules": rules,
            },
        }
    )


def grpc_route(
    name: str,
    rules: list[dict[str, Any]],
    namespace: str = "default",
    hostnames: tuple[str, ...] = (),
    created: str = "2026-01-01T00:00:00Z",
    parent: dict[str, Any] | None = None,
) -> Any:
    return grpc_route_from(
        {
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {
                "parentRefs": [parent or {"name": "web", "namespace": "default"}],
                "hostnames": list(hostnames),
                "rules": rules,
            },
        }
    )


def to(name: str, port: int = 80, weight: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "port": port, "weight": weight, **extra}


def prefix(value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": "PathPrefix", "value": value}, **extra}


def state(*objects: Any, services: tuple[Any, ...] = (), **more: Any) -> ClusterState:
    """A cluster with the default HAProxy workload, `services` and the route objects."""
    fields: dict[str, list[Any]] = {}
    kinds = {
        "GatewayClass": "gateway_classes",
        "Gateway": "gateways",
        "HTTPRoute": "http_routes",
        "GRPCRoute": "grpc_routes",
        "ReferenceGrant": "reference_grants",
        "Ingress": "ingresses",
        "IngressClass": "ingress_classes",
        "Namespace": "namespaces",
    }
    for obj in (GATEWAY_CLASS, INGRESS_CLASS, *objects):
        fields.setdefault(kinds[type(obj).__name__], []).append(obj)
    base = cluster(
        services=services or (service("shop"), service("catalog")),
        pods=more.pop("pods", DEFAULT_PODS),
        config=more.pop("config", None),
    )
    return dataclasses.replace(base, **{k: tuple(v) for k, v in fields.items()}, **more)


def prefix_rule(path: str, backends: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"matches": [prefix(path)], "backendRefs": backends, **extra}


def edge_pod() -> Any:
    """A pod of a second HAProxy workload, haproxy-system/DaemonSet/edge."""
    pod = haproxy_pod("edge-a", "127.0.1.9")
    return dataclasses.replace(pod, owner=dataclasses.replace(pod.owner, name="edge"))


def ingress(name: str, rules: list[dict[str, Any]], namespace: str = "default", **spec: Any) -> Any:
    return ingress_from(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": spec.pop("created", "2026-01-01T00:00:00Z"),
            },
            "spec": {"rules": rules, **spec},
        }
    )


def path(
    value: str, kind: str, svc: str = "shop", port: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "path": value,
        "pathType": kind,
        "backend": {"service": {"name": svc, "port": port or {"number": 80}}},
    }
