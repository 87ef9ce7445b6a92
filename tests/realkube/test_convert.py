"""The converters (controlplane/source/convert*.py) on objects as a real API server returns them.

An object read back from kube-apiserver carries what the manifest did not: managedFields,
uid, resourceVersion, generation, server-side defaults (a Service's clusterIP, type and
port protocol; the Gateway API CRDs' defaults: a parentRef's group and kind, a
backendRef's weight, an HTTPRoute rule's default match...). None of it may change the
model object: each one read back converts to what its manifest converts to, but for the
fields only the server sets (generation, creationTimestamp, a Secret's resourceVersion).
The demo's objects and the fake API server's builders (tests/kubeapi/objects.py) are
applied server-side into a namespace of the test's own.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from controlplane.source.convert import (
    config_map_from,
    endpoint_slice_from,
    service_from,
)
from controlplane.source.convert_gateway import (
    gateway_class_from,
    gateway_from,
    namespace_from,
    reference_grant_from,
)
from controlplane.source.convert_ingress import ingress_class_from, ingress_from
from controlplane.source.convert_routes import http_route_from, tcp_route_from, tls_route_from
from controlplane.source.convert_secret import tls_secret_from
from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_demo import demo_objects
from tests.kubeapi import objects as fake

Obj = dict[str, Any]
GATEWAY = "apis/gateway.networking.k8s.io"
# kind -> (API path prefix, plural, converter)
KINDS: dict[str, tuple[str, str, Callable[[Obj], Any]]] = {
    "Service": ("api/v1", "services", service_from),
    "EndpointSlice": ("apis/discovery.k8s.io/v1", "endpointslices", endpoint_slice_from),
    "ConfigMap": ("api/v1", "configmaps", config_map_from),
    "Secret": ("api/v1", "secrets", tls_secret_from),
    "Namespace": ("api/v1", "namespaces", namespace_from),
    "GatewayClass": (f"{GATEWAY}/v1", "gatewayclasses", gateway_class_from),
    "Gateway": (f"{GATEWAY}/v1", "gateways", gateway_from),
    "HTTPRoute": (f"{GATEWAY}/v1", "httproutes", http_route_from),
    "TLSRoute": (f"{GATEWAY}/v1", "tlsroutes", tls_route_from),
    "TCPRoute": (f"{GATEWAY}/v1", "tcproutes", tcp_route_from),
    "ReferenceGrant": (f"{GATEWAY}/v1beta1", "referencegrants", reference_grant_from),
    "IngressClass": ("apis/networking.k8s.io/v1", "ingressclasses", ingress_class_from),
    "Ingress": ("apis/networking.k8s.io/v1", "ingresses", ingress_from),
}
NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_INGRESS_CLASS = "peerplane"  # deploy/examples/demo/routes.yaml
SERVER_SET = ("generation", "creation_timestamp", "resource_version")


def moved(obj: Obj, namespace: str) -> Obj:
    """`obj` in `namespace` (a cluster-scoped object stays as it is)."""
    obj = copy.deepcopy(obj)
    if obj["kind"] not in ("GatewayClass", "IngressClass", "Namespace"):
        obj["metadata"]["namespace"] = namespace
    return obj


def as_defaulted(manifest: Obj) -> Obj:
    """`manifest` with the two server defaults the model sees: every Namespace is labelled
    `kubernetes.io/metadata.name` with its name (a Gateway listener's namespace selector
    may select on it), and an Ingress created without a class gets the default
    IngressClass's name (the DefaultIngressClass admission plugin; the demo's `peerplane`
    class is the default)."""
    obj = copy.deepcopy(manifest)
    if obj["kind"] == "Namespace":
        obj["metadata"].setdefault("labels", {})[NAME_LABEL] = obj["metadata"]["name"]
    if obj["kind"] == "Ingress" and "ingressClassName" not in obj["spec"]:
        obj["spec"]["ingressClassName"] = DEFAULT_INGRESS_CLASS
    return obj


def read_back(cluster: RealCluster, obj: Obj) -> Obj:
    """The object as the API server returns it (raw JSON, managedFields and all)."""
    prefix, plural, _ = KINDS[obj["kind"]]
    meta = obj["metadata"]
    where = f"namespaces/{meta['namespace']}/" if "namespace" in meta else ""
    found: Obj = json.loads(
        cluster.kubectl("get", "--raw", f"/{prefix}/{where}{plural}/{meta['name']}")
    )
    return found


def comparable(model: Any, like: Any) -> Any:
    """`model` with the fields only the server sets taken from `like`."""
    names = {f.name for f in dataclasses.fields(model)}
    return dataclasses.replace(model, **{n: getattr(like, n) for n in SERVER_SET if n in names})


def test_objects_read_back_from_the_server_convert_as_their_manifests(
    cluster: RealCluster,
) -> None:
    namespace = cluster.namespace("convert")
    demo, _ = demo_objects()
    builders = [
        fake.namespace(namespace, team="shop"),
        fake.service("plain"),  # no targetPort, no protocol: both defaulted by the server
        fake.endpoint_slice("plain", {"10.1.0.1": True, "10.1.0.2": False}),
        fake.gateway("fake-web"),
        fake.http_route("fake-shop", gateway_name="fake-web"),
        fake.tls_route("fake-db"),
        fake.tcp_route("fake-pg"),
        fake.reference_grant("fake-grant", namespace, "elsewhere"),
        fake.ingress("fake-shop", class_name=None),
    ]
    manifests = [moved(o, namespace) for o in [*demo, *builders] if o["kind"] in KINDS]
    try:
        cluster.apply(manifests)
        kinds, differ = set(), []
        for manifest in manifests:
            convert = KINDS[manifest["kind"]][2]
            served = read_back(cluster, manifest)
            assert served["metadata"].get("managedFields"), manifest["metadata"]
            wanted, got = convert(as_defaulted(manifest)), convert(served)
            if comparable(got, wanted) != wanted:
                differ.append((manifest["kind"], wanted, got))
            kinds.add(manifest["kind"])
        assert not differ, "\n".join(map(str, differ))
        assert kinds == set(KINDS)
    finally:
        cluster.delete_namespace(namespace)
