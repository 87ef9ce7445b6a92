"""TLS termination on a workload's HTTP listeners: which certificates each HTTPS listener
and each Ingress `spec.tls` entry binds, and the crt-list of each port (pure).

A Gateway HTTPS listener (`tls.mode: Terminate`) binds its `certificateRefs`: core Secrets,
in the Gateway's namespace or granted by a ReferenceGrant (from Gateway, to Secret) in
theirs, each valid at compute's clock (`certificates`). Its ResolvedRefs condition is
False when any is not (InvalidCertificateRef, or RefNotPermitted for an ungranted one);
the listener is served while at least one is. An Ingress's `spec.tls` entries bind their
Secret (the Ingress's namespace) to their hosts on the https port; a bad one is reported
and its hosts get the port's default certificate.

Every listener of a port shares one crt-list: bindings for named hosts before catch-all
ones, the port's default certificate (the first certificate of the first catch-all
listener, else of the first listener) as the first binding. A port is plain HTTP or TLS:
a workload's HTTP and HTTPS listeners on one port are conflicted (ProtocolConflict).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.compute.types import (
    Certificate,
    CertificateBinding,
    HttpListener,
    RejectedInput,
)
from controlplane.compute.values import shown
from controlplane.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayListener,
    Ingress,
    ReferenceGrant,
    TLSSecret,
)
from controlplane.routes import names
from controlplane.routes.certificates import CertificateCache
from peerplane import routes as patterns

SecretKey = tuple[str, str]  # (namespace, name)
INVALID_CERTIFICATE_REF = "InvalidCertificateRef"
CERTIFICATE_REASONS = frozenset({INVALID_CERTIFICATE_REF, names.REF_NOT_PERMITTED})


class SecretLookup:
    """The Secrets of one computation by key, parsed through `cache` and dated at `now`.

    Remembers every key looked up with the object found (None: missing) and the next time
    an answer changes with the clock: the table depends on these and nothing else of the
    Secrets, so `RouteComputer` makes it again only when one of them moves."""

    def __init__(self, secrets: Iterable[TLSSecret], cache: CertificateCache, now: float) -> None:
        self._secrets = {(s.namespace, s.name): s for s in secrets}
        self._cache = cache
        self.now = now
        self.looked: dict[SecretKey, TLSSecret | None] = {}
        self.changes_at = math.inf

    def certificate(self, namespace: str, name: str) -> Certificate | str:
        """The certificate of Secret namespace/name, or why it is not served."""
        secret = self._secrets.get((namespace, name))
        self.looked[namespace, name] = secret
        if secret is None:
            return "Secret not found"
        parsed = self._cache.get(secret)
        self.changes_at = min(self.changes_at, parsed.changes_after(self.now))
        return parsed.at(self.now)


def by_namespace(grants: Iterable[ReferenceGrant]) -> dict[str, tuple[ReferenceGrant, ...]]:
    """ReferenceGrants by their namespace (the namespace of what they let be referenced)."""
    found: dict[str, list[ReferenceGrant]] = {}
    for grant in grants:
        found.setdefault(grant.namespace, []).append(grant)
    return {namespace: tuple(items) for namespace, items in found.items()}


def granted_secret(
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    gateway_namespace: str,
    secret_namespace: str,
    secret_name: str,
) -> bool:
    """Whether a ReferenceGrant in the Secret's namespace lets Gateways of
    `gateway_namespace` reference it."""
    for grant in grants.get(secret_namespace, ()):
        if not any(
            f.group == GATEWAY_GROUP and f.kind == "Gateway" and f.namespace == gateway_namespace
            for f in grant.from_
        ):
            continue
        if any(
            t.group == "" and t.kind == "Secret" and t.name in ("", secret_name) for t in grant.to
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class RefProblem:
    index: int  # in tls.certificateRefs
    ref: str  # "namespace/name" as resolved
    reason: str  # InvalidCertificateRef or RefNotPermitted
    message: str


@dataclass(frozen=True, slots=True)
class ListenerTLS:
    """An HTTPS listener's certificates (valid refs, in order) and the refs that failed."""

    certificates: tuple[Certificate, ...]
    problems: tuple[RefProblem, ...]

    @property
    def verdict(self) -> tuple[bool, str, str]:
        """ResolvedRefs for the certificates: ok, reason, message."""
        if not self.problems:
            return True, names.RESOLVED_REFS, "certificates resolved"
        told = "; ".join(f"certificateRefs[{p.index}] {p.ref}: {p.message}" for p in self.problems)
        if self.certificates:
            served = f"served with {len(self.certificates)} certificate(s)"
        else:
            served = "no valid certificate: listener not served"
        return False, self.problems[0].reason, f"{told}; {served}"


