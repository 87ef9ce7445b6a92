"""Typed, immutable cluster state: the only input of the computation.

Sources (a folder of manifests, the Kubernetes API) build a `ClusterState`; nothing past
this module sees a Kubernetes client object. Every collection is a tuple or a frozen
mapping so that a state can be shared between threads and compared for equality.

Here: the input kinds (one per row of `controlplane/source/kinds.py`) and `ClusterState`.
What every kind carries (name, `ObjectMeta`) is in `model_meta`, the parts of the route
model's objects (listeners, matches, filters, backend references) in `model_parts`; both
are re-exported, so `controlplane.model` names the whole model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.changes import ChangeSet
from controlplane.model_meta import (
    ANNOTATION_PREFIX,
    EMPTY_MAP,
    ClusterObject,
    NamespacedObject,
    ObjectMeta,
    ObjectRef,
    OwnerRef,
    frozen_map,
)
from controlplane.model_parts import (
    GATEWAY_GROUP,
    POLICY_GROUP,
    GatewayAddress,
    GatewayListener,
    GRPCMethodMatch,
    GRPCRouteMatch,
    GRPCRouteRule,
    HeaderModifier,
    HTTPBackendRef,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRetry,
    HTTPRouteRule,
    HTTPRouteTimeouts,
    IngressBackend,
    IngressPath,
    IngressRule,
    IngressTLS,
    L4Rule,
    LabelSelector,
    NameValueMatch,
    ParentRef,
    PathMatch,
    PolicyTargetRef,
    ReferenceGrantFrom,
    ReferenceGrantTo,
    RequestRedirect,
    RouteGroupKind,
    SecretRef,
    SelectorRequirement,
    SessionPersistenceSpec,
    URLRewrite,
)

__all__ = [  # the whole model: its parts are re-exported from here
    "ANNOTATION_PREFIX",
    "EMPTY_MAP",
    "GATEWAY_GROUP",
    "POLICY_GROUP",
    "ClusterObject",
    "ClusterState",
    "ConfigMap",
    "Endpoint",
    "EndpointPort",
    "EndpointSlice",
    "GRPCMethodMatch",
    "GRPCRoute",
    "GRPCRouteMatch",
    "GRPCRouteRule",
    "Gateway",
    "GatewayAddress",
    "GatewayClass",
    "GatewayListener",
    "HTTPBackendRef",
    "HTTPRoute",
    "HTTPRouteFilter",
    "HTTPRouteMatch",
    "HTTPRouteRetry",
    "HTTPRouteRule",
    "HTTPRouteTimeouts",
    "HeaderModifier",
    "Ingress",
    "IngressBackend",
    "IngressClass",
    "IngressPath",
    "IngressRule",
    "IngressTLS",
    "L4Rule",
    "LabelSelector",
    "LoadBalancerIngress",
    "NameValueMatch",
    "Namespace",
    "NamespacedObject",
    "ObjectMeta",
    "ObjectRef",
    "OwnerRef",
    "ParentRef",
    "PathMatch",
    "Pod",
    "PolicyTargetRef",
    "ReferenceGrant",
    "ReferenceGrantFrom",
    "ReferenceGrantTo",
    "ReplicaSet",
    "RequestRedirect",
    "RouteGroupKind",
    "SecretRef",
    "SelectorRequirement",
    "Service",
    "ServicePort",
    "SessionPersistenceSpec",
    "SourceIPPersistencePolicy",
    "TCPRoute",
    "TLSRoute",
    "TLSSecret",
    "URLRewrite",
    "frozen_map",
]


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str  # "" when the Service has a single unnamed port
    port: int
    protocol: str = "TCP"
    # spec.ports[].appProtocol as written ("" : absent): kubernetes.io/h2c, ws and wss
    # choose the backend's protocol (`controlplane/compute/protocol.py`).
    app_protocol: str = ""


@dataclass(frozen=True, slots=True)
class LoadBalancerIngress:
    """A Service's `status.loadBalancer.ingress` entry: an IP, a hostname, or both."""

    ip: str = ""
    hostname: str = ""


@dataclass(frozen=True, slots=True)
class Service(NamespacedObject):
    ports: tuple[ServicePort, ...]
    # spec.selector ({} : none) and status.loadBalancer.ingress: which pods it fronts and
    # where its load balancer answers (the `publish-service` setting publishes it).
    selector: Mapping[str, str] = field(default_factory=frozen_map)
    load_balancer: tuple[LoadBalancerIngress, ...] = ()


@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    # Kubernetes semantics: a missing `ready` condition means ready.
    ready: bool = True
    terminating: bool = False
    target_pod: str = ""  # name of the pod behind the endpoint, for display only


@dataclass(frozen=True, slots=True)
class EndpointSlice(NamespacedObject):
    service_name: str  # label kubernetes.io/service-name
    address_type: str  # IPv4, IPv6 or FQDN
    ports: tuple[EndpointPort, ...]
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class Pod(NamespacedObject):
    ip: str  # "" while unassigned
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    owner: OwnerRef | None  # controller owner
    deleting: bool = False  # metadata.deletionTimestamp is set
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    host_ip: str = ""  # status.hostIP: the node's address
    host_network: bool = False  # spec.hostNetwork: the pod listens on the node's address


@dataclass(frozen=True, slots=True)
class ReplicaSet(NamespacedObject):
    owner: OwnerRef | None


@dataclass(frozen=True, slots=True)
class ConfigMap(NamespacedObject):
    data: Mapping[str, str] = field(default_factory=frozen_map)


