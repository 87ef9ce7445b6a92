"""Typed, immutable cluster state: the only input of the computation.

Sources (a folder of manifests, the Kubernetes API) build a `ClusterState`; nothing past
this module sees a Kubernetes client object. Every collection is a tuple or a frozen
mapping so that a state can be shared between threads and compared for equality.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

ANNOTATION_PREFIX = "haproxy.org/"


def frozen_map(data: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy of `data` (annotations, labels, ConfigMap data)."""
    return MappingProxyType(dict(data or {}))


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """namespace/name of a namespaced object."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectRef:
        """Parse "namespace/name"; raises ValueError on anything else."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"expected NAMESPACE/NAME, got {text!r}")
        return cls(namespace, name)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The controller owner of an object (ownerReferences entry with controller=true)."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str  # "" when the Service has a single unnamed port
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True, slots=True)
class LoadBalancerIngress:
    """A Service's `status.loadBalancer.ingress` entry: an IP, a hostname, or both."""

    ip: str = ""
    hostname: str = ""


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    ports: tuple[ServicePort, ...]
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    # RFC 3339 creationTimestamp; decides which Service keeps a contested host or port.
    creation_timestamp: str = ""
    # spec.selector ({} : none) and status.loadBalancer.ingress: which pods it fronts and
    # where its load balancer answers (the `publish-service` setting publishes it).
    selector: Mapping[str, str] = field(default_factory=frozen_map)
    load_balancer: tuple[LoadBalancerIngress, ...] = ()

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


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
class EndpointSlice:
    namespace: str
    name: str
    service_name: str  # label kubernetes.io/service-name
    address_type: str  # IPv4, IPv6 or FQDN
    ports: tuple[EndpointPort, ...]
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    ip: str  # "" while unassigned
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    owner: OwnerRef | None  # controller owner
    deleting: bool = False  # metadata.deletionTimestamp is set
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    host_ip: str = ""  # status.hostIP: the node's address
    host_network: bool = False  # spec.hostNetwork: the pod listens on the node's address

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    namespace: str
    name: str
    owner: OwnerRef | None


@dataclass(frozen=True, slots=True)
class ConfigMap:
    namespace: str
    name: str
    data: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


# ------------------------------------------------------------------ the route model's inputs
# Gateway API (gateway.networking.k8s.io/v1, v1beta1 ReferenceGrant) and Ingress
# (networking.k8s.io/v1) objects, with the defaults their CRDs and the API server apply
# already filled in (controlplane/source/convert_routes.py). Values are kept as written:
# what compute cannot serve (a regex, an unknown filter) is reported by compute, not lost
# at conversion, so the rest of a route is still served.

GATEWAY_GROUP = "gateway.networking.k8s.io"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One matchExpressions entry: operator In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector: every matchLabels pair and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=frozen_map)
    match_expressions: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Namespace:
    """A namespace's labels, for a Gateway listener's allowedRoutes Selector."""

    name: str
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    creation_timestamp: str = ""