def listener_tls(
    gateway: Gateway,
    listener: GatewayListener,
    lookup: SecretLookup,
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> ListenerTLS:
    """The certificates an HTTPS listener's `certificateRefs` resolve to."""
    if not listener.certificate_refs:
        problem = RefProblem(0, "-", INVALID_CERTIFICATE_REF, "tls.certificateRefs is empty")
        return ListenerTLS((), (problem,))
    found: list[Certificate] = []
    problems: list[RefProblem] = []
    for index, ref in enumerate(listener.certificate_refs):
        namespace = ref.namespace or gateway.namespace
        where = f"{namespace}/{ref.name}"
        if (ref.group, ref.kind) != ("", "Secret"):
            group = ref.group or "core"
            message = f"{ref.kind} of group {group} is not a core Secret"
            problems.append(RefProblem(index, where, INVALID_CERTIFICATE_REF, message))
            continue
        if namespace != gateway.namespace and not granted_secret(
            grants, gateway.namespace, namespace, ref.name
        ):
            message = f"no ReferenceGrant in namespace {namespace} lets this Gateway use it"
            problems.append(RefProblem(index, where, names.REF_NOT_PERMITTED, message))
            continue
        certificate = lookup.certificate(namespace, ref.name)
        if isinstance(certificate, str):
            problems.append(RefProblem(index, where, INVALID_CERTIFICATE_REF, certificate))
        elif all(c.name != certificate.name for c in found):
            found.append(certificate)
    return ListenerTLS(tuple(found), tuple(problems))


def listener_rejections(
    gateway: Gateway, listener: GatewayListener, tls: ListenerTLS
) -> list[RejectedInput]:
    """The failed refs as warnings on the Gateway (they become Events)."""
    return [
        RejectedInput(
            "Gateway",
            gateway.namespace,
            gateway.name,
            f"spec.listeners[{listener.name}].tls.certificateRefs[{p.index}]",
            shown(p.ref),
            f"{p.reason}: {p.message}",
        )
        for p in tls.problems
    ]


@dataclass(frozen=True, slots=True)
class Asker:
    """An object choosing whether a port takes the PROXY protocol, and by which key."""

    kind: str  # "Gateway" or "ConfigMap"
    namespace: str
    name: str
    key: str

    def rejection(self, reason: str) -> RejectedInput:
        return RejectedInput(self.kind, self.namespace, self.name, self.key, "true", reason)


@dataclass(slots=True)
class _Port:
    """What the listeners of one port ask of its TLS and PROXY protocol."""

    named: list[CertificateBinding] = field(default_factory=list)  # with hostnames
    catch_all: list[CertificateBinding] = field(default_factory=list)
    default: str = ""  # the first certificate of the first catch-all source
    first: str = ""  # the first certificate of the first source
    proxy: dict[bool, list[Asker]] = field(default_factory=dict)  # value -> who asks it


@dataclass(slots=True)
class WorkloadTLS:
    """One workload's TLS bindings and PROXY protocol choices by port, collected from its
    listeners and Ingresses in precedence order, then applied to its HTTP listeners."""

    ports: dict[int, _Port] = field(default_factory=dict)
    certificates: dict[str, Certificate] = field(default_factory=dict)

    def bind(
        self, port: int, certificates: Iterable[Certificate], hostnames: tuple[str, ...]
    ) -> None:
        """The certificates of one source (a listener, an Ingress tls entry) for its
        hostnames (() : any host, the certificates' own names)."""
        edge = self.ports.setdefault(port, _Port())
        for certificate in certificates:
            self.certificates[certificate.name] = certificate
            if not edge.first:
                edge.first = certificate.name
            if not hostnames and not edge.default:
                edge.default = certificate.name
            binding = CertificateBinding(certificate.name, hostnames)
            target = edge.named if hostnames else edge.catch_all
            if binding not in target:
                target.append(binding)

    def proxy(self, port: int, accept: bool, who: Asker) -> None:
        """`who` asks `accept` of the PROXY protocol on `port`."""
        asking = self.ports.setdefault(port, _Port()).proxy.setdefault(accept, [])
        if who not in asking:
            asking.append(who)

    def tls_ports(self) -> frozenset[int]:
        return frozenset(port for port, edge in self.ports.items() if edge.first)

    def bindings(self, port: int) -> tuple[CertificateBinding, ...]:
        """The crt-list of `port`: the default certificate first, then named hosts, then
        catch-all ones."""
        edge = self.ports.get(port)
        if edge is None or not edge.first:
            return ()
        ordered = [*edge.named, *edge.catch_all]
        default = edge.default or edge.first
        head = next(b for b in ordered if b.certificate == default)
        if edge.default:  # a catch-all binding: its own names
            head = CertificateBinding(default, ())
        return (head, *(b for b in ordered if b != head))

    def apply(
        self, listeners: tuple[HttpListener, ...], rejections: list[RejectedInput]
    ) -> tuple[HttpListener, ...]:
        """`listeners` with their ports' TLS bindings and PROXY protocol. A port asked
        both with and without the PROXY protocol takes none, reported."""
        done: list[HttpListener] = []
        for listener in listeners:
            edge = self.ports.get(listener.port)
            if edge is None:
                done.append(listener)
                continue
            asking, refusing = edge.proxy.get(True, []), edge.proxy.get(False, [])
            accept = bool(asking) and not refusing
            if asking and refusing:
                others = ", ".join(f"{who.kind} {who.namespace}/{who.name}" for who in refusing)
                reason = (
                    f"port {listener.port} is shared with {others}, without the PROXY "
                    "protocol: not taken"
                )
                rejections.extend(who.rejection(reason) for who in asking)
            tls = self.bindings(listener.port)
            if tls or accept:
                listener = dataclasses.replace(listener, tls=tls, accept_proxy=accept)
            done.append(listener)
        return tuple(done)

    def bound(self, listeners: Iterable[HttpListener]) -> tuple[Certificate, ...]:
        """The certificates the listeners bind, sorted by name."""
        used = {b.certificate for listener in listeners for b in listener.tls}
        return tuple(self.certificates[name] for name in sorted(used))


def ingress_tls(
    ingress: Ingress, lookup: SecretLookup, port: int, tls: WorkloadTLS
) -> list[RejectedInput]:
    """Bind each `spec.tls` entry's certificate to its hosts on `port`; what cannot be
    bound is reported (its hosts get the port's default certificate)."""
    rejections: list[RejectedInput] = []

    def reject(key: str, value: str, reason: str) -> None:
        rejections.append(
            RejectedInput("Ingress", ingress.namespace, ingress.name, key, shown(value), reason)
        )

    for index, entry in enumerate(ingress.tls):
        where = f"spec.tls[{index}]"
        hosts: list[str] = []
        for number, host in enumerate(entry.hosts):
            if patterns.is_route_host(host):
                hosts.append(host)
            else:
                reject(
                    f"{where}.hosts[{number}]", host, "not a lower-case host name or *. wildcard"
                )
        if entry.hosts and not hosts:
            continue
        if not entry.secret_name:
            reason = "no secretName: these hosts get the default certificate"
            reject(f"{where}.secretName", "", reason)
            continue
        certificate = lookup.certificate(ingress.namespace, entry.secret_name)
        if isinstance(certificate, str):
            reason = f"{certificate}: these hosts get the default certificate"
            reject(f"{where}.secretName", entry.secret_name, reason)
            continue
        tls.bind(port, (certificate,), tuple(hosts))
    return rejections
