"""Each workload's crt-lists and PROXY protocol choices, by port (pure).

The served HTTPS listeners of a workload's Gateways bind their certificates to their
hostname (none: the certificates' own names), and an Ingress's `spec.tls` entries bind
their Secret (the Ingress's namespace) to their hosts on the settings' https port; a bad
entry is reported on the Ingress. Every listener of a port shares one crt-list, each
line naming its SNI names explicitly: named hosts before catch-all ones, a catch-all
certificate's own names but those a named binding of its namespace answers.

One namespace per SNI name (`sni`): a binding of another namespace than the name's
oldest binder is refused that name, reported on its object (an Ingress: a warning and
an Event; a Gateway listener: an Event and `Conflicted` / `HostnameConflict`).

The default certificate (no SNI, or one no line holds) is the operator's: the settings'
`default-certificate`, first line, with "!name" filters only, so it serves no name by
SNI and never takes one from a listener. Without it, no default: `strict_sni`, and such
a handshake fails. No tenant's certificate becomes the default by sorting first.

The PROXY protocol: a Gateway's `peerplane.dev/accept-proxy-protocol` annotation for its
listeners' ports, the settings' `accept-proxy-protocol` for the Ingress ports. A port
asked both ways takes none and the askers are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.model import ClusterState, ConfigMap, Ingress
from controlplane.routes import protocols, sni
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.placement import ACCEPT_PROXY_ANNOTATION, Placement, accept_proxy
from controlplane.routes.sni import Source
from controlplane.routes.termination import SecretLookup
from controlplane.settings.resolver import Resolver
from controlplane.settings.table import DEFAULT_CERTIFICATE
from controlplane.settings.values import shown
from controlplane.snapshot import (
    Certificate,
    CertificateBinding,
    HttpListener,
    RejectedInput,
)
from peerplane import patterns

ACCEPT_PROXY_KEY = "accept-proxy-protocol"  # the settings ConfigMap's
DEFAULT_SAID = (
    "these hosts get the settings' default-certificate, or fail the handshake without one"
)


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

    def default_certificate(self) -> DefaultCertificate:
        """The settings' `default-certificate`, looked up (so a change to its Secret makes
        the table again); a malformed value is reported with the other settings."""
        ref = Resolver(self.settings).default_certificate([])
        if not ref or self.settings is None:
            return DefaultCertificate()
        namespace, _, name = ref.partition("/")
        found = self.secrets.certificate(namespace, name)
        if isinstance(found, str):
            cm = self.settings
            reason = (
                f"{found}: no default certificate, a client whose SNI no listener names "
                "(or who sends none) fails the handshake"
            )
            key = DEFAULT_CERTIFICATE.key
            rejection = RejectedInput("ConfigMap", cm.namespace, cm.name, key, shown(ref), reason)
            return DefaultCertificate(problem=rejection)
        return DefaultCertificate(found)


@dataclass(frozen=True, slots=True)
class DefaultCertificate:
    """The operator's default certificate of every HTTPS port (None: none, `strict_sni`),
    or why the one named cannot be."""

    certificate: Certificate | None = None
    problem: RejectedInput | None = None


@dataclass(frozen=True, slots=True)
class Asker:
    """An object choosing whether a port takes the PROXY protocol, and by which key."""

    kind: str  # "Gateway" or "ConfigMap"
    namespace: str
    name: str
    key: str

    def rejection(self, reason: str) -> RejectedInput:
        return RejectedInput(self.kind, self.namespace, self.name, self.key, "true", reason)


@dataclass(frozen=True, slots=True)
class _Bound:
    """One source's certificate for SNI names: its hostnames, else (a catch-all) the
    certificate's own names."""

    source: Source
    certificate: Certificate
    hostnames: tuple[str, ...]  # () : a catch-all

    @property
    def names(self) -> tuple[str, ...]:
        return self.hostnames or self.certificate.dns_names


@dataclass(slots=True)
class _Port:
    """What the listeners of one port ask of its TLS and PROXY protocol."""

    bound: list[_Bound] = field(default_factory=list)  # in precedence order
    keys: set[tuple[str, tuple[str, ...], str]] = field(default_factory=set)  # of `bound`
    proxy: dict[bool, list[Asker]] = field(default_factory=dict)  # value -> who asks it
    plain: str = ""  # who serves the port in plain HTTP ("Gateway ns/name listener l")
    tls_only: list[RejectedInput] = field(default_factory=list)  # said when no certificate


@dataclass(frozen=True, slots=True)
class PortTLS:
    """A port's crt-list, whether it has no default, and the names refused to sources."""

    bindings: tuple[CertificateBinding, ...] = ()
    strict_sni: bool = False
    refused: tuple[sni.Refusal, ...] = ()