@dataclass(frozen=True, slots=True)
class GatewayClass:
    name: str
    controller_name: str
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class RouteGroupKind:
    group: str
    kind: str


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A listener's `tls.certificateRefs` entry, as written ("" namespace: the Gateway's)."""

    name: str
    namespace: str = ""
    group: str = ""  # "" : the core group
    kind: str = "Secret"


@dataclass(frozen=True, slots=True)
class GatewayListener:
    name: str
    port: int
    protocol: str  # HTTP, HTTPS, TLS and TCP are served; UDP and others are reported
    hostname: str = ""  # "" when absent: every host
    allowed_from: str = "Same"  # allowedRoutes.namespaces.from: Same, All or Selector
    allowed_selector: LabelSelector | None = None  # with allowed_from "Selector"
    allowed_kinds: tuple[RouteGroupKind, ...] = ()  # () : the protocol's kinds (HTTPRoute)
    tls_mode: str = ""  # tls.mode: Terminate (the default with a tls block) or Passthrough
    certificate_refs: tuple[SecretRef, ...] = ()  # tls.certificateRefs, in order
    tls_ignored: tuple[str, ...] = ()  # tls fields set and not served: "options", ...


@dataclass(frozen=True, slots=True)
class GatewayAddress:
    type: str  # IPAddress, Hostname or an implementation-specific domain-prefixed type
    value: str


@dataclass(frozen=True, slots=True)
class Gateway:
    namespace: str
    name: str
    gateway_class_name: str
    listeners: tuple[GatewayListener, ...]
    addresses: tuple[GatewayAddress, ...] = ()
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ParentRef:
    """An HTTPRoute's parentRefs entry, as written ("" namespace: the route's own;
    0 port: any)."""

    name: str
    group: str = GATEWAY_GROUP
    kind: str = "Gateway"
    namespace: str = ""
    section_name: str = ""
    port: int = 0


@dataclass(frozen=True, slots=True)
class PathMatch:
    type: str  # Exact, PathPrefix or RegularExpression (reported)
    value: str


@dataclass(frozen=True, slots=True)
class NameValueMatch:
    """A header or query parameter match: type Exact or RegularExpression (reported)."""

    type: str
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class HTTPRouteMatch:
    path: PathMatch = PathMatch("PathPrefix", "/")
    headers: tuple[NameValueMatch, ...] = ()
    query_params: tuple[NameValueMatch, ...] = ()
    method: str = ""  # "" : any method


@dataclass(frozen=True, slots=True)
class HeaderModifier:
    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestRedirect:
    scheme: str = ""
    hostname: str = ""
    port: int | None = None  # None: absent (keep the request's); as written otherwise
    status_code: int = 302
    path_type: str = ""  # "" (keep the path), ReplaceFullPath, ReplacePrefixMatch (reported)
    path_value: str = ""


@dataclass(frozen=True, slots=True)
class HTTPRouteFilter:
    """A filter; only RequestHeaderModifier and RequestRedirect are served, any other type
    is kept by name so compute can report it."""

    type: str
    request_header_modifier: HeaderModifier | None = None
    request_redirect: RequestRedirect | None = None


@dataclass(frozen=True, slots=True)
class HTTPBackendRef:
    name: str
    group: str = ""  # "" : the core group
    kind: str = "Service"
    namespace: str = ""  # "" : the route's own
    port: int = 0  # 0 : absent (required for a Service; reported)
    weight: int = 1
    filters: tuple[HTTPRouteFilter, ...] = ()  # per-backend filters: reported, not served


@dataclass(frozen=True, slots=True)
class HTTPRouteRule:
    matches: tuple[HTTPRouteMatch, ...] = (HTTPRouteMatch(),)
    filters: tuple[HTTPRouteFilter, ...] = ()
    backend_refs: tuple[HTTPBackendRef, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class HTTPRoute:
    namespace: str
    name: str
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...] = ()
    rules: tuple[HTTPRouteRule, ...] = (HTTPRouteRule(),)
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class L4Rule:
    """A TLSRoute or TCPRoute rule: only backends (HTTPBackendRef's shape, no filters)."""

    backend_refs: tuple[HTTPBackendRef, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class TLSRoute:
    """gateway.networking.k8s.io TLSRoute: SNI hostnames to backends, not terminated."""

    namespace: str
    name: str
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...] = ()
    rules: tuple[L4Rule, ...] = ()
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class TCPRoute:
    """gateway.networking.k8s.io TCPRoute: a listener's port to backends."""

    namespace: str
    name: str
    parent_refs: tuple[ParentRef, ...]
    rules: tuple[L4Rule, ...] = ()
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class TLSSecret:
    """A Secret a listener or an Ingress may reference for its certificate. Sources keep
    Secrets of type kubernetes.io/tls (and others by name only, to report the type):
    `cert_pem` is data["tls.crt"], `key_pem` data["tls.key"], both decoded from base64,
    never logged. Whether they parse, match and are in date is compute's to say."""

    namespace: str
    name: str
    type: str = "kubernetes.io/tls"
    cert_pem: bytes = field(default=b"", repr=False)
    key_pem: bytes = field(default=b"", repr=False)
    resource_version: str = ""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ReferenceGrantFrom:
    group: str
    kind: str
    namespace: str


@dataclass(frozen=True, slots=True)
class ReferenceGrantTo:
    group: str
    kind: str
    name: str = ""  # "" : every object of the kind in the grant's namespace


@dataclass(frozen=True, slots=True)
class ReferenceGrant:
    namespace: str
    name: str
    from_: tuple[ReferenceGrantFrom, ...]
    to: tuple[ReferenceGrantTo, ...]
    generation: int = 0
    creation_timestamp: str = ""


@dataclass(frozen=True, slots=True)
class IngressClass:
    name: str
    controller: str
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class IngressBackend:
    """A Service backend (port by number or by name), or a `resource` backend (kept as
    "Kind/name" to be reported: not served)."""

    service_name: str = ""
    port_number: int = 0
    port_name: str = ""
    resource: str = ""


@dataclass(frozen=True, slots=True)
class IngressPath:
    path: str
    path_type: str  # Exact, Prefix or ImplementationSpecific
    backend: IngressBackend


@dataclass(frozen=True, slots=True)
class IngressRule:
    host: str  # "" : every host
    paths: tuple[IngressPath, ...] = ()


@dataclass(frozen=True, slots=True)
class IngressTLS:
    hosts: tuple[str, ...] = ()  # () : the certificate's own names
    secret_name: str = ""  # "" : none (reported)


@dataclass(frozen=True, slots=True)
class Ingress:
    namespace: str
    name: str
    ingress_class_name: str = ""  # "" : the default class
    default_backend: IngressBackend | None = None
    rules: tuple[IngressRule, ...] = ()
    tls: tuple[IngressTLS, ...] = ()
    generation: int = 0
    creation_timestamp: str = ""
    annotations: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


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
    reference_grants: tuple[ReferenceGrant, ...] = ()
    ingresses: tuple[Ingress, ...] = ()
    ingress_classes: tuple[IngressClass, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    # TLS: passthrough and TCP routes, and the Secrets listeners and Ingresses reference.
    tls_routes: tuple[TLSRoute, ...] = ()
    tcp_routes: tuple[TCPRoute, ...] = ()
    secrets: tuple[TLSSecret, ...] = ()