# ------------------------------------------------------------------ the route model's inputs
# Gateway API (gateway.networking.k8s.io/v1, v1beta1 ReferenceGrant) and Ingress
# (networking.k8s.io/v1) objects, with the defaults their CRDs and the API server apply
# already filled in (controlplane/source/convert_gateway.py, convert_routes.py,
# convert_ingress.py). Values are kept as written: what compute cannot serve (a regex, an
# unknown filter) is reported by compute, not lost at conversion, so the rest of a route
# is still served.


@dataclass(frozen=True, slots=True)
class Namespace(ClusterObject):
    """A namespace's labels, for a Gateway listener's allowedRoutes Selector."""

    labels: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class GatewayClass(ClusterObject):
    controller_name: str


@dataclass(frozen=True, slots=True)
class Gateway(NamespacedObject):
    gateway_class_name: str
    listeners: tuple[GatewayListener, ...]
    addresses: tuple[GatewayAddress, ...] = ()
    # status.addresses as last written: where a Gateway's own address is read back from
    # (controlplane/routes/addresses.py), so a restart never moves it.
    status_addresses: tuple[GatewayAddress, ...] = ()


@dataclass(frozen=True, slots=True)
class HTTPRoute(NamespacedObject):
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...] = ()
    rules: tuple[HTTPRouteRule, ...] = (HTTPRouteRule(),)


@dataclass(frozen=True, slots=True)
class GRPCRoute(NamespacedObject):
    """gateway.networking.k8s.io GRPCRoute: gRPC services and methods to backends that
    speak HTTP/2 (served as HTTPRoute rules: `controlplane/routes/grpcroute.py`)."""

    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...] = ()
    rules: tuple[GRPCRouteRule, ...] = (GRPCRouteRule(),)


@dataclass(frozen=True, slots=True)
class TLSRoute(NamespacedObject):
    """gateway.networking.k8s.io TLSRoute: SNI hostnames to backends, not terminated."""

    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...] = ()
    rules: tuple[L4Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class TCPRoute(NamespacedObject):
    """gateway.networking.k8s.io TCPRoute: a listener's port to backends."""

    parent_refs: tuple[ParentRef, ...]
    rules: tuple[L4Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class TLSSecret(NamespacedObject):
    """A Secret a listener or an Ingress may reference for its certificate. Sources keep
    Secrets of type kubernetes.io/tls (and others by name only, to report the type):
    `cert_pem` is data["tls.crt"], `key_pem` data["tls.key"], both decoded from base64,
    never logged. Whether they parse, match and are in date is compute's to say."""

    type: str = "kubernetes.io/tls"
    cert_pem: bytes = field(default=b"", repr=False)
    key_pem: bytes = field(default=b"", repr=False)
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class ReferenceGrant(NamespacedObject):
    from_: tuple[ReferenceGrantFrom, ...]
    to: tuple[ReferenceGrantTo, ...]


@dataclass(frozen=True, slots=True)
class IngressClass(ClusterObject):
    controller: str


@dataclass(frozen=True, slots=True)
class Ingress(NamespacedObject):
    ingress_class_name: str = ""  # "" : the default class
    default_backend: IngressBackend | None = None
    rules: tuple[IngressRule, ...] = ()
    tls: tuple[IngressTLS, ...] = ()


# ------------------------------------------------------------------ peerplane's policies
# peerplane.dev/v1alpha1 policy kinds (Gateway API policy attachment, GEP-713). Values are
# kept as written: the settings' resolution (controlplane/settings/policies.py) checks
# them with the annotations' parsers and says on the policy's status what it refused.


@dataclass(frozen=True, slots=True)
class SourceIPPersistencePolicy(NamespacedObject):
    """Source-IP persistence for Services of its namespace (the annotation
    `haproxy.org/source-ip-persistence` as a policy): `table_size` and `expire` as
    written ("": the next level's value, the ConfigMap's or the default)."""

    target_refs: tuple[PolicyTargetRef, ...]
    table_size: str = ""
    expire: str = ""


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything the computation reads.

    `haproxy_pods` are the pods of the HAProxy workloads only (sources select them with
    the HAProxy label selector); `settings` is the settings ConfigMap, or None.
    """

    services: tuple[Service, ...] = ()
    endpoint_slices: tuple[EndpointSlice, ...] = ()
    haproxy_pods: tuple[Pod, ...] = ()
    replica_sets: tuple[ReplicaSet, ...] = ()
    settings: ConfigMap | None = None
    # The route model's inputs (Gateway API, Ingress) and the namespaces' labels.
    gateway_classes: tuple[GatewayClass, ...] = ()
    gateways: tuple[Gateway, ...] = ()
    http_routes: tuple[HTTPRoute, ...] = ()
    grpc_routes: tuple[GRPCRoute, ...] = ()
    reference_grants: tuple[ReferenceGrant, ...] = ()
    ingresses: tuple[Ingress, ...] = ()
    ingress_classes: tuple[IngressClass, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    # TLS: passthrough and TCP routes, and the Secrets listeners and Ingresses reference.
    tls_routes: tuple[TLSRoute, ...] = ()
    tcp_routes: tuple[TCPRoute, ...] = ()
    secrets: tuple[TLSSecret, ...] = ()
    # peerplane's policies.
    source_ip_persistence_policies: tuple[SourceIPPersistencePolicy, ...] = ()
    # What changed since the source's state before (None: the source cannot say); not
    # part of what a state is, so two states of equal objects are equal.
    changes: ChangeSet | None = field(default=None, compare=False, repr=False)