@dataclass(slots=True)
class WorkloadTLS:
    """One workload's TLS bindings and PROXY protocol choices by port, collected from its
    listeners and Ingresses in precedence order, then applied to its HTTP listeners."""

    ports: dict[int, _Port] = field(default_factory=dict)
    certificates: dict[str, Certificate] = field(default_factory=dict)
    # Gateway listener (namespace, name, listener) -> why some of its names are refused.
    conflicts: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def port(self, port: int) -> _Port:
        return self.ports.setdefault(port, _Port())

    def bind(
        self,
        port: int,
        certificates: Iterable[Certificate],
        hostnames: tuple[str, ...],
        source: Source,
    ) -> None:
        """The certificates of one source (a listener, an Ingress tls entry) for its
        hostnames (() : any host, the certificates' own names)."""
        edge = self.port(port)
        for certificate in certificates:
            self.certificates[certificate.name] = certificate
            key = (certificate.name, hostnames, source.namespace)
            if key not in edge.keys:  # the same line twice from one namespace: once
                edge.keys.add(key)
                edge.bound.append(_Bound(source, certificate, hostnames))

    def proxy(self, port: int, accept: bool, who: Asker) -> None:
        """`who` asks `accept` of the PROXY protocol on `port`."""
        asking = self.port(port).proxy.setdefault(accept, [])
        if who not in asking:
            asking.append(who)

    def tls(self, port: int, default: Certificate | None = None) -> PortTLS:
        """The crt-list of `port`: the operator's default certificate first (serving no
        name by SNI), then named hosts, then catch-all ones, each line with the names it
        is not refused; `strict_sni` without a default certificate."""
        edge = self.ports.get(port)
        if edge is None or not edge.bound:
            return PortTLS()
        refused = sni.refusals((b.source, b.names) for b in edge.bound)
        named: list[CertificateBinding] = []
        answered: dict[str, set[str]] = {}  # namespace -> the hosts its named lines take
        for b in edge.bound:
            if b.hostnames:
                kept = tuple(n for n in b.hostnames if (b.source, n) not in refused)
                if kept:
                    named.append(CertificateBinding(b.certificate.name, kept))
                    answered.setdefault(b.source.namespace, set()).update(kept)
        catch_all: list[CertificateBinding] = []
        for b in edge.bound:
            if b.hostnames:
                continue
            mine = answered.get(b.source.namespace, set())
            kept = tuple(
                n
                for n in b.certificate.dns_names
                if (b.source, n) not in refused
                and n not in mine
                and sni.covering_wildcard(n) not in mine
            )
            if kept:
                catch_all.append(CertificateBinding(b.certificate.name, kept))
        lines = list(dict.fromkeys([*named, *catch_all]))
        if not lines:
            return PortTLS(refused=tuple(refused.values()))
        if default is not None:
            self.certificates[default.name] = default
            head = tuple(f"!{n}" for n in default.dns_names)
            lines.insert(0, CertificateBinding(default.name, head))
        return PortTLS(tuple(lines), default is None, tuple(refused.values()))

    def apply(
        self,
        listeners: tuple[HttpListener, ...],
        rejections: list[RejectedInput],
        default: DefaultCertificate | None = None,
    ) -> tuple[HttpListener, ...]:
        """`listeners` with their ports' TLS bindings and PROXY protocol. A port asked
        both with and without the PROXY protocol takes none, reported; a port served in
        HTTPS for Ingresses alone without any certificate is not served, reported; a name
        refused to a source is reported on its object."""
        default = default or DefaultCertificate()
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
            found = self.tls(listener.port, default.certificate)
            self._report(listener.port, found.refused, rejections)
            if not found.bindings and edge.tls_only:
                rejections.extend(edge.tls_only)
                continue
            if found.bindings and default.problem is not None:
                rejections.append(default.problem)
            if found.bindings or accept:
                listener = dataclasses.replace(
                    listener, tls=found.bindings, accept_proxy=accept, strict_sni=found.strict_sni
                )
            done.append(listener)
        return tuple(done)

    def _report(
        self, port: int, refused: Iterable[sni.Refusal], rejections: list[RejectedInput]
    ) -> None:
        """Each refused name on its source's object; a Gateway listener's in `conflicts`
        too (its status)."""
        for refusal in refused:
            source = refusal.source
            reason = refusal.reason(port)
            if source.listener:
                key = (source.namespace, source.name, source.listener)
                told = self.conflicts.get(key)
                self.conflicts[key] = f"{told}; {reason}" if told else reason
            rejections.append(
                RejectedInput(
                    source.kind, source.namespace, source.name, source.where, refusal.name, reason
                )
            )

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
        for index, lp in enumerate(gateway_place.listeners):
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
                at = "hostname" if listener.hostname else "tls.certificateRefs"
                source = Source(
                    "Gateway",
                    *key,
                    f"spec.listeners[{listener.name}].{at}",
                    gateway.creation_timestamp,
                    index,
                    listener.name,
                )
                tls.bind(listener.port, lp.certificates, hostnames, source)
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
    bound is reported (its hosts get the operator's default certificate, if any)."""
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
            reason = f"no secretName: {DEFAULT_SAID}"
            reject(f"{where}.secretName", "", reason)
            continue
        certificate = lookup.certificate(ingress.namespace, entry.secret_name)
        if isinstance(certificate, str):
            reason = f"{certificate}: {DEFAULT_SAID}"
            reject(f"{where}.secretName", entry.secret_name, reason)
            continue
        at = "hosts" if hosts else "secretName"
        source = Source(
            "Ingress",
            ingress.namespace,
            ingress.name,
            f"{where}.{at}",
            ingress.creation_timestamp,
            index,
        )
        tls.bind(port, (certificate,), tuple(hosts), source)
    return rejections
