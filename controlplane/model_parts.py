"""The parts of the route model's objects: listeners, label selectors, matches, filters,
backend references, ReferenceGrant entries and Ingress rules. Value types that live only
inside a Gateway, a route, a ReferenceGrant or an Ingress (controlplane/model.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.model_meta import frozen_map

# The Gateway API's group: a ParentRef's default, the group of its kinds.
GATEWAY_GROUP = "gateway.networking.k8s.io"
# peerplane's own API group: its policy kinds (SourceIPPersistencePolicy).
POLICY_GROUP = "peerplane.dev"


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
    path_type: str = ""  # "" (keep the path), ReplaceFullPath, ReplacePrefixMatch
    path_value: str = ""


@dataclass(frozen=True, slots=True)
class URLRewrite:
    hostname: str = ""
    path_type: str = ""  # "" (keep the path), ReplaceFullPath, ReplacePrefixMatch
    path_value: str = ""


@dataclass(frozen=True, slots=True)
class HTTPRouteFilter:
    """A filter: one field per type peerplane reads (the types served are the rows of
    `controlplane/routes/filters` FILTERS); any other type is kept by name so compute can
    report it."""

    type: str
    request_header_modifier: HeaderModifier | None = None
    request_redirect: RequestRedirect | None = None
    response_header_modifier: HeaderModifier | None = None
    url_rewrite: URLRewrite | None = None


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
class HTTPRouteTimeouts:
    """A rule's `timeouts`, each a Gateway API duration as written (None: absent); compute
    parses them (controlplane/routes/filters/timeouts.py)."""

    request: str | None = None
    backend_request: str | None = None


@dataclass(frozen=True, slots=True)
class HTTPRouteRetry:
    """A rule's `retry` (experimental channel), as written (None: absent)."""

    codes: tuple[int, ...] = ()
    attempts: int | None = None
    backoff: str | None = None


@dataclass(frozen=True, slots=True)
class SessionPersistenceSpec:
    """A rule's `sessionPersistence` as written (GEP-1619; compute checks the values):
    `absolute_timeout` a Gateway API Duration ("" absent), `lifetime_type` the
    cookieConfig's ("" absent: Session)."""

    type: str = "Cookie"  # Cookie or Header (the CRD's default: Cookie)
    session_name: str = ""  # "" : absent (peerplane picks a name)
    absolute_timeout: str = ""
    lifetime_type: str = ""


@dataclass(frozen=True, slots=True)
class HTTPRouteRule:
    matches: tuple[HTTPRouteMatch, ...] = (HTTPRouteMatch(),)
    filters: tuple[HTTPRouteFilter, ...] = ()
    backend_refs: tuple[HTTPBackendRef, ...] = ()
    name: str = ""
    timeouts: HTTPRouteTimeouts | None = None
    retry: HTTPRouteRetry | None = None
    session_persistence: SessionPersistenceSpec | None = None


@dataclass(frozen=True, slots=True)
class GRPCMethodMatch:
    """A GRPCRoute match's `method`: type Exact or RegularExpression (reported), the
    service (e.g. "grpc.health.v1.Health") and method ("Check"); "" : any."""

    type: str = "Exact"
    service: str = ""
    method: str = ""


@dataclass(frozen=True, slots=True)
class GRPCRouteMatch:
    method: GRPCMethodMatch | None = None  # None : any service and method
    headers: tuple[NameValueMatch, ...] = ()


@dataclass(frozen=True, slots=True)
class GRPCRouteRule:
    matches: tuple[GRPCRouteMatch, ...] = (GRPCRouteMatch(),)
    filters: tuple[HTTPRouteFilter, ...] = ()
    backend_refs: tuple[HTTPBackendRef, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class L4Rule:
    """A TLSRoute or TCPRoute rule: only backends (HTTPBackendRef's shape, no filters)."""

    backend_refs: tuple[HTTPBackendRef, ...] = ()
    name: str = ""


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
class PolicyTargetRef:
    """A policy's spec.targetRefs entry (Gateway API LocalPolicyTargetReferenceWithSectionName):
    an object of the policy's own namespace, as written ("" section_name: the whole
    object)."""

    group: str
    kind: str
    name: str
    section_name: str = ""
