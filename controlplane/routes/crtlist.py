"""Each workload's crt-lists and PROXY protocol choices, by port (pure).

The served HTTPS listeners of a workload's Gateways bind their certificates to their
hostname (none: the certificates' own names), and an Ingress's `spec.tls` entries bind
their Secret (the Ingress's namespace) to their hosts on the settings' https port; a bad
entry is reported on the Ingress and its hosts get the port's default certificate. Every
listener of a port shares one crt-list: bindings for named hosts before catch-all ones,
the port's default certificate (the first certificate of the first catch-all listener,
else of the first listener) as the first binding (HAProxy's default certificate).

The PROXY protocol: a Gateway's `peerplane.dev/accept-proxy-protocol` annotation for its
listeners' ports, the settings' `accept-proxy-protocol` for the Ingress ports. A port
asked both ways takes none and the askers are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.compute.types import (
    Certificate,
    CertificateBinding,
    HttpListener,
    RejectedInput,
)
from controlplane.compute.values import shown
from controlplane.model import ClusterState, ConfigMap, Ingress
from controlplane.routes import protocols
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.placement import ACCEPT_PROXY_ANNOTATION, Placement, accept_proxy
from controlplane.routes.termination import SecretLookup
from peerplane import routes as patterns

ACCEPT_PROXY_KEY = "accept-proxy-protocol"  # the settings ConfigMap's


@dataclass(frozen=True, slots=True)
class Edge:
    """What the crt-lists and PROXY protocol choices read besides the routes."""

    secrets: SecretLookup  # the Secrets at compute's clock
    https_port: int = 443  # the settings' https-port; 0: none
    accept_proxy: bool = False  # the settings' accept-proxy-protocol
    settings: ConfigMap | None = None  # where that choice comes from (reported by it)

    @staticmethod
    def of(state: ClusterState, now: float = 0.0) -> Edge:
        """The defaults with `state`'s Secrets parsed afresh at `now`."""
        return Edge(SecretLookup(state.secrets, CertificateCache(), now), settings=state.settings)

    @property
    def asker(self) -> Asker:
        cm = self.settings
        return Asker(
            "ConfigMap", cm.namespace if cm else "", cm.name if cm else "", ACCEPT_PROXY_KEY
        )


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
    plain: str = ""  # who serves the port in plain HTTP ("Gateway ns/name listener l")
    tls_only: list[RejectedInput] = field(default_factory=list)  # said when no certificate


@dataclass(slots=True)
class WorkloadTLS:
    """One workload's TLS bindings and PROXY protocol choices by port, collected from its
    listeners and Ingresses in precedence order, then applied to its HTTP listeners."""

    ports: dict[int, _Port] = field(default_factory=dict)
    certificates: dict[str, Certificate] = field(default_factory=dict)

    def port(self, port: int) -> _Port:
        return self.ports.setdefault(port, _Port())

    def bind(
        self, port: int, certificates: Iterable[Certificate], hostnames: tuple[str, ...]
    ) -> None:
        """The certificates of one source (a listener, an Ingress tls entry) for its
        hostnames (() : any host, the certificates' own names)."""
        edge = self.port(port)
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
        asking = self.port(port).proxy.setdefault(accept, [])
        if who not in asking:
            asking.append(who)

    def bindings(self, port: int) -> tuple[CertificateBinding, ...]:
        """The crt-list of `port`: the default certificate first, then named hosts, then
        catch-all ones."""
        edge = self.ports.get(port)
        if edge is None or not edge.first:
            return ()
        ordered = [*edge.named, *edge.catch_all]
        if edge.default:  # the first catch-all binding: the certificate's own names
            head = CertificateBinding(edge.default, ())
        else:
            head = next(b for b in ordered if b.certificate == edge.first)
        lines = (head, *(b for b in ordered if b != head))
        named = [host for b in edge.named for host in b.hostnames]
        return tuple(self._excluding(b, named) for b in lines) if named else lines

    def _excluding(self, binding: CertificateBinding, named: list[str]) -> CertificateBinding:
        """A catch-all binding with "!name" for each of its certificate's own names that a
        named binding answers: HAProxy gives a name to the first line holding it, and the
        default certificate's line comes first, so without this a listener's certificate
        for its own hostname could lose to the default one that also names it."""
        if binding.hostnames:
            return binding
        own = self.certificates[binding.certificate].dns_names
        taken = tuple(f"!{n}" for n in own if any(patterns.host_matches(h, n) for h in named))
        return CertificateBinding(binding.certificate, taken) if taken else binding

    def apply(
        self, listeners: tuple[HttpListener, ...], rejections: list[RejectedInput]
    ) -> tuple[HttpListener, ...]:
        """`listeners` with their ports' TLS bindings and PROXY protocol. A port asked
        both with and without the PROXY protocol takes none, reported; a port served in
        HTTPS for Ingresses alone without any certificate is not served, reported."""
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
            if not tls and edge.tls_only:
                rejections.extend(edge.tls_only)
                continue
            if tls or accept:
                listener = dataclasses.replace(listener, tls=tls, accept_proxy=accept)
            done.append(listener)
        return tuple(done)

    def bound(self, listeners: Iterable[HttpListener]) -> tuple[Certificate, ...]:
        """The certificates the listeners bind, sorted by name."""
        used = {b.certificate for listener in listeners for b in listener.tls}
        return tuple(self.certificates[name] for name in sorted(used))


