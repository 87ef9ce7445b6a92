"""Per-Service planning: opt-in, routing annotations, settings, endpoints, slots.

A `ServicePlan` depends only on the Service, its EndpointSlices, the settings ConfigMap
and the previous slots of its backends, so an unchanged Service's plan is reused as is
between computations, and so are its `BackendSpec` objects (the encoder caches their bytes
by identity).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.compute.endpoints import ready_endpoints
from controlplane.compute.protocol import backend_protocol
from controlplane.compute.slots import assign_slots, quarantine_seconds
from controlplane.compute.spares import Claims
from controlplane.model import EndpointSlice, Service, ServicePort
from controlplane.settings.resolver import BackendSettings, Resolver, lookup
from controlplane.settings.values import (
    MAX_HOSTS,
    Invalid,
    is_dns_label,
    is_port_name,
    parse_bool,
    parse_hosts,
    parse_port,
    parse_workload_refs,
    shown,
)
from controlplane.snapshot import (
    BackendSlots,
    BackendSpec,
    HealthCheck,
    Persistence,
    RejectedInput,
    SessionCookie,
    SessionHeader,
    SessionPersistence,
    SlotAssignment,
)
from peerplane import limits, names, session


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """What one opted-in Service contributes, before it is placed in workloads."""

    service: Service
    workloads: frozenset[str] | None  # "namespace/name" refs, None = every workload
    hosts: tuple[str, ...]
    tcp_port: int | None
    backends: tuple[BackendSpec, ...]  # without the warnings a workload adds
    # Service-wide rejections (hosts, tcp-port, ports), shown on the first backend.
    service_warnings: tuple[RejectedInput, ...]
    configmap_rejections: tuple[RejectedInput, ...]
    # Backend name -> endpoints left out for want of a slot (followers only: see
    # `assign_slots(assign_new=False)`); absent when every endpoint has one.
    waiting: Mapping[str, int] = field(default_factory=dict)
    # When the first freed slot of its backends passes its quarantine, and planning again
    # would forget it (`assign_slots`): the plan is reusable until then.
    lapses_at: float = math.inf
    # Workloads ("namespace/name") whose routes (HTTPRoutes, Ingresses) reach the Service:
    # its backends are placed there too, whatever `workloads` says; its hosts and TCP
    # port are claimed only where `workloads` places it.
    routed_to: frozenset[str] = frozenset()

    def places(self, workload: str) -> bool:
        """Whether the plan's backends are in `workload`'s snapshot."""
        return self.claims_in(workload) or workload in self.routed_to

    def claims_in(self, workload: str) -> bool:
        """Whether the plan's hosts and TCP port are claimed in `workload`."""
        return self.workloads is None or workload in self.workloads

    @property
    def age_key(self) -> tuple[str, str, str]:
        """Older Services first; name breaks ties so the order is total."""
        svc = self.service
        return (svc.creation_timestamp or "~", svc.namespace, svc.name)


@dataclass(frozen=True, slots=True)
class Planned:
    """A Service's plan (None when it is not served) and every rejection found."""

    plan: ServicePlan | None
    rejections: tuple[RejectedInput, ...]


def service_rejection(service: Service, key: str, value: str, reason: str) -> RejectedInput:
    return RejectedInput("Service", service.namespace, service.name, key, shown(value), reason)


def opted_in(service: Service, rejections: list[RejectedInput]) -> bool:
    found = lookup(service.annotations, "expose")
    if found is None:
        return False
    try:
        return parse_bool(found.value)
    except Invalid as err:
        rejections.append(service_rejection(service, found.key, found.value, str(err)))
        return False


def _valid_identity(service: Service, rejections: list[RejectedInput]) -> bool:
    """Names become backend names in haproxy.cfg: accept only what Kubernetes accepts."""
    if not is_dns_label(service.namespace) or not is_dns_label(service.name):
        rejections.append(
            service_rejection(service, "metadata.name", service.name, "not a DNS label")
        )
        return False
    return True


def _servable(port: ServicePort) -> bool:
    return port.protocol == "TCP" and (not port.name or is_port_name(port.name))


def _backend_names_fit(service: Service, rejections: list[RejectedInput]) -> bool:
    """The agent refuses a whole snapshot holding a backend name it cannot write, so such a
    Service is refused here, alone. Kubernetes' own limits keep names within
    `limits.MAX_PROXY_NAME`; this holds that promise if naming ever changes."""
    for port in service.ports:
        name = names.backend_name(service.namespace, service.name, port.name, port.port)
        if _servable(port) and not limits.is_proxy_name(name):
            reason = (
                f"backend name {shown(name, 40)} is not {limits.MAX_PROXY_NAME} characters or "
                "less of letters, digits, _ . -; Service not served"
            )
            rejections.append(service_rejection(service, "metadata.name", service.name, reason))
            return False
    return True


