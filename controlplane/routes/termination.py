"""TLS termination: the certificates a Gateway HTTPS listener's `certificateRefs` resolve
to, and the Secrets one computation read (pure).

A listener (`tls.mode: Terminate`) binds core Secrets of the Gateway's namespace, or of
another namespace when a ReferenceGrant there (from Gateway, to Secret) allows it, each
valid at compute's clock (`certificates`). Its ResolvedRefs condition is False when any
is not (InvalidCertificateRef, or RefNotPermitted for an ungranted one); it is served
while at least one is (`placement.ListenerPlace.usable`). How the certificates become each
port's crt-list: `crtlist`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayListener,
    ReferenceGrant,
    TLSSecret,
)
from controlplane.routes import names
from controlplane.routes.certificates import CertificateCache
from controlplane.snapshot import (
    Certificate,
)

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