def bind_gateways(
    placement: Placement,
) -> tuple[dict[str, WorkloadTLS], list[tuple[str, RejectedInput]]]:
    """Each workload's served HTTP and HTTPS listeners' certificates and PROXY protocol
    choices; the HTTPS listeners' unresolved certificateRefs as (workload, warning) on
    their Gateway (they become Events)."""
    found: dict[str, WorkloadTLS] = {}
    told: list[tuple[str, RejectedInput]] = []
    for key in sorted(placement.gateways):
        gateway_place = placement.gateways[key]
        workload = gateway_place.workload
        if not workload:
            continue
        gateway = gateway_place.gateway
        asker = Asker("Gateway", gateway.namespace, gateway.name, ACCEPT_PROXY_ANNOTATION)
        proxy = accept_proxy(gateway)
        for lp in gateway_place.listeners:
            listener = lp.listener
            for field_name in listener.tls_ignored if lp.accepted.ok else ():
                where = f"spec.listeners[{listener.name}].tls.{field_name}"
                reason = "not served by peerplane (the listener is, without it); ignored"
                told.append((workload, RejectedInput("Gateway", *key, where, "", reason)))
            if listener.protocol not in protocols.HTTP_PROTOCOLS or not lp.accepted.ok:
                continue
            if listener.protocol == "HTTPS" and not lp.conflict and not lp.resolved.ok:
                where = f"spec.listeners[{listener.name}].tls.certificateRefs"
                reason = f"{lp.resolved.reason}: {lp.resolved.message}"
                told.append((workload, RejectedInput("Gateway", *key, where, "", reason)))
            if not lp.usable:
                continue
            tls = found.setdefault(workload, WorkloadTLS())
            tls.proxy(listener.port, proxy, asker)
            if listener.protocol == "HTTPS":
                hostnames = (listener.hostname,) if listener.hostname else ()
                tls.bind(listener.port, lp.certificates, hostnames)
            elif not tls.port(listener.port).plain:
                where = f"Gateway {gateway.namespace}/{gateway.name} listener {listener.name}"
                tls.port(listener.port).plain = where
    return found, told


def bind_ingress(
    ingress: Ingress, edge: Edge, http_port: int, tls: WorkloadTLS
) -> tuple[bool, list[RejectedInput]]:
    """Whether `ingress` is served on the https port too (it has `spec.tls` and the port
    is not plain HTTP), and what cannot be bound, reported. Its ports take the settings'
    PROXY protocol choice."""
    tls.proxy(http_port, edge.accept_proxy, edge.asker)
    if not ingress.tls:
        return False, []
    port = edge.https_port

    def problem(reason: str) -> RejectedInput:
        return RejectedInput("Ingress", ingress.namespace, ingress.name, "spec.tls", "", reason)

    if not port:
        return False, [
            problem(
                "no https-port: the settings' http-port or peer-port takes 443; not served in HTTPS"
            )
        ]
    plain = tls.port(port).plain
    if plain:
        return False, [
            problem(f"the https-port {port} is plain HTTP ({plain}); not served in HTTPS")
        ]
    tls.proxy(port, edge.accept_proxy, edge.asker)
    tls.port(port).tls_only.append(
        problem(f"no certificate for the https-port {port}: not served in HTTPS")
    )
    return True, ingress_tls(ingress, edge.secrets, port, tls)


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