def backend_spec(
    name: str,
    service: Service,
    port: ServicePort,
    mode: str,
    settings: BackendSettings,
    slots: BackendSlots,
    warnings: tuple[RejectedInput, ...],
    protocol: str = "",
    persisted: tuple[SessionCookie | None, SessionHeader | None] = (None, None),
) -> BackendSpec:
    """The backend as snapshots hold it: resolved settings made plain values."""
    check = settings.check
    return BackendSpec(
        name=name,
        service=f"{service.namespace}/{service.name}",
        service_port=port.name or str(port.port),
        mode=mode,
        balance=settings.balance.algorithm,
        balance_argument=settings.balance.argument,
        hash_type=settings.hash_type,
        persistence=(
            Persistence(settings.table_size, settings.expire_ms) if settings.persistence else None
        ),
        slots=slots,
        warnings=warnings,
        check=(
            None
            if check is None
            else HealthCheck(check.interval_ms, check.rise, check.fall, check.http_path)
        ),
        protocol=protocol,
        session_cookie=persisted[0],
        session_header=persisted[1],
    )


def session_persistence(
    asked: SessionPersistence | None,
    name: str,
    mode: str,
    settings: BackendSettings,
    reject: list[RejectedInput],
    service: Service,
) -> tuple[SessionCookie | None, SessionHeader | None, float]:
    """The backend's cookie or header persistence from what its routes ask
    (`routes/persistence.py`), and how long after a slot is freed it may still name it
    (its quarantine: docs/design.md, "Session persistence").

    A session cookie is honoured while used within the Service's persistence timeout
    (the stick-table expire: HAProxy's `maxidle`) and, with an absoluteTimeout, for that
    long at most (`maxlife`); a Permanent cookie for its absoluteTimeout (Max-Age and
    `maxlife`). A Header table takes the Service's table size and expire."""
    if asked is None:
        return None, None, 0.0
    if mode != "http":
        reason = f"session persistence {asked.type} needs an HTTP backend; not served"
        reject.append(service_rejection(service, "sessionPersistence", name, reason))
        return None, None, 0.0
    expire_s = -(-settings.expire_ms // 1000)
    if asked.type == "Header":
        if settings.persistence:
            reason = (
                "the Service's source-IP persistence holds the backend's stick table; "
                "Header session persistence not served"
            )
            reject.append(service_rejection(service, "sessionPersistence", asked.name, reason))
            return None, None, 0.0
        header = SessionHeader(asked.name, settings.table_size, settings.expire_ms)
        return None, header, settings.expire_ms / 1000
    cookie_name = asked.name or session.default_cookie_name(name)
    if asked.permanent:
        cookie = SessionCookie(cookie_name, asked.absolute_s, asked.absolute_s, 0)
    else:
        cookie = SessionCookie(cookie_name, 0, asked.absolute_s, expire_s)
    return cookie, None, float(cookie.honoured_s)


def _parse_routing(
    service: Service, own: list[RejectedInput]
) -> tuple[tuple[str, ...], int | None]:
    hosts: tuple[str, ...] = ()
    found = lookup(service.annotations, "hosts")
    if found is not None:
        try:
            parsed = parse_hosts(found.value)
        except Invalid as err:
            own.append(service_rejection(service, found.key, found.value, str(err)))
        else:
            hosts = parsed.served
            if parsed.dropped:
                reason = (
                    f"more than {MAX_HOSTS} hosts: the first {MAX_HOSTS} listed are served, "
                    f"these {len(parsed.dropped)} are not"
                )
                dropped = ",".join(parsed.dropped)
                own.append(service_rejection(service, found.key, dropped, reason))
    tcp_port: int | None = None
    found = lookup(service.annotations, "tcp-port")
    if found is not None:
        try:
            tcp_port = parse_port(found.value)
            if hosts:
                tcp_port = None
                raise Invalid("hosts and tcp-port exclude each other; hosts is used")
        except Invalid as err:
            own.append(service_rejection(service, found.key, found.value, str(err)))
    return hosts, tcp_port


def plan_service(
    service: Service,
    slices: Sequence[EndpointSlice],
    resolver: Resolver,
    previous: SlotAssignment,
    now: float,
    assign_new: bool = True,
    routed_to: frozenset[str] = frozenset(),
    tcp_names: frozenset[str] = frozenset(),
    h2_names: frozenset[str] = frozenset(),
    persistence: Mapping[str, SessionPersistence] | None = None,
    claims: Claims | None = None,
) -> Planned:
    """`now`: the computation's wall clock, when slots vacated by this plan are freed;
    `assign_new=False`: a follower's plan, whose endpoints without a slot in `previous`
    wait (counted in `waiting`, not warned about: the warning would change the content);
    `routed_to`: the workloads whose routes reach the Service (served there even when it
    is not exposed); `tcp_names`: its backends TLSRoutes or TCPRoutes reach and no HTTP
    route does, planned in mode tcp like a `haproxy.org/tcp-port` Service's when the
    Service is not exposed (an exposed Service keeps the mode its annotations give);
    `h2_names`: its backends GRPCRoutes reach, spoken to in HTTP/2 (`protocol.py`).
    `persistence`: the session persistence its HTTPRoute rules ask of its backends.
    `claims`: the leader's spare claiming, which a backend with no history in `previous`
    asks for a spare section (`compute/spares.py`)."""
    rejections: list[RejectedInput] = []
    exposed = opted_in(service, rejections)
    if not (
        (exposed or routed_to)
        and _valid_identity(service, rejections)
        and _backend_names_fit(service, rejections)
    ):
        return Planned(None, tuple(rejections))
    workloads: frozenset[str] | None = None if exposed else frozenset()
    found = lookup(service.annotations, "workloads") if exposed else None
    if found is not None:
        try:
            workloads = parse_workload_refs(found.value)
        except Invalid as err:
            # Safer to serve nowhere than everywhere when the limit is unreadable.
            reason = f"{err}; Service not served"
            rejections.append(service_rejection(service, found.key, found.value, reason))
            return Planned(None, tuple(rejections))
    own: list[RejectedInput] = []
    # Only an exposed Service claims hosts or a TCP port; a routed one is an HTTP backend
    # but for the ports only TLSRoutes and TCPRoutes reach (`tcp_names`).
    hosts, tcp_port = _parse_routing(service, own) if exposed else ((), None)
    mode = "tcp" if tcp_port is not None else "http"
    backends: list[BackendSpec] = []
    configmap: list[RejectedInput] = []
    waiting: dict[str, int] = {}
    lapses_at = math.inf
    for port in service.ports:
        if not _servable(port):
            own.append(
                service_rejection(
                    service,
                    "spec.ports",
                    port.name or str(port.port),
                    "only TCP ports with DNS-label names are served",
                )
            )
            continue
        name = names.backend_name(service.namespace, service.name, port.name, port.port)
        found_warnings: list[RejectedInput] = []
        port_mode = "tcp" if not exposed and name in tcp_names else mode
        settings = resolver.backend(service, port_mode, found_warnings, port.name)
        endpoints = ready_endpoints(slices, port)
        cookie, header, session_s = session_persistence(
            (persistence or {}).get(name), name, port_mode, settings, found_warnings, service
        )
        quarantine_s = quarantine_seconds(settings.persistence, settings.expire_ms, session_s)
        slots = assign_slots(
            endpoints,
            previous.get(name),
            settings.server_slots,
            now=now,
            quarantine_s=quarantine_s,
            assign_new=assign_new,
        )
        if assign_new and slots.freed:
            lapses_at = min(lapses_at, min(slots.freed.values()) + quarantine_s)
        if not assign_new and len(slots.slots) < len(endpoints):
            waiting[name] = len(endpoints) - len(slots.slots)
        elif len(slots.slots) < len(endpoints):
            found_warnings.append(
                service_rejection(
                    service,
                    "endpoints",
                    port.name or str(port.port),
                    f"{len(endpoints) - len(slots.slots)} endpoints beyond the "
                    f"{limits.MAX_SLOTS}-slot limit are not served",
                )
            )
        mine = tuple(w for w in found_warnings if w.kind == "Service")
        # ConfigMap rejections are listed once per snapshot, not on every backend.
        configmap.extend(w for w in found_warnings if w.kind != "Service")
        protocol = backend_protocol(port, port_mode, name in h2_names)
        spec = backend_spec(
            name, service, port, port_mode, settings, slots, mine, protocol, (cookie, header)
        )
        if claims is not None and previous.get(name) is None:
            spare = claims.claim(spec)
            if spare:
                spec = dataclasses.replace(spec, slots=dataclasses.replace(slots, spare=spare))
        backends.append(spec)
        rejections.extend(mine)
    rejections.extend(own)
    plan = ServicePlan(
        service=service,
        workloads=workloads,
        hosts=hosts,
        tcp_port=tcp_port,
        backends=tuple(backends),
        service_warnings=tuple(own),
        configmap_rejections=tuple(configmap),
        waiting=waiting,
        lapses_at=lapses_at,
        routed_to=routed_to,
    )
    return Planned(plan, tuple(rejections))
