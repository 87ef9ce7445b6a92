"""The snapshot model the pipeline speaks: slots, rejections and each workload's snapshot.

Compute produces these, routes build their parts, publish encodes them, the ledger stores
the slots and the loop, status and Kubernetes edges read them: one layer of its own above
the model, so no stage reaches into another for them (docs/design.md, "Layers").
Everything here is a frozen dataclass with no protobuf in it: `controlplane/publish/`
turns a `WorkloadSnapshot` into the wire bytes (docs/design.md, "Architecture").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, TypeVar

from peerplane import session

EndpointKey = tuple[str, int]  # (address, port)


@dataclass(frozen=True, slots=True)
class BackendSlots:
    """Slot assignment of one backend: endpoint -> 1-based slot index, and the slot count.

    The count only grows (in steps of `server-slots`) while the backend exists. `freed`
    maps each free slot that once held an endpoint to when it was freed (wall-clock
    seconds): stick-table entries may still name it, so it is not reused until the
    backend's stick-table expire has passed (docs/design.md, "Slots"). A free slot absent
    from `freed` was never used. `freed_by` names the endpoint that left a freed slot, when
    known: if that endpoint comes back it takes its own slot again at once.
    """

    count: int
    slots: Mapping[EndpointKey, int] = field(default_factory=lambda: MappingProxyType({}))
    freed: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    freed_by: Mapping[int, EndpointKey] = field(default_factory=lambda: MappingProxyType({}))
    # The spare section (`spare.<n>`) this backend claimed when it was new, kept for the
    # backend's life and its retirement: its stick table and slots live in that section
    # (docs/design.md, "Spare backends"). "" : its own section, `name`.
    spare: str = ""


# backend name ("<namespace>_<service>_<port>") -> its slots
SlotAssignment = Mapping[str, BackendSlots]


@dataclass(frozen=True, slots=True)
class RejectedInput:
    """One rejected input, with the object it came from (for logs, metrics and Events)."""

    kind: str  # "Service", "ConfigMap", "Pod", or a route kind ("HTTPRoute", "Ingress"...)
    namespace: str
    name: str
    key: str
    value: str
    reason: str

    @property
    def object(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Slot:
    """One server line `SRV_<index>`: a ready endpoint, or free (disabled, no address)."""

    index: int
    address: str = ""
    port: int = 0

    @property
    def server_name(self) -> str:
        return f"SRV_{self.index}"

    @property
    def enabled(self) -> bool:
        return bool(self.address)


@dataclass(frozen=True, slots=True)
class Persistence:
    """Source-IP persistence of a backend: its stick table."""

    table_size: int
    expire_ms: int


@dataclass(frozen=True, slots=True)
class SessionPersistence:
    """An HTTPRoute rule's sessionPersistence, checked (GEP-1619): what the route asks of
    its backends, before the Service's settings make it a `SessionCookie` or a
    `SessionHeader` (`compute/plan.py`)."""

    type: str  # "Cookie" or "Header"
    name: str  # cookie or header name ("" : a cookie named after its backend)
    permanent: bool = False  # cookieConfig.lifetimeType Permanent: Max-Age = absolute_s
    absolute_s: int = 0  # absoluteTimeout in seconds; 0: absent


@dataclass(frozen=True, slots=True)
class SessionCookie:
    """Cookie persistence of a backend: `cookie <name> insert indirect nocache`, each
    server's value its slot's name. HAProxy ignores a cookie past `max_life_s` since it
    was set or `max_idle_s` since it was last used (0: no bound), which bounds how long a
    cookie can name a freed slot (its quarantine: `compute/slots.py`)."""

    name: str
    max_age_s: int  # Permanent: the Max-Age attribute; 0: a session cookie
    max_life_s: int
    max_idle_s: int

    @property
    def honoured_s(self) -> int:
        """How long after a slot is freed a cookie may still send a request to it: its
        shorter bound, plus the slack of HAProxy's cookie dates."""
        bounds = [b for b in (self.max_life_s, self.max_idle_s) if b]
        return min(bounds) + session.COOKIE_DATE_SLACK_S


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """Header persistence of a backend: a stick table keyed by the header's value."""

    name: str
    table_size: int
    expire_ms: int


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """Active health checks on every server of a backend; empty `http_path`: TCP check."""

    interval_ms: int
    rise: int
    fall: int
    http_path: str = ""


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend as a workload's snapshot holds it: settings, slots and warnings.

    The computation keeps an unchanged Service's specs (the same objects) from one run to
    the next, so the encoder caches each spec's bytes by identity (a spec is not hashable:
    `slots` holds mappings).
    """

    name: str  # "<namespace>_<service>_<port name or number>"
    service: str  # "namespace/name"
    service_port: str  # port name, else number
    mode: str  # "http" or "tcp"
    balance: str
    balance_argument: str
    hash_type: str
    persistence: Persistence | None
    slots: BackendSlots
    warnings: tuple[RejectedInput, ...]  # the Service's rejections shown on this backend
    check: HealthCheck | None
    # What HAProxy speaks to the servers (`compute/protocol.py`): "" HTTP/1.1, "h2"
    # cleartext HTTP/2, "ws" WebSocket, "wss" WebSocket over TLS.
    protocol: str = ""
    session_cookie: SessionCookie | None = None  # from an HTTPRoute rule (GEP-1619)
    session_header: SessionHeader | None = None
    # An unclaimed spare of the pool (`name` is `spare.<n>`, no Service, every slot free).
    spare: bool = False

    @property
    def section(self) -> str:
        """The HAProxy section it runs in: the spare it claimed, else its own name."""
        return self.slots.spare or self.name

    def slot_list(self) -> tuple[Slot, ...]:
        """Every slot `SRV_1..SRV_count` in order, free ones without an address."""
        by_slot = {slot: endpoint for endpoint, slot in self.slots.slots.items()}
        return tuple(
            Slot(index, *by_slot[index]) if index in by_slot else Slot(index)
            for index in range(1, self.slots.count + 1)
        )


@dataclass(frozen=True, slots=True)
class Peer:
    name: str  # the HAProxy pod name (peer name and `localpeer`)
    address: str
    port: int


@dataclass(frozen=True, slots=True)
class PeerSection:
    name: str
    port: int
    peers: tuple[Peer, ...]  # sorted by name


@dataclass(frozen=True, slots=True)
class HostRoute:
    host: str
    backend: str


@dataclass(frozen=True, slots=True)
class HttpFrontend:
    port: int
    routes: tuple[HostRoute, ...]  # sorted by host


@dataclass(frozen=True, slots=True)
class TcpFrontend:
    port: int
    backend: str
    source: str = ""  # "TCPRoute ns/name rule 0"; "" : a Service's haproxy.org/tcp-port
    accept_proxy: bool = False


@dataclass(frozen=True, slots=True)
class RoutePath:
    """A rule's path match: "PathPrefix" (element-wise, no trailing "/" but for "/") or
    "Exact"."""

    type: str
    value: str


@dataclass(frozen=True, slots=True)
class WeightedBackend:
    backend: str  # a backend of the snapshot; "" : unresolved (its share gets a 500)
    weight: int


@dataclass(frozen=True, slots=True)
class HeaderChanges:
    """A RequestHeaderModifier filter."""

    # The noun of a filter that answers the request itself ("" : it does not); a rule
    # holding one has no backends.
    answers: ClassVar[str] = ""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    """A RequestRedirect filter; empty or 0 fields keep the request's value. The path is
    the request's, or `replace_full_path`, or with `replace_prefix_match` set its rule's
    PathPrefix match replaced (`PathRewrite`)."""

    answers: ClassVar[str] = "redirect"

    scheme: str = ""
    hostname: str = ""
    port: int = 0
    status_code: int = 302
    replace_full_path: str = ""
    replace_prefix_match: str | None = None

    @property
    def replaces_prefix(self) -> bool:
        return self.replace_prefix_match is not None


@dataclass(frozen=True, slots=True)
class RouteTimeouts:
    """A rule's `timeouts` (no filter: a rule field, carried with the filters): each in
    milliseconds, 0 for "0s" (disabled), None when absent; backend_request_ms <= request_ms
    when both limit."""

    answers: ClassVar[str] = ""

    request_ms: int | None = None
    backend_request_ms: int | None = None

    @property
    def server_ms(self) -> int | None:
        """How long the backend may stay silent: the smaller limit set, 0 (no limit) when
        every one set is "0s", None when none is set."""
        limits = [t for t in (self.request_ms, self.backend_request_ms) if t is not None]
        if not limits:
            return None
        return min((t for t in limits if t), default=0)


@dataclass(frozen=True, slots=True)
class PathRewrite:
    """A URLRewrite's path: `value` is the whole path (ReplaceFullPath) or the prefix
    that replaces the rule's PathPrefix match (ReplacePrefixMatch; its trailing "/"
    aside, "" or "/" strip the match, an empty result is "/")."""

    type: str  # "ReplaceFullPath" or "ReplacePrefixMatch"
    value: str


@dataclass(frozen=True, slots=True)
class URLRewrite:
    """A URLRewrite filter: the Host header and path the backend gets."""

    answers: ClassVar[str] = ""

    hostname: str = ""  # "" : the request's
    path: PathRewrite | None = None  # None : the request's

    @property
    def replaces_prefix(self) -> bool:
        return self.path is not None and self.path.type == "ReplacePrefixMatch"


@dataclass(frozen=True, slots=True)
class ResponseHeaderChanges:
    """A ResponseHeaderModifier filter: applied to every response to a request its rule
    won (a backend's, and one peerplane gives itself, such as a redirect)."""

    answers: ClassVar[str] = ""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


RouteFilter = HeaderChanges | Redirect | URLRewrite | ResponseHeaderChanges | RouteTimeouts
"""A route rule's filter as the agent applies it: one type per Gateway API filter type
served, each translated by its module of `controlplane/routes/filters/` (docs/design.md,
"Adding a route filter")."""

_Filter = TypeVar("_Filter", bound=RouteFilter)


@dataclass(frozen=True, slots=True)
class RouteRule:
    """One match of one route rule (for one hostname), as the agent applies it: the
    contract's RouteRule. Every string passed `peerplane.patterns`' patterns."""

    source: str  # "HTTPRoute ns/name rule 0 match 1", "Ingress ns/name rule 0 path 2"
    hostnames: tuple[str, ...]  # () : any host
    path: RoutePath | None  # None : any path
    method: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    query_params: tuple[tuple[str, str], ...] = ()
    backends: tuple[WeightedBackend, ...] = ()
    filters: tuple[RouteFilter, ...] = ()  # in the route's order, at most one of a type
    # `*.` hostnames match exactly one label (Ingress), not one or more (Gateway API)
    single_label_wildcards: bool = False

    def filter(self, kind: type[_Filter]) -> _Filter | None:
        """The rule's filter of type `kind`; None when it has none."""
        return next((f for f in self.filters if isinstance(f, kind)), None)


@dataclass(frozen=True, slots=True)
class CertificateBinding:
    """A crt-list line: a certificate and the SNI names it is presented for."""

    certificate: str  # a Certificate's name in the snapshot
    hostnames: tuple[str, ...] = ()  # () : the certificate's own names


@dataclass(frozen=True, slots=True)
class Certificate:
    """A validated certificate and key from a kubernetes.io/tls Secret: the contract's
    Certificate. `pem` (chain, then key) is never logged or shown; `fingerprint` is."""

    name: str  # "<namespace>_<secret>": the agent's file name (peerplane.names pattern)
    secret: str  # "namespace/name"
    fingerprint: str  # SHA-256 hex of pem
    serial: str
    not_after: str  # RFC 3339
    dns_names: tuple[str, ...]
    pem: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class HttpListener:
    """One HTTP port of the route model: its rules in precedence order (the first that
    matches serves) and the backend of what none matches ("" : 404). With `tls` the port
    terminates TLS, the first binding's certificate being the default unless `strict_sni`
    (no default: a client whose SNI matches no binding fails the handshake)."""

    port: int
    rules: tuple[RouteRule, ...]
    default_backend: str = ""
    tls: tuple[CertificateBinding, ...] = ()
    accept_proxy: bool = False
    strict_sni: bool = False
    # Hostnames whose lookup ends at their own layer: the next less specific hostname of
    # the port is another namespace's (controlplane/routes/ownership.py). Sorted.
    closed_hosts: tuple[str, ...] = ()
    # The address it binds (a Gateway's own, canonical); "" : every address. A workload's
    # listeners are unique by (address, port).
    address: str = ""


@dataclass(frozen=True, slots=True)
class SniRoute:
    """A TLSRoute rule on a passthrough listener: SNI names to mode-tcp backends."""

    source: str  # "TLSRoute ns/name rule 0"
    hostnames: tuple[str, ...]  # () : any
    backends: tuple[WeightedBackend, ...]


@dataclass(frozen=True, slots=True)
class TlsPassthroughListener:
    port: int
    routes: tuple[SniRoute, ...]  # precedence order: exact names, then longer wildcards
    accept_proxy: bool = False


class EditedBackends(tuple[BackendSpec, ...]):
    """A workload's backends made from another tuple of backends by replacing the specs
    `names` names in place (same names, same order): `edited_from` is the id of that
    tuple. The encoder, still holding the tuple it encoded last, reads from it which
    backends to encode again instead of comparing 8,000 specs per change; the id is only
    trusted while that tuple is alive, which is what makes it unique."""

    edited_from: int
    names: tuple[str, ...]

    @classmethod
    def of(
        cls, specs: list[BackendSpec], edited_from: tuple[BackendSpec, ...], names: tuple[str, ...]
    ) -> EditedBackends:
        made = cls(specs)
        made.edited_from, made.names = id(edited_from), names
        return made


class EditedRules(tuple[RouteRule, ...]):
    """A listener's rules made from another tuple of rules by a route change that decided
    the hostnames `hosts` names again (`routes/table_update.py`): `edited_from` is the
    id of that tuple, `hosts` each such hostname's rules now, in the listener's order;
    every other rule is the same object in the same relative order. The encoder, still
    holding the tuple it grouped last, regroups those hostnames from it instead of
    comparing every rule (`publish/route_groups.py`); the id is only trusted while that
    tuple is alive, which is what makes it unique."""

    edited_from: int
    hosts: dict[str, tuple[RouteRule, ...]]

    @classmethod
    def of(
        cls,
        rules: Iterable[RouteRule],
        edited_from: tuple[RouteRule, ...],
        hosts: dict[str, tuple[RouteRule, ...]],
    ) -> EditedRules:
        made = cls(rules)
        made.edited_from, made.hosts = id(edited_from), hosts
        return made


@dataclass(frozen=True, slots=True)
class WorkloadSnapshot:
    """Everything one HAProxy workload needs, unversioned and unencoded.

    `backends` are sorted by name; a backend whose Service-wide or lost-claim warnings this
    workload adds is a copy of the planned spec with them appended (docs/design.md,
    "Architecture").
    """

    workload: str  # "namespace/Kind/name"
    peers: PeerSection
    backends: tuple[BackendSpec, ...]
    http_frontend: HttpFrontend | None
    tcp_frontends: tuple[TcpFrontend, ...]  # sorted by port
    warnings: tuple[RejectedInput, ...]  # not tied to one backend (the settings ConfigMap)
    # The route model's listeners (controlplane/routes/), sorted by port.
    http_listeners: tuple[HttpListener, ...] = ()
    certificates: tuple[Certificate, ...] = ()  # sorted by name; only this workload's
    tls_listeners: tuple[TlsPassthroughListener, ...] = ()  # sorted by port

    def backend(self, name: str) -> BackendSpec:
        """The backend called `name` (KeyError when absent)."""
        for spec in self.backends:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def warning_count(self) -> int:
        return len(self.warnings) + sum(len(spec.warnings) for spec in self.backends)


@dataclass(frozen=True, slots=True)
class ComputeResult:
    """Output of one computation.

    `workloads` maps workload key -> its snapshot, typed and unversioned: the encoder
    (`controlplane/publish/`) makes the bytes and content hash, the store numbers
    versions. `pod_workloads` maps "namespace/pod" of every HAProxy pod to its workload
    key, so the server can place an agent from its Hello. `waiting` maps workload key ->
    endpoints left out of its snapshot until the leader's ledger gives them a slot (a
    follower's computation only; absent when none wait). `touched`, when known, names
    every backend whose `BackendSlots` object may differ from the `previous` assignment's
    (the others are the very same objects): comparing the two costs what changed.
    """

    workloads: Mapping[str, WorkloadSnapshot]
    assignment: SlotAssignment
    rejections: tuple[RejectedInput, ...]
    pod_workloads: Mapping[str, str]
    waiting: Mapping[str, int] = field(default_factory=dict)
    touched: frozenset[str] | None = None
    # Wall-clock seconds when the same inputs give another answer (a certificate starts or
    # expires): the loop computes again then, with no change from the cluster.
    recompute_at: float = math.inf
    # New backends of this computation that claimed a spare section (name -> spare), and
    # those no spare could hold (name -> why): they come with a reload, as before.
    spares_claimed: Mapping[str, str] = field(default_factory=dict)
    spares_refused: Mapping[str, str] = field(default_factory=dict)
