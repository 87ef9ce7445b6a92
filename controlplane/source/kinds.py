"""Every input kind, written once: the table both sources are built from.

One row per Kubernetes kind the computation reads: where the API serves it, which model
type it becomes and through which converter, which `ClusterState` field holds it, and what
each source does for it beyond list, watch and convert (a selector, an optional CRD, a
version the cluster may serve instead, a deletion the status writer hears of). The
Kubernetes informers (`kube.source`), the folder source (`source.files`), the manifest
index (`source.manifest_index`) and the tests read this table; adding a kind is a row
here, its model type and its converter (docs/design.md, "Adding an input kind").

Not an input kind: the slot ledger (the control plane's own ConfigMaps, `kube.ledger_watch`)
and the Lease; they are state the control plane writes, not what it computes from.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from controlplane.model import (
    GATEWAY_GROUP,
    POLICY_GROUP,
    ClusterObject,
    ConfigMap,
    EndpointSlice,
    Gateway,
    GatewayClass,
    GRPCRoute,
    HTTPRoute,
    Ingress,
    IngressClass,
    Namespace,
    NamespacedObject,
    Pod,
    ReferenceGrant,
    ReplicaSet,
    Service,
    SourceIPPersistencePolicy,
    TCPRoute,
    TLSRoute,
    TLSSecret,
)
from controlplane.source.convert import (
    SERVICE_NAME_LABEL,
    Manifest,
    config_map_from,
    endpoint_slice_from,
    pod_from,
    replica_set_from,
    service_from,
)
from controlplane.source.convert_gateway import (
    gateway_class_from,
    gateway_from,
    namespace_from,
    reference_grant_from,
)
from controlplane.source.convert_ingress import ingress_class_from, ingress_from
from controlplane.source.convert_policy import source_ip_persistence_policy_from
from controlplane.source.convert_routes import (
    grpc_route_from,
    http_route_from,
    tcp_route_from,
    tls_route_from,
)
from controlplane.source.convert_secret import TLS_SECRET_TYPE, tls_secret_from

InputObject = NamespacedObject | ClusterObject
"""What a converter of the table answers."""
T = TypeVar("T", bound=InputObject)


class Selection(enum.Enum):
    """Which objects of a kind a source keeps, beyond any fixed API selector."""

    EVERY = "every object"
    HAPROXY_PODS = "the pods the HAProxy selector matches"
    """The API lists by the HAProxy label selector; the folder keeps the pods it matches."""
    HAPROXY_OWNERS = "the owners of the HAProxy pods"
    """The API lists by the HAProxy selector (a Deployment's ReplicaSets carry its pod
    template's labels) and the state keeps those owning an HAProxy pod; the folder keeps
    every one (the model keeps no labels to match)."""
    SETTINGS = "the settings ConfigMap"
    """The one object named by --configmap (the API: a field selector on its name in its
    namespace, nothing watched when none is named); its state field holds it or None."""


@dataclass(frozen=True, slots=True)
class OptionalCRDs:
    """Kinds a cluster may not serve (their CRDs are not installed). The Kubernetes source
    takes a 404 on one as an empty, synced cache, asks again now and then, and says it
    once per set (`kube.optional_group.OptionalGroup`): `consequence` at WARNING, or at INFO
    when `by_choice` (kinds many clusters lack on purpose)."""

    consequence: str
    what: str = ""  # "" : the API group
    by_choice: bool = False


GATEWAY_API = OptionalCRDs(
    "the Gateway API CRDs are not installed; serving Ingress and Service annotations "
    "without GatewayClass, Gateway, HTTPRoute and ReferenceGrant"
)
L4_ROUTES = OptionalCRDs(
    "the Gateway API's TLSRoute and TCPRoute CRDs are not installed (standard channel "
    "v1.5+, or the experimental channel before); serving no TLS passthrough (TLSRoute) "
    "and no TCP (TCPRoute) routes",
    what=f"{GATEWAY_GROUP} TLSRoute and TCPRoute (v1 or v1alpha2)",
    by_choice=True,
)
"""Their own set: a cluster with an older standard channel lacks just these."""
PEERPLANE_POLICIES = OptionalCRDs(
    "peerplane's policy CRDs (deploy/base/policy-crds.yaml) are not installed; serving "
    "source-IP persistence from Service annotations only, no SourceIPPersistencePolicy",
    what=f"{POLICY_GROUP} SourceIPPersistencePolicy",
    by_choice=True,
)
"""peerplane's own CRDs: absent, the policies are off and the annotations still serve."""
POLICY_VERSIONS = ("v1alpha1",)
GRPC_ROUTES = OptionalCRDs(
    "the Gateway API's GRPCRoute CRD is not installed (standard channel v1.1+); serving "
    "no GRPCRoutes",
    what=f"{GATEWAY_GROUP} GRPCRoute (v1)",
    by_choice=True,
)
"""Its own set: a cluster with a standard channel before v1.1 lacks just this one."""

GATEWAY_VERSIONS = ("v1", "v1beta1")
"""What a manifest of a Gateway API kind may say (the folder reads both)."""
L4_ROUTE_VERSIONS = ("v1", "v1alpha2")
"""TLSRoute and TCPRoute: v1 in the standard channel since Gateway API v1.5, v1alpha2 in
older experimental installs; the informer asks which (`kube.served_version`)."""


@dataclass(frozen=True, slots=True)
class InputKind(Generic[T]):
    """One input kind: its place in the API, its model, and each source's part."""

    kind: str
    group: str  # "" : the core group
    plural: str
    model: type[T]
    convert: Callable[[Manifest], T]
    field: str  # the ClusterState field that holds the kind's objects
    namespaced: bool = True
    versions: tuple[str, ...] = ("v1",)
    """The versions the informer lists through, preferred first; with more than one it
    asks which the cluster serves, and follows an upgrade of the CRDs."""
    manifest_versions: tuple[str, ...] | None = None
    """The apiVersions a manifest of the folder may say (of `group`: the same kind name
    in another group, Istio's Gateway, is not this kind); None: any apiVersion, the kind
    name alone decides."""
    optional: OptionalCRDs | None = None
    selection: Selection = Selection.EVERY
    label_selector: str = ""  # a fixed label selector of the list (the API only)
    field_selector: str = ""  # a fixed field selector of the list (the API only)
    reports_deletion: bool = False
    """The status writer hears when one goes (`KubernetesSource.on_route_deleted`): it
    forgets what it wrote there, so an object deleted and created again gets its status."""

    @property
    def api_versions(self) -> tuple[str, ...]:
        """`manifest_versions` as apiVersion strings ("v1" for the core group)."""
        return tuple(f"{self.group}/{v}".lstrip("/") for v in self.manifest_versions or ())


INPUT_KINDS: tuple[InputKind[Any], ...] = (
    InputKind("Service", "", "services", Service, service_from, "services"),
    InputKind(
        "EndpointSlice",
        "discovery.k8s.io",
        "endpointslices",
        EndpointSlice,
        endpoint_slice_from,
        "endpoint_slices",
        label_selector=SERVICE_NAME_LABEL,
    ),
    InputKind("Pod", "", "pods", Pod, pod_from, "haproxy_pods", selection=Selection.HAPROXY_PODS),
    InputKind(
        "ReplicaSet",
        "apps",
        "replicasets",
        ReplicaSet,
        replica_set_from,
        "replica_sets",
        selection=Selection.HAPROXY_OWNERS,
    ),
    InputKind(
        "GatewayClass",
        GATEWAY_GROUP,
        "gatewayclasses",
        GatewayClass,
        gateway_class_from,
        "gateway_classes",
        namespaced=False,
        manifest_versions=GATEWAY_VERSIONS,
        optional=GATEWAY_API,
        reports_deletion=True,
    ),
    InputKind(
        "Gateway",
        GATEWAY_GROUP,
        "gateways",
        Gateway,
        gateway_from,
        "gateways",
        manifest_versions=GATEWAY_VERSIONS,
        optional=GATEWAY_API,
        reports_deletion=True,
    ),
    InputKind(
        "HTTPRoute",
        GATEWAY_GROUP,
        "httproutes",
        HTTPRoute,
        http_route_from,
        "http_routes",
        manifest_versions=GATEWAY_VERSIONS,
        optional=GATEWAY_API,
        reports_deletion=True,
    ),
    InputKind(
        "GRPCRoute",
        GATEWAY_GROUP,
        "grpcroutes",
        GRPCRoute,
        grpc_route_from,
        "grpc_routes",
        manifest_versions=GATEWAY_VERSIONS,
        optional=GRPC_ROUTES,
        reports_deletion=True,
    ),
    InputKind(
        "ReferenceGrant",
        GATEWAY_GROUP,
        "referencegrants",
        ReferenceGrant,
        reference_grant_from,
        "reference_grants",
        versions=("v1beta1",),  # the standard channel's ReferenceGrant (v1.2)
        manifest_versions=GATEWAY_VERSIONS,
        optional=GATEWAY_API,
    ),
    InputKind(
        "TLSRoute",
        GATEWAY_GROUP,
        "tlsroutes",
        TLSRoute,
        tls_route_from,
        "tls_routes",
        versions=L4_ROUTE_VERSIONS,
        manifest_versions=("v1alpha2", "v1alpha3", "v1"),
        optional=L4_ROUTES,
        reports_deletion=True,
    ),
    InputKind(
        "TCPRoute",
        GATEWAY_GROUP,
        "tcproutes",
        TCPRoute,
        tcp_route_from,
        "tcp_routes",
        versions=L4_ROUTE_VERSIONS,
        manifest_versions=("v1alpha2", "v1"),
        optional=L4_ROUTES,
        reports_deletion=True,
    ),
    # Only Secrets of type kubernetes.io/tls are ever read from the API: one a listener
    # references but of another type is "not found" to compute. The folder keeps the
    # others by name, to report their type.
    InputKind(
        "Secret",
        "",
        "secrets",
        TLSSecret,
        tls_secret_from,
        "secrets",
        manifest_versions=("v1",),
        field_selector=f"type={TLS_SECRET_TYPE}",
    ),
    InputKind(
        "Ingress",
        "networking.k8s.io",
        "ingresses",
        Ingress,
        ingress_from,
        "ingresses",
        manifest_versions=("v1",),
        reports_deletion=True,
    ),
    InputKind(
        "IngressClass",
        "networking.k8s.io",
        "ingressclasses",
        IngressClass,
        ingress_class_from,
        "ingress_classes",
        namespaced=False,
        manifest_versions=("v1",),
    ),
    # Their labels select a Gateway listener's routes (allowedRoutes Selector).
    InputKind(
        "Namespace",
        "",
        "namespaces",
        Namespace,
        namespace_from,
        "namespaces",
        namespaced=False,
        manifest_versions=("v1",),
    ),
    InputKind(
        "SourceIPPersistencePolicy",
        POLICY_GROUP,
        "sourceippersistencepolicies",
        SourceIPPersistencePolicy,
        source_ip_persistence_policy_from,
        "source_ip_persistence_policies",
        versions=POLICY_VERSIONS,
        manifest_versions=POLICY_VERSIONS,
        optional=PEERPLANE_POLICIES,
        reports_deletion=True,
    ),
    InputKind(
        "ConfigMap",
        "",
        "configmaps",
        ConfigMap,
        config_map_from,
        "settings",
        selection=Selection.SETTINGS,
    ),
)
"""Every input kind, in the order the Kubernetes source starts and waits for them."""

BY_KIND: dict[str, InputKind[Any]] = {row.kind: row for row in INPUT_KINDS}
BY_MODEL: dict[type, InputKind[Any]] = {row.model: row for row in INPUT_KINDS}
